"""Where a run stands and what it decides, as pure functions of its metrics rows (so a resumed run
re-derives a decision the killed run took but did not act on)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.config import TrainConfig
from rlvr.metrics import ALARM_PREFIX, M
from rlvr.training.pool import History, Outcome, record
from rlvr.training.stopping import (
    Alarm,
    AlarmName,
    EvalPoint,
    budget_spent,
    out_of_time,
    plateau,
)
from rlvr.training.warmstart import WarmMetric


class StopReason(StrEnum):
    PLATEAU = "plateau"  # validation stopped improving for `patience` evaluations
    MAX_STEPS = "max_steps"  # the step budget ran out first
    TIME_BUDGET = "time_budget"  # the next evaluation period would not fit in max_minutes
    REWARD_HACKING = "reward_hacking"  # divergence alarm with on_divergence=stop
    JUDGE_BUDGET = "judge_budget"  # the judge spend cap was reached
    NO_SIGNAL = "no_signal"  # the first steps found no group with reward spread, refills included


class RunResult(BaseModel):
    """What a run ended with; the same facts as summary.json."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path
    task: str
    scorer: str
    stop_reason: StopReason
    steps: int
    baseline_val: float
    best_val: float
    best_step: int
    test_accuracy: float | None
    alarms: list[Alarm]
    wall_s: float


class RunState(BaseModel):
    """Where a run stands; rebuilt from metrics.jsonl on resume."""

    step: int = 0
    evals: list[EvalPoint] = []
    policy_steps: dict[int, int] = {}  # loop step of an evaluation -> policy checkpoint step
    alarms: list[Alarm] = []
    wall_s: float = 0.0
    pool: dict[str, History] = {}  # training item id -> its groups so far (rlvr.training.pool)


def step_outcomes(row: dict[str, Any]) -> list[Outcome]:
    """The scored groups a step row records (item id, mean training reward, signal)."""
    return [Outcome.model_validate(o) for o in row.get(M.OUTCOMES) or []]


def restore_state(rows: list[dict[str, Any]]) -> RunState:
    state = RunState()
    for row in rows:
        step = int(row.get(M.STEP, 0))
        if M.REWARD_MEAN in row:
            state.step = max(state.step, step)
            outcomes = step_outcomes(row)
            state.pool = record(state.pool, outcomes)
        if M.VAL_ACCURACY in row:
            state.evals.append(
                EvalPoint(
                    step=step,
                    val=row[M.VAL_ACCURACY],
                    reward=row.get(M.VAL_TRAIN_REWARD),
                    val_items=row.get(M.VAL_ITEMS),
                    val_std=row.get(M.VAL_STD),
                    scores=row.get(M.VAL_SCORES),
                )
            )
            state.policy_steps[step] = int(row.get(M.POLICY_STEP, 0))
        for key, message in row.items():
            if key.startswith(ALARM_PREFIX):
                state.alarms.append(
                    Alarm(
                        name=AlarmName(key.removeprefix(ALARM_PREFIX)), step=step, message=message
                    )
                )
        state.wall_s = max(state.wall_s, float(row.get(M.WALL_SECONDS, 0.0)))
    return state


def last_policy_step(rows: list[dict[str, Any]]) -> int:
    return max((int(r[M.POLICY_STEP]) for r in rows if r.get(M.POLICY_STEP) is not None), default=0)


def eval_due(cfg: TrainConfig, step: int) -> bool:
    return step % cfg.eval_every == 0 or step == cfg.max_steps


def stop_after_eval(
    cfg: TrainConfig, state: RunState, rows: list[dict[str, Any]], test_items: int, val_items: int
) -> StopReason | None:
    """The stopping rules after the evaluation at `state.step`. A pure function of the history,
    so a resumed run re-derives a decision the killed run took but did not act on."""
    rules = cfg.stopping
    hacking = [
        a for a in state.alarms if a.name == AlarmName.REWARD_HACKING and a.step == state.step
    ]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    if hacking and cfg.stopping.on_divergence == "stop":
        return StopReason.REWARD_HACKING
    spent = budget_spent(state.step, cfg.max_steps, evals[-1][M.WALL_SECONDS], cfg.max_minutes)
    if spent >= rules.min_budget_share and plateau(
        state.evals, rules.patience, rules.min_delta, rules.rule, rules.trend_window, rules.trend_z
    ):
        return StopReason.PLATEAU
    # The test split is still to be evaluated for the best and the last checkpoint, and for the
    # start and the warm start unless their validation passes evaluated it already.
    pending = [t for t in tested(rows, -1, -2) if t not in early_tested(rows)]
    if cfg.max_minutes is not None and out_of_time(
        [r[M.WALL_SECONDS] for r in evals],
        test_s=item_seconds(evals[-1], val_items) * test_items * len(pending),
        budget_s=cfg.max_minutes * 60,
    ):
        return StopReason.TIME_BUDGET
    return None


def item_seconds(row: dict[str, Any], val_items: int) -> float:
    """An evaluation row's seconds per item evaluated (validation and any test items beside)."""
    per_item = row.get(M.EVAL_ITEM_SECONDS)
    return float(per_item) if per_item is not None else row[M.EVAL_SECONDS] / max(1, val_items)


