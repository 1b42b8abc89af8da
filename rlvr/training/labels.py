"""How a run spends its labels and what its held-out splits can show, said before training.

A label is an item's `answer` (rlvr.training.split.unlabelled_ids). A scorer that reads it
(`needs_labels`) cannot train on an item without one, which is an error at load; a scorer that
reads none trains on unlabelled items, and the labels go to validation and test. `HeldOut` is
(rlvr.evaluation.resolution) is what the run's settings lines, `rlvr preflight` and summary.json
say about it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rlvr.config import ConfigError, RunConfig
from rlvr.evaluation.resolution import STOP_MIN_ITEMS, HeldOut, resolution
from rlvr.scoring.scorers import GatedScorer, VerifierScorer, WeightedScorer
from rlvr.training.split import LabelError, Split, split_items, unlabelled_ids

if TYPE_CHECKING:
    from rlvr.types import Item, Scorer

log = logging.getLogger("rlvr.training.labels")

LABEL_FREE = "ruler, rubric, length or rollout"  # the installed scorers that read no label


def needs_labels(scorer: Scorer) -> bool:
    """Whether `scorer` reads the item's label, as far as it can be known: a verifier (the task's
    reward or a `fn(completion, ground_truth)`), reference-guided RULER, and any composite with
    one of them; a scorer object may say so itself with a boolean `needs_labels`."""
    if isinstance(scorer, WeightedScorer):
        return any(needs_labels(part) for part, _ in scorer.parts)
    if isinstance(scorer, GatedScorer):
        return needs_labels(scorer.gate) or needs_labels(scorer.scorer)
    own = getattr(scorer, "needs_labels", None)
    if isinstance(own, bool):
        return own
    return isinstance(scorer, VerifierScorer) or getattr(scorer, "reference", False) is True


def refuse_unlabelled(unlabelled: int, scorer: Scorer) -> None:
    """One line when a scorer that reads labels would train on items without one."""
    if unlabelled and needs_labels(scorer):
        raise ConfigError(
            f"{unlabelled} item(s) have no label (no answer) and would train under scorer "
            f"{scorer.name}, which reads the label: give them one, drop them with "
            f"skip_bad_rows=true (dataset task), or use a scorer that reads none ({LABEL_FREE})"
        )


def labelled_split(cfg: RunConfig, items: list[Item], scorer: Scorer) -> Split[Item]:
    """The run's split (rlvr.training.split.split_items): with a scorer that reads no label
    (or holdout=labelled), every labelled item is held out where unlabelled ones can train; with
    one that reads labels (or holdout=ratios), the labelled items split by the ratios. With a
    scorer that reads labels an unlabelled item is an error (or, under the dataset task's
    skip_bad_rows=true, dropped and counted)."""
    reads = needs_labels(scorer)
    unlabelled = unlabelled_ids(items)
    if unlabelled and reads:
        if cfg.task_options.get("skip_bad_rows") is not True:
            refuse_unlabelled(len(unlabelled), scorer)
        log.warning(
            "skipped %d item(s) without a label: scorer %s reads the label",
            len(unlabelled),
            scorer.name,
        )
        items = [i for i in items if i.id not in unlabelled]
    if cfg.holdout == "labelled" and not unlabelled_ids(items):
        raise ConfigError(
            f"task {cfg.task}: holdout=labelled holds out every labelled item, and every item "
            "has a label: none is left to train on; add unlabelled items or set holdout=ratios"
        )
    try:
        return split_items(
            items,
            val_ratio=cfg.val_ratio,
            test_ratio=cfg.test_ratio,
            seed=cfg.data_seed,
            hold_out_labels=cfg.holdout == "labelled" or (cfg.holdout == "auto" and not reads),
        )
    except LabelError as error:
        raise ConfigError(f"task {cfg.task}: {error}") from None


def held_out(split: Split[Item], val_items: int, scorer: Scorer) -> HeldOut:
    """What the run's split does with its labels (`val_items`: validation as evaluated, after
    max_val_items)."""
    unlabelled = len(split.unlabelled)
    labelled = (
        split.labelled
        if split.labelled is not None
        else len(split.train) + len(split.val) + len(split.test) - unlabelled
    )
    train_labelled = len(split.train) - unlabelled
    return HeldOut(
        labelled=labelled,
        unlabelled=unlabelled,
        train_labelled=train_labelled,
        hold_out_labels=split.hold_out_labels,
        label_free=not needs_labels(scorer),
        test=resolution("test", len(split.test)),
        validation=resolution("validation", val_items),
        held_validation=len(split.val),
        stops=val_items >= STOP_MIN_ITEMS,
        truth_rollouts=train_labelled > 0,
    )
