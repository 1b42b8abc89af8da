"""Every name in a run directory, in one place (what writes a run and what reads one agree here).

runs/<task>-<timestamp>/
  config.json                       resolved TrainConfig (no secrets: keys live in the environment)
  metrics.jsonl                     one JSON object per step (and per evaluation)
  summary.json, report.png
  trajectories/step-NNNN.parquet    every scored training trajectory of a step
  trajectories/val-NNNN.parquet     validation rollouts at an evaluation step
  trajectories/test.parquet         the final checkpoint's test rollouts (test-start,
                                    test-after-warm-start, test-last: the same items for the
                                    starting model, after the warm start, the last checkpoint)
  checkpoints/step-NNNN/, checkpoints/best/   LoRA adapters
  .art/                             ART's own layout (its checkpoints per policy step)
  .lock                             held by the one process writing the run (rlvr.runs.runlock)
"""

from __future__ import annotations

import re
from pathlib import Path

CONFIG = "config.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
REPORT = "report.png"
TRAJECTORIES = "trajectories"
CHECKPOINTS = "checkpoints"
BEST = "best"
ART_DIR = ".art"
LOCK_FILE = ".lock"
TABLE_SUFFIX = ".parquet"
TEST_TABLE = "test"  # the final checkpoint's test rollouts
SPLITS = ("train", "val", "test")
TRAIN_TABLE = re.compile(r"step-(\d+)\.parquet")
VAL_TABLE = re.compile(r"val-(\d+)\.parquet")


def step_name(step: int) -> str:
    """A training step's trajectory table and checkpoint: step-NNNN."""
    return f"step-{step:04d}"


def val_name(step: int) -> str:
    return f"val-{step:04d}"


def test_name(checkpoint: str | None = None) -> str:
    """The test table of the final checkpoint (None), or of another one (`start`,
    `after-warm-start`, `last`: rlvr.training.state.Tested)."""
    return TEST_TABLE if checkpoint is None else f"{TEST_TABLE}-{checkpoint}"


def table(run_dir: Path, name: str) -> Path:
    return run_dir / TRAJECTORIES / f"{name}{TABLE_SUFFIX}"


def table_step(path: Path) -> int | None:
    """The step of a training table's file name (step-NNNN.parquet), else None."""
    found = TRAIN_TABLE.fullmatch(path.name)
    return int(found[1]) if found else None
