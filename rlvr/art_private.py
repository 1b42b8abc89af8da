"""Every call rlvr makes into ART's private API, in one place, so an ART upgrade that moves one
breaks here and only here (pinned: openpipe-art 0.5.18, see requirements.lock).

- `delete_checkpoints`: `Backend._delete_checkpoint_files`, which LocalBackend, TinkerBackend and
  rlvr's LocalTorchBackend implement (ART's public `model.delete_checkpoints` keeps only the best by a
  metric name, not the checkpoints a run names).
- `train_sft`: `Backend._train_sft`, the path of ART's public `model.train_sft`, which takes
  trajectories and yields per-batch metrics without logging them as a training step.
- `build_rl_train_configs`: how ART's backends turn `train()` keyword arguments into its
  RunConfig/dev config (the loss options), reused so rlvr's backend reads them the same way.
- `gather_groups`: ART's `gather_trajectory_groups` without its tqdm bar (its gather context,
  group wrapping and exception accounting, as they are), so a run shows its own progress: a bar
  in a terminal, one line per step when piped, never carriage-return updates in a log.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import art
from art._backend_training import build_rl_train_configs
from art.gather import GatherContext, set_gather_context, wrap_group_awaitable

__all__ = ["build_rl_train_configs", "delete_checkpoints", "gather_groups", "train_sft"]

ART_DELETED_CHECKPOINT = "Deleted checkpoint "  # how ART's delete_checkpoints says each deletion


async def delete_checkpoints(
    backend: art.Backend, model: art.TrainableModel[Any, Any], keep: list[int]
) -> None:
    """Delete the model's checkpoints except the steps in `keep`. ART prints a line for each
    (`Deleted checkpoint .art/...`, art/local/checkpoints.py), a path in its own store that the
    run's output never names: those lines are dropped, anything else printed meanwhile is
    written out after."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            await backend._delete_checkpoint_files(model, keep)
    finally:
        lines = printed.getvalue().splitlines(keepends=True)
        sys.stdout.write("".join(x for x in lines if not x.startswith(ART_DELETED_CHECKPOINT)))


def train_sft(
    model: art.TrainableModel[Any, Any],
    trajectories: Iterable[art.Trajectory],
    config: art.TrainSFTConfig,
) -> AsyncIterator[dict[str, float]]:
    """Supervised steps on `trajectories` through the model's backend; per-batch metrics."""
    return model.backend()._train_sft(model, trajectories, config, {})


async def gather_groups(
    groups: Iterable[Awaitable[art.TrajectoryGroup]],
    after_each: Callable[[art.TrajectoryGroup], Awaitable[art.TrajectoryGroup]],
    max_exceptions: int,
) -> list[art.TrajectoryGroup]:
    """ART's gather of trajectory groups with no progress bar: each group's trajectories are
    awaited with ART's exception accounting (a rollout that raises is recorded on its group, up
    to `max_exceptions`), then `after_each` runs on it as soon as it is done."""

    async def forward(group: Awaitable[art.TrajectoryGroup]) -> art.TrajectoryGroup | None:
        gathered = await wrap_group_awaitable(group)
        return None if gathered is None else await after_each(gathered)

    with set_gather_context(GatherContext(pbar=None, max_exceptions=max_exceptions)):
        done = await asyncio.gather(*(forward(g) for g in groups))
    return [g for g in done if g is not None]
