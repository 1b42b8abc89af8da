"""The judges' commands, plugged into the `rlvr` command line through the `rlvr.commands` entry
points (`judge` -> `rlvr judge ...`, `bench.judge` -> `rlvr bench judge`): rlvr's CLI never
imports this package by name. Heavy modules are imported inside the commands."""

from __future__ import annotations

from typing import Annotated

import typer

judge_app = typer.Typer(no_args_is_help=True, help="The local judge.")


@judge_app.command("serve")
def judge_serve(
    port: Annotated[int | None, typer.Option(help="port on 127.0.0.1 (default: free)")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: half)")] = None,
    model: Annotated[
        str | None,
        typer.Option(help="rlvr model name or model directory (default: smollm2-135m)"),
    ] = None,
) -> None:
    """Start the local judge (rlvr's engine on 127.0.0.1) and keep it up until Ctrl-C.
    Runs use it with judge=local judge.base_url=<the printed URL>."""
    from judges.local import (
        JUDGE_MODEL,
        LocalJudgeSettings,
        ServerProcessError,
        default_threads,
        serve_forever,
    )
    from rlvr.cli.main import fail
    from rlvr.engine import ModelError, resolve_model

    try:
        settings = LocalJudgeSettings(
            model=model or JUDGE_MODEL, threads=threads or default_threads(), port=port
        )
        resolve_model(settings.model)  # a bad name is one line here, not a child's traceback
        serve_forever(settings)
    except (ModelError, ServerProcessError) as error:
        fail(str(error))


def bench_judge(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="config overrides as key=value")
    ] = None,
    group_size: Annotated[int, typer.Option(help="RULER group size")] = 8,
) -> None:
    """RULER prompt tokens per trajectory (group vs alone) and rubric calls per trajectory, with
    real calls on the configured judge (default: the local judge). Prints one JSON line last."""
    import asyncio

    from judges.bench import run_bench
    from rlvr.cli.main import command_config, fail, known_errors

    cfg = command_config(None, overrides or [])
    try:
        result = asyncio.run(run_bench(cfg, group_size))
    except known_errors() as error:
        fail(str(error).strip("'\""))
    typer.echo(result.line())
