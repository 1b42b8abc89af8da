"""Stopping rules and alarms: pure functions over the history of evaluations.

The hybrid approach trains on the scorer's reward and trusts only held-out validation accuracy:
- plateau: validation has not gained more than `min_delta` (and its noise) over its best for
  `patience` evals — and, under the default `trend` rule, its least-squares trend over the last
  `trend_window` evals does not rise by more than `trend_z` standard errors, so a slow steady rise
  that no single evaluation resolves keeps the run going while a flat or falling one stops it;
- reward hacking: the training reward trends up while validation trends down by more than
  `val_drop` and more than `val_z` standard errors of that change, or by more than one standard
  error at two evaluations in a row; one such fall alone is a warning (`val_falling`);
- converged: the training reward trends up while validation stays flat;
- RL regression: validation has fallen below where RL started (the first evaluation, after any
  warm start) by more than `val_drop` and `val_z` standard errors of the paired difference, whatever
  the training reward did: the updates unteach the policy;
- judge disagrees: over the last `window` training steps the scorer's reward and the ground truth
  of the very same rollouts differ by more than `gap` and more than their sampling noise (a judge
  that rewards wrong answers, or a reward that does not measure the task);
- time budget: the next evaluation period and the test evaluation would not fit.
Trends are least-squares slopes over the last `window` evaluations, times the span, so one noisy
evaluation cannot fire an alarm on its own. Where the evaluations carry per-item scores on the
same items (every run of rlvr's), their noise is paired: the spread of the items' own slopes and
differences, so a rise every item shares counts, and outcomes that scatter when the policy moves
(a game's boards) count as noisy as they are.
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class AlarmName(StrEnum):
    REWARD_HACKING = "reward_hacking"  # reward up, validation down: stop and read the rollouts
    VAL_FALLING = "val_falling"  # reward up, validation down once by 1-`val_z` s.e.: a warning
    CONVERGED = "converged"  # reward up, validation flat: more steps buy nothing
    JUDGE_DISAGREES = "judge_disagrees"  # training reward far from ground truth, same rollouts
    RL_REGRESSION = "rl_regression"  # validation below where RL started, beyond paired noise


class EvalPoint(BaseModel):
    """One validation: the step, the accuracy, and the mean training reward of the steps since
    the previous validation (None at the baseline, before any training)."""

    model_config = ConfigDict(frozen=True)

    step: int
    val: float
    reward: float | None = None
    val_items: int | None = None  # how many items the accuracy is measured on (its noise)
    val_std: float | None = None  # std of the per-item scores (checks outside [0, 1])
    scores: dict[str, float] | None = None  # item id -> its score: the paired noise


class Alarm(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: AlarmName
    step: int
    message: str


class Thresholds(BaseModel):
    model_config = ConfigDict(frozen=True)

    window: int = 3
    reward_rise: float = 0.1
    val_drop: float = 0.05
    val_flat: float = 0.02
    val_z: float = 2.0  # standard errors of a validation fall that stop a run at once


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


def plateau(
    points: list[EvalPoint], patience: int, min_delta: float, rule: str, window: int, z: float
) -> bool:
    """The plateau stop: no counted gain for `patience` evaluations and, under the `trend` rule,
    no rising validation trend over the last `window` evaluations."""
    if not points or len(points) - 1 - best_eval(points, min_delta) < patience:
        return False
    return rule == "best" or not val_trend(points, window).rising(z)


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


def val_falls(points: list[EvalPoint], thresholds: Thresholds, z: float) -> bool:
    """Training reward rose over the window while validation fell by more than `val_drop` and
    more than `z` standard errors of its change."""
    recent = points[-thresholds.window :]
    rewards = [p.reward for p in recent if p.reward is not None]
    if len(recent) < thresholds.window or len(rewards) < 2:
        return False
    if trend(rewards) < thresholds.reward_rise:
        return False
    change, se = val_change(recent)
    return change <= -max(thresholds.val_drop, z * se)


def divergence(points: list[EvalPoint], thresholds: Thresholds) -> Alarm | None:
    """Compare the trends of training reward and validation over the last window of evaluations.
    The baseline (no training reward yet) counts for validation: a fall from the untrained
    policy is the clearest sign there is."""
    recent = points[-thresholds.window :]
    rewards = [p.reward for p in recent if p.reward is not None]
    if len(recent) < thresholds.window or len(rewards) < 2:
        return None
    reward_change = trend(rewards)
    if reward_change < thresholds.reward_rise:
        return None
    span = f"steps {recent[0].step}-{recent[-1].step}"
    change, se = val_change(recent)
    falling = f"training reward rose {reward_change:+.2f} while validation fell {change:+.2f} "
    if change <= -max(thresholds.val_drop, se):
        confident = change <= -max(thresholds.val_drop, thresholds.val_z * se)
        # the previous window fell too (reward rising there as well): a fall that persists
        hacking = confident or val_falls(points[:-1], thresholds, 1.0)
        name, advice = (
            (
                AlarmName.REWARD_HACKING,
                "the reward is being gamed; read the rollouts (rlvr inspect --suspicious) and "
                "fix the reward before training on",
            )
            if hacking
            else (
                AlarmName.VAL_FALLING,
                f"within {thresholds.val_z:g} standard errors, so the run goes on; a second fall "
                "in a row stops it as reward hacking",
            )
        )
        message = f"{falling}(s.e. {se:.2f}) over {span}: {advice}"
        return Alarm(name=name, step=recent[-1].step, message=message)
    if abs(change) < thresholds.val_flat:
        return Alarm(
            name=AlarmName.CONVERGED,
            step=recent[-1].step,
            message=(
                f"training reward rose {reward_change:+.2f} but validation stayed flat "
                f"({change:+.2f}) over {span}: converged; stop soon"
            ),
        )
    return None


def rl_regression(points: list[EvalPoint], thresholds: Thresholds) -> Alarm | None:
    """Validation at the latest evaluation is below the first one (where RL started: after any
    warm start) by more than `val_drop` and `val_z` standard errors of their difference, paired
    over their common items where both carry per-item scores. Unlike reward hacking it needs no
    rising reward: updates that lower the reward they optimise unteach the policy as surely."""
    if len(points) < 2:
        return None
    rows = common_scores([points[0], points[-1]])
    gain, se = (
        mean_and_se([later - earlier for earlier, later in rows])
        if rows is not None
        else (points[-1].val - points[0].val, val_noise(points))
    )
    if gain > -max(thresholds.val_drop, thresholds.val_z * se):
        return None
    return Alarm(
        name=AlarmName.RL_REGRESSION,
        step=points[-1].step,
        message=(
            f"validation {points[-1].val:.3f} at step {points[-1].step} is {gain:+.3f} (s.e. "
            f"{se:.3f}) below where RL started ({points[0].val:.3f} at step {points[0].step}): the "
            "updates unteach the policy, and the best checkpoint is kept. Read train/update_kl "
            "and the rollouts (rlvr inspect RUN --step N); try a lower learning_rate, a KL "
            "penalty toward the start (kl_penalty_coef) or more groups_per_batch"
        ),
    )


def is_new(alarm: Alarm, alarms: list[Alarm]) -> bool:
    """Whether `alarm` is not already raised: the same alarm at the same step (a resumed run
    evaluating again) is one alarm, while another alarm at that step never hides it."""
    return all((a.name, a.step) != (alarm.name, alarm.step) for a in alarms)


class StepPoint(BaseModel):
    """One training step: the scorer's mean reward and the ground truth's mean on the same
    `n` scored rollouts."""

    model_config = ConfigDict(frozen=True)

    step: int
    reward: float
    truth: float
    n: int


def judge_disagrees(points: list[StepPoint], window: int, gap: float) -> Alarm | None:
    """The scorer and the ground truth disagree on the same rollouts over `window` steps: every
    step differs in the same direction, most steps by more than `gap`, and the window's mean
    difference exceeds `gap` and two standard errors of a mean difference of scores in [0, 1]
    over its rollouts (at most 1/sqrt(n)). So one odd step cannot fire it, nor a handful of
    rollouts, and one quieter step cannot silence a judge that is far off on the rest."""
    recent = points[-window:]
    n = sum(p.n for p in recent)
    if len(recent) < window or n == 0:
        return None
    gaps = [p.reward - p.truth for p in recent]
    sign = 1.0 if gaps[0] > 0 else -1.0
    if not all(g * sign > 0 for g in gaps) or 2 * sum(g * sign > gap for g in gaps) <= window:
        return None
    reward = sum(p.reward * p.n for p in recent) / n
    truth = sum(p.truth * p.n for p in recent) / n
    if abs(reward - truth) <= max(gap, 2 / math.sqrt(n)):
        return None
    direction = (
        "rewards answers the ground truth fails"
        if reward > truth
        else "fails answers the ground truth accepts"
    )
    return Alarm(
        name=AlarmName.JUDGE_DISAGREES,
        step=recent[-1].step,
        message=(
            f"the training scorer gives {reward:.2f} where ground truth gives {truth:.2f} on the "
            f"same {n} rollouts over steps {recent[0].step}-{recent[-1].step}: it {direction}; "
            "read them (rlvr inspect --suspicious), then use a stronger judge, a reference-guided judge "
            "(scorer=ruler_ref), a gated scorer (verifier>ruler) or scorer=verifier"
        ),
    )


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


def out_of_time(eval_walls: list[float], test_s: float, budget_s: float) -> bool:
    """Whether one more evaluation period (as long as the last one: its steps and validation)
    plus the test evaluation (`test_s`) would overrun the budget. `eval_walls` are the run's
    wall-clock seconds at each evaluation so far; judged right after one, so a run that stops
    for time stops at a validated checkpoint."""
    if len(eval_walls) < 2:
        return False
    now = eval_walls[-1]
    return now + (now - eval_walls[-2]) + test_s > budget_s


def budget_spent(step: int, max_steps: int, wall_s: float, max_minutes: float | None) -> float:
    """The share of the run's budget spent: of max_minutes where the run has one (time is what
    ends it), else of max_steps."""
    if max_minutes is not None:
        return min(1.0, wall_s / (max_minutes * 60))
    return min(1.0, step / max_steps)
