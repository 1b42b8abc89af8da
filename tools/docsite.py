"""The documentation site's generated pages, and the mkdocs hook that adds them at build time
(mkdocs.yml `hooks:`): the configuration reference from RunConfig's fields, the command-line
reference from the typer app, the tasks reference from the installed tasks, the Python API through
mkdocstrings, and the results and benchmarks pages from results/, with their pictures (each
task's kept run drawn as its report.png, the benchmarks against their baselines). Generating them
from the code keeps them from drifting: a renamed field or command changes its page, and `mkdocs
build --strict` fails on a link to a page, name or picture that is gone."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

# `int | None`'s type (the standard library's types.UnionType; rlvr has a module named types).
UNION_TYPE = type(int | None)

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files

    from rlvr.runs.results import Inputs, RunRecord

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "results" / "records"
BENCH = ROOT / "results" / "bench"
CHANGELOG = ROOT / "CHANGELOG.md"
GENERATED_NOTE = "Generated from the code when the site is built; do not edit by hand."
CONFIG_PAGE = "reference/configuration.md"
CLI_PAGE = "reference/cli.md"
TASKS_PAGE = "reference/tasks.md"
API_PAGE = "reference/api.md"
RESULTS_PAGE = "results/index.md"
BENCH_PAGE = "results/benchmarks.md"
CHANGELOG_PAGE = "changelog.md"
# The pictures the results pages show, drawn when the site is built; none is a file under docs/.
FIGURES = "results/figures"
BENCH_FIGURE = f"{FIGURES}/benchmarks.png"
# Every page the hook adds: none of them is a file under docs/.
GENERATED_PAGES = (
    CONFIG_PAGE,
    CLI_PAGE,
    TASKS_PAGE,
    API_PAGE,
    RESULTS_PAGE,
    BENCH_PAGE,
    CHANGELOG_PAGE,
)


# --- configuration -------------------------------------------------------------------------------


def type_name(annotation: Any) -> str:
    """A field's type as a user types it: `int`, `float | None`, `cispo | ppo`."""
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, UNION_TYPE):
        return " \\| ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "(required)"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(below)"
    if isinstance(value, Enum):
        value = value.value
    return f"`{value!r}`" if value not in (None, {}, []) else f"`{value}`"


