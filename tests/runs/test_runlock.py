"""One writer per run directory: the lock, unique run names, and fresh runs that refuse a
directory holding a run. The writers are real processes (`rlvr` commands against a directory
another process holds, forked warm: tests/helpers/warm.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import RunConfig
from rlvr.runs import runlock
from tests.helpers import warm
from tests.helpers.run_dirs import finished_summary

HOLDER = """
import sys, time
from pathlib import Path
from rlvr.runs.runlock import hold
with hold(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held(tmp_path: Path):
    """A run directory whose lock another live process holds: (run_dir, that process)."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield run_dir, holder
    holder.kill()
    holder.wait()


def test_a_second_holder_is_refused_naming_the_first(held) -> None:
    run_dir, holder = held
    with pytest.raises(runlock.RunLocked, match=rf"pid {holder.pid}\b"), runlock.hold(run_dir):
        pass


def test_the_lock_goes_with_a_killed_holder(held) -> None:
    run_dir, holder = held
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with runlock.hold(run_dir):  # the stale .lock file is simply locked again
        assert (run_dir / runlock.LOCK_FILE).read_text().strip() == str(os.getpid())


def test_run_names_never_collide(tmp_path: Path) -> None:
    made = [runlock.claim_new(tmp_path, "math-20261123-120000") for _ in range(3)]
    assert [p.name for p in made] == [
        "math-20261123-120000",
        "math-20261123-120000-2",
        "math-20261123-120000-3",
    ]
    assert all(p.is_dir() for p in made)


@pytest.mark.parametrize("marker", ["metrics.jsonl", "checkpoints", ".art"])
def test_a_fresh_run_refuses_a_directory_holding_a_run(tmp_path: Path, marker: str) -> None:
    (tmp_path / marker).mkdir()
    with pytest.raises(runlock.RunLocked, match=f"already holds a run \\({marker}\\)"):
        runlock.refuse_existing_run(tmp_path, ("metrics.jsonl", "checkpoints", ".art"))


def finished_run(run_dir: Path, task: str = "math") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig(task=task, judge="none", run_dir=run_dir)
    (run_dir / "config.json").write_text(json.dumps(cfg.public_dict()))
    (run_dir / "summary.json").write_text(finished_summary(run_dir, task))
    (run_dir / "metrics.jsonl").write_text("")
    return run_dir


def rlvr(*args: str) -> warm.Finished:
    return warm.rlvr(*args, timeout_s=300)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "resume", "eval"])
def test_a_second_writer_exits_2_naming_the_holder(held, command: str) -> None:
    run_dir, holder = held
    if command == "train":
        done = rlvr("train", "math", "judge=none", f"run_dir={run_dir}")
    else:
        finished_run(run_dir)
        if command == "resume":
            (run_dir / "summary.json").unlink()
        done = rlvr(*(["train", "--resume"] if command == "resume" else ["eval"]), str(run_dir))
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("error:") and f"pid {holder.pid}" in line
    assert not (run_dir / "trajectories").exists()  # nothing written


@pytest.mark.slow
def test_a_fresh_cli_run_into_a_used_directory_exits_2(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / ".art").mkdir(parents=True)
    done = rlvr("train", "math", "judge=none", f"run_dir={run_dir}")
    assert done.returncode == 2
    assert "already holds a run (.art)" in done.stderr and "--resume" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["resume", "eval"])
def test_resume_and_eval_say_which_file_they_will_execute(tmp_path: Path, command: str) -> None:
    task_file = tmp_path / "elsewhere" / "task.py"
    task_file.parent.mkdir()
    task_file.write_text("raise SystemExit('the task file ran')\n")
    run_dir = finished_run(tmp_path / "run", task=f"{task_file}:task")
    if command == "resume":
        (run_dir / "summary.json").unlink()
    done = rlvr(*(["train", "--resume"] if command == "resume" else ["eval"]), str(run_dir))
    announced = f"its config.json names {task_file}; executing it"
    assert announced in done.stderr
    assert done.stderr.index(announced) < done.stderr.index("the task file ran")


@pytest.mark.slow
def test_a_checkpoint_optimizer_file_cannot_run_code(tmp_path: Path) -> None:
    """optimizer.pt is read with weights_only=True: a pickle that would run code is refused."""
    import pickle

    import torch

    from rlvr.engine.lora_engine import Engine
    from rlvr.engine.models import DEFAULT_MODEL, resolve_model
    from rlvr.engine.types import ADAPTER_WEIGHTS, OPTIMIZER_FILE

    first = Engine(resolve_model(DEFAULT_MODEL), tmp_path / "model", precision="fp32")
    checkpoint = first.adapters.checkpoint_dir(first.adapters.live_step)
    assert (checkpoint / ADAPTER_WEIGHTS).is_file()
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"state": Payload()}, checkpoint / OPTIMIZER_FILE)
    with pytest.raises(pickle.UnpicklingError):
        Engine(resolve_model(DEFAULT_MODEL), tmp_path / "model", precision="fp32")
    assert not marker.exists()
