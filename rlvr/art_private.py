"""Every call rlvr makes into ART's private API, in one place, so an ART upgrade that moves one
breaks here and only here (pinned: openpipe-art 0.5.18, see requirements.lock).

- `delete_checkpoints`: `Backend._delete_checkpoint_files`, which LocalBackend, TinkerBackend and
  rlvr's TorchBackend implement (ART's public `model.delete_checkpoints` keeps only the best by a
  metric name, not the checkpoints a run names).
- `train_sft`: `Backend._train_sft`, the path of ART's public `model.train_sft`, which takes
  trajectories and yields per-batch metrics without logging them as a training step.
- `build_rl_train_configs`: how ART's backends turn `train()` keyword arguments into its
  TrainConfig/dev config (the loss options), reused so rlvr's backend reads them the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import art
from art._backend_training import build_rl_train_configs

__all__ = ["build_rl_train_configs", "delete_checkpoints", "train_sft"]


async def delete_checkpoints(backend: Any, model: art.TrainableModel, keep: list[int]) -> None:
    """Delete the model's checkpoints except the steps in `keep`."""
    await backend._delete_checkpoint_files(model, keep)


def train_sft(
    model: art.TrainableModel, trajectories: Iterable[art.Trajectory], config: Any
) -> AsyncIterator[dict[str, float]]:
    """Supervised steps on `trajectories` through the model's backend; per-batch metrics."""
    return model.backend()._train_sft(model, trajectories, config, {})
