"""The `rlvr` command line. Each command is a thin shell over a function in the package; heavy
modules are imported inside the command so `rlvr --help` stays fast. Config errors exit 2 with
one line; a constant reward in preflight exits 1."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train LLM agents with RL on ART.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks; each prints one JSON line last.")
judge_app = typer.Typer(no_args_is_help=True, help="The local judge engine.")
app.add_typer(bench_app, name="bench")
app.add_typer(judge_app, name="judge")

console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)
