"""How much did training change held-out accuracy? A paired comparison over the same items.

Two checkpoints are scored on the same test items with the same greedy sampling, so each item
gives a difference `after - before`, and the gain is their mean. Its p-value is a paired sign-flip
permutation test of "no change"; its 95% interval is that same test inverted: every shift d for
which the test of `diff - d` does not reject at 5%. So the interval and the p-value cannot
disagree: 0 lies outside the interval exactly when p < 0.05. Both are exact (over all 2^n sign
patterns, counted by how many items share a difference) where the items' differences take few
distinct values, as accuracy differences do; otherwise both come from the same 20,000 seeded
random sign patterns. Pairing removes the items' own difficulty from the noise, which is why a
gain that a best-of-N validation curve cannot resolve can be resolved here.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict

ALPHA = 0.05  # the interval is the 95% one
FLIPS = 20_000  # seeded random sign patterns where exact counting would hold too many sums
EXACT_STATES = 200_000  # distinct (signed sum, sign count) pairs exact counting may hold
TIE = 1e-9  # shifts this close to a pattern's interval count as in it (rounding of float sums)


class PairedGain(BaseModel):
    """Mean accuracy before and after on the same items, their mean difference, its interval."""

    model_config = ConfigDict(frozen=True)

    items: int
    before: float
    after: float
    gain: float
    ci95: tuple[float, float]
    p_value: float

    def describe(self, what: str = "test items") -> str:
        low, high = self.ci95
        return (
            f"{self.gain:+.3f} [{signed(low)}, {signed(high)}] on {self.items} {what} "
            f"(p={self.p_value:.3g}; {self.before:.3f} -> {self.after:.3f})"
        )


def signed(value: float) -> str:
    """`value` to 3 decimals with its sign; an interval end a tie tolerance below 0 reads +0.000."""
    return f"{0.0 if round(value, 3) == 0 else value:+.3f}"


class SignPatterns(NamedTuple):
    """The sign patterns s of the test, as distinct pairs (s . diff, sum of s) with the share of
    all patterns each stands for."""

    signed: np.ndarray
    net: np.ndarray
    weight: np.ndarray


class Acceptance(NamedTuple):
    """For each sign pattern, the shifts d at which it counts against the observed statistic:
    the closed interval [low, high] (it always holds the mean difference)."""

    low: np.ndarray
    high: np.ndarray
    weight: np.ndarray


def paired_gain(before: list[float], after: list[float], *, seed: int = 0) -> PairedGain:
    """The paired gain of `after` over `before` (same items, same order)."""
    if len(before) != len(after):
        raise ValueError(f"paired scores differ in length: {len(before)} vs {len(after)}")
    if not before:
        raise ValueError("no items to compare")
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    diff = b - a
    accepted = acceptance(diff, seed=seed)
    # Where even the most extreme pattern cannot reach 5% (five items or fewer) nothing is
    # rejected: the interval is then every gain the scores allow.
    span = float(max(a.max(), b.max()) - min(a.min(), b.min()))
    return PairedGain(
        items=len(diff),
        before=float(a.mean()),
        after=float(b.mean()),
        gain=float(diff.mean()),
        ci95=inverted_interval(accepted, float(diff.mean()), bounds=(-span, span)),
        p_value=p_at(accepted, 0.0),
    )


def sign_patterns(diff: np.ndarray, *, seed: int = 0) -> SignPatterns:
    """Every sign pattern of `diff`, counted exactly by the items' distinct differences (a
    difference shared by m items adds j - (m - j) of itself for each j of C(m, j) patterns),
    or FLIPS seeded random ones where that would hold more than EXACT_STATES pairs."""
    values, counts = np.unique(diff, return_counts=True)
    signed, count, log_weight = np.zeros(1), np.zeros(1, dtype=np.int64), np.zeros(1)
    for value, m in zip(values.tolist(), counts.tolist(), strict=True):
        if len(signed) * (m + 1) > EXACT_STATES:
            return _random_patterns(diff, seed)
        net = np.arange(-m, m + 1, 2)  # pluses minus minuses among the m items
        ways = np.array([_log_binomial(m, j) - m * math.log(2) for j in range(m + 1)])
        signed = (signed[:, None] + value * net[None, :]).ravel()
        count = (count[:, None] + net[None, :]).ravel()
        log_weight = (log_weight[:, None] + ways[None, :]).ravel()
        signed, count, log_weight = _merged(signed, count, log_weight)
    return SignPatterns(signed, count, np.exp(log_weight))


def _log_binomial(m: int, j: int) -> float:
    return math.lgamma(m + 1) - math.lgamma(j + 1) - math.lgamma(m - j + 1)


def _merged(
    signed: np.ndarray, count: np.ndarray, log_weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs that coincide (to rounding) merged, their weights summed."""
    keys = np.stack([np.round(signed, 9), count.astype(float)], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    top = log_weight.max()
    summed = np.bincount(inverse.ravel(), weights=np.exp(log_weight - top))
    return signed[first], count[first], np.log(summed) + top


def _random_patterns(diff: np.ndarray, seed: int) -> SignPatterns:
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(FLIPS, len(diff)))
    return SignPatterns(
        signs @ diff, signs.sum(axis=1).astype(np.int64), np.full(FLIPS, 1.0 / FLIPS)
    )


