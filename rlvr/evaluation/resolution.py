"""What a held-out split can show before a run spends its budget: the smallest gain the paired
sign-flip test of `paired_gains` resolves at 95% on n items, read from that same test.

An accuracy difference per item is +1, -1 or 0, and items that did not change add nothing to the
test, so the smallest resolvable gain is that of the fewest items improving with none worsening;
where every item changes (the noisiest case), more than half must improve. Both counts come from
`sign_flip_p`, the p-value `paired_gain` reports, so the figure and the final test block agree.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict

from rlvr.evaluation.paired_gains import ALPHA, sign_flip_p

if TYPE_CHECKING:
    from rlvr.config import RunConfig

TARGET_GAIN = 0.10  # the gain the advice sizes a split for: a typical first RL gain on held-out
# Validation smaller than this is too small to stop on: its accuracy moves in steps above 0.1 and
# the paired test resolves a change only when most of its items move one way.
STOP_MIN_ITEMS = 10


@cache
def resolves(up: int, down: int) -> bool:
    """Whether `up` items improving by 1 and `down` worsening by 1 is a gain the paired test
    resolves at 95% (p < ALPHA)."""
    diff = np.array([1.0] * up + [-1.0] * down)
    return up > down and bool(len(diff)) and sign_flip_p(diff) < ALPHA


@cache
def fewest_improving(n: int) -> int | None:
    """The fewest of n items that must improve, none worsening, for the test to resolve a gain;
    None where even all n improving does not."""
    return next((up for up in range(1, n + 1) if resolves(up, 0)), None)


@cache
def improving_of_all(n: int) -> int | None:
    """Where all n items change, how many must improve for the test to resolve a gain; None
    where even all n do not."""
    return next((up for up in range(n // 2 + 1, n + 1) if resolves(up, n - up)), None)


def items_for_gain(gain: float) -> int:
    """The fewest items on which `gain` can resolve (its fewest improving items, none worsening)."""
    n = 1
    while (up := fewest_improving(n)) is None or up / n > gain + 1e-12:
        n += 1
    return n


class Resolution(BaseModel):
    """What one held-out split can resolve: `fewest` items must improve (none worsening) for a
    gain to resolve, `of_all` of them where every item changes (None: nothing resolves)."""

    model_config = ConfigDict(frozen=True)

    split: str  # "test" or "validation"
    items: int
    fewest: int | None
    of_all: int | None
    smallest_gain: float | None
    items_for_target: int  # the items a TARGET_GAIN gain needs

    def claim(self) -> str:
        """What resolves on this split, in words."""
        n = self.items
        if self.fewest is None:
            need = fewest_improving(self.items_for_target) or 6
            return f"no gain can resolve on {n} (the paired test needs at least {need} items improving)"
        if self.fewest == n:
            return f"a gain resolves only if all {n} improve"
        assert self.smallest_gain is not None
        return (
            f"a gain resolves from {self.smallest_gain:+.3f} ({self.fewest} of {n} improve and "
            f"none worsens; if every item changes, {self.of_all} of {n} must improve)"
        )


def resolution(split: str, n: int) -> Resolution:
    fewest = fewest_improving(n) if n else None
    return Resolution(
        split=split,
        items=n,
        fewest=fewest,
        of_all=improving_of_all(n) if n else None,
        smallest_gain=None if fewest is None else fewest / n,
        items_for_target=items_for_gain(TARGET_GAIN),
    )


class HeldOut(BaseModel):
    """Where the labels went and what the held-out splits can resolve (summary.json's
    `held_out`). `stops` is False where validation is too small for the plateau and divergence
    stops (below STOP_MIN_ITEMS), and the run stops by work instead."""

    model_config = ConfigDict(frozen=True)

    labelled: int
    unlabelled: int
    train_labelled: int
    hold_out_labels: bool
    label_free: bool
    test: Resolution
    validation: Resolution  # as each evaluation runs it: max_val_items caps it
    held_validation: int  # the validation split's items
    stops: bool
    truth_rollouts: bool  # whether training rollouts are checked against a label at all

    def labels_line(self) -> str:
        """How the labels were spent, in one line."""
        spent = f"{self.held_validation} validation, {self.test.items} test"
        reads = "reads no label" if self.label_free else "reads labels"
        if self.hold_out_labels:
            where = f"all {self.labelled} held out ({spent})"
        else:
            where = f"{self.train_labelled} train, {spent}"
        line = f"labels: {self.labelled} labelled item(s): {where}; the scorer {reads}"
        if self.unlabelled:
            line += f"; {self.unlabelled} unlabelled item(s) train"
            line += (
                "; judge/agreement and train/independent_reward use labelled training rollouts only"
                if self.truth_rollouts
                else "; no labelled training item, so judge/agreement and "
                "train/independent_reward are not computed"
            )
        return line

    def lines(self, cfg: RunConfig) -> list[str]:
        """The labels line, then what test and validation can resolve."""
        return [self.labels_line(), self.test_line(cfg), self.validation_line(cfg)]

    def test_line(self, cfg: RunConfig) -> str:
        test = self.test
        line = f"test: {test.items} labelled items; {test.claim()}"
        if test.smallest_gain is not None and test.smallest_gain <= TARGET_GAIN + 1e-12:
            return line
        need = test.items_for_target
        share = test_share(cfg, self.hold_out_labels)
        if not self.hold_out_labels and need / max(self.labelled, 1) <= 0.5:
            ratio = f"test_ratio={need / self.labelled:.2f} of your {self.labelled} labelled"
        else:
            ratio = f"label about {math.ceil(need / share)} items at test_ratio={cfg.test_ratio:g}"
            if self.hold_out_labels:
                ratio += f", val_ratio={cfg.val_ratio:g}: the test gets {share:.0%} of them"
        return f"{line}; for a {TARGET_GAIN:+.2f} gain hold out at least {need} ({ratio})"

    def validation_line(self, cfg: RunConfig) -> str:
        val = self.validation
        capped = (
            f" of {self.held_validation} (max_val_items)"
            if val.items < self.held_validation
            else ""
        )
        line = (
            f"validation: {val.items}{capped} items, steps of {1 / max(val.items, 1):.3f}; "
            f"{val.claim().replace('gain', 'change')}"
        )
        if self.stops:
            return line
        return (
            f"{line}; too small to stop on (under {STOP_MIN_ITEMS} items): the plateau and "
            f"divergence stops are off and the run stops by work (max_steps={cfg.max_steps}"
            + (f", max_minutes={cfg.max_minutes:g}" if cfg.max_minutes else "")
            + ")"
        )


def test_share(cfg: RunConfig, hold_out_labels: bool) -> float:
    """The share of the labelled items the test split gets."""
    if hold_out_labels:
        return cfg.test_ratio / (cfg.val_ratio + cfg.test_ratio)
    return cfg.test_ratio
