"""`rlvr results PATHS... [--out FILE]` and `rlvr results record RUN_DIR`: the command-line shell
over rlvr.runs.results. A bad input is one line naming the file and what was expected, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

TABLES = "tables"
RECORDS = Path("results/records")


class ResultsGroup(TyperGroup):
    """`rlvr results PATHS...` runs `tables` without naming it: a first argument that is not a
    subcommand is taken as the start of its paths."""

    # ctx: typer's own fork of click's Context (typer._click), which typer does not export.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [TABLES, *args]
        return super().parse_args(ctx, args)


results_app = typer.Typer(
    cls=ResultsGroup,
    no_args_is_help=True,
    help="Results tables from run directories and run records (`rlvr results PATHS...`).",
)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@results_app.command(TABLES)
def tables(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="run directories, record files (.json), `rlvr bench` output (.jsonl), or "
            "folders of them (results/records)"
        ),
    ],
    out: Annotated[
        Path | None, typer.Option(help="write the Markdown here (whole or not at all)")
    ] = None,
    summary: Annotated[
        bool, typer.Option(help="only the table of one row per task (the README's)")
    ] = False,
) -> None:
    """Markdown tables: a row per task with RL's own test gain, then every run by task with its
    command, commit, CPU, date, test items, steps, wall time and peak memory, then benchmarks."""
    from rlvr.runs.results import ResultsError, gather, results_page, write_page

    try:
        page = results_page(gather(paths), paths, summary_only=summary)
        if out is None:
            typer.echo(page, nl=False)
        else:
            write_page(out, page)
    except (ResultsError, OSError) as error:
        _fail(str(error))


@results_app.command("record")
def record(
    run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
    out: Annotated[Path, typer.Option(help="the folder the record goes to")] = RECORDS,
    command: Annotated[
        str | None,
        typer.Option(help="the exact command that ran (default: rebuilt from config.json)"),
    ] = None,
    commit: Annotated[
        str | None, typer.Option(help="the run's commit (default: this checkout's)")
    ] = None,
    cpu: Annotated[
        str | None, typer.Option(help="the CPU kind it ran on (default: this machine's)")
    ] = None,
    note: Annotated[str | None, typer.Option(help="one line shown beside the command")] = None,
) -> None:
    """Keep a finished run as one small JSON record (its figures and provenance), so the run
    directory itself need not be kept."""
    from rlvr.runs.results import ResultsError, record_from_run, write_record

    try:
        record = record_from_run(run_dir, command=command, commit=commit, cpu=cpu, note=note)
        path = write_record(record, out)
    except (ResultsError, OSError) as error:
        _fail(str(error))
    typer.echo(str(path))