def acceptance(diff: np.ndarray, *, seed: int = 0) -> Acceptance:
    """Where each sign pattern counts. The test of `diff - d` compares |s . (diff - d)| =
    |A - d B| (A = s . diff, B = sum of s) with the observed |S - n d|; the difference of their
    squares is (A - S + d (n - B)) (A + S - d (n + B)), whose two roots bound the d where the
    pattern counts. Each interval holds S / n (the observed statistic is 0 there), so the share
    of patterns counting rises up to the mean difference and falls after it: the shifts not
    rejected form one interval."""
    n, total = len(diff), float(diff.sum())
    patterns = sign_patterns(diff, seed=seed)
    a, b = patterns.signed, patterns.net.astype(float)
    mean = total / n
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(b == n, -np.inf, (total - a) / (n - b))
        second = np.where(b == -n, np.inf, (a + total) / (n + b))
    # A pattern that ties the observed statistic counts (to rounding: sums of graded scores).
    low = np.minimum(np.minimum(first, second), mean) - TIE
    high = np.maximum(np.maximum(first, second), mean) + TIE
    # All-plus and all-minus count at every shift (their statistic is the observed one).
    always = np.abs(b) == n
    low, high = np.where(always, -np.inf, low), np.where(always, np.inf, high)
    return Acceptance(low, high, patterns.weight / patterns.weight.sum())


def p_at(accepted: Acceptance, shift: float) -> float:
    """The two-sided p-value of "the mean difference is `shift`": the share of sign patterns at
    least as extreme as the observed one (summed in one fixed order, so that one pattern more
    never lowers it)."""
    counted = (accepted.low <= shift) & (shift <= accepted.high)
    return float(np.sum(np.where(counted, accepted.weight, 0.0)))


def inverted_interval(
    accepted: Acceptance, mean: float, *, bounds: tuple[float, float]
) -> tuple[float, float]:
    """The shifts whose p-value (`p_at`) is at least ALPHA: from the smallest interval end below
    the mean where it is, to the largest above it; clipped to `bounds` where nothing is
    rejected."""
    if p_at(accepted, -math.inf) >= ALPHA:  # hence at every shift
        return min(bounds[0], mean), max(bounds[1], mean)
    lows = np.unique(accepted.low[np.isfinite(accepted.low) & (accepted.low <= mean)])
    highs = np.unique(accepted.high[np.isfinite(accepted.high) & (accepted.high >= mean)])
    return float(_first_accepted(accepted, lows)), float(_first_accepted(accepted, highs[::-1]))


def _first_accepted(accepted: Acceptance, shifts: np.ndarray) -> float:
    """The first of `shifts` (ordered towards the mean, where p is 1) whose p-value is at least
    ALPHA; p only rises along them, so a bisection finds it."""
    lo, hi = 0, len(shifts) - 1
    while lo < hi:
        middle = (lo + hi) // 2
        if p_at(accepted, float(shifts[middle])) >= ALPHA:
            hi = middle
        else:
            lo = middle + 1
    return float(shifts[lo])


def sign_flip_p(diff: np.ndarray, *, seed: int = 0) -> float:
    """Two-sided p-value of mean(diff) = 0 under random signs (items whose scores did not change
    add nothing either way)."""
    return p_at(acceptance(np.asarray(diff, dtype=float), seed=seed), 0.0)


METHOD = (
    "paired sign-flip permutation test over items: p-value of no change, and the 95% interval "
    "of the shifts it does not reject (exact where differences take few values, else "
    f"{FLIPS:,} seeded sign patterns)"
)


