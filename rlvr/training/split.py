"""The deterministic train / validation / test split."""

from __future__ import annotations

import random
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class Split(BaseModel, Generic[T]):
    """Items of one task divided three ways. Validation and test hold the labels used for
    stopping and for the final score; only `train` is ever passed to the training scorer.
    `unlabelled` names the training items without a label (`is_labelled`), whose rollouts are
    never checked against a truth they do not have; `labelled` counts the items with one."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    train: list[T]
    val: list[T]
    test: list[T]
    unlabelled: frozenset[str] = frozenset()
    labelled: int | None = None  # None: every item (a pinned split, or not Items)
    hold_out_labels: bool = False  # every labelled item went to validation and test


def split_sizes(n: int, val_ratio: float, test_ratio: float) -> tuple[int, int, int]:
    """(train, val, test) sizes for n items. Validation and test get at least one item each when
    n >= 3, rounding is to the nearest item, and the remainder goes to training."""
    if n < 3:
        raise ValueError(f"need at least 3 items to split three ways, got {n}")
    n_val = max(1, round(n * val_ratio))
    n_test = max(1, round(n * test_ratio))
    return n - n_val - n_test, n_val, n_test


# Items pinned to their part (rlvr.types.PINNED) keep it, and ratios do not apply.
PARTS = ("train", "val", "test")


def pinned_split(items: list[T]) -> Split[T] | None:
    """The split the items name themselves, when every one of them names a part; else None."""
    from rlvr.types import PINNED, Item

    parts = [i.data.get(PINNED) if isinstance(i, Item) else None for i in items]
    if not items or any(p not in PARTS for p in parts):
        return None
    train, val, test = (
        [i for i, p in zip(items, parts, strict=True) if p == name] for name in PARTS
    )
    return Split(train=train, val=val, test=test)


MIN_LABELLED = 3  # as split_sizes needs: one each for validation and test, and one to spare


class LabelError(ValueError):
    """Too few labelled items to hold out validation and test (one line for the caller)."""


def has_answer(item: object) -> bool:
    from rlvr.types import Item

    return not isinstance(item, Item) or bool(item.answer and item.answer.strip())


def unlabelled_ids(items: list[T]) -> frozenset[str]:
    """The ids of the items without a label: an Item whose `answer` is None or empty, among
    items of which some have one. Where none has an answer, the task keeps its truth elsewhere
    (ifeval's instructions, a rubric's criteria in `data`) and every item counts as labelled."""
    from rlvr.types import Item

    if not any(has_answer(i) for i in items):
        return frozenset()
    return frozenset(i.id for i in items if isinstance(i, Item) and not has_answer(i))


def split_items(
    items: list[T],
    *,
    val_ratio: float,
    test_ratio: float,
    seed: int,
    hold_out_labels: bool = False,
) -> Split[T]:
    """Shuffle with a seeded RNG and cut (or keep the parts the items pin, `pinned_split`). The
    same items and seed always give the same split, and the three parts are disjoint and cover
    every item.

    Unlabelled items (`unlabelled_ids`) are training items: test is cut from the labelled ones
    first, then validation, at the ratios of the labelled items, and labelled items left over
    train. With `hold_out_labels` (a scorer that reads no label) and unlabelled items to train
    on, every labelled item is held out, split between validation and test by their ratio."""
    pinned = pinned_split(items)
    if pinned is not None:
        unlabelled = unlabelled_ids(items)
        held = [getattr(i, "id", "") for i in pinned.val + pinned.test]
        if strays := [i for i in held if i in unlabelled]:
            raise LabelError(
                f"{len(strays)} unlabelled item(s) pinned to validation or test (first: "
                f"{strays[0]!r}); held-out items need an answer, or pin them to train"
            )
        return pinned.model_copy(update={"unlabelled": unlabelled})
    unlabelled = unlabelled_ids(items)
    labelled = [i for i in items if getattr(i, "id", None) not in unlabelled]
    order = labelled
    random.Random(seed).shuffle(order)
    if unlabelled and len(order) < MIN_LABELLED:
        raise LabelError(
            f"{len(order)} labelled item(s) beside {len(unlabelled)} unlabelled; validation and "
            f"test need at least {MIN_LABELLED} labelled items (items with an answer)"
        )
    hold_all = hold_out_labels and bool(unlabelled)
    if hold_all:
        n_test = min(
            len(order) - 1, max(1, round(len(order) * test_ratio / (val_ratio + test_ratio)))
        )
        n_train, n_val = 0, len(order) - n_test
    else:
        n_train, n_val, _ = split_sizes(len(order), val_ratio, test_ratio)
    rest = [i for i in items if getattr(i, "id", None) in unlabelled]
    random.Random(seed).shuffle(rest)
    return Split(
        train=order[:n_train] + rest,
        val=order[n_train : n_train + n_val],
        test=order[n_train + n_val :],
        unlabelled=unlabelled,
        labelled=len(order),
        hold_out_labels=hold_all,
    )
