"""Every phase longer than a few seconds shows progress: a live bar in a terminal, a few plain
lines when the output goes to a file (at most one a quarter of the phase and 30 s apart, and its
end), never broken mid-line there and free of third-party lines (ART's checkpoint deletions).
The slow test reads a real warm start piped to a file (the session's `agent_run`,
tests/conftest.py)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from rlvr.training.progress import Progress, RunConsole, phase


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=120), buffer


def piped_phase(total: int, seconds_each: float) -> list[str]:
    """The lines a phase of `total` steps, each `seconds_each` long, writes to a file."""
    out, buffer = console(terminal=False)
    clock = FakeClock()
    with Progress("warm start: SFT", total, "step", out, clock) as bar:
        for n in range(total):
            clock.now += seconds_each
            bar.advance(note=f"loss {2.0 - n / total:.3f}")
    assert "\r" not in buffer.getvalue() and "\x1b[" not in buffer.getvalue()
    return buffer.getvalue().splitlines()


def done_of(line: str) -> int:
    found = re.match(r"warm start: SFT: (\d+)/", line)
    assert found, line
    return int(found.group(1))


@pytest.mark.parametrize("total", [1, 3, 4, 7, 12, 40, 96, 1000])
@pytest.mark.parametrize("seconds_each", [0.2, 3.0, 10.0, 45.0, 600.0])
def test_a_piped_phase_writes_a_few_lines_and_its_end(total: int, seconds_each: float) -> None:
    written = piped_phase(total, seconds_each)
    last_note = f"loss {2.0 - (total - 1) / total:.3f}"
    assert written[-1] == (
        f"warm start: SFT: {total}/{total} steps, {last_note} in {seconds_each * total:.0f}s"
    )
    shown = [done_of(x) for x in written[:-1]]
    assert len(written) <= 4  # at most three lines on the way, then the end
    assert shown == sorted(set(shown)) and all(0 < n < total for n in shown)
    # each line on the way: another quarter of the phase and 30 s after the one before
    for before, after in zip([0, *shown], shown, strict=False):
        assert (after - before) * 4 >= total
        assert (after - before) * seconds_each >= 30


@pytest.mark.parametrize(
    ("total", "seconds_each", "shown"),
    [
        (96, 10.0, [24, 48, 72]),  # a long phase: its quarters
        (40, 2.0, [15, 30]),  # 30 s apart, later than its quarters
        (40, 0.5, []),  # 20 s in all: only its end
        (3, 60.0, [1, 2]),  # slow steps: each is more than a quarter
    ],
)
def test_a_piped_phase_says_its_quarters_at_most_every_30_s(
    total: int, seconds_each: float, shown: list[int]
) -> None:
    written = piped_phase(total, seconds_each)
    assert [done_of(x) for x in written[:-1]] == shown
    assert done_of(written[-1]) == total and written[-1].endswith(
        f" in {seconds_each * total:.0f}s"
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
    clock = FakeClock()
    with pytest.raises(RuntimeError), Progress("test (final)", 3, "item", out, clock) as bar:
        clock.now += 40
        bar.advance()
        clock.now += 40
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
def test_a_warm_start_piped_to_a_file_prints_its_steps_in_a_few_lines(agent_run) -> None:
    """`rlvr train` of a tool agent with a warm start (3 SFT steps of 2 demonstrations), its
    output piped: the demonstrations, then a few SFT lines with the loss (at most one a step,
    30 s apart) ending in the phase's own, then the warm start's summary."""
    lines = agent_run.stdout.splitlines()
    steps = [x for x in lines if x.startswith("warm start: SFT: ")]
    done = [int(x.split(":")[2].split("/")[0]) for x in steps]
    assert done[-1] == 3 and done[:-1] == sorted(set(done[:-1])) and all(n < 3 for n in done[:-1])
    assert all(re.search(r"steps, loss \d+\.\d{3}", x) for x in steps)
    assert re.search(r" in \d+s$", steps[-1]), steps[-1]
    assert any(x.startswith("warm start: demonstrations: 6/6 demonstrations") for x in lines)
    assert any(x.startswith("warm start: 6 demonstrations in 3 steps") for x in lines)
    assert "\r" not in agent_run.stdout


NARROW = 40  # columns: any line of a run's output is longer


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """The run's console as `make train > log` has it: not a terminal, at the width Rich takes
    from the environment there (COLUMNS, else 80), here narrow; what it writes."""
    from rlvr.training import output, progress

    buffer = io.StringIO()
    monkeypatch.setenv("COLUMNS", str(NARROW))
    piped_console = RunConsole(file=buffer)
    assert not piped_console.is_terminal and piped_console.width == NARROW
    monkeypatch.setattr(progress, "console", piped_console)
    monkeypatch.setattr(output, "console", piped_console)
    return buffer


def test_a_piped_run_writes_each_line_whole_at_any_width(piped: io.StringIO) -> None:
    from rlvr.metrics import HINT_KEY, M
    from rlvr.runs.records import StepRow
    from rlvr.training.output import CUT_CALLS, print_step, print_validation

    hint = "the group's rewards are all 0 at max_tokens=16: raise max_tokens or give partial credit"
    row = {
        M.STEP: 1,
        M.REWARD_MEAN: 0.567,
        M.REWARD_STD: 0.454,
        M.NO_SIGNAL_RATE: 0.25,
        M.ALL_ZERO: 1,
        M.ALL_ONE: 0,
        M.TRUNCATED_RATE: 0.5,
        M.LOOPING_RATE: 0.25,
        CUT_CALLS: 0.125,
        M.UPDATE_KL: 0.0002,
        M.SKIPPED: 0,
        M.STEP_SECONDS: 26.0,
        HINT_KEY: [hint],
    }
    clock = FakeClock()
    with Progress("step 1 rollouts", 2, "group", clock=clock) as bar:  # on the run's console
        for reward in (0.25, 0.19):
            clock.now += 40
            bar.advance(note=f"reward {reward:.2f} over 8 rollouts, 3 of them truncated")
    print_step(StepRow.model_validate(row))
    print_validation(1, 0.625, 1, 0.0125, 0.004)

    lines = piped.getvalue().splitlines()
    assert len(lines) == 5, lines  # one per thing said: nothing wrapped onto a second line
    note = "reward 0.19 over 8 rollouts, 3 of them truncated"
    assert (
        lines[0] == "step 1 rollouts: 1/2 groups, reward 0.25 over 8 rollouts, 3 of them truncated"
    )
    assert lines[1] == f"step 1 rollouts: 2/2 groups, {note} in 80s"
    assert lines[2].startswith("step 1 reward 0.567±0.454  no-signal 25% (all-0 1, all-1 0)")
    assert "trunc 50% (loops 25%, ended at a cut call 12%)  update-kl 0.0002" in lines[2]
    assert lines[2].endswith("skipped 0  26s")
    assert lines[3] == f"  hint: {hint}"
    assert lines[4] == "validation @ step 1: 0.625 (policy step 1; trend +0.013/eval ± 0.004)"
    assert all(len(x) > NARROW for x in lines)


def test_a_piped_alarm_box_still_fits_the_width(piped: io.StringIO) -> None:
    from rlvr.runs.records import Alarm, AlarmName
    from rlvr.training.output import print_alarm

    message = "training reward rose 0.30 over 3 steps while validation fell 0.10: read the rollouts"
    print_alarm(Alarm(name=AlarmName.REWARD_HACKING, step=4, message=message))
    lines = piped.getvalue().splitlines()
    assert all(len(x) <= NARROW for x in lines) and len(lines) > 3  # a box, wrapped inside
    inside = " ".join(x.strip("│ ") for x in lines[1:-1])
    assert " ".join(inside.split()) == message


async def test_arts_checkpoint_deletions_stay_off_the_console(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The run's deletion of old adapters goes through the backend's `_delete_checkpoint_files`
    to ART's `delete_checkpoints`, which prints a line for each; none reaches the output."""
    import art
    from art.utils.output_dirs import get_model_dir

    from rlvr import art_private
    from rlvr.engine.backend import LocalTorchBackend

    backend = LocalTorchBackend(path=str(tmp_path / ".art"))
    model = art.TrainableModel(name="m", project="p", base_model="smollm2-135m")
    await backend.register(model)  # the backend's part of registering: no engine is loaded
    checkpoints = Path(get_model_dir(model=model, art_path=str(tmp_path / ".art"))) / "checkpoints"
    for step in range(4):
        (checkpoints / f"{step:04d}").mkdir(parents=True)
        (checkpoints / f"{step:04d}" / "adapter_model.safetensors").write_bytes(b"")
    await art_private.delete_checkpoints(backend, model, [0, 2])
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0000", "0002", "0003"]  # 3: latest
    out, err = capfd.readouterr()
    assert "Deleted checkpoint" not in out + err and out == ""


@pytest.mark.parametrize("command", [False, True], ids=["bare-python", "rlvr-command"])
def test_installed_packages_compile_warnings_stay_off_the_console(
    tmp_path: Path, command: bool
) -> None:
    """reasoning-gym imports cellpylib, whose source Python warns about while compiling it (an
    empty bytecode cache here, as on a first run): an rlvr command keeps that off stderr."""
    setup = "from rlvr.cli.main import _every_command; _every_command(); " if command else ""
    done = subprocess.run(
        [sys.executable, "-X", f"pycache_prefix={tmp_path}", "-c", f"{setup}import cellpylib"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("SyntaxWarning" in done.stderr) is not command, done.stderr[-2000:]
