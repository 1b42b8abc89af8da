"""The `rlvr` command line. Each command is a thin shell over a function in the package; heavy
modules are imported inside the command so `rlvr --help` stays fast. Config errors exit 2 with
one line; a constant reward in preflight exits 1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold keys; never print them
    help="Train LLM agents with RL on ART.",
)

TaskArg = Annotated[str | None, typer.Argument(help="task name (see `rlvr tasks`)")]
Overrides = Annotated[list[str] | None, typer.Argument(help="config overrides as key=value")]
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks; each prints one JSON line last.")
judge_app = typer.Typer(no_args_is_help=True, help="The local judge engine.")
app.add_typer(bench_app, name="bench")
app.add_typer(judge_app, name="judge")

console = Console(stderr=True, soft_wrap=True)  # errors stay on one line


def fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _config(task: str | None, overrides: list[str]):
    from rlvr.config import ConfigError, parse_overrides

    try:
        return parse_overrides(overrides, base={"task": task} if task else None)
    except ConfigError as error:
        fail(str(error))


def _known_errors() -> tuple[type[BaseException], ...]:
    from rlvr.config import ConfigError
    from scenarios import UnknownTask

    return (ConfigError, UnknownTask, FileNotFoundError)


@app.command()
def train(
    task: TaskArg = None,
    overrides: Overrides = None,
    resume: Annotated[Path | None, typer.Option(help="continue this run directory")] = None,
) -> None:
    """Train TASK until validation plateaus; writes runs/<task>-<timestamp>/."""
    from rlvr.loop import run_training

    if resume is not None:
        if task or overrides:
            fail("--resume takes the run's own config.json; drop TASK and key=value overrides")
        if not (resume / "config.json").is_file():
            fail(f"{resume}: not a run directory (no config.json)")
        cfg = None
    else:
        if not task:
            fail("give a TASK (see `rlvr tasks`) or --resume RUN_DIR")
        cfg = _config(task, overrides or [])
    try:
        if cfg is None:
            from rlvr.store import read_config

            result = asyncio.run(run_training(read_config(resume), resume=resume))
        else:
            result = asyncio.run(run_training(cfg))
    except _known_errors() as error:
        fail(str(error).strip("'\""))
    except ValueError as error:
        if (
            str(error).startswith("config:")
            or "run directory" in str(error)
            or "already finished" in str(error)
        ):
            fail(str(error))
        raise
    typer.echo(result.model_dump_json())


@app.command()
def preflight(
    task: TaskArg = None,
    overrides: Overrides = None,
    items: Annotated[int, typer.Option(help="training items to roll out, group_size each")] = 4,
) -> None:
    """Roll out and score a few items; exit 1 if the reward is constant."""
    from rlvr.preflight import preflight as run_preflight

    if not task:
        fail("give a TASK (see `rlvr tasks`)")
    cfg = _config(task, overrides or [])
    try:
        report = asyncio.run(run_preflight(cfg, items))
    except _known_errors() as error:
        fail(str(error).strip("'\""))
    console.print(
        f"rewards ({len(report.rewards)} trajectories, {report.groups} groups):", highlight=False
    )
    for value, count in report.histogram().items():
        console.print(f"  {value:5.2f} {'█' * count} {count}", highlight=False)
    console.print(
        f"no-signal groups: {report.no_signal}/{report.groups} (all-0 {report.all_zero}, all-1 {report.all_one}); "
        f"skipped {report.skipped}; truncated {report.truncated_rate:.0%}",
        highlight=False,
    )
    if report.constant:
        fail(
            "the reward is constant on every sampled trajectory: GRPO cannot learn from it; "
            "give partial credit, change difficulty, max_tokens or temperature",
            code=1,
        )
    console.print("[green]reward varies: ok to train[/]")


@app.command()
def tasks() -> None:
    """List the registered tasks."""
    from scenarios import REGISTRY

    for name, target in sorted(REGISTRY.items()):
        typer.echo(f"{name}\t{target}")
