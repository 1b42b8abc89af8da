"""Where a run stands and what it decides, as pure functions of its metrics rows (so a resumed run
re-derives a decision the killed run took but did not act on)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.config import TrainConfig
from rlvr.metrics import ALARM_PREFIX, M
from rlvr.training.stopping import (
    Alarm,
    AlarmName,
    EvalPoint,
    gain_threshold,
    out_of_time,
    plateaued,
)
from rlvr.training.warmstart import WarmMetric


class StopReason(StrEnum):
    PLATEAU = "plateau"  # validation stopped improving for `patience` evaluations
    MAX_STEPS = "max_steps"  # the step budget ran out first
    TIME_BUDGET = "time_budget"  # the next evaluation period would not fit in max_minutes
    REWARD_HACKING = "reward_hacking"  # divergence alarm with on_divergence=stop
    JUDGE_BUDGET = "judge_budget"  # the judge spend cap was reached


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


def restore_state(rows: list[dict[str, Any]]) -> RunState:
    state = RunState()
    for row in rows:
        step = int(row.get(M.STEP, 0))
        if M.REWARD_MEAN in row:
            state.step = max(state.step, step)
        if M.VAL_ACCURACY in row:
            state.evals.append(
                EvalPoint(
                    step=step,
                    val=row[M.VAL_ACCURACY],
                    reward=row.get(M.VAL_TRAIN_REWARD),
                    val_items=row.get(M.VAL_ITEMS),
                    val_std=row.get(M.VAL_STD),
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
        state.wall_s = max(state.wall_s, float(row.get("time/wall_s", 0.0)))
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
    vals = [p.val for p in state.evals]
    hacking = [
        a for a in state.alarms if a.name == AlarmName.REWARD_HACKING and a.step == state.step
    ]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    if hacking and cfg.stopping.on_divergence == "stop":
        return StopReason.REWARD_HACKING
    if plateaued(vals, cfg.stopping.patience, gain_threshold(state.evals, cfg.stopping.min_delta)):
        return StopReason.PLATEAU
    if cfg.max_minutes is not None and out_of_time(
        [r["time/wall_s"] for r in evals],
        # the test split is evaluated for the final, the starting and the warm-started model
        test_s=evals[-1][M.EVAL_SECONDS]
        * test_items
        / val_items
        * len(tested_checkpoints(rows, -1)),
        budget_s=cfg.max_minutes * 60,
    ):
        return StopReason.TIME_BUDGET
    return None


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


def tested_checkpoints(rows: list[dict[str, Any]], final: int) -> list[tuple[str, int]]:
    """(name, policy step) of the checkpoints the test split is evaluated for: the final (best)
    one, the start (policy step 0, before any training) and the one after the warm start."""
    warm = warm_policy_step(rows)
    return [
        ("final", final),
        ("start", 0),
        *([("after-warm-start", warm)] if warm is not None else []),
    ]
