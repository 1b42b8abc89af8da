"""The run's checkpoints: which the backend keeps, which checkpoints/ keeps, which the test split
is evaluated for, and which keeps the optimizer's state (the newest only).

checkpoints/ keeps the first evaluation's (the start of RL), the best and the newest step, and
every `save_every`-th where that is set: a run writes an adapter at every evaluation, and keeping
them all made the run directory grow with its length (the hardening issue's record of a default
email run).
"""

from __future__ import annotations

import os
from pathlib import Path

from rlvr import art_private
from rlvr.config import RunConfig
from rlvr.engine.types import OPTIMIZER_FILE
from rlvr.runs import atomic, layout, store
from rlvr.runs.checkpoints import saved_steps
from rlvr.runs.records import Row
from rlvr.training.backends import Policy
from rlvr.training.progress import phase
from rlvr.training.state import RunState, warm_policy_step
from rlvr.training.trends import best_eval


def checkpoint_path(policy: Policy, policy_step: int) -> Path | None:
    from art.utils.output_dirs import get_model_dir, get_step_checkpoint_dir

    path = Path(
        get_step_checkpoint_dir(
            get_model_dir(model=policy.model, art_path=policy.model.base_path), policy_step
        )
    )
    return path if path.is_dir() else None


async def keep_checkpoints(
    cfg: RunConfig, policy: Policy, state: RunState, run_dir: Path, rows: list[Row]
) -> None:
    """Name this evaluation's adapter in checkpoints/ and remove the copies the run no longer
    needs (`copies_kept`); the backend keeps only the adapters named below (ART's own checkpoint
    directory would grow every step)."""
    step = state.evals[-1].step
    source = checkpoint_path(policy, state.policy_steps[step])
    if source is not None:
        with phase(f"saving checkpoint {layout.step_name(step)}"):
            store.save_checkpoint(run_dir, source, layout.step_name(step))
    best = state.evals[best_eval(state.evals, cfg.stopping.min_delta)]
    keep_copies = copies_kept(saved_steps(run_dir), best.step, step, cfg.save_every)
    for old in set(saved_steps(run_dir)) - keep_copies:
        atomic.remove_dir(run_dir / layout.CHECKPOINTS / layout.step_name(old))
    # The start and the warm start stay too: the test split is evaluated for them at the end.
    warm = warm_policy_step(rows)
    keep = sorted(
        {await policy.model.get_step(), state.policy_steps[best.step], 0}
        | ({warm} if warm is not None else set())
    )
    await art_private.delete_checkpoints(policy.backend, policy.model, keep)


def copies_kept(saved: list[int], best: int, newest: int, save_every: int | None) -> set[int]:
    """The saved steps checkpoints/ keeps: the first (the start of RL), the best, the newest, and
    every `save_every`-th (None: no others)."""
    every = {s for s in saved if save_every is not None and s % save_every == 0}
    first = {min(saved)} if saved else set()
    return first | ({best, newest} & set(saved)) | every


def kept_line(evaluated: list[int], saved: list[int], save_every: int | None) -> str | None:
    """What checkpoints/ kept of the evaluated steps, where it removed some (said once, at the
    end of a run); None where it kept them all."""
    removed = sorted(set(evaluated) - set(saved))
    if not removed:
        return None
    names = ", ".join(layout.step_name(s) for s in saved)
    more = f"save_every={save_every}" if save_every is not None else "save_every=N"
    return (
        f"checkpoints: kept {names} and {layout.BEST} (the start of RL, the best, the newest); "
        f"removed the adapters of {len(removed)} other evaluations ({more} keeps every Nth)"
    )


def save_best(policy: Policy, policy_step: int, run_dir: Path) -> None:
    source = checkpoint_path(policy, policy_step)
    if source is not None:
        with phase(f"saving checkpoint {layout.BEST}"):
            store.save_checkpoint(run_dir, source, layout.BEST)


def policy_checkpoints(cfg: RunConfig, run_dir: Path) -> dict[int, Path]:
    """Policy step -> its checkpoint in the backend's own folder (the local backends'; none for
    a remote one, which keeps its checkpoints with the service)."""
    if cfg.backend not in ("local", "art-local"):
        return {}
    root = layout.policy_dir(run_dir, cfg.project) / "checkpoints"
    if not root.is_dir():
        return {}
    return {int(p.name): p for p in root.iterdir() if p.name.isdigit() and p.is_dir()}


def keep_optimizer_newest(cfg: RunConfig, run_dir: Path, policy_step: int) -> list[Path]:
    """Remove the optimizer's state from every checkpoint older than policy step `policy_step`
    (the newest a metrics row records, which a resume continues from), in the backend's folder
    and in checkpoints/ (whose files are hard links: a link to the newest's state costs nothing
    and stays). Only a resume reads that state, and it is most of a checkpoint's bytes. Returns
    the files removed."""
    steps = policy_checkpoints(cfg, run_dir)
    if not steps:  # a remote backend: checkpoints/ holds no optimizer state of its own
        return []
    kept = [
        steps[step] / OPTIMIZER_FILE
        for step in steps
        if step >= policy_step and (steps[step] / OPTIMIZER_FILE).is_file()
    ]
    older = [steps[step] / OPTIMIZER_FILE for step in steps if step < policy_step]
    copies = run_dir / layout.CHECKPOINTS
    linked = [p / OPTIMIZER_FILE for p in copies.iterdir()] if copies.is_dir() else []
    removed = []
    for path in [*older, *linked]:
        if path.is_file() and not any(os.path.samefile(path, keep) for keep in kept):
            path.unlink()
            removed.append(path)
    return removed


def optimizer_restart_line(cfg: RunConfig, run_dir: Path, policy_step: int) -> str | None:
    """What a resume from policy step `policy_step` says when that checkpoint keeps no optimizer
    state (an older step than the newest, which alone keeps it): the optimizer restarts."""
    checkpoint = policy_checkpoints(cfg, run_dir).get(policy_step)
    if policy_step == 0 or checkpoint is None or (checkpoint / OPTIMIZER_FILE).is_file():
        return None
    return (
        f"resuming from policy step {policy_step}, whose checkpoint keeps no optimizer state "
        "(only the newest does): the optimizer restarts, its moments from zero"
    )
