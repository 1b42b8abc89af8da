"""Where a run stands, as pure functions of its metrics rows (rlvr.runs.records), so a resumed
run re-derives where the killed run stood (and the early test results its tables kept); its stop
rules: rlvr.training.stop_rules."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict

from rlvr.config import RunConfig
from rlvr.runs import layout
from rlvr.runs.records import (
    Alarm,
    AlarmName,
    EvalRow,
    Row,
    RunResult,
    StepRow,
    StopReason,
    WarmStartRow,
)
from rlvr.runs.store import TableRow
from rlvr.training.pool import History, record
from rlvr.training.trends import EvalPoint

__all__ = ["RunResult", "RunState", "StopReason", "TestResult", "Tested"]


class RunState(BaseModel):
    """Where a run stands; rebuilt from metrics.jsonl on resume."""

    step: int = 0
    evals: list[EvalPoint] = []
    policy_steps: dict[int, int] = {}  # loop step of an evaluation -> policy checkpoint step
    alarms: list[Alarm] = []
    wall_s: float = 0.0
    pool: dict[str, History] = {}  # training item id -> its groups so far (rlvr.training.pool)


def restore_state(rows: list[Row]) -> RunState:
    state = RunState()
    for row in rows:
        if isinstance(row, StepRow):
            state.step = max(state.step, row.step)
            state.pool = record(state.pool, row.outcomes)
        if isinstance(row, EvalRow):  # the validation as stop rules and alarms read it
            point = EvalPoint(
                step=row.step,
                val=row.accuracy,
                reward=row.train_reward,
                truth=row.train_truth,
                val_items=row.items,
                val_std=row.std,
                scores=row.scores,
            )
            state.evals.append(point)
            state.policy_steps[row.step] = row.policy_step or 0
        for name, message in row.alarms.items():
            state.alarms.append(Alarm(name=AlarmName(name), step=row.step, message=message))
        state.wall_s = max(state.wall_s, row.wall_s or 0.0)
    return state


def eval_due(cfg: RunConfig, step: int) -> bool:
    return step % cfg.eval_every == 0 or step == cfg.max_steps


def early_tested(rows: list[Row]) -> list[Tested]:
    """The checkpoints whose test split a validation pass evaluated beside it (the start, the
    model after the warm start): their tables are written, not evaluated again at the end."""
    return [
        Tested(r.test_checkpoint)
        for r in rows
        if isinstance(r, EvalRow | WarmStartRow) and r.test_checkpoint
    ]


def window_steps(rows: list[Row], step: int, eval_every: int) -> list[StepRow]:
    """The training steps since the evaluation before `step`: what an evaluation row averages."""
    return [r for r in rows if isinstance(r, StepRow) and step - eval_every < r.step <= step]


def window_reward(rows: list[Row], step: int, eval_every: int) -> float | None:
    recent = [r.reward_mean for r in window_steps(rows, step, eval_every)]
    return sum(recent) / len(recent) if recent else None


def window_truth(rows: list[Row], step: int, eval_every: int) -> float | None:
    """The ground truth of the training rollouts `window_reward` averages, where every one of
    those steps measured it (labelled training items), else None."""
    recent = window_steps(rows, step, eval_every)
    truths = [r.independent for r in recent if r.independent is not None]
    return sum(truths) / len(truths) if recent and len(truths) == len(recent) else None


def warm_start_row(rows: list[Row]) -> WarmStartRow | None:
    """The warm start's row (None without a warm start)."""
    return next((r for r in rows if isinstance(r, WarmStartRow)), None)


def warm_policy_step(rows: list[Row]) -> int | None:
    """The policy checkpoint the warm start saved (None without a warm start)."""
    warm = warm_start_row(rows)
    return warm.policy_step if warm is not None else None


class Tested(StrEnum):
    """The checkpoints the test split is evaluated for, on the same items."""

    FINAL = "final"  # the best checkpoint by validation: the run's result
    START = "start"  # policy step 0, before any training
    AFTER_WARM_START = "after-warm-start"
    LAST = "last"  # the last checkpoint, where it is not the best one


class TestResult(BaseModel):
    """The test split evaluated at one checkpoint: its policy step, accuracy over the completed
    items, each item's score and the rows of its trajectory table."""

    __test__ = False  # a record, not a pytest class

    model_config = ConfigDict(frozen=True)

    policy_step: int
    accuracy: float
    scores: dict[str, float]
    rows: list[TableRow]


def tested(rows: list[Row], final: int, last: int) -> dict[Tested, int]:
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


def read_early_tests(run_dir: Path, rows: list[Row]) -> dict[Tested, TestResult]:
    """The test results a (killed) run's validation passes kept, read back from their tables: a
    resumed run evaluates them no more."""
    steps = tested(rows, -1, -2)
    found: dict[Tested, TestResult] = {}
    for name in early_tested(rows):
        path = layout.table(run_dir, layout.test_name(name))
        if name not in steps or not path.is_file():
            continue  # evaluated again at the end
        table = pl.read_parquet(path).to_dicts()
        scores = {str(r["item_id"]): float(r["reward"]) for r in table}
        found[name] = TestResult(
            policy_step=steps[name],
            accuracy=sum(scores.values()) / len(scores) if scores else 0.0,
            scores=scores,
            rows=table,
        )
    return found
