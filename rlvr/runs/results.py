"""Results tables from run records: what `rlvr results` prints and the documentation's results
and benchmarks pages are made of.

A *record* is one finished run in a small JSON file (`results/records/*.json`): the task, the
exact command, where and when it ran, and what its summary.json, config.json and metrics.jsonl
say about RL's own test gain, its steps, its time and its memory, and the curves its report.png
is drawn from (`Curves`; records written without them draw their paired gains alone, in
rlvr.runs.pictures). Records are kept instead of
run directories, which hold checkpoints and rollouts (hundreds of MB). `rlvr results record
RUN_DIR` writes one; `rlvr results PATHS...` turns run directories, record files and folders of
them, and `rlvr bench` JSON lines, into Markdown tables.

Every input error is a `ResultsError` whose text is one line naming the file, field and value.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from rlvr.config import RunConfig
from rlvr.evaluation.paired_gains import Compared, TestBlock
from rlvr.metrics import M
from rlvr.runs import atomic, layout, store
from rlvr.runs.damage import RunDamaged
from rlvr.runs.records import Row, RunResult, parse_row
from rlvr.runs.report import drawn

RECORD_FORMAT: Literal[1] = 1
BENCH_SUFFIXES = (".jsonl",)
RECORD_SUFFIX = ".json"
# A run directory's name ends in its start time (rlvr.runs.store.new_run_dir).
RUN_STAMP = re.compile(r"-(\d{8})-\d{6}(?:-\d+)?$")
# Keys of a run's config.json that say where it was written, not what it trained.
PLACE_KEYS = frozenset({"run_dir", "runs_root"})
# A run of the defaults on another seed, or on other data of the same task, is still one.
REPLICATE_KEYS = frozenset({"seed", "data_seed"})
DASH = "—"


class ResultsError(ValueError):
    """A bad input to the results generator; its text is the one line the user reads."""


class Gain(BaseModel):
    """A paired test gain with its sign-flip p-value and the 95% interval of that test
    (rlvr.evaluation.paired_gains)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float
    low: float
    high: float
    p: float | None = None

    def text(self) -> str:
        """`+0.142 [+0.042, +0.242]`, bold where the interval's lower bound is above 0."""
        said = f"{self.value:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"
        return f"**{said}**" if self.low > 0 else said


class Curves(BaseModel):
    """What a run's report.png is drawn from (rlvr.runs.report), kept in its record: the rows of
    its metrics.jsonl cut to the keys the picture reads (report.drawn), and its summary.json with
    `run_dir` as the directory's name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[dict[str, JsonValue], ...]
    summary: dict[str, JsonValue]

    @model_validator(mode="after")
    def _readable(self) -> Curves:
        self.parsed()  # a row or summary that is not one fails where the record is read
        return self

    def parsed(self) -> tuple[list[Row], RunResult]:
        """The rows and the summary as the run directory's reader parses them."""
        return [parse_row(r) for r in self.rows], RunResult.model_validate(self.summary)


