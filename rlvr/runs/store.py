"""The run directory: everything a run writes (file names: `rlvr.runs.layout`).

Crash safety (a run can be SIGKILLed at any instant and resumed):
- every file is written to a temporary name, fsynced and renamed (`rlvr.runs.atomic`); checkpoint
  directories too, so a half-written one is never taken for complete;
- metrics.jsonl is appended one fsynced line per row; a row counts once its newline is on disk.
  A torn last line (killed mid-append) is dropped with a warning, and `recover` cuts it off
  before a resumed run appends; an unparsable line before the last is an error naming it;
- credentials never reach a file: rows pass through `rlvr.redact` on the way out.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import art
import polars as pl
from openai.types.chat.chat_completion import Choice
from pydantic import JsonValue, ValidationError

from rlvr.config import SAVED_RUN, RunConfig
from rlvr.json_types import JsonObject
from rlvr.redact import redact_data, redact_rows
from rlvr.runs import atomic, layout, runlock
from rlvr.runs.damage import RunDamaged, fault_point, space_guard
from rlvr.runs.records import Row, RunResult, StepRow, parse_row

log = logging.getLogger(__name__)

# The names, re-exported for the modules that read them from here.
CONFIG, METRICS, SUMMARY, REPORT = layout.CONFIG, layout.METRICS, layout.SUMMARY, layout.REPORT
TRAJECTORIES, CHECKPOINTS = layout.TRAJECTORIES, layout.CHECKPOINTS


def new_run_dir(cfg: RunConfig, now: datetime | None = None, name: str | None = None) -> Path:
    """`cfg.run_dir`, else a new runs_root/<name>-<timestamp>[-N], created here so no other run
    can take the same name (name: the environment's, default the task)."""
    if cfg.run_dir is not None:
        return cfg.run_dir
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or cfg.task).strip("._") or "task"
    return runlock.claim_new(cfg.runs_root, f"{safe}-{stamp}")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_config(run_dir: Path, cfg: RunConfig) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(run_dir / CONFIG, json.dumps(cfg.public_dict(), indent=2))


def read_config(run_dir: Path) -> RunConfig:
    path = run_dir / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no config.json; is {run_dir} a run directory?")
    from pydantic import ValidationError

    try:
        text = path.read_text(errors="replace")
        return RunConfig.model_validate_json(text, context={SAVED_RUN: True})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise RunDamaged(
            f"{path}: damaged or not an rlvr config ({where}: {first['msg']})"
        ) from None


class MetricsError(RunDamaged):
    """metrics.jsonl is damaged before its last line; the message names the file and line."""


def append_metrics(run_dir: Path, row: Row) -> None:
    """Append one row as one fsynced line (O(1) per step, and `tail -f` friendly)."""
    line = (json.dumps(redact_data(_json_safe(row.on_disk()))) + "\n").encode()
    path = run_dir / METRICS
    half = len(line) // 2
    # A line cut short by a full disk or a kill is a torn last line, which `recover` cuts off on
    # resume; the line goes in two writes so that the tests can kill the process between them.
    with space_guard(path), path.open("ab") as f:
        f.write(line[:half])
        f.flush()
        fault_point(f"metrics:{row.step}")
        f.write(line[half:])
        f.flush()
        os.fsync(f.fileno())


def parse_metrics(text: str, source: Path | str = METRICS) -> tuple[list[Row], int]:
    """(rows as their records, the number of a torn last line or 0). A last line without its
    newline, or one that does not parse, is torn (the run was killed while writing it); an
    unparsable line before it, or a value that is not what its key holds, raises MetricsError
    naming `source`, the line and the key."""
    lines = text.split("\n")  # a complete file ends with "\n": its last piece is ""
    rows: list[Row] = []
    for number, line in enumerate(lines, start=1):
        last = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
        if not line.strip():
            continue
        try:
            row = json.loads(line) if number < len(lines) else None
        except json.JSONDecodeError as error:
            if last:
                return rows, number
            raise MetricsError(
                f"{source}:{number}: unparsable metrics line ({error.msg} at column "
                f"{error.colno}); fix or delete that line to read the run"
            ) from None
        if row is None:  # unterminated: cut off by a kill
            return rows, number
        if not isinstance(row, dict):  # complete but wrong: not something a kill leaves
            raise MetricsError(
                f"{source}:{number}: expected a JSON object, got {type(row).__name__}"
            )
        rows.append(_parsed_row(row, f"{source}:{number}"))
    return rows, 0


def _parsed_row(raw: dict[str, JsonValue], where: str) -> Row:
    """One metrics row as its record; MetricsError naming `where`, the key and its value."""
    try:
        return parse_row(raw)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise MetricsError(
            f"{where}: {key}={raw.get(str(first['loc'][0]))!r}: {first['msg'].lower()}"
        ) from None


def read_metrics(run_dir: Path) -> list[Row]:
    """Rows of metrics.jsonl; a torn last line is dropped with a warning naming it."""
    return _read_rows(run_dir)[0]


