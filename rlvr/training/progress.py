"""The progress of a run's long phases, and the console a run prints to.

Progress is for phases that take more than a few seconds (the warm start's demonstrations and
steps, evaluations, checkpoint saves): in a terminal a live bar; where the output goes to a file
or a pipe, plain lines without carriage returns: one once the phase has gone another quarter of
the way and 30 s have passed since its last line (at most three), and one when it ends, so a log
shows where a run is in a few lines a phase.

Where the output is not a terminal, Rich assumes 80 columns; the run's console writes each line
of text whole there (a log line broken mid-line reads as two), and boxes (alarms, the finished
panel) at the width Rich gives them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar


class RunConsole(Console):
    """Rich's console, except that a line of text is never broken where the output is not a
    terminal: a file or a pipe has no width to fit, and a reader greps a log by lines."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        if soft_wrap is None:
            soft_wrap = not self.is_terminal and all(isinstance(o, str) for o in objects)
        super().print(*objects, soft_wrap=soft_wrap, **options)


console = RunConsole()
Clock = Callable[[], float]
# Piped output: a phase's next line waits for both (module docstring), so that a quick phase says
# only its end and a long one at most three points on the way.
LINE_SHARE = 4  # another 1/LINE_SHARE of the phase done
LINE_GAP_S = 30.0  # seconds since the phase's last line (or its start)


class Progress:
    """The progress of a phase of `total` units (a context manager): `advance(note=...)` after
    each unit. In a terminal a live bar with the last note; piped, a line with the last note at
    most every quarter of the phase and 30 s (LINE_SHARE, LINE_GAP_S), and a last line with the
    phase's time."""

    def __init__(
        self,
        desc: str,
        total: int,
        unit: str,
        out: Console | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.out, self.clock = out or console, clock
        self.done, self.note, self._said = 0, "", 0
        self._bar: Bar | None = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        self.started = self._said_at = self.clock()
        if self.out.is_terminal:
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(f"{escape(self.unit)}s"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=self.out,
            )
            self._bar.start()
            self._task = self._bar.add_task(escape(self.desc), total=self.total, note="")
        return self

    def grow(self, n: int = 1) -> None:
        """The phase has `n` more units than it started with (a step's refilled groups)."""
        self.total += n
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)

    def advance(self, n: int = 1, note: str = "") -> None:
        self.done, self.note = self.done + n, note or self.note
        if self._bar is not None:
            self._bar.update(self._task, advance=n, note=escape(self.note))
        elif self._line_due():
            self._said, self._said_at = self.done, self.clock()
            self._line()

    def _line_due(self) -> bool:
        """Piped: another share of the phase done and LINE_GAP_S passed (the end has its line)."""
        ahead = (self.done - self._said) * LINE_SHARE >= self.total
        return self.done < self.total and ahead and self.clock() - self._said_at >= LINE_GAP_S

    def _line(self, ended: bool = False) -> None:
        note = f", {self.note}" if self.note else ""
        when = f" in {self.clock() - self.started:.0f}s" if ended else ""
        self.out.print(
            f"{self.desc}: {self.done}/{self.total} {self.unit}s{note}{when}",
            highlight=False,
            markup=False,
        )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: object,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        if kind is None:
            self._line(ended=True)


@contextmanager
def phase(desc: str, out: Console | None = None, clock: Clock = time.monotonic) -> Iterator[None]:
    """A phase of one piece (a checkpoint save): a spinner in a terminal, and one line with its
    time when it ends, in a terminal and piped alike."""
    out = out or console
    started = clock()
    if out.is_terminal:
        with out.status(escape(desc)):
            yield
    else:
        yield
    out.print(f"{desc}: done in {clock() - started:.1f}s", highlight=False, markup=False)
