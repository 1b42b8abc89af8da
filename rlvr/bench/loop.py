"""`rlvr bench hack`: a deliberately hackable reward on the real model, to show the divergence
alarm firing. Training rewards reply length (`scorer=length`); validation stays correctness, so a
policy that learns to ramble gains reward while losing accuracy. Prints one JSON line last."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlvr.config import RunConfig
from rlvr.metrics import ALARM_PREFIX, Figures
from rlvr.runs import store
from rlvr.runs.records import AlarmName, EvalRow
from rlvr.training import run_training

HACK_DEFAULTS = {
    "task": "math",
    "task_options": {"difficulty": "easy", "num_items": 400},
    "scorer": "length",
    "judge": "none",
    "temperature": 0.8,
    "max_tokens": 48,
    "learning_rate": 3e-4,
    "eval_every": 1,
    "stopping.patience": 50,
    "max_steps": 12,
    "max_val_items": 40,
    "stopping.divergence_window": 3,
}


class Evaluated(BaseModel):
    """One evaluation as a replay test needs it: step, val accuracy, windowed train reward and
    the ground truth of those training rollouts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    val: float
    reward: float | None
    truth: float | None = None
    val_items: int | None
    scores: dict[str, float] | None


class HackFigures(Figures):
    """`rlvr bench hack`: how the run stopped and whether the divergence alarm fired."""

    bench: str = "hack"
    run_dir: str
    stop_reason: str
    alarms: list[AlarmName]
    alarm_fired: bool
    steps: int
    baseline_val: float
    wall_s: float
    # in the record file (--record), not the printed line
    history: list[Evaluated] = Field(exclude=True)
    alarm_rows: list[dict[str, str]]  # per row that raised any: `alarm/<name>` -> its message


def history(run_dir: Path) -> list[Evaluated]:
    """The run's evaluation history (Evaluated)."""
    return [
        Evaluated(
            step=r.step,
            val=r.accuracy,
            reward=r.train_reward,
            truth=r.train_truth,
            val_items=r.items,
            scores=r.scores,
        )
        for r in store.read_metrics(run_dir)
        if isinstance(r, EvalRow)
    ]


async def hack_benchmark(
    runs_root: Path, record: Path | None = None, **overrides: Any
) -> HackFigures:
    cfg = RunConfig(**{**HACK_DEFAULTS, **overrides, "runs_root": runs_root})
    started = time.monotonic()
    result = await run_training(cfg)
    alarms = [a.name for a in result.alarms]
    figures = HackFigures(
        run_dir=str(result.run_dir),
        stop_reason=result.stop_reason,
        alarms=alarms,
        alarm_fired="reward_hacking" in alarms,
        steps=result.steps,
        baseline_val=result.baseline_val,
        wall_s=round(time.monotonic() - started, 1),
        history=history(result.run_dir),
        alarm_rows=[
            {f"{ALARM_PREFIX}{name}": message for name, message in r.alarms.items()}
            for r in store.read_metrics(result.run_dir)
            if r.alarms
        ],
    )
    if record is not None:
        written = figures.model_dump(mode="json") | {
            "history": [e.model_dump(mode="json") for e in figures.history]
        }
        record.write_text(json.dumps({"config": cfg.public_dict(), **written}, indent=1))
    return figures
