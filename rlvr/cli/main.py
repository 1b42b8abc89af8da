"""The `rlvr` command line. Each command is a thin shell over a function in the package; heavy
modules are imported inside the command so `rlvr --help` stays fast. What a user can act on is
one line: a config error, or a task whose import, options, factory or load() raised (named by the
file and line of its code), exit 2; every rollout failing, or a constant reward in preflight,
exits 1. Only an error of rlvr's own prints its (redacted) traceback."""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from rlvr.bench.cli import bench_app
from rlvr.cli.help import reflow_help
from rlvr.runs.results_cli import results_app

if TYPE_CHECKING:
    from rlvr.config import RunConfig

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    # Tracebacks go through rlvr's redacting hook (see `_every_command`), never Rich's printer,
    # which would show locals and unredacted text.
    pretty_exceptions_enable=False,
    help="Train LLM agents with RL on ART.",
)

# Installed packages' files: the SyntaxWarnings Python gives while compiling them (cellpylib's
# `memoize is "recursive"`, imported by reasoning-gym) are theirs to fix and tell a user nothing.
INSTALLED_CODE = r".*[/\\](site|dist)-packages[/\\]"


@app.callback()
def _every_command() -> None:
    """Before any command runs: no log line or traceback of this process can print a key (an
    exception from a task or a provider may quote one); its exit will not sweep the ML stack;
    installed packages' compile-time warnings stay off the console."""
    from rlvr.lifetime import quick_teardown
    from rlvr.redact import install_redaction

    install_redaction()
    quick_teardown()
    warnings.filterwarnings("ignore", category=SyntaxWarning, module=INSTALLED_CODE)


TaskArg = Annotated[
    str | None,
    typer.Argument(help="task name (see `rlvr tasks`), path/to/file.py:factory or module:factory"),
]
Overrides = Annotated[list[str] | None, typer.Argument(help="config overrides as key=value")]
app.add_typer(bench_app, name="bench")
app.add_typer(results_app, name="results")
COMMAND_GROUP = (
    "rlvr.commands"  # installed packages' commands: NAME -> a Typer app, bench.NAME -> a command
)


