"""Reading a run directory: the run (config, metrics, summary), its step table, and its
trajectory tables (train, val, test) as polars frames, with groups and no-signal groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, JsonValue

from rlvr.metrics import ALARM_PREFIX, HINT_KEY, M
from rlvr.runs import layout, store
from rlvr.runs.damage import RunDamaged
from rlvr.runs.records import KIND_KEY, Row, RunResult, StepRow

SPLITS = layout.SPLITS
TRAIN_FILE, VAL_FILE = layout.TRAIN_TABLE, layout.VAL_TABLE
TEST_FILE = layout.test_name() + layout.TABLE_SUFFIX
SIGNAL_TOLERANCE = 1e-9


class InspectError(ValueError):
    """A run directory or trajectory file that cannot be read; the message is one line."""


# --- the run ------------------------------------------------------------------------------------


class Run(BaseModel):
    """A run directory as read from disk: its config as written, its metrics rows as their
    records (rlvr.runs.records), and its summary (None while the run is still going)."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path
    config: dict[str, JsonValue]
    metrics: list[Row]
    summary: RunResult | None


def _read_json(path: Path) -> dict[str, JsonValue]:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InspectError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(value, dict):
        raise InspectError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def load_run(run_dir: str | Path) -> Run:
    """Read config.json, metrics.jsonl and (if the run finished) summary.json."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InspectError(f"{run_dir}: no such run directory")
    if not (run_dir / store.CONFIG).is_file():
        raise InspectError(f"{run_dir}: not a run directory (no {store.CONFIG})")
    summary_path = run_dir / store.SUMMARY
    try:
        metrics = store.read_metrics(run_dir)
        summary = store.read_summary(run_dir) if summary_path.is_file() else None
    except RunDamaged as error:
        raise InspectError(str(error)) from None
    return Run(
        run_dir=run_dir,
        config=_read_json(run_dir / store.CONFIG),
        metrics=metrics,
        summary=summary,
    )


def latest_run(*roots: str | Path) -> Path:
    """The most recently started run directory under `roots` (default: runs/ here or one level
    up, so a notebook in notebooks/ finds the project's runs)."""
    folders = [Path(r) for r in roots] or [Path("runs"), Path("..") / "runs"]
    configs = [c for root in folders for c in root.glob(f"*/{store.CONFIG}")]
    if not configs:
        where = ", ".join(str(f) for f in folders)
        raise InspectError(f"no runs under {where}; train one (rlvr train math) or name a run dir")
    return max(configs, key=lambda c: c.stat().st_mtime).parent.resolve()


def step_table(run: Run) -> pl.DataFrame:
    """One row per step: the training metrics of the step merged with the evaluation made after it
    (step 0 is the baseline evaluation). Alarms and hints are joined into text columns."""
    merged: dict[int, dict[str, JsonValue]] = {}
    for row in run.metrics:
        target = merged.setdefault(row.step, {M.STEP.value: row.step})
        for key, value in row.on_disk().items():
            if key.startswith(ALARM_PREFIX) or key in (HINT_KEY, KIND_KEY):
                continue
            target[key] = value
        alarms = [f"{name}: {message}" for name, message in row.alarms.items()]
        if alarms:
            earlier = target.get("alarms")
            target["alarms"] = "; ".join(
                [*([earlier] if isinstance(earlier, str) else []), *alarms]
            )
        if isinstance(row, StepRow) and row.hints:
            target["hints"] = "; ".join(row.hints)
    if not merged:
        return pl.DataFrame({M.STEP.value: []}, schema={M.STEP.value: pl.Int64})
    rows = [merged[step] for step in sorted(merged)]
    known = [str(m) for m in M if any(str(m) in r for r in rows)]
    extra = sorted({k for r in rows for k in r} - set(known) - {"alarms", "hints"})
    order = [*known, *extra, *(c for c in ("alarms", "hints") if any(c in r for r in rows))]
    return pl.DataFrame(
        [{key: _cell(r.get(key)) for key in order} for r in rows], infer_schema_length=None
    ).with_columns(pl.col(M.STEP.value).cast(pl.Int64))


def _cell(value: JsonValue) -> str | float | None:
    """Numbers stay numbers (ints become floats so a column has one type); the rest is text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return json.dumps(value)


# --- trajectories -------------------------------------------------------------------------------


def available(run: Run) -> dict[str, list[int]]:
    """Steps with trajectory files per split (test: the step of the checkpoint it evaluated)."""
    folder = run.run_dir / store.TRAJECTORIES
    names = [p.name for p in folder.glob("*.parquet")] if folder.is_dir() else []
    found: dict[str, list[int]] = {
        "train": sorted(int(m[1]) for n in names if (m := TRAIN_FILE.fullmatch(n))),
        "val": sorted(int(m[1]) for n in names if (m := VAL_FILE.fullmatch(n))),
        "test": [],
    }
    if TEST_FILE in names:
        found["test"] = sorted(set(_read(folder / TEST_FILE)["step"].to_list()))
    return found


def _path(run: Run, split: str, step: int | None) -> Path:
    folder = run.run_dir / store.TRAJECTORIES
    if split not in SPLITS:
        raise InspectError(f"split '{split}': expected one of {', '.join(SPLITS)}")
    if split == "test":
        if not (folder / TEST_FILE).is_file():
            raise InspectError(
                f"{folder / TEST_FILE}: no test trajectories (has the run finished?)"
            )
        return folder / TEST_FILE
    steps = available(run)[split]
    if not steps:
        raise InspectError(f"{folder}: no {split} trajectories yet")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise InspectError(
            f"{folder}: no {split} trajectories for step {step}; "
            f"steps with {split} trajectories: {', '.join(map(str, steps))}"
        )
    name = layout.step_name(step) if split == "train" else layout.val_name(step)
    return layout.table(run.run_dir, name)


def _read(path: Path) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several types for a damaged file
        raise InspectError(
            f"{path}: not a readable parquet file ({type(error).__name__})"
        ) from None
    missing = [
        c for c in ("step", "group", "index", "reward", "messages") if c not in frame.columns
    ]
    if missing:
        raise InspectError(f"{path}: missing column(s) {', '.join(missing)}; not a trajectory file")
    return frame


def trajectories(run: Run, step: int | None = None, split: str = "train") -> pl.DataFrame:
    """The trajectories of one step (default: the latest) with `prompt` and `completion` text
    columns added: the last user message and the last assistant message."""
    path = _path(run, split, step)
    frame = _read(path)
    messages = [
        parse_field(path, i, "messages", raw, list) for i, raw in enumerate(frame["messages"])
    ]
    return frame.with_columns(
        pl.Series("prompt", [last_text(m, "user") for m in messages], dtype=pl.Utf8),
        pl.Series("completion", [last_text(m, "assistant") for m in messages], dtype=pl.Utf8),
    ).sort("group", "index")


def all_trajectories(run: Run, split: str = "train") -> pl.DataFrame:
    """Every step's trajectories of a split, concatenated."""
    steps = available(run)[split] if split != "test" else [None]
    frames = [trajectories(run, step, split) for step in steps]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def parse_field(path: Path | str, row: int, field: str, raw: str | None, kind: type) -> Any:
    if raw is None:
        return kind()
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        raise InspectError(f"{path}: row {row}: {field}: not valid JSON") from None
    if not isinstance(value, kind):
        raise InspectError(
            f"{path}: row {row}: {field}: expected a JSON {kind.__name__}, got {type(value).__name__}"
        )
    return value


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def last_text(messages: list[Any], role: str) -> str:
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == role:
            return content_text(m.get("content"))
    return ""


def groups(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per group: its item, rewards, ground truth and whether GRPO can learn from it."""
    if frame.is_empty():
        return pl.DataFrame()
    return (
        frame.group_by("step", "group", "item_id")
        .agg(
            pl.len().alias("n"),
            pl.col("reward").sort_by("index").alias("rewards"),
            pl.col("reward").mean().alias("reward_mean"),
            pl.col("independent_reward").mean().alias("truth_mean"),
            (pl.col("reward").max() - pl.col("reward").min() > SIGNAL_TOLERANCE).alias("signal"),
        )
        .with_columns(((pl.col("n") > 1) & pl.col("signal")).alias("signal"))
        .sort("step", "group")
    )


def no_signal_groups(frame: pl.DataFrame) -> pl.DataFrame:
    """Groups whose rewards are all equal: GRPO's advantage is zero, the step learns nothing
    from them (all-0: too hard or a broken reward; all-1: too easy)."""
    table = groups(frame)
    return table.filter(~pl.col("signal")) if not table.is_empty() else table