class RunRecord(BaseModel):
    """One finished run, as a results table shows it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = RECORD_FORMAT
    task: str = Field(min_length=1)
    command: str = Field(min_length=1, description="the exact command that ran")
    defaults: bool = Field(description="the task's own defaults: `rlvr train TASK` as it is")
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="the day the run started, UTC")
    commit: str | None = Field(None, description="the code's commit, where known")
    cpu: str | None = Field(None, description="CPU kind: AMX, AVX512-BF16, AVX2, or a GPU")
    test_items: int | None = Field(None, ge=0)
    test_before: float | None = Field(
        None, description="test accuracy RL started from: after the warm start, else the start"
    )
    test_best: float | None = None
    test_last: float | None = None
    rl_gain_best: Gain | None = Field(None, description="RL's own test gain, best checkpoint")
    rl_gain_last: Gain | None = Field(None, description="RL's own test gain, last checkpoint")
    steps: int | None = Field(None, ge=0)
    stop_reason: str | None = None
    wall_s: float | None = Field(None, ge=0)
    peak_rss_gb: float | None = Field(None, ge=0)
    run_mb: float | None = Field(None, ge=0, description="the run directory's size when recorded")
    run: str | None = Field(None, description="the run directory's name")
    source: str = Field(min_length=1, description="where the figures come from")
    note: str | None = None
    curves: Curves | None = Field(None, description="what the run's report.png is drawn from")


class BenchLine(BaseModel):
    """One `rlvr bench ...` JSON line and the file it was read from."""

    model_config = ConfigDict(frozen=True)

    bench: str
    source: str
    figures: tuple[tuple[str, str], ...]
    numbers: tuple[tuple[str, float], ...] = ()  # the figures that are numbers, for charts


class Inputs(BaseModel):
    """What the paths given to the generator held."""

    model_config = ConfigDict(frozen=True)

    records: tuple[RunRecord, ...] = ()
    bench: tuple[BenchLine, ...] = ()


# --- reading ------------------------------------------------------------------------------------


def _one_line(path: Path, error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    value = first.get("input")
    shown = "" if isinstance(value, dict) else f" (got {json.dumps(value, default=str)[:60]})"
    return f"{path}: field {where!r}{shown}: {first['msg']}"


def _json_object(path: Path, text: str, what: str) -> dict[str, JsonValue]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ResultsError(
            f"{path}: not JSON ({error.msg} at line {error.lineno}); {what}"
        ) from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: a JSON {type(data).__name__}; {what}")
    return data


def read_record(path: Path) -> RunRecord:
    data = _json_object(path, path.read_text(), "expected a run record (rlvr results record)")
    try:
        return RunRecord.model_validate(data)
    except ValidationError as error:
        raise ResultsError(_one_line(path, error)) from None


def read_bench(path: Path) -> list[BenchLine]:
    """The JSON lines of `rlvr bench` output (other lines, such as progress, are skipped); a line
    that is a JSON object without a `bench` key is named with its line number."""
    lines = []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.startswith("{"):
            continue
        data = _json_object(Path(f"{path}:{number}"), text, "expected an `rlvr bench` JSON line")
        name = data.pop("bench", None)
        if not isinstance(name, str):
            raise ResultsError(f"{path}:{number}: no 'bench' key; expected an `rlvr bench` line")
        figures = tuple((k, _cell(v)) for k, v in data.items() if k != "config")
        numbers = tuple(
            (k, float(v))
            for k, v in data.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        )
        lines.append(BenchLine(bench=name, source=path.name, figures=figures, numbers=numbers))
    return lines


def gain_of(test: TestBlock | None, which: Compared) -> Gain | None:
    """One comparison of summary.json's `test` block (RL's gain at the best or the last
    checkpoint) as a Gain; None where it was not made."""
    found = test.compared(which) if test is not None else None
    if found is None:
        return None
    return Gain(value=found.gain, low=found.ci95[0], high=found.ci95[1], p=found.p)


def run_date(run_dir: Path, summary: Path) -> str:
    """The day a run started: its directory's time stamp, else the day its summary was written."""
    stamp = RUN_STAMP.search(run_dir.name)
    if stamp:
        day = stamp[1]
        return f"{day[:4]}-{day[4:6]}-{day[6:]}"
    return datetime.fromtimestamp(summary.stat().st_mtime, UTC).strftime("%Y-%m-%d")