class Compared(StrEnum):
    """The comparisons of the test block: each checkpoint's gain over the start, and RL's own gain
    over the model after the warm start (over the start without a warm start)."""

    GAIN = "gain"  # the final (best) checkpoint over the start
    RL_GAIN = "rl_gain"  # the final checkpoint over the warm start
    GAIN_LAST = "gain_last"  # the last checkpoint over the start
    RL_GAIN_LAST = "rl_gain_last"  # the last checkpoint over the warm start


class Comparison(BaseModel):
    """One paired comparison of the test block: the gain, its 95% interval and p-value."""

    model_config = ConfigDict(frozen=True)

    gain: float
    ci95: tuple[float, float]
    p: float


class TestBlock(BaseModel):
    """summary.json's `test` block: the items every tested checkpoint completed, each one's test
    accuracy (start, after the warm start, final = best, last), and the paired comparisons
    (`Compared`), each as gain, 95% interval and p-value. Its keys on disk are its field names;
    a field left out is a comparison that was not made (no warm start, no last checkpoint)."""

    __test__ = False  # a record, not a pytest class

    model_config = ConfigDict(frozen=True)

    items: int
    method: str
    start: float | None = None
    after_warm_start: float | None = None
    final: float | None = None
    last: float | None = None
    gain: float | None = None
    gain_ci95: tuple[float, float] | None = None
    gain_p: float | None = None
    rl_gain: float | None = None
    rl_gain_ci95: tuple[float, float] | None = None
    rl_gain_p: float | None = None
    gain_last: float | None = None
    gain_last_ci95: tuple[float, float] | None = None
    gain_last_p: float | None = None
    rl_gain_last: float | None = None
    rl_gain_last_ci95: tuple[float, float] | None = None
    rl_gain_last_p: float | None = None

    def compared(self, which: Compared) -> Comparison | None:
        """One comparison, None where it was not made."""
        gain, ci95, p = {
            Compared.GAIN: (self.gain, self.gain_ci95, self.gain_p),
            Compared.RL_GAIN: (self.rl_gain, self.rl_gain_ci95, self.rl_gain_p),
            Compared.GAIN_LAST: (self.gain_last, self.gain_last_ci95, self.gain_last_p),
            Compared.RL_GAIN_LAST: (
                self.rl_gain_last,
                self.rl_gain_last_ci95,
                self.rl_gain_last_p,
            ),
        }[which]
        if gain is None or ci95 is None or p is None:
            return None
        return Comparison(gain=gain, ci95=ci95, p=p)


def test_block(
    start: dict[str, float],
    after_warm_start: dict[str, float] | None,
    final: dict[str, float],
    last: dict[str, float] | None = None,
) -> TestBlock:
    """The test block from per-item test scores of the starting model, the model after the warm
    start (None without one), the final (best) checkpoint and the last checkpoint (None where it
    could not be evaluated; the final's scores where it is the final one), over the items all of
    them completed."""
    tables = [start, final, *(t for t in (after_warm_start, last) if t is not None)]
    common = sorted(set.intersection(*(set(t) for t in tables)))
    if not common:
        return TestBlock(items=0, method=METHOD)
    base = after_warm_start if after_warm_start is not None else start

    def on_common(scores: dict[str, float]) -> list[float]:
        return [scores[i] for i in common]

    best = paired_gain(on_common(start), on_common(final))
    rl = paired_gain(on_common(base), on_common(final))
    found = TestBlock(
        items=len(common),
        start=best.before,
        after_warm_start=(
            float(np.mean(on_common(after_warm_start))) if after_warm_start is not None else None
        ),
        final=best.after,
        gain=best.gain,
        gain_ci95=best.ci95,
        gain_p=best.p_value,
        rl_gain=rl.gain,
        rl_gain_ci95=rl.ci95,
        rl_gain_p=rl.p_value,
        method=METHOD,
    )
    if last is None:
        return found
    at_last = paired_gain(on_common(start), on_common(last))
    rl_last = paired_gain(on_common(base), on_common(last))
    return found.model_copy(
        update={
            "last": at_last.after,
            "gain_last": at_last.gain,
            "gain_last_ci95": at_last.ci95,
            "gain_last_p": at_last.p_value,
            "rl_gain_last": rl_last.gain,
            "rl_gain_last_ci95": rl_last.ci95,
            "rl_gain_last_p": rl_last.p_value,
        }
    )
