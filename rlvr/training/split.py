"""The deterministic train / validation / test split."""

from __future__ import annotations

import random
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class Split(BaseModel):
    """Items of one task divided three ways. Validation and test hold the labels used for
    stopping and for the final score; only `train` is ever passed to the training scorer."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    train: list
    val: list
    test: list


def split_sizes(n: int, val_ratio: float, test_ratio: float) -> tuple[int, int, int]:
    """(train, val, test) sizes for n items. Validation and test get at least one item each when
    n >= 3, rounding is to the nearest item, and the remainder goes to training."""
    if n < 3:
        raise ValueError(f"need at least 3 items to split three ways, got {n}")
    n_val = max(1, round(n * val_ratio))
    n_test = max(1, round(n * test_ratio))
    return n - n_val - n_test, n_val, n_test


def split_items(items: list[T], *, val_ratio: float, test_ratio: float, seed: int) -> Split:
    """Shuffle with a seeded RNG and cut. The same items and seed always give the same split,
    and the three parts are disjoint and cover every item."""
    order = list(items)
    random.Random(seed).shuffle(order)
    n_train, n_val, _ = split_sizes(len(order), val_ratio, test_ratio)
    return Split(
        train=order[:n_train],
        val=order[n_train : n_train + n_val],
        test=order[n_train + n_val :],
    )