def _plugged_commands() -> None:
    """Commands of installed packages (the judges' `judge serve`, `bench judge`), registered as
    entry points so this module imports no package by name."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=COMMAND_GROUP):
        group, _, name = ep.name.rpartition(".")
        loaded = ep.load()
        if group == "bench":
            bench_app.command(name)(loaded)
        elif isinstance(loaded, typer.Typer):
            app.add_typer(loaded, name=name)


_plugged_commands()

console = Console(stderr=True, soft_wrap=True)  # errors stay on one line


def fail(message: str, code: int = 2) -> NoReturn:
    from rlvr.redact import redact_error

    console.print(f"[bold red]error:[/] {escape(redact_error(message))}", highlight=False)
    raise typer.Exit(code)


def crash(error: BaseException) -> NoReturn:
    """An unexpected error: its traceback on stderr, credentials removed (an exception's text
    may quote a key, e.g. a provider's 401), then exit 1."""
    import traceback

    from rlvr.redact import redact_error

    text = "".join(traceback.format_exception(error))
    print(redact_error(text), file=sys.stderr, end="", flush=True)
    raise typer.Exit(1)


def command_config(task: str | None, overrides: list[str]) -> RunConfig:
    """RunConfig from TASK and key=value pairs (RunConfig keys and the task's options)."""
    from rlvr.config import pairs_to_dict, parse_overrides
    from rlvr.task_api.plugins import task_config

    if task is None:
        return parse_overrides(overrides)
    return task_config(task, **pairs_to_dict(overrides))


def announce_code(run_dir: Path) -> None:
    """Say which files of code a run directory's config.json will make this process execute:
    resuming or evaluating a run directory from elsewhere runs the code it names."""
    from rich.markup import escape

    from rlvr.runs.store import read_config
    from rlvr.task_api.imports import referenced_files

    cfg = read_config(run_dir)
    for path in referenced_files(cfg.task, cfg.scorer):
        console.print(
            f"{escape(str(run_dir))}: its config.json names {escape(str(path))}; executing it",
            highlight=False,
        )


def known_errors() -> tuple[type[BaseException], ...]:
    """rlvr's own one-line errors: their text is the message."""
    from rlvr.config import ConfigError
    from rlvr.inference.errors import InferenceError
    from rlvr.runs.damage import DiskFull, RunDamaged
    from rlvr.runs.runlock import RunLocked

    return (ConfigError, FileNotFoundError, RunLocked, RunDamaged, DiskFull, InferenceError)


def said_by_rlvr(error: BaseException) -> bool:
    """One of rlvr's one-line errors (a config, run-directory or finished-run refusal)."""
    text = str(error)
    return isinstance(error, known_errors()) or (
        isinstance(error, ValueError)
        and (text.startswith("config:") or "run directory" in text or "already finished" in text)
    )


@contextmanager
def one_line_errors(*own: type[BaseException]) -> Iterator[None]:
    """Errors a user can act on become one line (rlvr.training.failures.as_one_line): exit 2,
    or 1 when every rollout raised; anything else is rlvr's own bug, shown as its traceback.
    `own`: the command's own one-line error types."""
    from rlvr.training.failures import as_one_line

    try:
        yield
    except typer.Exit:
        raise
    except Exception as error:
        from rlvr.runs.damage import as_disk_full

        full = as_disk_full(error)  # also where a library wrapped it (a copy's shutil.Error)
        if full is not None:
            fail(str(full))
        said = as_one_line(error, known=isinstance(error, own) or said_by_rlvr(error))
        if said is None:
            crash(error)
        fail(*said)


@app.command()
def train(
    task: TaskArg = None,
    overrides: Overrides = None,
    resume: Annotated[Path | None, typer.Option(help="continue this run directory")] = None,
) -> None:
    """Train TASK until validation plateaus; writes runs/<task>-<timestamp>/."""
    from rlvr.runs import layout
    from rlvr.training import run_training

    if resume is not None:
        if task or overrides:
            fail("--resume takes the run's own config.json; drop TASK and key=value overrides")
        if not (resume / layout.CONFIG).is_file():
            fail(f"{resume}: not a run directory (no config.json)")
    elif not task:
        fail("give a TASK (see `rlvr tasks`) or --resume RUN_DIR")
    with one_line_errors():
        if resume is not None:
            from rlvr.runs.store import read_config

            announce_code(resume)
            result = asyncio.run(run_training(read_config(resume), resume=resume))
        else:
            result = asyncio.run(run_training(command_config(task, overrides or [])))
    typer.echo(result.model_dump_json())


@app.command()
def preflight(
    task: TaskArg = None,
    overrides: Overrides = None,
    items: Annotated[int, typer.Option(help="training items to roll out, group_size each")] = 4,
    warm_steps: Annotated[
        int,
        typer.Option(
            help="train a short warm start of this many steps first and judge its samples "
            "(default: judge the warm start's demonstrations beside the untrained samples)",
            min=0,
        ),
    ] = 0,
) -> None:
    """Roll out and score a few training items as the run would; exit 1 if GRPO would have
    nothing to learn from on what the run trains on (for a task with a warm start: its
    demonstrations, checked by the task and scored beside the untrained samples)."""
    from rlvr.training.preflight import describe, suggestions, verdict
    from rlvr.training.preflight import preflight as run_preflight

    if not task:
        fail("give a TASK (see `rlvr tasks`)")
    with one_line_errors():
        cfg = command_config(task, overrides or [])
        report = asyncio.run(run_preflight(cfg, items, warm_steps))
    for line in describe(report):
        console.print(line, highlight=False, markup=False)
    judged = verdict(report)
    console.print(f"judged: {judged.judged}", highlight=False, markup=False)
    for warning in judged.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    for suggestion in suggestions(report, cfg):
        console.print(f"suggest {suggestion.line()}", highlight=False, markup=False)
    if not judged.ok:
        fail(judged.message, code=1)
    console.print(f"[green]{escape(judged.message)}[/]", highlight=False)


@app.command("eval")
def eval_run(
    run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
    split: Annotated[str, typer.Option(help="test or val")] = "test",
    samples: Annotated[
        int | None,
        typer.Option(help="sample K answers an item and report pass@k, pass^k and avg@k"),
    ] = None,
    temperature: Annotated[
        float, typer.Option(help="the sampling temperature with --samples")
    ] = 1.0,
) -> None:
    """Evaluate a finished run's best checkpoint on its test (or validation) split: greedy
    accuracy, or with --samples K, pass@k, pass^k and avg@k for k up to K with 95% intervals."""
    from rlvr.training import evaluate_run, evaluate_samples

    if split not in ("test", "val"):
        fail(f"--split: expected test or val, got '{split}'")
    if samples is not None and samples < 1:
        fail(f"--samples: expected at least 1, got {samples}")
    if not 0 <= temperature <= 2:
        fail(f"--temperature: expected 0 to 2, got {temperature:g}")
    chosen: Literal["test", "val"] = "test" if split == "test" else "val"
    with one_line_errors():
        announce_code(run_dir)
        if samples is not None:
            sampled = asyncio.run(evaluate_samples(run_dir, samples, temperature, chosen))
            for line in sampled.lines():
                typer.echo(f"{split}: {line}")
            return
        accuracy = asyncio.run(evaluate_run(run_dir, chosen))
    typer.echo(f"{split}_accuracy={accuracy:.4f}")


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="a finished run directory (the baseline)")],
    run_b: Annotated[Path, typer.Argument(help="a finished run directory of the same task")],
) -> None:
    """B's final test accuracy minus A's, paired over the same test items, with its 95%
    interval and p-value (e.g. scorer=verifier against scorer=ruler_ref)."""
    from polars.exceptions import PolarsError

    from rlvr.training.compare import compare_runs
    from rlvr.training.failures import first_line

    with one_line_errors(ValueError):
        try:
            gain = compare_runs(run_a, run_b)
        except PolarsError as error:
            fail(f"{run_a}, {run_b}: cannot read their test rollouts: {first_line(str(error))}")
    typer.echo(f"{run_b.name} vs {run_a.name}: {gain.describe()}")