def _read_rows(run_dir: Path) -> tuple[list[Row], str, int]:
    """(rows, text, torn line number or 0) of metrics.jsonl, warning once of a torn line."""
    path = run_dir / METRICS
    if not path.is_file():
        return [], "", 0
    text = path.read_text(errors="replace")
    rows, torn = parse_metrics(text, path)
    if torn:
        log.warning(
            "%s:%d: dropped an incomplete last line (the run was killed while writing it)",
            path,
            torn,
        )
    return rows, text, torn


def recover(run_dir: Path) -> list[Row]:
    """Make a killed run's directory consistent before it resumes, and return its metrics rows:
    temporaries of interrupted writes are removed, a torn last metrics line is cut off (the
    next append would otherwise glue onto it), and training trajectories of steps with no
    metrics row are removed (the resumed run redoes those steps). A fresh directory has none of
    these, and no rows."""
    for folder in (run_dir, run_dir / TRAJECTORIES, run_dir / CHECKPOINTS):
        atomic.remove_leftovers(folder)
    rows, text, torn = _read_rows(run_dir)
    if torn:
        kept = text.split("\n")[: torn - 1]
        atomic.write_text(run_dir / METRICS, "".join(f"{line}\n" for line in kept))
    done = max((r.step for r in rows if isinstance(r, StepRow)), default=0)
    for parquet in (run_dir / TRAJECTORIES).glob(f"*{layout.TABLE_SUFFIX}"):
        step = layout.table_step(parquet)
        if step is not None and step > done:
            parquet.unlink()
    return rows


def write_summary(run_dir: Path, summary: RunResult) -> None:
    text = json.dumps(redact_data(_json_safe(summary.on_disk())), indent=2)
    atomic.write_text(run_dir / SUMMARY, text)


def read_summary(run_dir: Path) -> RunResult:
    """summary.json as its record; RunDamaged naming the file and key where it is not one."""
    path = run_dir / SUMMARY
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no summary.json; has the run finished?")
    summary = read_json_object(path, "the summary of a finished run")
    try:
        return RunResult.model_validate(summary)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        found = first.get("input")
        shown = "" if isinstance(found, dict) else f" is {found!r}"
        raise RunDamaged(
            f"{path}: {key}{shown}: {first['msg'].lower()}; expected the summary of a finished run"
        ) from None


def read_json_object(path: Path, what: str) -> dict[str, JsonValue]:
    """The JSON object in `path`; RunDamaged naming the file where it is torn or not one."""
    text = path.read_text(errors="replace")
    try:
        found = json.loads(text)
    except json.JSONDecodeError as error:
        raise RunDamaged(
            f"{path}: damaged, not valid JSON ({error.msg} at line {error.lineno} column "
            f"{error.colno} of {len(text.splitlines())}); expected {what}"
        ) from None
    if not isinstance(found, dict):
        raise RunDamaged(f"{path}: damaged, a JSON {type(found).__name__}; expected {what}")
    return found


# ART's messages are the openai SDK's TypedDicts and Choices, as the JSON the table holds
def _message_dict(message: Any) -> JsonObject:
    if isinstance(message, Choice):
        return {**message.message.model_dump(exclude_none=True), "trainable": True}
    return dict(message)


# One row of a trajectory table: its columns (`write_trajectories`) hold text, numbers or nothing.
TableRow = dict[str, str | int | float | None]


def trajectory_rows(
    groups: list[art.TrajectoryGroup], item_ids: list[str], *, step: int, split: str
) -> list[TableRow]:
    """Flatten groups into table rows. Nested fields are JSON strings so any environment's messages,
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


def write_trajectories(run_dir: Path, name: str, rows: list[TableRow]) -> Path:
    path = layout.table(run_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
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
    with atomic.writing(path) as tmp:
        pl.DataFrame(redact_rows(rows), schema=schema).write_parquet(tmp)
    return path


def save_checkpoint(run_dir: Path, source: Path, name: str) -> Path:
    """Name an adapter directory of ART's folder as checkpoints/<name> (replacing an older one);
    it appears under its name only once complete. Its files are hard links to the source's: the
    checkpoint is stored once, evaluation (which reads ART's folder) reads the very bytes
    checkpoints/ names, and ART removing its copy of an older step leaves this one whole."""
    target = run_dir / CHECKPOINTS / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic.writing_dir(target) as tmp:
        link_tree(source, tmp)
    return target


def link_tree(source: Path, target: Path) -> None:
    """Hard-link every file of `source` into the existing folder `target` (subfolders made);
    a file is copied where the filesystem refuses a link (not the case for a full disk)."""
    for folder, dirs, files in os.walk(source):
        here = target / Path(folder).relative_to(source)
        for name in dirs:
            (here / name).mkdir(exist_ok=True)
        for name in files:
            try:
                os.link(Path(folder) / name, here / name)
            except OSError as error:
                if error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise
                shutil.copy2(Path(folder) / name, here / name)
