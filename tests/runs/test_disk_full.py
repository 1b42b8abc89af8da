"""A full disk is one line, and nothing is lost: every write of a run that fails for lack of space
says the path, "no space left on device", what the run directory holds and how to continue; the
old content stays, no temporary is left, and the run resumes once there is room.

Fault-injected ENOSPC at each write site (`RLVR_FAULT=disk_full:<site>`), the words each library
uses for it, and real runs: one whose checkpoint or summary write is refused, and one on a real
small filesystem (a tmpfs, mounted when the tests run as root) that fills during a checkpoint."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import atomic, damage, layout, store
from rlvr.runs.damage import DiskFull, as_disk_full, human_bytes, says_disk_full, stored_bytes
from rlvr.runs.records import RunResult, StopReason, parse_row
from rlvr.runs.report import plot_report
from tests.helpers import faults, warm
from tests.helpers.tiny_runs import tiny_model_path

FULL = "No space left on device"


@pytest.fixture
def injector(monkeypatch: pytest.MonkeyPatch) -> None:
    """RLVR_FAULT honoured in this process, as in every run a test starts (tests/helpers/warm.py)."""
    monkeypatch.setattr(damage, "fault_hook", faults.inject)


def a_run(tmp_path: Path) -> Path:
    """An unfinished run directory: a config, a metrics row and a checkpoint to replace."""
    run_dir = tmp_path / "math-full"
    store.write_config(run_dir, RunConfig(task="math"))
    store.append_metrics(run_dir, parse_row({M.STEP: 0, M.VAL_ACCURACY: 0.5}))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"w" * 5000)
    store.save_checkpoint(run_dir, adapter, layout.BEST)
    return run_dir


def finished(run_dir: Path, steps: int) -> RunResult:
    """What a run that stopped at `steps` writes as summary.json."""
    return RunResult(
        run_dir=run_dir,
        task="math",
        scorer="verifier",
        stop_reason=StopReason.MAX_STEPS,
        steps=steps,
        baseline_val=0.5,
        best_val=0.5,
        best_step=0,
        test_accuracy=None,
        alarms=[],
        wall_s=1.0,
    )


def art_checkpoint(run_dir: Path) -> None:
    """A write into ART's model folder, as the policy's checkpoint is written."""
    target = run_dir / layout.ART_DIR / "rlvr" / layout.ART_MODELS / "m" / "checkpoints" / "0001"
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic.writing_dir(target) as tmp:
        (tmp / "adapter_model.safetensors").write_bytes(b"w" * 100)


WRITES: dict[str, Callable[[Path], Any]] = {
    "config": lambda run: store.write_config(run, RunConfig(task="math", seed=7)),
    "metrics": lambda run: store.append_metrics(run, parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5})),
    "trajectories": lambda run: store.write_trajectories(run, layout.step_name(1), []),
    "checkpoints": lambda run: store.save_checkpoint(run, run / layout.CHECKPOINTS / "best", "2"),
    ".art": art_checkpoint,
    "report": lambda run: plot_report(
        store.read_metrics(run), finished(run, 1), run / layout.REPORT
    ),
    "summary": lambda run: store.write_summary(run, finished(run, 2)),
}


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize("site", list(WRITES))
def test_each_write_site_says_a_full_disk_in_one_line_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, injector: None, site: str
) -> None:
    run_dir = a_run(tmp_path)
    before = snapshot(run_dir)
    monkeypatch.setenv(faults.FAULT_ENV, f"{faults.FaultPoint.DISK_FULL}:{site}")
    with pytest.raises(DiskFull) as raised:
        WRITES[site](run_dir)
    line = str(raised.value)
    assert "\n" not in line and ": no space left on device; the run directory " in line
    assert line.startswith(str(run_dir))  # the path the write went to
    assert f"holds {human_bytes(stored_bytes(run_dir))}" in line
    assert line.endswith(f"continue with `rlvr train --resume {run_dir}`"), line
    assert snapshot(run_dir) == before  # nothing half-written, nothing lost
    assert not list(run_dir.rglob("*.tmp"))
    monkeypatch.delenv(faults.FAULT_ENV)
    WRITES[site](run_dir)  # room again: the same write goes through


def test_rlvr_alone_ignores_the_fault_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the tests' injector a run honours no RLVR_FAULT: the seam is None."""
    assert damage.fault_hook is None
    run_dir = a_run(tmp_path)
    monkeypatch.setenv(faults.FAULT_ENV, f"{faults.FaultPoint.DISK_FULL}:config")
    store.write_config(run_dir, RunConfig(task="math", seed=7))
    assert store.read_config(run_dir).seed == 7


def test_a_finished_run_refused_a_write_is_told_to_run_the_command_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, injector: None
) -> None:
    run_dir = a_run(tmp_path)
    store.write_summary(run_dir, finished(run_dir, 1))
    monkeypatch.setenv(faults.FAULT_ENV, f"{faults.FaultPoint.DISK_FULL}:trajectories")
    with pytest.raises(DiskFull, match=r"eval-test\.parquet: no space .* run the command again$"):
        store.write_trajectories(run_dir, "eval-test", [])


