"""Every name in a run directory, in one place (what writes a run and what reads one agree here).

runs/<task>-<timestamp>/
  config.json                       resolved RunConfig (no secrets: keys live in the environment)
  metrics.jsonl                     one JSON object per step (and per evaluation)
  summary.json, report.png
  trajectories/step-NNNN.parquet    every scored training trajectory of a step
  trajectories/val-NNNN.parquet     validation rollouts at an evaluation step
  trajectories/test.parquet         the final checkpoint's test rollouts (test-start,
                                    test-after-warm-start, test-last: the same items for the
                                    starting model, after the warm start, the last checkpoint)
  checkpoints/step-NNNN/, checkpoints/best/   LoRA adapters: hard links to the files of ART's
                                    checkpoint of that step (each checkpoint stored once)
  .art/<project>/models/<name>/     ART's own layout (its checkpoints per policy step); <name> is
                                    the run directory's name when it was created, kept when the
                                    directory is renamed, moved or copied (`policy_name`)
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
ART_MODELS = "models"  # .art/<project>/models/<name>/: ART's folder of the run's policy
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


def policy_name(run_dir: Path, project: str) -> str:
    """The name the run's policy is registered under in ART: the one model folder the run holds
    (.art/<project>/models/<name>, named when the run was created: a run keeps working when its
    directory is renamed, moved or copied), else the run directory's name (a new run)."""
    models = run_dir / ART_DIR / project / ART_MODELS
    found = (
        sorted(p.name for p in models.iterdir() if p.is_dir() and not p.name.startswith("."))
        if models.is_dir()
        else []
    )
    return found[0] if len(found) == 1 and run_dir.name not in found else run_dir.name


def policy_dir(run_dir: Path, project: str) -> Path:
    """ART's folder of the run's policy (its checkpoints are under checkpoints/NNNN)."""
    return run_dir / ART_DIR / project / ART_MODELS / policy_name(run_dir, project)