def early_tested(rows: list[dict[str, Any]]) -> list[Tested]:
    """The checkpoints whose test split a validation pass evaluated beside it (the start, the
    model after the warm start): their tables are written, not evaluated again at the end."""
    return [Tested(r[M.TEST_CHECKPOINT]) for r in rows if r.get(M.TEST_CHECKPOINT)]


def window_reward(rows: list[dict[str, Any]], step: int, eval_every: int) -> float | None:
    recent = [
        r[M.REWARD_MEAN]
        for r in rows
        if M.REWARD_MEAN in r and step - eval_every < r[M.STEP] <= step
    ]
    return sum(recent) / len(recent) if recent else None


def warm_policy_step(rows: list[dict[str, Any]]) -> int | None:
    """The policy checkpoint the warm start saved (None without a warm start)."""
    warm = next((r for r in rows if WarmMetric.SECONDS in r), None)
    return int(warm[M.POLICY_STEP]) if warm is not None and M.POLICY_STEP in warm else None


class Tested(StrEnum):
    """The checkpoints the test split is evaluated for, on the same items."""

    FINAL = "final"  # the best checkpoint by validation: the run's result
    START = "start"  # policy step 0, before any training
    AFTER_WARM_START = "after-warm-start"
    LAST = "last"  # the last checkpoint, where it is not the best one


class TestResult(BaseModel):
    """The test split evaluated at one checkpoint: its policy step, accuracy over the completed
    items, each item's score and the rows of its trajectory table."""

    model_config = ConfigDict(frozen=True)

    policy_step: int
    accuracy: float
    scores: dict[str, float]
    rows: list[dict[str, Any]]


def tested(rows: list[dict[str, Any]], final: int, last: int) -> dict[Tested, int]:
    """Policy step of each checkpoint the test split is evaluated for: the final (best) one, the
    start, the one after the warm start (with one) and the last one (when it differs from the
    best, so RL's effect on held-out accuracy is measured even when the best stays the start)."""
    warm = warm_policy_step(rows)
    return {
        Tested.FINAL: final,
        Tested.START: 0,
        **({Tested.AFTER_WARM_START: warm} if warm is not None else {}),
        **({Tested.LAST: last} if last != final else {}),
    }


NO_SIGNAL_STEPS = 2  # steps without any group with signal after which a run says so and stops


def no_signal_stop(cfg: TrainConfig, rows: list[dict[str, Any]]) -> bool:
    """The template's preflight as the run's first act: the first NO_SIGNAL_STEPS steps scored
    groups and trained on none (every scored group all equal, refills included). A step whose
    groups were all skipped (the judge failed) says nothing about the data: it never stops a run
    for no signal."""
    steps = [r for r in rows if M.REWARD_MEAN in r]
    return (
        cfg.preflight
        and len(steps) == NO_SIGNAL_STEPS
        and all(r.get(M.GROUPS) and not r.get(M.TRAINED_GROUPS) for r in steps)
    )


class NoSignal(BaseModel):
    """Why a run found nothing to learn from in its first steps, and what the GRPO template
    advises for it."""

    model_config = ConfigDict(frozen=True)

    steps: int
    groups: int
    all_zero: int
    all_one: int
    reward_counts: dict[str, int]
    truncated_rate: float
    remedies: list[str]

    def message(self) -> str:
        counts = ", ".join(f"{value}: {n}" for value, n in self.reward_counts.items())
        return (
            f"no group with reward spread in the first {self.steps} steps ({self.groups} groups, "
            f"refills included; {self.all_zero} all-0, {self.all_one} all-1); rewards seen: "
            f"{counts}. GRPO has nothing to learn from. " + " ".join(self.remedies)
        )


def no_signal_verdict(rows: list[dict[str, Any]], cfg: TrainConfig) -> NoSignal:
    """What the first steps' groups looked like and the template's remedies for that case."""
    steps = [r for r in rows if M.REWARD_MEAN in r]
    counts: dict[str, int] = {}
    for row in steps:
        for value, n in (row.get(M.REWARD_COUNTS) or {}).items():
            counts[value] = counts.get(value, 0) + n
    all_zero = sum(int(r.get(M.ALL_ZERO) or 0) for r in steps)
    all_one = sum(int(r.get(M.ALL_ONE) or 0) for r in steps)
    truncated = sum(float(r.get(M.TRUNCATED_RATE) or 0.0) for r in steps) / max(len(steps), 1)
    remedies = []
    if all_zero or not all_one:
        cut = f" ({truncated:.0%} of replies were cut at max_tokens={cfg.max_tokens})"
        remedies.append(
            "All-0 groups (too hard, or the reward too strict): give partial credit, raise "
            f"max_tokens{cut if truncated else ''}, raise temperature (now {cfg.temperature:g}), "
            "use easier items, or add a warm start (sft_steps=) from demonstrations."
        )
    if all_one:
        remedies.append("All-1 groups (too easy): use harder items.")
    remedies.append("preflight=false trains anyway.")
    return NoSignal(
        steps=len(steps),
        groups=sum(int(r.get(M.GROUPS) or 0) for r in steps),
        all_zero=all_zero,
        all_one=all_one,
        reward_counts=dict(sorted(counts.items(), key=lambda kv: float(kv[0]))),
        truncated_rate=truncated,
        remedies=remedies,
    )
