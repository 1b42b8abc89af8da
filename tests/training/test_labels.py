"""Labels where they count: unlabelled items train, labelled ones are held out first, a scorer
that reads labels refuses unlabelled training items, and the run says what its held-out splits
can resolve (rlvr.training.labels, rlvr.training.split)."""

from __future__ import annotations

import re

import pytest

from judges.ruler import RulerScorer
from rlvr.config import ConfigError, RunConfig
from rlvr.scoring.scorers import (
    GatedScorer,
    LengthScorer,
    RolloutScorer,
    VerifierScorer,
    WeightedScorer,
    reward_scorer,
)
from rlvr.training.labels import held_out, labelled_split, needs_labels
from rlvr.training.split import LabelError, split_items
from rlvr.types import Item


def items(labelled: int, unlabelled: int) -> list[Item]:
    return [Item(id=f"l{i}", prompt="q", answer=str(i)) for i in range(labelled)] + [
        Item(id=f"u{i}", prompt="q", answer=None if i % 2 else "  ") for i in range(unlabelled)
    ]


class Judge:
    key = "labels-test"


JUDGE = Judge()
VERIFIER = VerifierScorer(lambda item, t: 1.0)
LABEL_FREE = [RulerScorer(JUDGE), LengthScorer(), RolloutScorer()]  # type: ignore[arg-type]
READS_LABELS = [
    VERIFIER,
    RulerScorer(JUDGE, reference=True),  # type: ignore[arg-type]
    reward_scorer(lambda completion, truth: float(completion == truth)),
    WeightedScorer([(LengthScorer(), 0.5), (VERIFIER, 0.5)]),
    GatedScorer(VERIFIER, LengthScorer()),
]


@pytest.mark.parametrize(
    ("scorer", "reads"), [(s, False) for s in LABEL_FREE] + [(s, True) for s in READS_LABELS]
)
def test_which_scorers_read_labels(scorer, reads: bool) -> None:
    assert needs_labels(scorer) is reads


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("labelled", "unlabelled"), [(3, 1), (60, 400), (7, 13)])
def test_a_label_free_split_holds_out_every_label_and_trains_on_none(
    seed: int, labelled: int, unlabelled: int
) -> None:
    """No held-out label ever reaches the scorer: every training item is unlabelled, every
    labelled item is held out, and the split is the same for the same seed."""
    given = items(labelled, unlabelled)
    split = split_items(given, val_ratio=0.1, test_ratio=0.1, seed=seed, hold_out_labels=True)
    assert all(i.id.startswith("u") for i in split.train)
    assert split.unlabelled == {i.id for i in split.train}
    assert sorted(i.id for i in split.val + split.test) == sorted(f"l{i}" for i in range(labelled))
    assert len(split.val) >= 1 and len(split.test) >= 1
    again = split_items(given, val_ratio=0.1, test_ratio=0.1, seed=seed, hold_out_labels=True)
    assert (split.train, split.val, split.test) == (again.train, again.val, again.test)


def test_with_ratios_the_labelled_items_are_cut_and_their_leftovers_train() -> None:
    split = split_items(items(60, 400), val_ratio=0.1, test_ratio=0.1, seed=0)
    assert (len(split.val), len(split.test)) == (6, 6)
    assert all(i.answer for i in split.val + split.test)
    assert sum(i.id.startswith("l") for i in split.train) == 48 and len(split.train) == 448
    assert not split.hold_out_labels and split.labelled == 60


def test_a_fully_labelled_split_is_the_split_it_always_was() -> None:
    """No item unlabelled: the same cut as before labels counted (same seed, same parts)."""
    import random

    given = items(100, 0)
    order = list(given)
    random.Random(3).shuffle(order)
    for hold in (False, True):
        split = split_items(given, val_ratio=0.1, test_ratio=0.1, seed=3, hold_out_labels=hold)
        assert split.train == order[:80] and split.val == order[80:90] and split.test == order[90:]


def test_items_that_keep_their_truth_elsewhere_are_all_labelled() -> None:
    """ifeval's and a rubric's items have no answer at all: their truth is in `data`."""
    none = [Item(id=str(i), prompt="q", data={"instructions": []}) for i in range(10)]
    split = split_items(none, val_ratio=0.1, test_ratio=0.1, seed=0, hold_out_labels=True)
    assert (len(split.train), len(split.val), len(split.test)) == (8, 1, 1)
    assert not split.unlabelled


def test_fewer_than_three_labels_beside_unlabelled_items_is_an_error() -> None:
    with pytest.raises(LabelError, match="2 labelled item"):
        split_items(items(2, 50), val_ratio=0.1, test_ratio=0.1, seed=0, hold_out_labels=True)


