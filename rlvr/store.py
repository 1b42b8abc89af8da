"""The run directory: everything a run writes, in the layout of design.md §2.

runs/<task>-<timestamp>/
  config.json                 resolved TrainConfig (no secrets: keys live in the environment)
  metrics.jsonl               one JSON object per step (and per evaluation)
  trajectories/step-NNNN.parquet   every scored training trajectory of a step
  trajectories/val-NNNN.parquet    validation rollouts at an evaluation step
  trajectories/test.parquet        the single test evaluation
  checkpoints/step-NNNN/, checkpoints/best/   LoRA adapters
  summary.json, report.png
Files are written to a temporary name and renamed, so a killed run never leaves half a file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import art
import polars as pl
from openai.types.chat.chat_completion import Choice

from rlvr.config import TrainConfig

CONFIG = "config.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
REPORT = "report.png"
TRAJECTORIES = "trajectories"
CHECKPOINTS = "checkpoints"


def new_run_dir(cfg: TrainConfig, now: datetime | None = None) -> Path:
    if cfg.run_dir is not None:
        return cfg.run_dir
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return cfg.runs_root / f"{cfg.task}-{stamp}"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(run_dir / CONFIG, json.dumps(cfg.public_dict(), indent=2))


def read_config(run_dir: Path) -> TrainConfig:
    path = run_dir / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no config.json; is {run_dir} a run directory?")
    return TrainConfig.model_validate_json(path.read_text())


def append_metrics(run_dir: Path, row: dict[str, Any]) -> None:
    with (run_dir / METRICS).open("a") as f:
        f.write(json.dumps(_json_safe(row)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl; a torn last line (a run killed mid-write) is ignored."""
    path = run_dir / METRICS
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    _atomic_write(run_dir / SUMMARY, json.dumps(_json_safe(summary), indent=2))


def read_summary(run_dir: Path) -> dict[str, Any]:
    path = run_dir / SUMMARY
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no summary.json; has the run finished?")
    return json.loads(path.read_text())


def _message_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Choice):
        return {**message.message.model_dump(exclude_none=True), "trainable": True}
    return dict(message)


def trajectory_rows(
    groups: list[art.TrajectoryGroup], item_ids: list[str], *, step: int, split: str
) -> list[dict[str, Any]]:
    """Flatten groups into table rows. Nested fields are JSON strings so any scenario's messages,
    tools, metrics and metadata fit one schema."""
    return [
        {
            "step": step,
            "split": split,
            "item_id": item_id,
            "group": g,
            "index": i,
            "reward": float(t.reward),
            "independent_reward": t.metrics.get("independent_reward"),
            "messages": json.dumps(_json_safe([_message_dict(m) for m in t.messages_and_choices])),
            "tools": json.dumps(t.tools) if t.tools else None,
            "metrics": json.dumps(_json_safe(dict(t.metrics))),
            "metadata": json.dumps(_json_safe(dict(t.metadata))),
            "logs": json.dumps(t.logs),
        }
        for g, (group, item_id) in enumerate(zip(groups, item_ids, strict=True))
        for i, t in enumerate(group.trajectories)
    ]


def write_trajectories(run_dir: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    folder = run_dir / TRAJECTORIES
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.parquet"
    tmp = folder / f".{name}.parquet.tmp"
    schema = {
        "step": pl.Int64,
        "split": pl.Utf8,
        "item_id": pl.Utf8,
        "group": pl.Int64,
        "index": pl.Int64,
        "reward": pl.Float64,
        "independent_reward": pl.Float64,
        "messages": pl.Utf8,
        "tools": pl.Utf8,
        "metrics": pl.Utf8,
        "metadata": pl.Utf8,
        "logs": pl.Utf8,
    }
    pl.DataFrame(rows, schema=schema).write_parquet(tmp)
    os.replace(tmp, path)
    return path


def save_checkpoint(run_dir: Path, source: Path, name: str) -> Path:
    """Copy an adapter directory into checkpoints/<name> (replacing an older copy)."""
    target = run_dir / CHECKPOINTS / name
    tmp = run_dir / CHECKPOINTS / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target
