"""A run directory keeps working when renamed, moved or copied (nothing in it depends on its old
path or name), stores each checkpoint once, and names a damaged file in one line.

Two real tiny runs (math, 2 steps, 1 group of 2, 6 tokens) on the tiny random model (`tiny_model`:
what is checked is the run directory, not the policy): one killed after its first step
(resumable), and the same run resumed to the end (finished). Each test works on copies."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import layout, store
from tests.helpers import faults, warm

pytestmark = pytest.mark.slow  # real training runs

SCORER = '''
def alternate(group, item):
    """0 and 1 inside every group: every step has a learning signal, so every step trains."""
    return [float(i % 2) for i in range(len(group.trajectories))]
'''
RUN = {
    "difficulty": "easy",
    "num_items": 10,  # 8 train / 1 val / 1 test
    "group_size": 2,
    "groups_per_batch": 1,
    "max_tokens": 6,
    "max_steps": 2,
    "eval_every": 1,
    "judge": "none",
    "stopping.on_divergence": "warn",
}


class Runs(BaseModel):
    model_config = ConfigDict(frozen=True)

    unfinished: Path  # killed after step 1: resumable
    finished: Path  # the same run resumed to its end


def train(*args: str, env: dict[str, str] | None = None) -> warm.Finished:
    return warm.rlvr("train", *args, env=env or {}, unset=[faults.FAULT_ENV], timeout_s=900)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Runs:
    folder = tmp_path_factory.mktemp("moves")
    scorer = folder / "alternate.py"
    scorer.write_text(SCORER)
    run_dir = folder / "math-original"
    killed = train(
        "math",
        *(f"{k}={v}" for k, v in RUN.items()),
        f"scorer={scorer}:alternate",
        f"model={tiny_model}",
        f"run_dir={run_dir}",
        env={faults.FAULT_ENV: f"{faults.FaultPoint.ROLLOUTS}:2"},
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    unfinished = folder / "unfinished" / "math-original"
    unfinished.parent.mkdir()
    subprocess.run(["cp", "-a", str(run_dir), str(unfinished)], check=True)
    done = train("--resume", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    return Runs(unfinished=unfinished, finished=run_dir)


def rename(run_dir: Path, tmp: Path) -> Path:
    target = run_dir.with_name(f"{run_dir.name}-renamed")
    run_dir.rename(target)
    return target


def move(run_dir: Path, tmp: Path) -> Path:
    target = tmp / "elsewhere" / "deeper" / "math-moved"
    target.parent.mkdir(parents=True)
    shutil.move(run_dir, target)
    return target


def copy(run_dir: Path, tmp: Path) -> Path:
    """A copy as to another machine (hard links become separate files), the original gone."""
    target = tmp / "other-machine" / "math-copied"
    shutil.copytree(run_dir, target)
    shutil.rmtree(run_dir)
    return target


RELOCATIONS: dict[str, Callable[[Path, Path], Path]] = {
    "rename": rename,
    "move": move,
    "copy": copy,
}


def placed(source: Path, tmp: Path) -> Path:
    """A copy of `source` under `tmp` (same name, hard links kept: `cp -a`), to change without
    touching the fixture."""
    target = tmp / "here" / source.name
    target.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    return target


def one_line_exit_2(done: warm.Finished) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines and lines[-1].startswith("error: "), done.stderr[-3000:]
    return lines[-1]


@pytest.mark.parametrize("how", list(RELOCATIONS))
def test_a_relocated_run_resumes_then_evaluates_and_inspects(
    runs: Runs, tmp_path: Path, how: str
) -> None:
    relocate = RELOCATIONS[how]
    run_dir = relocate(placed(runs.unfinished, tmp_path), tmp_path)
    resumed = train("--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [row.on_disk() for row in store.read_metrics(run_dir)]
    train_rows = [r for r in rows if M.REWARD_MEAN in r]
    # The policy continued from step 1's checkpoint (a fresh adapter would start at 0 again).
    assert [(r[M.STEP], r[M.POLICY_STEP]) for r in train_rows] == [(1, 1), (2, 2)]
    assert store.read_summary(run_dir).steps == 2

    finished = relocate(run_dir, tmp_path / "again")
    evaluated = warm.rlvr("eval", str(finished), timeout_s=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "test_accuracy=" in evaluated.stdout and "404" not in evaluated.stderr
    assert (finished / layout.TRAJECTORIES / "eval-test.parquet").is_file()
    shown = CliRunner().invoke(app, ["inspect", str(finished)])
    assert shown.exit_code == 0, shown.output
    assert "trajectories: train 1, 2 · val 0, 1, 2" in " ".join(shown.output.split())
    assert not run_dir.exists()  # nothing was read from the old place


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_each_checkpoint_is_stored_once_and_eval_reads_the_copy_checkpoints_names(
    runs: Runs,
) -> None:
    run_dir = runs.finished
    by_content: dict[tuple[int, str], set[tuple[int, int]]] = {}
    for path in (
        *(run_dir / layout.CHECKPOINTS).rglob("*"),
        *(run_dir / layout.ART_DIR).rglob("*"),
    ):
        if path.suffix in (".safetensors", ".pt") and path.stat().st_size > 4096:
            info = path.stat()
            key = (info.st_size, file_digest(path))
            by_content.setdefault(key, set()).add((info.st_dev, info.st_ino))
    assert by_content and all(len(inodes) == 1 for inodes in by_content.values())
    cfg = RunConfig.model_validate_json((run_dir / layout.CONFIG).read_text())
    best_step = store.read_summary(run_dir).best_step
    policy_step = next(
        r[M.POLICY_STEP]
        for r in (row.on_disk() for row in store.read_metrics(run_dir))
        if r[M.STEP] == best_step
    )
    served = (
        layout.policy_dir(run_dir, cfg.project) / "checkpoints" / f"{policy_step:04d}"
    ) / "adapter_model.safetensors"
    named = run_dir / layout.CHECKPOINTS / layout.BEST / "adapter_model.safetensors"
    assert os.path.samefile(served, named)


def truncate(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)


def latest_art_checkpoint(run_dir: Path) -> Path:
    cfg = RunConfig.model_validate_json((run_dir / layout.CONFIG).read_text())
    root = layout.policy_dir(run_dir, cfg.project) / "checkpoints"
    return max((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def damage_adapter(run_dir: Path, command: str) -> str:
    """The adapter a command reads: best (named by checkpoints/) for eval, the latest to resume."""
    if command == "eval":
        target = run_dir / layout.CHECKPOINTS / layout.BEST / "adapter_model.safetensors"
    else:
        target = latest_art_checkpoint(run_dir) / "adapter_model.safetensors"
    truncate(target)
    return "damaged adapter weights"


def damage_optimizer(run_dir: Path, command: str) -> str:
    truncate(latest_art_checkpoint(run_dir) / "optimizer.pt")
    return "optimizer.pt: damaged optimizer state"


def damage_summary(run_dir: Path, command: str) -> str:
    path = run_dir / layout.SUMMARY
    text = path.read_text() if path.is_file() else json.dumps({"steps": 1}, indent=2)
    path.write_text(text[: len(text) // 2])
    return "summary.json: damaged, not valid JSON" if command == "eval" else "already finished"


def damage_metrics(run_dir: Path, command: str) -> str:
    path = run_dir / layout.METRICS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0][: len(lines[0]) // 2] + "\n" + "".join(lines[1:]))
    return "metrics.jsonl:1: unparsable metrics line"


DAMAGES: dict[str, Callable[[Path, str], str]] = {
    "adapter": damage_adapter,
    "optimizer": damage_optimizer,
    "summary": damage_summary,
    "metrics": damage_metrics,
}


@pytest.mark.parametrize("command", ["eval", "resume"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_file_is_named_in_one_line(
    runs: Runs, tmp_path: Path, damage: str, command: str
) -> None:
    # eval reads a finished run; resume an unfinished one (a finished one is refused first).
    source = runs.finished if command == "eval" or damage == "summary" else runs.unfinished
    run_dir = placed(source, tmp_path)
    said = DAMAGES[damage](run_dir, command)
    args = ["eval", str(run_dir)] if command == "eval" else ["train", "--resume", str(run_dir)]
    done = warm.rlvr(*args, unset=[faults.FAULT_ENV], timeout_s=600)
    line = one_line_exit_2(done)
    assert said in line, line
    assert str(run_dir) in line  # the file is named by its path