TaskNames = Annotated[
    list[str] | None,
    typer.Argument(help="tasks to show (default: every installed one); a name or file.py:factory"),
]


@app.command()
def tasks(names: TaskNames = None) -> None:
    """List the installed tasks (entry-point group rlvr.tasks), or the tasks named, with their
    options and the RunConfig defaults each starts from. A task that cannot be imported or whose
    options reject their own defaults is one line naming its file and line (exit 2)."""
    from rlvr.task_api.plugins import task_names

    if names:
        with one_line_errors():
            for name in names:
                typer.echo("\n".join(task_lines(name)))
        return
    from rlvr.training.failures import as_one_line

    broken = 0
    for name in task_names():
        try:
            typer.echo("\n".join(task_lines(name)))
        except Exception as error:
            said = as_one_line(error, known=said_by_rlvr(error))
            if said is None:
                crash(error)
            typer.echo(f"{name}\t(cannot load: {said[0]})")
            broken += 1
    if broken:
        fail(f"{broken} installed task(s) cannot be loaded (above)")


def task_lines(name: str) -> list[str]:
    """A task's line, its options with their defaults, and the RunConfig defaults. Defaults
    are validated as `rlvr train NAME` would (when no option is required)."""
    from rlvr.task_api.plugins import resolve_task

    task = resolve_task(name)
    fields = task.options.model_fields
    if not any(info.is_required() for info in fields.values()):
        task.parse_options({})
    lines = [f"{name}\t{task.description}"]
    for key, info in fields.items():
        value = None if info.is_required() else info.get_default(call_default_factory=True)
        shown = (
            "(required)"
            if info.is_required()
            else repr(value.value if isinstance(value, Enum) else value)
        )
        about = f"  {info.description}" if info.description else ""
        lines.append(f"    {key}={shown}{about}")
    if task.defaults:
        lines.append(f"    defaults: {' '.join(f'{k}={v}' for k, v in task.defaults.items())}")
    if not any(info.is_required() for info in fields.values()):
        from rlvr.task_api.plugins import task_config
        from rlvr.training.work import work_line

        lines.append(f"    {work_line(task_config(task, task=name))}")
    if task.catalog is not None:
        lines.extend(f"    {line}" for line in task.catalog())
    return lines


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="the task's name; also its folder")],
    directory: Annotated[Path, typer.Option("--dir", help="where the folder goes")] = Path("."),
) -> None:
    """Write a working task folder (items, rollout, check, a test) to start your own from."""
    from rlvr.task_api.scaffold import ScaffoldError, write_task

    try:
        folder = write_task(name, directory)
    except ScaffoldError as error:
        fail(str(error))
    typer.echo(f"wrote {folder}/ — train it with: rlvr train {folder}/task.py:task max_steps=2")


