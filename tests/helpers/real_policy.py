"""One real rollout of an environment with the real SmolLM2-135M policy on a fresh LocalTorchBackend (for
the slow tier's "a real episode is well-formed" tests), and a sequence's log-probabilities computed
alone, the reference the trainer's shared passes are held to."""

from __future__ import annotations

import os
from pathlib import Path

import art
import torch

from rlvr.engine.backend import LocalTorchBackend
from rlvr.engine.models import resolve_model
from rlvr.types import Environment, Item, Sampling


async def real_rollout(
    environment: Environment, item: Item, sampling: Sampling, tmp_path: Path, name: str
) -> art.Trajectory:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = art.TrainableModel(
        name=name,
        project="rlvr-tests",
        base_model=str(resolve_model("smollm2-135m")),
        base_path=str(tmp_path),
    )
    backend = LocalTorchBackend(path=str(tmp_path))
    try:
        await model.register(backend)
        return await environment.rollout(model, item, sampling)
    finally:
        await backend.close()


def logprobs_alone(model: torch.nn.Module, sequence: list[int]) -> torch.Tensor:
    """Each token's log-probability after the tokens before it, the sequence alone in `model`."""
    logits = model(input_ids=torch.tensor([sequence])).logits[0]
    return torch.log_softmax(logits.float(), -1)[:-1].gather(
        -1, torch.tensor(sequence[1:])[:, None]
    )[:, 0]
