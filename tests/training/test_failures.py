"""Rollouts that raise are loud: named with the user's file and line, counted, never scored, and
a step or evaluation in which every rollout raised stops the run (exit 1)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

import art
import pytest

from rlvr.training.evaluation import evaluate
from rlvr.training.failures import Failure, FailureLog, RunFailed, failures_of, user_frame
from rlvr.types import Item, Sampling
from tests.helpers import warm


def traceback_of(*frames: tuple[str, int]) -> str:
    lines = [f'  File "{path}", line {line}, in f\n    x()' for path, line in frames]
    return "Traceback (most recent call last):\n" + "\n".join(lines) + "\nValueError: boom"


RLVR_DIR = str(Path(__import__("rlvr").__file__).parent)
ART_DIR = str(Path(art.__file__).parent)


@pytest.mark.parametrize(
    ("frames", "where"),
    [
        ([(f"{RLVR_DIR}/loop.py", 10), ("/home/me/task.py", 7)], "/home/me/task.py:7"),
        ([("/home/me/task.py", 7), (f"{ART_DIR}/gather.py", 3)], "/home/me/task.py:7"),
        ([("/home/me/a.py", 1), ("/home/me/b.py", 2), (asyncio.__file__, 5)], "/home/me/b.py:2"),
        ([(f"{RLVR_DIR}/loop.py", 10), (asyncio.__file__, 5)], None),
        ([("<string>", 1)], None),
    ],
)
def test_the_users_frame_is_the_innermost_outside_the_machinery(frames, where) -> None:
    assert user_frame(traceback_of(*frames)) == where


def test_failures_come_from_arts_records_with_type_message_and_place(tmp_path: Path) -> None:
    task = tmp_path / "task.py"
    task.write_text("def rollout(item):\n    return item.promt\n")
    namespace: dict = {}
    exec(compile(task.read_text(), str(task), "exec"), namespace)
    try:
        namespace["rollout"](Item(id="a", prompt="p"))
    except AttributeError as error:
        group = art.TrajectoryGroup([], exceptions=[error])
    [failure] = failures_of([group])
    assert failure.kind == "AttributeError"
    assert "promt" in failure.message and failure.where == f"{task}:2"


def test_each_distinct_failure_is_printed_once(capsys) -> None:
    from rich.console import Console

    log = FailureLog(Console(file=sys.stdout, width=200))
    boom = Failure(kind="ValueError", message="boom [/]", where="/t.py:3")
    other = Failure(kind="KeyError", message="'x'", where=None)
    log.report([boom, boom, other], "step 1")
    log.report([boom], "step 2")
    out = capsys.readouterr().out
    assert out.count("ValueError: boom [/] at /t.py:3") == 1 and "(2×)" in out
    assert out.count("KeyError") == 1


def answer(text: str) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": text},
        ],
        reward=0.0,
    )


@pytest.mark.parametrize(
    ("failing", "accuracy", "errors"),
    [(set(), 0.5, 0), ({"0", "1"}, 0.5, 2), ({"0", "2"}, 1.0, 2), ({"0", "1", "2", "3"}, None, 4)],
)
async def test_evaluation_scores_completed_items_only(failing, accuracy, errors) -> None:
    """A rollout that raised is not a wrong answer: accuracy is over the completed items, the
    errors are counted beside it, and an evaluation where all raised is RunFailed."""
    items = [Item(id=str(i), prompt="q", answer="yes" if i % 2 else "no") for i in range(4)]

    async def rollout(model, item, sampling):
        if item.id in failing:
            raise RuntimeError(f"tool down for {item.id}")
        return answer("yes")

    async def check(item, trajectory):
        return float(item.answer == "yes")

    policy = SimpleNamespace(model=None)  # the rollouts here never call a model
    run = evaluate(rollout, check, policy, items, Sampling(), asyncio.Semaphore(4), "validate @0")
    if accuracy is None:
        with pytest.raises(RunFailed, match=r"every rollout of validate @0 failed \(4\)"):
            await run
        return
    evaluated = await run
    assert evaluated.accuracy == accuracy
    assert len(evaluated.items) == 4 - errors and len(evaluated.failures) == errors


BROKEN = """
import rlvr


def load():
    return [{{"prompt": f"What is {{a}} + 1?", "answer": str(a + 1)}} for a in range(30)]


async def rollout(model, item, sampling):
    text = item.promt  # the typo
    return await rlvr.single_turn(model, item, [{{"role": "user", "content": text}}], sampling)


task = rlvr.Task(
    name="broken",
    make=lambda: rlvr.environment(
        name="broken", load=load, rollout=rollout, check=lambda i, t: 1.0
    ),
)
"""


@pytest.mark.slow
def test_a_rollout_raising_every_time_stops_train_at_the_first_evaluation(tmp_path: Path) -> None:
    task = tmp_path / "elsewhere" / "broken.py"
    task.parent.mkdir()
    task.write_text(BROKEN.format())
    line = BROKEN.format().splitlines().index("    text = item.promt  # the typo") + 1
    done = warm.rlvr(  # `rlvr train` in a process of its own, forked warm (tests/helpers/warm.py)
        "train", f"{task}:task", "max_steps=2", "judge=none", f"runs_root={tmp_path}"
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "AttributeError" in output and "promt" in output
    assert f"{task}:{line}" in output
    assert "error: every rollout of validate @0 failed" in done.stderr
    assert "step 1" not in done.stdout  # stopped before any training step