@app.command("inspect")
def inspect_run(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (finished or running)")],
    step: Annotated[int | None, typer.Option(help="show this step's groups and rollouts")] = None,
    split: Annotated[str, typer.Option(help="train, val or test (with --step)")] = "train",
    suspicious: Annotated[
        bool, typer.Option("--suspicious", help="hacking candidates and their rollouts")
    ] = False,
    limit: Annotated[int, typer.Option(help="conversations to print")] = 4,
    threshold: Annotated[float, typer.Option(help="high reward / passing truth")] = 0.5,
    jump: Annotated[float, typer.Option(help="step-to-step reward rise that is sudden")] = 0.3,
    flips: Annotated[
        bool, typer.Option("--flips", help="the test items RL won and lost, with both answers")
    ] = False,
    before: Annotated[
        str | None,
        typer.Option(help="--flips from: start, after-warm-start (default where run), best, last"),
    ] = None,
    after: Annotated[str, typer.Option(help="--flips to: a checkpoint as for --before")] = "last",
) -> None:
    """Look at a run: step table, alarms and hints; --step N its rollouts; --suspicious the
    hacking candidates (high reward failing ground truth, identical completions, reward jumps);
    --flips the test items whose score changed between two checkpoints."""
    from rich.console import Console as Out

    from rlvr import inspection as ri
    from rlvr.inspection.flips import flips as find_flips
    from rlvr.inspection.flips import flips_view

    with one_line_errors(ri.InspectError):
        run = ri.load_run(run_dir)
        if flips:
            parts = flips_view(find_flips(run, before, after), limit)
        elif suspicious:
            parts = ri.suspicious_view(run, threshold, jump, step, limit)
        elif step is not None or split != "train":
            parts = ri.step_view(run, step, split, limit)
        else:
            parts = ri.overview_view(run)
    out = Out()
    for part in parts:
        out.print(part)


RunArg = Annotated[Path, typer.Argument(help="a run directory")]
CheckpointOpt = Annotated[
    str, typer.Option(help="best, last (the highest saved step) or a step number")
]


@app.command("export")
def export_cmd(
    run_dir: RunArg,
    out: Annotated[Path, typer.Option(help="a new (or empty) directory to write")],
    checkpoint: CheckpointOpt = "best",
    gguf: Annotated[
        bool, typer.Option("--gguf", help="also write an f16 GGUF (llama.cpp, ollama)")
    ] = False,
    verify: Annotated[
        int,
        typer.Option(
            "--verify",
            min=1,
            help="held-out prompts on which the export must answer as the run's engine does",
        ),
    ] = 5,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="skip that check (the card says so)")
    ] = False,
) -> None:
    """Write a run's checkpoint as a merged Hugging Face model (transformers, vLLM), its PEFT
    adapter (OUT/adapter/) and a model card (OUT/README.md), once checked: its weights are not
    the base model's, and it answers --verify held-out prompts greedily as the run's engine does."""
    from rlvr.export import ExportError, export_run

    with one_line_errors(ExportError):
        done = export_run(
            run_dir, out, checkpoint, gguf=gguf, verify_items=None if no_verify else verify
        )
    typer.echo(f"wrote {done.out} (from {done.checkpoint})")


@app.command("serve")
def serve_cmd(
    run_dir: RunArg,
    checkpoint: CheckpointOpt = "best",
    host: Annotated[
        str, typer.Option(help="address to bind; anything but 127.0.0.1 exposes the agent")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: a free one)", min=0, max=65535)] = 8000,
) -> None:
    """Serve a run's trained agent on an OpenAI-compatible endpoint (/v1/chat/completions), with
    a bearer key: $RLVR_SERVE_KEY, else one generated and printed. Ctrl-C stops it."""
    from rlvr.serve import ServeError, serve_run

    try:
        with one_line_errors(ServeError):
            serve_run(
                run_dir, checkpoint, host, port, announce=lambda line: print(line, flush=True)
            )
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped: no "Aborted!", exit 0
        console.print("stopped", highlight=False)


@app.command(
    "serve-vllm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def serve_vllm_cmd(
    ctx: typer.Context,
    export_dir: Annotated[Path, typer.Argument(help="a directory `rlvr export` wrote")],
    host: Annotated[
        str, typer.Option(help="address to bind; anything but 127.0.0.1 exposes the model")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port", min=1, max=65535)] = 8000,
) -> None:
    """Serve an export with vLLM (from `make vllm-env`'s environment) on an OpenAI-compatible
    endpoint, in fp32, with a bearer key: $RLVR_SERVE_KEY, else one generated and printed.
    Arguments after `--` go to vLLM."""
    from rlvr.serve import ServeError
    from rlvr.serve_vllm import serve_export

    with one_line_errors(ServeError):
        serve_export(export_dir, host, port, list(ctx.args))


reflow_help(app)  # last: every command, plugged ones too, is registered by now

if __name__ == "__main__":
    app()
