"""The deterministic train / validation / test split."""

from __future__ import annotations

import random
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class Split(BaseModel, Generic[T]):
    """Items of one task divided three ways. Validation and test hold the labels used for
    stopping and for the final score; only `train` is ever passed to the training scorer."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    train: list[T]
    val: list[T]
    test: list[T]


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
    return Split(
        **{name: [i for i, p in zip(items, parts, strict=True) if p == name] for name in PARTS}
    )


def split_items(items: list[T], *, val_ratio: float, test_ratio: float, seed: int) -> Split[T]:
    """Shuffle with a seeded RNG and cut (or keep the parts the items pin, `pinned_split`). The
    same items and seed always give the same split, and the three parts are disjoint and cover
    every item."""
    pinned = pinned_split(items)
    if pinned is not None:
        return pinned
    order = list(items)
    random.Random(seed).shuffle(order)
    n_train, n_val, _ = split_sizes(len(order), val_ratio, test_ratio)
    return Split(
        train=order[:n_train],
        val=order[n_train : n_train + n_val],
        test=order[n_train + n_val :],
    )