def test_a_new_run_refused_its_config_is_told_to_start_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, injector: None
) -> None:
    run_dir = tmp_path / "math-new"
    run_dir.mkdir()
    (run_dir / layout.LOCK_FILE).touch()  # what a starting run holds before it writes
    monkeypatch.setenv(faults.FAULT_ENV, f"{faults.FaultPoint.DISK_FULL}:config")
    with pytest.raises(DiskFull, match=r"config\.json: no space left on device; .*start the run"):
        store.write_config(run_dir, RunConfig(task="math"))


@pytest.mark.parametrize(
    ("error", "full"),
    [
        (OSError(errno.ENOSPC, FULL, "/x"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/x"), True),
        # safetensors' writer, and shutil.copytree's collected errors
        (RuntimeError(f"Error while serializing: I/O error: {FULL} (os error 28)"), True),
        (shutil.Error([("/a", "/b", f"[Errno 28] {FULL}: '/a' -> '/b'")]), True),
        (OSError(errno.EACCES, "Permission denied", "/x"), False),
        (RuntimeError("unexpected pos 576 vs 534"), False),  # torch's words; free space decides
    ],
)
def test_the_words_libraries_use_for_a_full_disk(error: BaseException, full: bool) -> None:
    assert says_disk_full(error) is full
    assert (as_disk_full(error) is not None) is full


def test_the_command_line_says_a_wrapped_full_disk_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rlvr.cli.main import one_line_errors

    with pytest.raises(typer.Exit) as exited, one_line_errors():
        raise shutil.Error([("/a", "/run/x", f"[Errno 28] {FULL}: '/a' -> '/run/x'")])
    assert exited.value.exit_code == 2
    said = capsys.readouterr().err
    assert "no space left on device" in said and "Traceback" not in said


# --- slow: real runs ---------------------------------------------------------------------------

SCORER = '''
def alternate(group, item):
    """0 and 1 inside every group: every step has a learning signal, so every step trains."""
    return [float(i % 2) for i in range(len(group.trajectories))]
'''
RUN = {
    "model": str(tiny_model_path()),  # what a full disk leaves is the claim, not the policy
    "difficulty": "easy",
    "num_items": 10,
    "group_size": 2,
    "groups_per_batch": 1,
    "max_tokens": 6,
    "max_steps": 2,
    "eval_every": 1,
    "judge": "none",
    "stopping.on_divergence": "warn",
}


def train(run_dir: Path, fault: str | None = None, **overrides: Any) -> warm.Finished:
    """`rlvr train` of the tiny run into `run_dir` (or `--resume` it when it has a config)."""
    scorer = run_dir.parent / "alternate.py"
    scorer.write_text(SCORER)
    settings = {**RUN, **overrides}
    args = (
        ["--resume", str(run_dir)]
        if (run_dir / layout.CONFIG).is_file()
        else [
            "math",
            *(f"{k}={v}" for k, v in settings.items()),
            f"scorer={scorer}:alternate",
            f"run_dir={run_dir}",
        ]
    )
    env = {faults.FAULT_ENV: fault} if fault else {}
    return warm.rlvr("train", *args, env=env, unset=[faults.FAULT_ENV], timeout_s=900)


def one_line(done: warm.Finished) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def finishes(run_dir: Path, steps: int = 2) -> None:
    resumed = train(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [row.on_disk() for row in store.read_metrics(run_dir)]
    assert [r[M.STEP] for r in rows if M.REWARD_MEAN in r] == list(range(1, steps + 1))  # each once
    assert store.read_summary(run_dir).steps == steps
    assert not list(run_dir.rglob("*.tmp"))


@pytest.mark.slow
@pytest.mark.parametrize("site", [".art", "checkpoints", "summary"])
def test_a_run_refused_a_write_ends_in_one_line_and_resumes(tmp_path: Path, site: str) -> None:
    run_dir = tmp_path / "math-full"
    line = one_line(train(run_dir, f"{faults.FaultPoint.DISK_FULL}:{site}"))
    assert f"{run_dir}/" in line and "no space left on device" in line
    assert f"`rlvr train --resume {run_dir}`" in line
    finishes(run_dir)


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_real_small_filesystem_that_fills_during_a_checkpoint(tmp_path: Path) -> None:
    # Room for the start (config, ART's step-0 adapter, the baseline's rows) but not for step 1's
    # checkpoint, whose optimizer state triples it (lora_rank 2 keeps the numbers small): the real
    # model's sizes, which the tiny model's kilobytes would not fill. One step: the disk fills at
    # the first step's checkpoint, and the resume redoes that step.
    with tmpfs(tmp_path / "small", "4m") as small:
        run_dir = small / "math-small"
        line = one_line(train(run_dir, lora_rank=2, model="smollm2-135m", max_steps=1))
        assert "no space left on device" in line and f"`rlvr train --resume {run_dir}`" in line
        assert f"{layout.ART_DIR}/" in line or f"{layout.CHECKPOINTS}/" in line, line
        subprocess.run(["mount", "-o", "remount,size=256m", str(small)], check=True)
        finishes(run_dir, steps=1)  # the half-written checkpoint was discarded; nothing else lost