def bounds(info: FieldInfo) -> str:
    """The field's numeric bounds (`ge`, `gt`, `le`, `lt`) in words a key=value user reads."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    said = [
        f"{sign} {getattr(m, name)}"
        for m in info.metadata
        for name, sign in signs.items()
        if getattr(m, name, None) is not None
    ]
    return ", ".join(said)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def field_rows(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, ...]]:
    for key, info in model.model_fields.items():
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            continue
        yield (
            f"`{prefix}{key}`",
            type_name(info.annotation),
            default_text(info),
            bounds(info),
            _cell(info.description or ""),
        )


def nested_models(model: type[BaseModel]) -> list[tuple[str, type[BaseModel], str]]:
    """The groups set with dotted keys (`judge.timeout_s`): key, model, description."""
    found = []
    for key, info in model.model_fields.items():
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            found.append((key, nested, info.description or ""))
    return found


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def config_reference() -> str:
    """Every RunConfig key, with its type, default, bounds and description; nested groups by
    their dotted keys."""
    from rlvr.config import RunConfig

    header = ("key", "type", "default", "bounds", "what it does")
    parts = [
        "# Configuration reference",
        f"<!-- {GENERATED_NOTE} -->",
        "Every key below is a `key=value` override of `rlvr train TASK` (and of `make train "
        'TASK=... ARGS="..."`), a keyword of `rlvr.task_config(TASK, ...)`, and a field of '
        "`rlvr.RunConfig`. A task's own options (its `difficulty`, `num_items`, ...) are on "
        "[the tasks page](tasks.md). How to set them: [Configuration](../guide/configuration.md).",
        "## RunConfig",
        _doc(RunConfig),
        table(header, list(field_rows(RunConfig))),
    ]
    for key, model, description in nested_models(RunConfig):
        parts += [
            f"## `{key}.*`",
            _cell(description) + (f"\n\n{_doc(model)}" if _doc(model) else ""),
            table(header, list(field_rows(model, f"{key}."))),
        ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


# --- command line --------------------------------------------------------------------------------


# Commands and parameters are typer's own fork of click's classes (typer._click), which typer
# does not export: they are read by their attributes.
def _param_row(param: Any) -> tuple[str, ...]:
    if param.param_type_name == "option":
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        kind = "flag" if param.is_flag else "option"
    else:
        names = f"`{(param.name or '').upper()}`" + ("..." if param.nargs == -1 else "")
        kind = "argument"
    default = param.default
    shown = "" if default is None or callable(default) or param.required else f"`{default}`"
    help_text = getattr(param, "help", None) or ""
    return names, kind, "yes" if param.required else "", shown, _cell(help_text)


def command_sections(command: Any, path: list[str], depth: int = 2) -> Iterator[str]:
    import typer

    ctx = typer.Context(command, info_name=" ".join(path))
    if not command.hidden:
        usage = " ".join([" ".join(path), *command.collect_usage_pieces(ctx)])
        body = inspect.cleandoc(command.help or "")
        params = [_param_row(p) for p in command.params if not p.hidden and p.name not in ("help",)]
        section = [f"{'#' * depth} `{' '.join(path)}`", f"```\n{usage}\n```", body]
        if params:
            section.append(table(("name", "kind", "required", "default", "help"), params))
        yield "\n\n".join(s for s in section if s)
    if hasattr(command, "list_commands"):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from command_sections(sub, [*path, name], min(depth + 1, 4))


def cli_reference() -> str:
    """Every `rlvr` command and subcommand with its usage, arguments and options."""
    import typer

    from rlvr.cli.main import app

    root = typer.main.get_command(app)
    parts = [
        "# Command-line reference",
        f"<!-- {GENERATED_NOTE} -->",
        "The same text as `rlvr COMMAND --help`. Bad input to any command is one line naming the "
        "file, key or value and what was expected, with exit code 2.",
        *command_sections(root, ["rlvr"]),
    ]
    return "\n\n".join(parts) + "\n"


# --- tasks ---------------------------------------------------------------------------------------


def tasks_reference() -> str:
    """Each installed task: what it is, its options (`key=value` beside RunConfig's keys) and
    the RunConfig defaults it starts from."""
    from rlvr.task_api.plugins import resolve_task, task_names

    parts = [
        "# Tasks reference",
        f"<!-- {GENERATED_NOTE} -->",
        "The installed tasks (`rlvr tasks` lists the same). A task's options are `key=value` "
        "overrides beside [RunConfig's](configuration.md); its defaults are the RunConfig "
        "values `rlvr train TASK` starts from.",
    ]
    header = ("option", "type", "default", "bounds", "what it does")
    for name in task_names():
        task = resolve_task(name)
        parts += [f"## `{name}`", _cell(task.description)]
        rows = list(field_rows(task.options))
        if rows:
            parts.append(table(header, rows))
        if task.open_options:
            parts.append("Takes further options of its own (validated by the task).")
        if task.defaults:
            shown = " ".join(f"{k}={v}" for k, v in task.defaults.items())
            parts.append(f"Defaults: `{shown}`")
    return "\n\n".join(p for p in parts if p) + "\n"


# --- Python API ----------------------------------------------------------------------------------


def api_reference() -> str:
    """`from rlvr import ...`: each public name, documented by mkdocstrings from its module."""
    import importlib

    import rlvr

    by_module: dict[str, list[str]] = {}
    for name in sorted(rlvr.__all__):
        value = getattr(rlvr, name)
        module = getattr(value, "__module__", None) or importlib.import_module("rlvr").__name__
        by_module.setdefault(module, []).append(name)
    parts = [
        "# Python API",
        f"<!-- {GENERATED_NOTE} -->",
        "Everything `from rlvr import ...` gives, grouped by the module that defines it.",
    ]
    for module in sorted(by_module):
        parts.append(f"## `{module}`")
        parts += [f"::: {module}.{name}" for name in by_module[module]]
    return "\n\n".join(parts) + "\n"


# --- results -------------------------------------------------------------------------------------


def record_inputs(records: Path = RECORDS) -> Inputs:
    from rlvr.runs.results import Inputs, gather

    return gather([records]) if records.is_dir() else Inputs()


def bench_inputs(bench: Path = BENCH) -> Inputs:
    from rlvr.runs.results import Inputs, gather

    return gather([bench]) if bench.is_dir() and any(bench.iterdir()) else Inputs()


def figure_path(task: str) -> str:
    """Where a task's picture goes in the site (a task name may hold any character)."""
    return f"{FIGURES}/{re.sub(r'[^A-Za-z0-9_-]+', '-', task)}.png"


def results_pictures(records: Path = RECORDS, bench: Path = BENCH) -> dict[str, bytes]:
    """Every picture of the results pages by its path in the site: each task's current run
    (the one the results page's first table shows) drawn from its record by the code of
    report.png, and the benchmark chart where bench lines are kept."""
    from rlvr.runs.pictures import bench_figure, png, record_figure
    from rlvr.runs.results import current

    pictures = {
        figure_path(r.task): png(record_figure(r)) for r in current(record_inputs(records).records)
    }
    lines = bench_inputs(bench).bench
    if lines:
        pictures[BENCH_FIGURE] = png(bench_figure(lines))
    return pictures


def _picture(path: str, alt: str) -> str:
    """A Markdown image from a page under results/, a link to the full-size file: strict mkdocs
    fails the build where the file is missing."""
    target = Path(path).relative_to("results")
    return f"[![{alt}]({target})]({target})"


def _run_picture(record: RunRecord) -> str:
    """A task's picture on the results page, and which run it draws."""
    shown = _picture(figure_path(record.task), f"{record.task}: its run's curves and paired gains")
    drawn = "" if record.curves else "; the record keeps no curves, so it shows the paired gains"
    return (
        f"{shown}\n\n*The picture: `{record.command}` ({record.date}), drawn from its record as "
        f"the run's report.png{drawn}.*"
    )


def results_pages(records: Path = RECORDS, bench: Path = BENCH) -> tuple[str, str]:
    """The results page (every record by task) and the benchmarks page (bench JSON lines)."""
    from rlvr.runs.results import Inputs, bench_tables, current, made_by, results_page

    inputs = record_inputs(records)
    pictures = {r.task: _run_picture(r) for r in current(inputs.records)}
    runs = results_page(
        Inputs(records=inputs.records), [Path("results/records")], pictures=pictures
    )
    results = "\n\n".join(
        [
            "# Results",
            "Real training runs of the built-in tasks, one record each (`results/records/`). "
            "**RL gain** is RL's own paired test gain: the trained checkpoint (best by "
            "validation, and the last) against the model RL started from (after the warm start, "
            "else the start), on the same held-out test items with greedy sampling; the 95% "
            "interval inverts the paired sign-flip test, bold where its lower bound is above 0 "
            "([how it is measured](../concepts/hybrid-loop.md#the-test-block-paired-gains)). "
            "The first table holds one run per task: its newest run at the task's own defaults "
            "(on any seed; the command names it). Under each task's heading that run is drawn as "
            "its report.png draws it: training reward, validation, test accuracy and alarms over "
            "the steps, and the paired test gains with their 95% intervals.",
            "Keep a run of your own with `rlvr results record RUN_DIR` (it writes "
            "`results/records/<task>-<date>-<run>.json`), and see every record with `rlvr "
            "results results/records`. Records whose source is the README measurement log were "
            "transcribed with the provenance it gave; their intervals are the paired bootstrap "
            "rlvr computed then.",
            runs,
        ]
    )
    kept = bench_inputs(bench)
    chart = _picture(BENCH_FIGURE, "speed and peak memory of each benchmark against its baseline")
    tables = (
        f"{chart}\n\n*{made_by([Path('results/bench')])}*\n\n{bench_tables(kept.bench)}"
        if kept.bench
        else "No benchmark output is kept in `results/bench/` yet."
    )
    bench_page = "\n\n".join(
        [
            "# Benchmarks",
            "`rlvr bench serve | turns | train | eval | step | phases | judge | hack` each run one part of "
            "rlvr against its bare baseline in the same process and print one JSON line last "
            "(`make bench` runs them all; the [command-line reference](../reference/cli.md#rlvr-bench) "
            "says what each measures). Lines kept in `results/bench/NAME.jsonl` appear here, a "
            "table per benchmark; `date`, `cpu`, `command` and `source` keys added to a line say "
            "where it came from. `ratio_vs_bare` is rlvr's figure over the bare baseline's: a "
            "throughput for serve and eval (above 1 is faster than bare), a time for train and "
            "turns (below 1 is faster). "
            "[Performance notes](performance.md) puts the figures in context. The chart draws "
            "each line that has a bare baseline: its speed as a multiple of the baseline's "
            "(above 1 is faster, whether the figure is a throughput or a time) and the peak "
            "memory of the process that ran both.",
            tables,
        ]
    )
    return results, bench_page


# --- the mkdocs hook -----------------------------------------------------------------------------


def generated_pages() -> dict[str, str]:
    """Every generated page by its path in the site."""
    results, bench = results_pages()
    pages = {
        CONFIG_PAGE: config_reference(),
        CLI_PAGE: cli_reference(),
        TASKS_PAGE: tasks_reference(),
        API_PAGE: api_reference(),
        RESULTS_PAGE: results,
        BENCH_PAGE: bench,
        CHANGELOG_PAGE: CHANGELOG.read_text(),
    }
    assert tuple(pages) == GENERATED_PAGES
    return pages


def generated_files() -> dict[str, str | bytes]:
    """Every file the hook adds by its path in the site: the pages and the pictures they show."""
    return {**generated_pages(), **results_pictures()}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """mkdocs hook: add the generated pages and pictures before the navigation is built."""
    from mkdocs.structure.files import File

    for path, content in generated_files().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files
