"""Help texts that reflow to the terminal: Typer's Rich help keeps a docstring's single line breaks
(in a command list and after a help page's first paragraph), so a sentence broken where the source
wraps at 100 columns would be broken on every screen, mid-line at any other width."""

from __future__ import annotations

import inspect

import typer

KEEP_LAYOUT = "\b"  # click's mark for a paragraph whose line breaks are meant


def one_line_paragraphs(text: str) -> str:
    """`text` (a docstring) with each paragraph on one line, for the help to wrap at the screen's
    width; paragraphs stay apart, and one led by `\\b` keeps its lines."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if p.startswith(KEEP_LAYOUT) else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def reflow_help(app: typer.Typer) -> None:
    """Every command's help in `app` and its sub-apps as one-line paragraphs. Call it once every
    command is registered (Typer reads the help when it builds the command line)."""
    for command in app.registered_commands:
        text = command.help if command.help is not None else inspect.getdoc(command.callback)
        if text:
            command.help = one_line_paragraphs(text)
    if isinstance(app.info.help, str):
        app.info.help = one_line_paragraphs(app.info.help)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)
        if isinstance(group.help, str):
            group.help = one_line_paragraphs(group.help)
