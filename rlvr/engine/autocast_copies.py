"""Frozen weights kept once in autocast's dtype.

Under autocast a linear layer casts its fp32 weight to bf16 on every call. PyTorch keeps such a
cast for the rest of the autocast region only for weights that require a gradient, so the frozen
base weights under the LoRA layers (all seven projections of every layer) are cast again by every
training forward: a packed row computed in two passes casts all ~106M of SmolLM2-135M's projection
weights twice, and a gradient-checkpointed row once more in backward. A bf16 copy made once and
used wherever autocast asks for bf16 computes exactly the same numbers (the cast is the same
rounding), and phases that run in fp32 keep the fp32 weight, which merging and checkpoints use.
"""

from __future__ import annotations

from typing import Any

import torch


def lower_frozen(model: Any, dtype: torch.dtype) -> int:
    """Give the frozen base layer of every LoRA layer in PeftModel `model` a `dtype` copy of its
    weight, used when autocast computes in `dtype` (its fp32 weight otherwise); how many."""
    from peft.tuners.lora import Linear as LoraLinear

    bases = [
        base
        for m in model.modules()
        if isinstance(m, LoraLinear) and isinstance(base := m.get_base_layer(), torch.nn.Linear)
    ]
    for base in bases:
        _use_copy_under_autocast(base, dtype)
    return len(bases)


def _use_copy_under_autocast(layer: torch.nn.Linear, dtype: torch.dtype) -> None:
    low = layer.weight.detach().to(dtype)
    forward = layer.forward
    module: torch.nn.Module = layer

    def lowered_or_own(x: torch.Tensor) -> torch.Tensor:
        kind = x.device.type
        if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == dtype:
            result: torch.Tensor = torch.nn.functional.linear(x, low, layer.bias)
            return result
        own: torch.Tensor = forward(x)
        return own

    module.forward = lowered_or_own
