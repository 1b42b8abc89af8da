"""Every alarm of a run, as a pure function over its history: what the loop raises on a metrics
row as `alarm/<name>` (rlvr.runs.records.AlarmName), after a validation or a training step.

- reward hacking: the training reward trends up while validation trends down by more than
  `val_drop` and more than `val_z` standard errors of that change, or by more than one standard
  error at two evaluations in a row; one such fall alone is a warning (`val_falling`). Where the
  training items are labelled, the reward must also rise beyond the ground truth of the same
  rollouts by `reward_rise`: a reward that rises with the truth is not gamed, and validation's
  fall is then a warning whatever its size (noise, or a gain that does not carry over, which the
  plateau stop and the best checkpoint handle);
- converged: the training reward trends up while validation stays flat;
- RL regression: validation has fallen below where RL started (the first evaluation, after any
  warm start) by more than `val_drop` and `val_z` standard errors of the paired difference,
  whatever the training reward did: the updates unteach the policy; said once;
- judge disagrees: over the last `window` training steps the scorer's reward and the ground truth
  of the very same rollouts differ by more than `gap` and more than their sampling noise (a judge
  that rewards wrong answers, or a reward that does not measure the task); said once a window.
The baseline (no training reward yet) counts for validation: a fall from the untrained policy is
the clearest sign there is. Trends and noise: rlvr.training.trends.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from rlvr.runs.records import Alarm, AlarmName, StepRow
from rlvr.training.trends import (
    EvalPoint,
    common_scores,
    mean_and_se,
    trend,
    val_change,
    val_noise,
)


class Thresholds(BaseModel):
    """The divergence thresholds of a run (RunConfig.stopping)."""

    model_config = ConfigDict(frozen=True)

    window: int = 3
    reward_rise: float = 0.1
    val_drop: float = 0.05
    val_flat: float = 0.02  # a validation change below this, on a rising reward: converged
    val_z: float = 2.0  # standard errors of a validation fall that stop a run at once


def truth_change(recent: list[EvalPoint]) -> float | None:
    """The trend of the ground truth of the training rollouts over the window, where every
    rewarded evaluation in it carries one (labelled training items), else None."""
    rewarded = [p for p in recent if p.reward is not None]
    truths = [p.truth for p in rewarded if p.truth is not None]
    return trend(truths) if len(truths) == len(rewarded) >= 2 else None


def gamed(recent: list[EvalPoint], thresholds: Thresholds) -> bool:
    """Whether the window's reward may be gamed: its rise beyond the ground truth of the same
    rollouts counts as rising, or that truth is unknown (unlabelled training items)."""
    rewards = [p.reward for p in recent if p.reward is not None]
    truth = truth_change(recent)
    return truth is None or trend(rewards) - truth >= thresholds.reward_rise


def val_falls(points: list[EvalPoint], thresholds: Thresholds, z: float) -> bool:
    """Training reward rose over the window, beyond its ground truth where known, while
    validation fell by more than `val_drop` and more than `z` standard errors of its change."""
    recent = points[-thresholds.window :]
    rewards = [p.reward for p in recent if p.reward is not None]
    if len(recent) < thresholds.window or len(rewards) < 2:
        return False
    if trend(rewards) < thresholds.reward_rise or not gamed(recent, thresholds):
        return False
    change, se = val_change(recent)
    return change <= -max(thresholds.val_drop, z * se)


def over_steps(name: AlarmName, first: int, last: int, finding: str, advice: str) -> Alarm:
    """An alarm over a window of steps, raised at its last: "<finding> over steps A-B: <advice>"
    (the one shape every windowed alarm's message takes)."""
    return Alarm(name=name, step=last, message=f"{finding} over steps {first}-{last}: {advice}")


def divergence(points: list[EvalPoint], thresholds: Thresholds) -> Alarm | None:
    """Compare the trends of training reward and validation over the last window of evaluations:
    reward hacking, a validation fall (a warning) or convergence."""
    recent = points[-thresholds.window :]
    rewards = [p.reward for p in recent if p.reward is not None]
    if len(recent) < thresholds.window or len(rewards) < 2:
        return None
    reward_change = trend(rewards)
    if reward_change < thresholds.reward_rise:
        return None
    first, last = recent[0].step, recent[-1].step
    change, se = val_change(recent)
    if change <= -max(thresholds.val_drop, se):
        truth = truth_change(recent)
        if not gamed(recent, thresholds) and truth is not None:
            finding = (
                f"validation fell {change:+.2f} (s.e. {se:.2f}) while training reward rose "
                f"{reward_change:+.2f} and the ground truth of the same rollouts {truth:+.2f}"
            )
            advice = (
                "the reward follows the ground truth, so it is not gamed: the training items' "
                "gain does not reach validation (noise, or a gain that does not generalise); the "
                "run goes on, the plateau stop decides, and the best checkpoint is kept"
            )
            return over_steps(AlarmName.VAL_FALLING, first, last, finding, advice)
        confident = change <= -max(thresholds.val_drop, thresholds.val_z * se)
        # the previous window fell too (reward rising there as well): a fall that persists
        hacking = confident or val_falls(points[:-1], thresholds, 1.0)
        finding = (
            f"training reward rose {reward_change:+.2f} while validation fell {change:+.2f} "
            f"(s.e. {se:.2f})"
            + ("" if truth is None else f" and the ground truth of the same rollouts {truth:+.2f}")
        )
        if hacking:
            advice = (
                "the reward is being gamed; read the rollouts (rlvr inspect --suspicious) and "
                "fix the reward before training on"
            )
            return over_steps(AlarmName.REWARD_HACKING, first, last, finding, advice)
        advice = (
            f"within {thresholds.val_z:g} standard errors, so the run goes on; a second fall "
            "in a row stops it as reward hacking"
        )
        return over_steps(AlarmName.VAL_FALLING, first, last, finding, advice)
    if abs(change) < thresholds.val_flat:
        finding = (
            f"training reward rose {reward_change:+.2f} but validation stayed flat ({change:+.2f})"
        )
        return over_steps(AlarmName.CONVERGED, first, last, finding, "converged; stop soon")
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


def validation_alarms(
    points: list[EvalPoint], raised: list[Alarm], thresholds: Thresholds
) -> list[Alarm]:
    """The alarms a validation (the last of `points`) raises, given those `raised` so far:
    divergence, and RL regression once per run."""
    regressed = any(a.name == AlarmName.RL_REGRESSION for a in raised)
    found = [
        divergence(points, thresholds),
        None if regressed else rl_regression(points, thresholds),
    ]
    return [a for a in found if a is not None and is_new(a, raised)]


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
    return over_steps(
        AlarmName.JUDGE_DISAGREES,
        recent[0].step,
        recent[-1].step,
        f"the training scorer gives {reward:.2f} where ground truth gives {truth:.2f} on the "
        f"same {n} rollouts",
        f"it {direction}; read them (rlvr inspect --suspicious), then use a stronger judge, a "
        "reference-guided judge (scorer=ruler_ref), a gated scorer (verifier>ruler) or "
        "scorer=verifier",
    )


def judge_alarm(
    steps: list[StepRow], raised: list[Alarm], step: int, window: int, gap: float
) -> Alarm | None:
    """alarm/judge_disagrees at training step `step` (the last of `steps`), unless it already
    fired within the window."""
    points = [
        StepPoint(step=r.step, reward=r.reward_mean, truth=r.independent, n=r.truth_rollouts or 0)
        for r in steps
        if r.independent is not None
    ]
    alarm = judge_disagrees(points, window, gap)
    recent = [a for a in raised if a.name == AlarmName.JUDGE_DISAGREES and a.step > step - window]
    if alarm is None or recent or alarm.step != step:
        return None
    return alarm
