"""Optimizer state is kept only in the newest checkpoint, where a resume needs it.

Fast: on a run directory's checkpoint layout (the backend's folder, and checkpoints/ holding hard
links to it), every older checkpoint gives up its optimizer.pt, a link to the newest's stays, and a
resume from a checkpoint without it says in one line that the optimizer restarts. Slow, on the
shared `tiny_run` (read-only; what changes goes to a copy): after the real run only the newest
checkpoint's state is stored; the engine resuming from it continues the optimizer (its step
counter is the saved one), and from an older step it restarts and says so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rlvr.config import RunConfig
from rlvr.runs import layout, store
from rlvr.training.checkpoints import (
    OPTIMIZER_FILE,
    keep_optimizer_newest,
    optimizer_restart_line,
    policy_checkpoints,
)
from tests.helpers.tiny_runs import TinyRun

CFG = RunConfig(task="math")


def fake_run(tmp_path: Path, steps: int) -> Path:
    """Policy checkpoints 0..steps in the backend's folder, each with an optimizer state;
    checkpoints/step-NNNN and best linked to them as a run links them."""
    run_dir = tmp_path / "math-run"
    root = layout.policy_dir(run_dir, CFG.project) / "checkpoints"
    for step in range(steps + 1):
        folder = root / f"{step:04d}"
        folder.mkdir(parents=True)
        for name in ("adapter_config.json", "adapter_model.safetensors", OPTIMIZER_FILE):
            (folder / name).write_text(f"{name} of {step}")
        if step:
            store.save_checkpoint(run_dir, folder, layout.step_name(step))
    store.save_checkpoint(run_dir, root / f"{steps:04d}", layout.BEST)
    return run_dir


def optimizer_files(run_dir: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(run_dir)) for p in run_dir.rglob(OPTIMIZER_FILE))


def test_only_the_newest_checkpoint_keeps_its_optimizer_state(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path, 3)
    removed = keep_optimizer_newest(CFG, run_dir, 3)
    newest = layout.policy_dir(run_dir, CFG.project) / "checkpoints" / "0003"
    assert optimizer_files(run_dir) == sorted(
        [
            str(newest.relative_to(run_dir)),
            "checkpoints/best",  # best is the newest here: the same file, linked
            "checkpoints/step-0003",
        ]
    )
    assert all(os.path.samefile(p, newest / OPTIMIZER_FILE) for p in run_dir.rglob(OPTIMIZER_FILE))
    assert len(removed) == 3 + 2  # policy steps 0, 1, 2 and the links of steps 1 and 2
    for step in (1, 2):  # the adapters themselves stay whole
        assert (
            run_dir / "checkpoints" / layout.step_name(step) / "adapter_model.safetensors"
        ).is_file()
    assert keep_optimizer_newest(CFG, run_dir, 3) == []  # nothing more to remove


def test_a_newer_checkpoint_than_the_recorded_one_keeps_its_state(tmp_path: Path) -> None:
    """A checkpoint written before its metrics row (the step under way) is not touched."""
    run_dir = fake_run(tmp_path, 3)
    keep_optimizer_newest(CFG, run_dir, 2)
    steps = policy_checkpoints(CFG, run_dir)
    assert [s for s in steps if (steps[s] / OPTIMIZER_FILE).is_file()] == [2, 3]


@pytest.mark.parametrize(("resumed_at", "restarts"), [(3, False), (2, True), (0, False)])
def test_a_resume_without_optimizer_state_says_it_restarts(
    tmp_path: Path, resumed_at: int, restarts: bool
) -> None:
    run_dir = fake_run(tmp_path, 3)
    keep_optimizer_newest(CFG, run_dir, 3)
    line = optimizer_restart_line(CFG, run_dir, resumed_at)
    if not restarts:  # the newest continues; step 0 has nothing to continue
        assert line is None
        return
    assert line is not None and "\n" not in line
    assert f"policy step {resumed_at}" in line and "the optimizer restarts" in line


def test_a_remote_backend_has_nothing_here(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path, 2)
    remote = CFG.model_copy(update={"backend": "tinker"})
    assert keep_optimizer_newest(remote, run_dir, 2) == []
    assert optimizer_restart_line(remote, run_dir, 1) is None


# ------------------------------------------------------------------ the real run (slow)


def adam_steps(state: dict[str, object]) -> set[float]:
    """The step counters of an AdamW state dict, one per parameter."""
    per_param = state["state"]
    assert isinstance(per_param, dict)
    return {float(s["step"]) for s in per_param.values()}


@pytest.mark.slow
def test_a_real_run_keeps_the_state_once_and_a_resume_continues_it(
    tiny_run: TinyRun, tmp_path: Path
) -> None:
    import torch

    from rlvr.engine import Engine, resolve_model
    from rlvr.training.backends import rewind_policy

    run_dir = tiny_run.run_dir
    cfg = store.read_config(run_dir)
    steps = policy_checkpoints(cfg, run_dir)
    newest = max(steps)
    assert len(list((run_dir / layout.CHECKPOINTS).glob("step-*"))) >= 2
    stored = list(run_dir.rglob(OPTIMIZER_FILE))
    assert stored, "the newest checkpoint keeps its optimizer state"
    assert all(os.path.samefile(p, steps[newest] / OPTIMIZER_FILE) for p in stored)
    saved = adam_steps(torch.load(steps[newest] / OPTIMIZER_FILE, weights_only=True))
    assert saved and min(saved) > 0

    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("trajectories"))
    art_dir = layout.policy_dir(copy, cfg.project)
    base = resolve_model(cfg.model)
    continued = Engine(base, art_dir, device="cpu", precision="fp32")
    assert adam_steps(continued.trainer.optimizer.state_dict()) == saved
    assert optimizer_restart_line(cfg, copy, newest) is None
    del continued

    # An older step, as a resume whose metrics end before the newest: step 1's adapter (its
    # copy under checkpoints/, which the backend's folder no longer keeps once step 2 is best).
    older = 1
    if older not in steps:  # neither folder may keep it: the newest's adapter, without its state
        kept = copy / layout.CHECKPOINTS / layout.step_name(older)
        source = kept if kept.is_dir() else steps[newest]
        shutil.copytree(
            source,
            art_dir / "checkpoints" / f"{older:04d}",
            ignore=shutil.ignore_patterns(OPTIMIZER_FILE),
        )
    rewind_policy(cfg, copy, older)
    line = optimizer_restart_line(cfg, copy, older)
    assert line is not None and "the optimizer restarts" in line
    restarted = Engine(base, art_dir, device="cpu", precision="fp32")
    assert restarted.trainer.optimizer.state_dict()["state"] == {}
