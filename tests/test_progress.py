"""Every phase longer than a few seconds shows progress: a live bar in a terminal, one plain line
per step when the output goes to a file. The slow test reads a real warm start piped to a file
(the session's `agent_run`, tests/conftest.py)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from rlvr.training.progress import Progress, phase


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=120), buffer


@pytest.mark.parametrize(
    ("total", "lines", "shown"),
    [
        (3, None, [1, 2, 3]),  # a line per step
        (12, None, list(range(1, 13))),
        (40, 10, [4, 8, 12, 16, 20, 24, 28, 32, 36, 40]),  # many small units: about ten lines
        (7, 10, [1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_piped_output_is_one_line_per_step_and_one_at_the_end(
    total: int, lines: int | None, shown: list[int]
) -> None:
    out, buffer = console(terminal=False)
    clock = FakeClock()
    with Progress("warm start: SFT", total, "step", out, clock, lines) as bar:
        for n in range(total):
            clock.now += 10
            bar.advance(note=f"loss {2.0 - n / total:.3f}")
    written = buffer.getvalue().splitlines()
    assert "\r" not in buffer.getvalue() and "\x1b[" not in buffer.getvalue()
    assert [int(re.match(r"warm start: SFT: (\d+)/", x).group(1)) for x in written[:-1]] == shown
    assert written[0].startswith(f"warm start: SFT: {shown[0]}/{total} steps, loss ")
    assert (
        written[-1]
        == f"warm start: SFT: {total}/{total} steps, loss {2.0 - (total - 1) / total:.3f} in {10 * total}s"
    )


def test_a_terminal_gets_a_live_bar_with_the_note() -> None:
    out, buffer = console(terminal=True)
    with Progress("warm start: SFT", 4, "step", out, FakeClock()) as bar:
        for loss in (2.25, 1.5, 0.8, 0.39):
            bar.advance(note=f"loss {loss}")
    text = buffer.getvalue()
    assert "\x1b[" in text and "━" in text  # drawn and redrawn in place
    assert "4/4" in text and "loss 0.39" in text
    assert text.rstrip().endswith("warm start: SFT: 4/4 steps, loss 0.39 in 0s")


def test_a_phase_that_fails_prints_no_end_line() -> None:
    out, buffer = console(terminal=False)
    with pytest.raises(RuntimeError), Progress("test (final)", 3, "item", out, FakeClock()) as bar:
        bar.advance()
        raise RuntimeError("the endpoint went away")
    assert buffer.getvalue().splitlines() == ["test (final): 1/3 items"]


@pytest.mark.parametrize("terminal", [False, True])
def test_a_one_piece_phase_says_its_time(terminal: bool) -> None:
    out, buffer = console(terminal)
    clock = FakeClock()
    with phase("saving checkpoint step-0004", out, clock):
        clock.now += 2.5
    last = buffer.getvalue().splitlines()[-1]
    assert last.endswith("saving checkpoint step-0004: done in 2.5s")  # after the spinner
    assert last == "saving checkpoint step-0004: done in 2.5s" or terminal


@pytest.mark.slow
def test_a_warm_start_piped_to_a_file_prints_each_step(agent_run) -> None:
    """`rlvr train` of a tool agent with a warm start (3 SFT steps of 2 demonstrations), its
    output piped: the demonstrations, then one line per SFT step with its loss, then the warm
    start's summary."""
    lines = agent_run.stdout.splitlines()
    steps = [x for x in lines if x.startswith("warm start: SFT: ")]
    assert [x.split(":")[2].split("/")[0].strip() for x in steps] == ["1", "2", "3", "3"]
    assert all(re.search(r"steps, loss \d+\.\d{3}", x) for x in steps)
    assert steps[-1].endswith("s") and " in " in steps[-1]
    assert any(x.startswith("warm start: demonstrations: 6/6 demonstrations") for x in lines)
    assert any(x.startswith("warm start: 6 demonstrations in 3 steps") for x in lines)
    assert "\r" not in agent_run.stdout