def _flat(values: dict[str, JsonValue], prefix: str = "") -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out |= _flat(value, "" if key == "task_options" else f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _value_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f'"{text}"' if " " in text else text


def command_of(cfg: RunConfig) -> tuple[str, bool]:
    """`rlvr train TASK key=value ...` that reproduces a run's config (as `store.read_config`
    reads config.json): each key whose value differs from the task's defaults. False as the second
    value where a key other than the seeds differs (another seed or data seed replicates the
    defaults); where the task no longer resolves (a file moved), every key that differs from
    RunConfig's own."""
    config = cfg.model_dump(mode="json")
    task = cfg.task
    try:
        from rlvr.task_api.plugins import task_config

        base = task_config(task).model_dump(mode="json")
    except Exception:  # a task that no longer resolves: compare with the bare config
        base = RunConfig(task=task).model_dump(mode="json")
    ours, theirs = _flat(config), _flat(base)
    changed = {
        k: v
        for k, v in ours.items()
        if k not in PLACE_KEYS and k != "task" and theirs.get(k, object()) != v
    }
    command = " ".join(["rlvr train", task, *(f"{k}={_value_text(v)}" for k, v in changed.items())])
    return command, not set(changed) - REPLICATE_KEYS


def peak_rss(rows: Iterable[Row]) -> float | None:
    seen = [peak for r in rows if (peak := r.number(M.PEAK_RSS)) is not None]
    return max(seen) if seen else None


def directory_mb(folder: Path) -> float:
    """The bytes of the files under `folder`, in MB (10^6), a file linked twice counted once
    (ART's checkpoint folder hard-links the run's own checkpoint files)."""
    sizes = {
        (stat.st_dev, stat.st_ino): stat.st_size
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink()
        for stat in [path.stat()]
    }
    return sum(sizes.values()) / 1e6


def _disk(record: RunRecord) -> str:
    """The run directory's size, and its growth a minute of the run."""
    if record.run_mb is None:
        return DASH
    if not record.wall_s:
        return f"{record.run_mb:.0f} MB"
    return f"{record.run_mb:.0f} MB ({record.run_mb / (record.wall_s / 60):.1f} MB/min)"


def this_commit(cwd: Path | None = None) -> str | None:
    """The checkout's short commit, or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def cpu_kind(flags: str) -> str:
    """The CPU kinds that decide rlvr's precision (rlvr.engine.device): from /proc/cpuinfo flags."""
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX512-BF16"
    if "avx512f" in flags:
        return "AVX512"
    return "AVX2" if "avx2" in flags else "other"


def this_cpu() -> str | None:
    try:
        return cpu_kind(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None


def record_from_run(
    run_dir: Path,
    *,
    command: str | None = None,
    commit: str | None = None,
    cpu: str | None = None,
    note: str | None = None,
) -> RunRecord:
    """A finished run directory's record. `command`, `commit`, `cpu`: where the run directory
    does not say them (it records its config, not how or where it was launched), the command
    rebuilt from config.json and the commit and CPU of the machine recording it."""
    summary_path = run_dir / layout.SUMMARY
    if not run_dir.is_dir():
        raise ResultsError(f"{run_dir}: no such directory; expected a finished run directory")
    if not summary_path.is_file():
        raise ResultsError(
            f"{run_dir}: no {layout.SUMMARY} (the run has not finished, or this is not a run "
            "directory)"
        )
    if not (run_dir / layout.CONFIG).is_file():
        raise ResultsError(f"{run_dir}: no {layout.CONFIG}; expected a run directory")
    try:
        summary = store.read_summary(run_dir)
        rows = store.read_metrics(run_dir)
        cfg = store.read_config(run_dir)
    except RunDamaged as error:
        raise ResultsError(str(error)) from None
    test = summary.test
    rebuilt, defaults = command_of(cfg)
    task = summary.task or cfg.task
    warmed = test.after_warm_start if test else None
    try:
        return RunRecord(
            task=task,
            command=command or rebuilt,
            defaults=defaults,
            date=run_date(run_dir, summary_path),
            commit=commit if commit is not None else this_commit(),
            cpu=cpu if cpu is not None else this_cpu(),
            test_items=test.items if test else None,
            test_before=warmed if warmed is not None else (test.start if test else None),
            test_best=test.final if test else None,
            test_last=test.last if test else None,
            rl_gain_best=gain_of(test, Compared.RL_GAIN),
            rl_gain_last=gain_of(test, Compared.RL_GAIN_LAST),
            steps=summary.steps,
            stop_reason=summary.stop_reason,
            wall_s=summary.wall_s,
            peak_rss_gb=peak_rss(rows),
            run_mb=directory_mb(run_dir),
            run=run_dir.name,
            source=f"run directory {run_dir.name}",
            note=note,
            curves=Curves(
                rows=tuple(drawn(r) for r in rows),
                # the recording machine's path says nothing of the run
                summary=summary.on_disk() | {"run_dir": run_dir.name},
            ),
        )
    except ValidationError as error:
        raise ResultsError(_one_line(summary_path, error)) from None


def record_name(record: RunRecord) -> str:
    """A record's file name: task, day and run so names sort by task and time; a record without
    a run directory is named by its command (a hash keeps long commands that share a start apart)."""
    if record.run:
        return f"{record.task}-{record.date}-{record.run}{RECORD_SUFFIX}"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", record.command).strip("-")[:40].strip("-")
    digest = hashlib.sha1(record.command.encode()).hexdigest()[:6]
    return f"{record.task}-{record.date}-{slug}-{digest}{RECORD_SUFFIX}"


def write_record(record: RunRecord, folder: Path) -> Path:
    """The record as `folder/<name>.json`, written whole or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / record_name(record)
    atomic.write_text(path, record.model_dump_json(indent=1, exclude_none=True) + "\n")
    return path


def gather(paths: Sequence[Path]) -> Inputs:
    """Records from run directories (those with a summary.json), record files, bench output
    (`.jsonl`) and folders of record and bench files. A path that is none of these is one line."""
    records: list[RunRecord] = []
    bench: list[BenchLine] = []
    for path in paths:
        if path.is_dir() and (path / layout.CONFIG).is_file():
            records.append(record_from_run(path))
        elif path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            runs = sorted(p for p in path.iterdir() if (p / layout.SUMMARY).is_file())
            if not files and not runs:
                raise ResultsError(
                    f"{path}: no run directory, record (.json) or bench (.jsonl) file in it"
                )
            found = gather(
                [*runs, *(p for p in files if p.suffix in (RECORD_SUFFIX, *BENCH_SUFFIXES))]
            )
            records += found.records
            bench += found.bench
        elif path.suffix in BENCH_SUFFIXES and path.is_file():
            bench += read_bench(path)
        elif path.suffix == RECORD_SUFFIX and path.is_file():
            records.append(read_record(path))
        elif not path.exists():
            raise ResultsError(f"{path}: no such file or directory")
        else:
            raise ResultsError(
                f"{path}: expected a run directory, a record (.json), `rlvr bench` output "
                "(.jsonl) or a folder of them"
            )
    return Inputs(records=tuple(records), bench=tuple(bench))


# --- tables -------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value).replace("|", "\\|").replace("\n", " ")


def _gain(gain: Gain | None) -> str:
    return DASH if gain is None else gain.text()


def _accuracy(before: float | None, after: float | None) -> str:
    return DASH if before is None or after is None else f"{before:.3f} → {after:.3f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _newest_first(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Newest first; on one date a record kept from its run directory before one transcribed,
    and a later run (its directory's timestamp) before an earlier one."""
    return sorted(
        records, key=lambda r: (r.date, r.defaults, r.run is not None, r.run or ""), reverse=True
    )


def current(records: Iterable[RunRecord]) -> list[RunRecord]:
    """One record per task, by task name: its newest run of `rlvr train TASK` as a reader would
    type it, else of the task's defaults on another seed, else its newest run. The front page
    prints the command beside the figures, so the row is the bare command's where one ran."""
    by_task: dict[str, list[RunRecord]] = {}
    for record in records:
        by_task.setdefault(record.task, []).append(record)
    chosen = []
    for task in sorted(by_task):
        runs = _newest_first(by_task[task])
        defaults = [r for r in runs if r.defaults]
        bare = [r for r in defaults if r.command == f"rlvr train {task}"]
        chosen.append((bare or defaults or runs)[0])
    return chosen


def summary_table(records: Iterable[RunRecord]) -> str:
    """The front page's table: a row per task with RL's own test gain (best and last checkpoint)."""
    rows = [
        (
            f"`{r.task}`",
            _gain(r.rl_gain_best),
            _gain(r.rl_gain_last),
            _cell(r.test_items),
            f"`{r.command}`",
            r.date,
        )
        for r in current(records)
    ]
    header = (
        "task",
        "RL gain, best [95% CI]",
        "RL gain, last [95% CI]",
        "test items",
        "command",
        "date",
    )
    return _table(header, rows)


def _minutes(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds / 60:.1f} min"


def _rss(gb: float | None) -> str:
    return DASH if gb is None else f"{gb:.1f} GB"


def _steps(record: RunRecord) -> str:
    if record.steps is None:
        return DASH
    return f"{record.steps} ({record.stop_reason})" if record.stop_reason else str(record.steps)


def runs_table(records: Iterable[RunRecord]) -> str:
    """Every record of one task, newest first, with its provenance."""
    rows = [
        (
            r.date,
            f"`{r.command}`" + (f" ({r.note})" if r.note else ""),
            _gain(r.rl_gain_best),
            _gain(r.rl_gain_last),
            _accuracy(r.test_before, r.test_best),
            _cell(r.test_items),
            _steps(r),
            _minutes(r.wall_s),
            _rss(r.peak_rss_gb),
            _disk(r),
            _cell(r.cpu),
            _cell(r.commit),
            _cell(r.source),
        )
        for r in _newest_first(records)
    ]
    header = (
        "date",
        "command",
        "RL gain, best [95% CI]",
        "RL gain, last [95% CI]",
        "test, before → best",
        "test items",
        "steps (stop)",
        "wall",
        "peak RSS",
        "run dir",
        "CPU",
        "commit",
        "source",
    )
    return _table(header, rows)


def bench_tables(lines: Iterable[BenchLine]) -> str:
    """A table per benchmark: a row per JSON line, a column per figure any of its lines has."""
    by_bench: dict[str, list[BenchLine]] = {}
    for line in lines:
        by_bench.setdefault(line.bench, []).append(line)
    parts = []
    for name in sorted(by_bench):
        keys: list[str] = []
        for line in by_bench[name]:
            keys += [k for k, _ in line.figures if k not in keys]
        keys.sort(key=lambda k: k == "source")  # where a figure came from goes last
        rows = [
            (line.source, *(dict(line.figures).get(k, DASH) for k in keys))
            for line in by_bench[name]
        ]
        parts.append(f"### `rlvr bench {name}`\n\n" + _table(("file", *keys), rows))
    return "\n\n".join(parts)


def made_by(paths: Sequence[Path], *options: str) -> str:
    shown = " ".join([*(str(p) for p in paths), *options])
    return f"Made by `rlvr results {shown}`; do not edit by hand."


def results_page(
    inputs: Inputs,
    paths: Sequence[Path],
    summary_only: bool = False,
    pictures: Mapping[str, str] | None = None,
) -> str:
    """The Markdown the command prints: the summary table, then (unless `summary_only`) every
    record by task and the benchmark tables; `pictures`: task -> Markdown put under the task's
    heading (the documentation's picture of its run)."""
    options = ("--summary",) if summary_only else ()
    parts = [f"*{made_by(paths, *options)}*"]
    if inputs.records:
        parts.append(summary_table(inputs.records))
    if not summary_only:
        tasks = sorted({r.task for r in inputs.records})
        for task in tasks:
            mine = [r for r in inputs.records if r.task == task]
            shown = (pictures or {}).get(task)
            parts.append(f"## `{task}`\n\n" + (f"{shown}\n\n" if shown else "") + runs_table(mine))
        if inputs.bench:
            parts.append("## Benchmarks\n\n" + bench_tables(inputs.bench))
    return "\n\n".join(parts) + "\n"


def write_page(path: Path, text: str) -> None:
    """The page at `path`, whole or not at all."""
    if not path.parent.is_dir():
        raise ResultsError(f"{path}: its folder {path.parent} does not exist")
    atomic.write_text(path, text)
