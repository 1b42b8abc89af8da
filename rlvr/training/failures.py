"""Rollouts that raise, made loud.

ART's gather keeps going when a rollout raises (the exception is stored on its group), which is
right for a flaky tool call and wrong for a typo: a rollout that raises on every call would give
a run that "finished" with validation 0.000. Here each distinct failure is printed once
with its message and the place in the user's code it came from, counted per step and
evaluation, never scored, and a step or evaluation in which every rollout failed stops the run
(`RunFailed`, exit 1 from the CLI) before the time budget is spent.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from pathlib import Path

import art
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.markup import escape

# Frames in these folders are the machinery, not the place a user wants to look at.
_MACHINERY = tuple(
    str(Path(p).resolve())
    for p in (
        Path(__file__).parents[1],  # rlvr itself
        Path(art.__file__).parent,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    )
)
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_CLASS = re.compile(r"<class '([^']+)'>")


class RunFailed(RuntimeError):
    """Every rollout of a step or an evaluation raised: nothing to learn or measure from."""


class Failure(BaseModel):
    """One rollout exception: its type, message, and the innermost frame of the user's code."""

    model_config = ConfigDict(frozen=True)

    kind: str
    message: str
    where: str | None

    def line(self) -> str:
        place = f" at {self.where}" if self.where else ""
        return f"{self.kind}: {self.message}{place}"


def user_frame(traceback_text: str, machinery: tuple[str, ...] = _MACHINERY) -> str | None:
    """`path:line` of the innermost frame outside rlvr, ART, the standard library and installed
    packages: where the user's rollout (or task) raised."""
    for path, line in reversed(_FRAME.findall(traceback_text)):
        resolved = str(Path(path).resolve()) if not path.startswith("<") else path
        if not path.startswith("<") and not resolved.startswith(machinery):
            return f"{path}:{line}"
    return None


def first_line(text: str) -> str:
    """The first line of a message, marked where more lines were left out."""
    lines = text.strip().splitlines()
    if not lines:
        return "(no message)"
    return lines[0] + (f" [+{len(lines) - 1} more lines]" if len(lines) > 1 else "")


def where_raised(error: BaseException) -> str | None:
    """`path:line` of the innermost frame of the user's code where `error` came from (a task's
    import, options, factory or load() that raised), looked for from its deepest cause out;
    None when it came from rlvr, ART or a library alone."""
    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    places = (user_frame("".join(traceback.format_tb(e.__traceback__))) for e in reversed(chain))
    return next((place for place in places if place), None)


def one_line(error: BaseException, known: bool = False) -> str:
    """`error` as one line for the console, led by the place in the user's code it came from:
    rlvr's own errors (`known`) keep their text; any other gets its type in front."""
    text = str(error) if known else f"{type(error).__name__}: {error}"
    place = where_raised(error)
    return f"{place}: {first_line(text)}" if place else first_line(text)


def failures_of(groups: list[art.TrajectoryGroup]) -> list[Failure]:
    """The exceptions ART stored on the groups, one Failure each."""
    return [
        Failure(
            kind=(m.group(1).rsplit(".", 1)[-1] if (m := _CLASS.match(e.type)) else e.type),
            message=first_line(e.message),
            where=user_frame(e.traceback),
        )
        for g in groups
        for e in g.exceptions
    ]


class FailureLog:
    """Prints each distinct failure once per run, however many rollouts hit it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen: set[Failure] = set()

    def report(self, failures: list[Failure], during: str) -> None:
        for failure in failures:
            if failure in self.seen:
                continue
            self.seen.add(failure)
            count = failures.count(failure)
            self.console.print(
                f"[bold red]rollout error[/] during {escape(during)} ({count}×): "
                f"{escape(failure.line())}",
                highlight=False,
            )


def require_some(done: int, failures: list[Failure], during: str) -> None:
    """Raise RunFailed when nothing of `during` completed and something raised."""
    if done == 0 and failures:
        raise RunFailed(
            f"every rollout of {during} failed ({len(failures)}); first: {failures[0].line()}"
        )


def as_one_line(error: BaseException, known: bool) -> tuple[str, int] | None:
    """(line, exit code) for an error a user can act on: every rollout raising (1), one of
    rlvr's own one-line errors (`known`, 2), or an error raised in the user's own code — a task's
    import, options, factory or load() — named by its file and line (2). None for anything else:
    a fault of rlvr itself, whose traceback is what helps."""
    if isinstance(error, RunFailed):
        return str(error), 1
    if known or where_raised(error) is not None:
        return one_line(error, known=known), 2
    return None
