"""The run's checkpoints: which the backend keeps, which are copied into checkpoints/, and which
the test split is evaluated for."""

from __future__ import annotations

from pathlib import Path

from rlvr import art_private
from rlvr.config import RunConfig
from rlvr.runs import layout, store
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
    """Copy this evaluation's adapter into checkpoints/ every save_every steps; the backend keeps
    only its latest and best adapters (ART's own checkpoint directory would grow every step)."""
    step = state.evals[-1].step
    source = checkpoint_path(policy, state.policy_steps[step])
    if source is not None and step % cfg.save_every == 0:
        with phase(f"saving checkpoint {layout.step_name(step)}"):
            store.save_checkpoint(run_dir, source, layout.step_name(step))
    best = state.evals[best_eval(state.evals, cfg.stopping.min_delta)]
    # The start and the warm start stay too: the test split is evaluated for them at the end.
    warm = warm_policy_step(rows)
    keep = sorted(
        {await policy.model.get_step(), state.policy_steps[best.step], 0}
        | ({warm} if warm is not None else set())
    )
    await art_private.delete_checkpoints(policy.backend, policy.model, keep)


def save_best(policy: Policy, policy_step: int, run_dir: Path) -> None:
    source = checkpoint_path(policy, policy_step)
    if source is not None:
        with phase(f"saving checkpoint {layout.BEST}"):
            store.save_checkpoint(run_dir, source, layout.BEST)
