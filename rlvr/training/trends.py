"""The statistics of validation that stop rules and alarms read: pure functions over the
history of evaluations (rlvr.training.stop_rules decides, rlvr.training.alarms warns).

Trends are least-squares slopes over the last `window` evaluations, times the span, so one noisy
evaluation cannot decide on its own. Where the evaluations carry per-item scores on the same
items (every run of rlvr's), their noise is paired: the spread of the items' own slopes and
differences, so a rise every item shares counts, and outcomes that scatter when the policy moves
(a game's boards) count as noisy as they are. The best evaluation moves only on a gain above
`min_delta` and that noise.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict


class EvalPoint(BaseModel):
    """One validation: the step, the accuracy, and the mean training reward of the steps since
    the previous validation (None at the baseline, before any training), with the ground truth of
    those same training rollouts where their items are labelled (`truth`)."""

    model_config = ConfigDict(frozen=True)

    step: int
    val: float
    reward: float | None = None
    truth: float | None = None
    val_items: int | None = None  # how many items the accuracy is measured on (its noise)
    val_std: float | None = None  # std of the per-item scores (checks outside [0, 1])
    scores: dict[str, float] | None = None  # item id -> its score: the paired noise


MIN_PAIRED_ITEMS = 8  # fewer items in common: the noise is estimated as if independent


def common_scores(points: list[EvalPoint]) -> list[list[float]] | None:
    """Per item scored in every one of `points`: its scores in order; None where an evaluation
    carries no per-item scores or fewer than MIN_PAIRED_ITEMS items are common."""
    if not points or any(p.scores is None for p in points):
        return None
    scored = [p.scores for p in points if p.scores is not None]
    common = sorted(set.intersection(*(set(s) for s in scored)))
    if len(common) < MIN_PAIRED_ITEMS:
        return None
    return [[s[item] for s in scored] for item in common]


def mean_and_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.inf
    return mean, math.sqrt(var / n)


def counted_gain(points: list[EvalPoint], a: int, b: int, min_delta: float) -> tuple[float, float]:
    """Evaluation `b`'s gain over evaluation `a` and the gain that counts: above `min_delta` and
    one standard error, paired over their common items where both carry per-item scores, else
    that of two independent accuracies (`gain_threshold`)."""
    rows = common_scores([points[a], points[b]])
    if rows is None:
        return points[b].val - points[a].val, gain_threshold(points, min_delta)
    gain, se = mean_and_se([later - earlier for earlier, later in rows])
    return gain, max(min_delta, se)


def best_eval(points: list[EvalPoint], min_delta: float) -> int:
    """Index of the best evaluation: a later one displaces the best so far only with a gain that
    counts (so noise does not move the restored checkpoint)."""
    best = 0
    for i in range(1, len(points)):
        gain, threshold = counted_gain(points, best, i, min_delta)
        if gain > threshold:
            best = i
    return best


class Trend(BaseModel):
    """The least-squares slope of validation per evaluation over a window, and its standard error
    from the per-item sampling noise of each evaluation."""

    model_config = ConfigDict(frozen=True)

    slope: float
    se: float
    points: int

    def rising(self, z: float) -> bool:
        return self.points >= 3 and self.slope > 0 and self.slope > z * self.se


def val_trend(points: list[EvalPoint], window: int) -> Trend:
    """Validation's trend over the last `window` evaluations. Paired where the evaluations carry
    per-item scores: the mean and standard error of the items' own slopes. Otherwise each
    evaluation's noise is that of an accuracy on its items (binomial at the window's mean), or the
    measured spread of a check that is not an accuracy, as if the evaluations were independent."""
    recent = points[-window:]
    n = len(recent)
    if n < 2:
        return Trend(slope=0.0, se=math.inf, points=n)
    rows = common_scores(recent)
    if rows is not None:
        slope, se = mean_and_se([slope_of(row) for row in rows])
        return Trend(slope=slope, se=se, points=n)
    sxx = sum((x - (n - 1) / 2) ** 2 for x in range(n))
    noise = item_noise(recent)
    return Trend(
        slope=slope_of([p.val for p in recent]),
        se=noise / math.sqrt(sxx) if noise else math.inf,
        points=n,
    )


def item_noise(points: list[EvalPoint]) -> float:
    """Standard deviation of one evaluation's mean score from its items' sampling noise."""
    n = points[-1].val_items
    if not n:
        return 0.0
    spread = next((p.val_std for p in reversed(points) if p.val_std is not None), None)
    if spread is not None:
        return spread / math.sqrt(n)
    p = min(1.0, max(0.0, sum(point.val for point in points) / len(points)))
    return math.sqrt(p * (1 - p) / n)


def slope_of(values: list[float]) -> float:
    """The least-squares slope of `values` per step (0 for fewer than two)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    var_x = sum((x - mean_x) ** 2 for x in range(n))
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(range(n), values, strict=True)) / var_x


def trend(values: list[float]) -> float:
    """Change along the least-squares line through `values` from first to last point."""
    return slope_of(values) * (len(values) - 1)


def val_change(points: list[EvalPoint]) -> tuple[float, float]:
    """Validation's change along its trend over `points` and that change's standard error
    (paired over per-item scores where the evaluations carry them)."""
    rows = common_scores(points)
    if rows is None:
        return trend([p.val for p in points]), val_noise(points)
    change, se = mean_and_se([trend(row) for row in rows])
    return change, se


def gain_threshold(points: list[EvalPoint], min_delta: float) -> float:
    """The smallest validation gain that counts, for the best checkpoint and the plateau stop:
    above `min_delta` and above the sampling noise of an accuracy on that many items (0.18 on 16
    items at 50 %), so picking the best of several noisy evaluations does not chase noise."""
    return max(min_delta, val_noise(points)) if points else min_delta


def val_noise(points: list[EvalPoint]) -> float:
    """Standard error of the difference of two accuracies measured on the same number of items:
    a validation fall smaller than this is indistinguishable from sampling noise (0.11 on 40
    items at 50 % accuracy), so it cannot stop a run as reward hacking. For a check that is not
    an accuracy (ART's idiom without one: the rollout's own reward) the measured spread counts."""
    return math.sqrt(2) * item_noise(points)
