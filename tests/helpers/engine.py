"""Driving the engine's parts as the scheduler and ART do: rows joining a live decode batch step by
step, and a model registered with the local backend."""

from __future__ import annotations

import art
import torch

from rlvr.engine.backend import LocalTorchBackend
from rlvr.engine.decoding import Decoder
from rlvr.engine.models import DEFAULT_MODEL
from rlvr.engine.types import SampleRow


def continuous(decoder: Decoder, arrivals: dict[int, list[SampleRow]]) -> list[list[int]]:
    """Decode rows arriving at the given steps, joined into one live batch as the scheduler
    joins them; each row's tokens, in arrival order."""
    view = decoder.weights.view(None)
    order = [row for step in sorted(arrivals) for row in arrivals[step]]
    done: dict[int, list[int]] = {}
    with torch.inference_mode(), view.applied():
        live = None
        states = []
        step = 0
        while step <= max(arrivals) or live is not None:
            if step in arrivals:
                newcomers = [decoder.new_state(row) for row in arrivals[step]]
                states += newcomers
                live = decoder.join(live, decoder.admit(newcomers, view))
            if live is not None:
                live, left = decoder.retire(live)
                for state in left:
                    done[states.index(state)] = state.ids
            if live is not None:
                decoder.advance(live)
            step += 1
    return [done[i] for i in range(len(order))]


async def registered(
    backend: LocalTorchBackend, name: str, base_model: str = DEFAULT_MODEL
) -> art.TrainableModel:
    """`name` registered on `backend`: the real model, or `base_model` (a model directory: the
    tiny one, tests/helpers/tiny_runs.py `tiny_model_path`, where the claim is the engine's)."""
    model = art.TrainableModel(name=name, project="tests", base_model=base_model)
    await model.register(backend)
    return model
