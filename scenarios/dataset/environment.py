"""Reading a dataset file into items, and the single-turn environment over them."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import art

from rlvr.config import ConfigError
from rlvr.scoring.verifiers import VERIFIERS, RewardFn, contains_answer
from rlvr.task_api.rollouts import single_turn
from rlvr.types import Environment, EnvironmentBase, Item, Sampling, completion_text
from scenarios.dataset import Options

log = logging.getLogger("rlvr.task_api.dataset")

SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".parquet")
MAX_BYTES = 1 << 30  # a dataset is read whole into memory; larger files are refused, not swapped
MIN_ROWS = 3  # one each for train, validation and test
PARTIAL = ("math", "numeric", "exact")  # verifiers whose answer can also appear mid-text


class DataError(ConfigError):
    """A dataset file or row that cannot be used; one line naming file, row and field."""


def read_rows(path: Path) -> list[Any]:
    """The file's rows as Python objects (dicts, unless the file is broken)."""
    if not path.exists():
        raise DataError(f"{path}: no such file (data_path=)")
    if not path.is_file():  # a folder, a device such as /dev/zero, a FIFO: would read forever
        raise DataError(f"{path}: not a regular file; data_path= expects a dataset file")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(
            f"{path}: unknown file type '{suffix or '(none)'}'; expected one of "
            f"{', '.join(SUFFIXES)}"
        )
    if (size := path.stat().st_size) > MAX_BYTES:
        raise DataError(
            f"{path}: {size / 2**20:.0f} MiB is over the {MAX_BYTES >> 20} MiB a dataset may "
            "have (it is read whole); sample it down first"
        )
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataError(f"{path}: row {number}: not valid JSON ({error.msg})") from None
        return rows
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"), strict=False)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: not valid JSON at line {error.lineno}: {error.msg}") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON array of rows, got {type(data).__name__}")
        return data
    import polars as pl

    try:
        frame = pl.read_csv(path, infer_schema=False) if suffix == ".csv" else pl.read_parquet(path)
    except Exception as error:  # polars raises several kinds; the message says which
        raise DataError(
            f"{path}: cannot read as {suffix[1:]}: {str(error).splitlines()[0]}"
        ) from None
    return frame.to_dicts()


def is_rubric_file(rows: list[Any]) -> bool:
    from judges.rubric_data import CRITERION_KEY

    return any(
        isinstance(row, dict) and any(CRITERION_KEY.match(str(k).strip()) for k in row)
        for row in rows[:5]
    )


def _text(value: Any) -> str | None:
    """A usable prompt/answer text: strings and numbers (not NaN, not bool)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return value if isinstance(value, str) and value.strip() else None


def row_item(row: Any, number: int, options: Options, source: str) -> Item:
    """One row -> Item, or ValueError saying which field is wrong (the caller adds the file)."""
    if not isinstance(row, dict):
        raise ValueError(f"expected an object with fields, got {type(row).__name__}")
    fields = {
        options.prompt_field: "a non-empty string",
        options.answer_field: "a string or number",
    }
    values: dict[str, str | None] = {}
    for field, expected in fields.items():
        value = row.get(field)
        # No answer (missing, null, an empty cell): an unlabelled row, which trains under a
        # scorer that reads no label (rlvr.training.labels).
        if field == options.answer_field and (
            value is None or (isinstance(value, str) and not value.strip())
        ):
            values[field] = None
            continue
        if value is None:
            raise ValueError(f"field '{field}': missing; expected {expected}")
        text = _text(value)
        if text is None or (field == options.prompt_field and not isinstance(value, str)):
            raise ValueError(f"field '{field}': got {value!r}; expected {expected}")
        values[field] = text
    own = row.get("system")
    system = own if isinstance(own, str) and own.strip() else options.system  # empty cell: default
    raw_id = row.get("id")
    prompt = values[options.prompt_field]
    assert prompt is not None
    return Item(
        id=str(raw_id) if _text(raw_id) else f"{source}-{number}",
        prompt=prompt,
        answer=values[options.answer_field],
        data={"system": system} if system else {},
    )


def load_items(rows: list[Any], path: Path, options: Options) -> tuple[list[Item], list[str]]:
    """(items, skipped-row reasons) from the file's rows. Without skip_bad_rows the first bad
    row is a DataError."""
    items: list[Item] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for number, row in enumerate(rows, 1):
        try:
            item = row_item(row, number, options, path.stem)
            if item.id in seen:
                raise ValueError(f"field 'id': {item.id!r} appears more than once")
        except ValueError as error:
            if not options.skip_bad_rows:
                raise DataError(
                    f"{path}: row {number}: {error} (skip_bad_rows=true skips such rows)"
                ) from None
            skipped.append(f"row {number}: {error}")
            continue
        seen.add(item.id)
        items.append(item)
    if not items:
        raise DataError(f"{path}: no usable rows ({len(skipped)} skipped)")
    if skipped:
        log.warning("%s: skipped %d bad row(s); first: %s", path, len(skipped), skipped[0])
    items = items[: options.num_items]
    if len(items) < MIN_ROWS:
        raise DataError(
            f"{path}: {len(items)} usable row(s); the train/validation/test split needs at "
            f"least {MIN_ROWS}"
        )
    labelled = sum(i.answer is not None for i in items)
    if labelled < MIN_ROWS:
        raise DataError(
            f"{path}: {labelled} of {len(items)} rows have an answer (field "
            f"'{options.answer_field}'); validation and test need at least {MIN_ROWS} labelled "
            "rows; the rows without one train only under a scorer that reads no label "
            "(scorer=ruler or rubric)"
        )
    return items, skipped


class DatasetEnvironment(EnvironmentBase):
    """One chat turn per item; the answer is checked by a verifier from the library."""

    name = "dataset"
    default_scorer = "verifier"

    def __init__(self, items: list[Item], check: RewardFn, reward: RewardFn, skipped: int) -> None:
        self.items, self._check, self._reward, self.skipped = items, check, reward, skipped

    def load(self) -> list[Item]:
        return self.items

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        system = item.data.get("system")
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": item.prompt})
        return await single_turn(model, item, messages, sampling)

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return self._check(completion_text(trajectory), item.answer or "")

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        return self._reward(completion_text(trajectory), item.answer or "")


def make_environment(options: Options, judge: Any = None) -> Environment:
    rows = read_rows(options.data_path)
    if is_rubric_file(rows):
        from judges.rubric_data import rows_from_records
        from scenarios.rubric_if.environment import RubricIfEnvironment

        if judge is None:
            raise DataError(
                f"{options.data_path}: a rubric file needs a judge; set judge=local or a model id"
            )
        data = rows_from_records(rows, str(options.data_path), options.skip_bad_rows)
        return RubricIfEnvironment(data, judge, options.num_items or len(data.rows))
    items, skipped = load_items(rows, options.data_path, options)
    check = VERIFIERS[options.verifier]
    reward = contains_answer if options.partial_credit and options.verifier in PARTIAL else check
    return DatasetEnvironment(items, check, reward, len(skipped))
