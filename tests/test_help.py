"""`rlvr --help` reflows to the screen: a command's description wraps where the width needs it,
at a space, and nowhere else (never where its docstring's source line happened to end)."""

from __future__ import annotations

import itertools
import re

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from rlvr.cli.help import one_line_paragraphs
from rlvr.cli.main import app

SENTENCE = "exit 1 if GRPO would have nothing to learn from"  # in `rlvr preflight`'s docstring


def render_help(args: list[str], width: int) -> str:
    # Rich reads the width from COLUMNS where the output is not a terminal.
    done = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(width)})
    assert done.exit_code == 0, done.output
    return done.output


def listing(text: str) -> tuple[dict[str, list[str]], int]:
    """The Commands panel of a help page: each command's description as its wrapped lines, and
    the description column's width."""
    panel = text.split("─ Commands ")[1].splitlines()[1:]
    rows = [line[1:-1] for line in panel if line.startswith("│")]
    start = re.match(r" \S+\s+", rows[0])
    assert start is not None, rows[0]
    column = start.end()
    cells: dict[str, list[str]] = {}
    name = ""
    for row in rows:
        name = row[:column].strip() or name
        cells.setdefault(name, []).append(row[column:].strip())
    return cells, len(rows[0]) - column - 1  # one space of padding before the border


def described(args: list[str]) -> dict[str, str]:
    """Each subcommand's first help paragraph, its whitespace collapsed: what its cell must say."""
    group = typer.main.get_command(app)
    for name in args:
        assert isinstance(group, TyperGroup)
        group = group.commands[name]
    assert isinstance(group, TyperGroup)
    return {
        name: " ".join((command.help or "").split("\n\n")[0].split())
        for name, command in group.commands.items()
    }


@pytest.mark.parametrize("width", [60, 200])
@pytest.mark.parametrize(
    "args", [[], ["bench"], ["results"], ["judge"]], ids=lambda args: " ".join(["rlvr", *args])
)
def test_a_command_list_wraps_only_where_the_width_needs_it(args: list[str], width: int) -> None:
    cells, column = listing(render_help(args, width))
    expected = described(args)
    assert set(cells) == set(expected)
    for name, lines in cells.items():
        assert " ".join(lines) == expected[name]  # every word whole, in order: broken at spaces
        for line, after in itertools.pairwise(lines):
            # greedy: the next line's first word would not have fit on this one
            assert len(line) + 1 + len(after.split()[0]) > column, (name, line, after)


def test_a_sentence_stays_on_one_line_where_it_fits() -> None:
    assert any(SENTENCE in line for line in render_help([], 200).splitlines())
    narrow = render_help([], 60)
    assert not any(SENTENCE in line for line in narrow.splitlines())
    assert SENTENCE in " ".join(" ".join(listing(narrow)[0]["preflight"]).split())


@pytest.mark.parametrize(
    ("doc", "reflowed"),
    [
        ("One line.", "One line."),
        (
            "A sentence broken\n    where the source wraps.",
            "A sentence broken where the source wraps.",
        ),
        ("First\n    paragraph.\n\n    Second\n    one.", "First paragraph.\n\nSecond one."),
        ("Text.\n\n    \b\n    kept\n    as is", "Text.\n\n\b\nkept\nas is"),
    ],
    ids=["one-line", "broken-sentence", "two-paragraphs", "kept-layout"],
)
def test_one_line_paragraphs(doc: str, reflowed: str) -> None:
    assert one_line_paragraphs(doc) == reflowed