@pytest.mark.parametrize("part", ["val", "test"])
def test_an_unlabelled_item_pinned_to_a_held_out_part_is_an_error(part: str) -> None:
    from rlvr.types import PINNED

    pinned = [
        i.model_copy(update={"data": {PINNED: p}})
        for i, p in zip(items(3, 2), ["train", "val", "test", "train", part], strict=True)
    ]
    with pytest.raises(LabelError, match=r"1 unlabelled item.*'u1'"):
        split_items(pinned, val_ratio=0.1, test_ratio=0.1, seed=0)


def test_a_pinned_split_names_its_unlabelled_training_items() -> None:
    from rlvr.types import PINNED

    pinned = [
        i.model_copy(update={"data": {PINNED: p}})
        for i, p in zip(items(3, 2), ["train", "val", "test", "train", "train"], strict=True)
    ]
    split = split_items(pinned, val_ratio=0.1, test_ratio=0.1, seed=0)
    assert split.unlabelled == {"u0", "u1"} and [i.id for i in split.val] == ["l1"]


def config(**values) -> RunConfig:
    return RunConfig(**values)


@pytest.mark.parametrize(
    ("cfg", "scorer", "given", "message"),
    [
        (config(), VERIFIER, items(60, 400), "400 item(s) have no label"),
        (config(), READS_LABELS[1], items(60, 400), "scorer ruler_ref, which reads the label"),
        (config(), LABEL_FREE[0], items(2, 400), "2 labelled item(s) beside 400 unlabelled"),
        (config(holdout="labelled"), LABEL_FREE[0], items(60, 0), "none is left to train on"),
    ],
)
def test_bad_label_budgets_are_one_line(cfg, scorer, given, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        labelled_split(cfg, given, scorer)
    assert "\n" not in str(error.value)
    if "no label" in message:
        assert "skip_bad_rows" in str(error.value) and "ruler" in str(error.value)


def test_skip_bad_rows_drops_the_unlabelled_items_a_verifier_cannot_score() -> None:
    cfg = config(task_options={"skip_bad_rows": True})
    split = labelled_split(cfg, items(60, 400), VERIFIER)
    assert not split.unlabelled and len(split.train) == 48


def test_holdout_ratios_lends_labels_to_training_under_a_label_free_scorer() -> None:
    split = labelled_split(config(holdout="ratios"), items(60, 400), LABEL_FREE[0])
    line = held_out(split, len(split.val), LABEL_FREE[0]).labels_line()
    assert (len(split.val), len(split.test)) == (6, 6)
    assert "48 train, 6 validation, 6 test" in line
    assert "use labelled training rollouts only" in line


def test_the_hybrid_says_where_its_labels_went_and_what_its_test_can_resolve() -> None:
    cfg = config()
    split = labelled_split(cfg, items(60, 400), LABEL_FREE[0])
    found = held_out(split, len(split.val), LABEL_FREE[0])
    labels, test, validation = found.lines(cfg)
    assert labels.startswith(
        "labels: 60 labelled item(s): all 60 held out (30 validation, 30 test)"
    )
    assert "400 unlabelled item(s) train" in labels
    assert "judge/agreement and train/independent_reward are not computed" in labels
    assert test.startswith("test: 30 labelled items; a gain resolves from +0.200 (6 of 30")
    assert "for a +0.10 gain hold out at least 60 (label about 120 items" in test
    assert validation.startswith("validation: 30 items, steps of 0.033") and found.stops


def test_sixty_labelled_rows_under_80_10_10_say_their_six_test_items_resolve_little() -> None:
    cfg = config(max_steps=12)
    split = labelled_split(cfg, items(60, 0), VERIFIER)
    found = held_out(split, len(split.val), VERIFIER)
    labels, test, validation = found.lines(cfg)
    assert (
        labels
        == "labels: 60 labelled item(s): 48 train, 6 validation, 6 test; the scorer reads labels"
    )
    assert test == (
        "test: 6 labelled items; a gain resolves only if all 6 improve; for a +0.10 gain hold "
        "out at least 60 (label about 600 items at test_ratio=0.1)"
    )
    assert "too small to stop on (under 10 items)" in validation
    assert "the run stops by work (max_steps=12)" in validation and not found.stops
    assert found.model_dump(mode="json")["test"]["fewest"] == 6


@pytest.mark.parametrize("data_seed", [0, 3])
def test_the_data_seed_cuts_the_split_and_the_training_seed_does_not(data_seed: int) -> None:
    """Seeds on one data seed validate and test on the same items; another data seed cuts another
    split."""
    given = items(200, 0)
    splits = [
        labelled_split(config(seed=seed, data_seed=data_seed), given, VERIFIER)
        for seed in (0, 1, 2)
    ]
    assert all(
        (s.train, s.val, s.test) == (splits[0].train, splits[0].val, splits[0].test) for s in splits
    )
    other = labelled_split(config(data_seed=data_seed + 1), given, VERIFIER)
    assert other.val != splits[0].val and other.test != splits[0].test
