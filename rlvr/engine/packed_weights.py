"""Sampling's matrix products over weights laid out once for the CPU's kernel (oneDNN).

A decode step multiplies a few rows (a token each) by every weight of the model. PyTorch's plain
CPU product re-lays out the weight for its kernel on every call, which at a few rows costs more
than the product itself; a weight packed once (`mkldnn._reorder_linear_weight`, what
torch.compile's CPU freezing uses) skips that, in the same precision. The packed kernel has no
backward, so only sampling (no gradient) uses it; training keeps the plain weights. Figures:
docs/results/performance.md.

Packing is used where a probe at first use agrees with the plain product (a CPU torch build with
oneDNN); RLVR_PACKED_WEIGHTS=0 turns it off.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import torch

from rlvr.config import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PACKED_ENV = "RLVR_PACKED_WEIGHTS"  # "0" samples with plain weights (to compare, or a fallback)
# The row count the layout is chosen for: a decode step's batch (any count computes the same).
LAYOUT_ROWS = 16


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` ([out, in]) laid out for oneDNN's product, in its own dtype."""
    packed: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(
        weight.detach().contiguous(), LAYOUT_ROWS
    )
    return packed


def packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """`x @ weight.T + bias` with a packed `dtype` weight, computed in `dtype` whatever autocast
    says (autocast casts only the ops it lists, and this kernel is not one); the result in
    `dtype`."""
    product: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
        x.to(dtype), packed, bias, "none", [], ""
    )
    return product


@functools.cache
def _probe(dtype: torch.dtype) -> bool:
    """Whether packed products in `dtype` run here (a torch build with oneDNN, a CPU with the
    dtype's instructions) and agree with the plain product."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 40, generator=generator).to(dtype)
    x = torch.randn(3, 40, generator=generator).to(dtype)
    try:
        packed = packed_linear(x, pack(weight), None, dtype)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    plain = torch.nn.functional.linear(x, weight)
    return torch.allclose(packed.float(), plain.float(), rtol=2e-2, atol=2e-2)


def packing_wanted() -> bool:
    """RLVR_PACKED_WEIGHTS: unset or 1 packs where it works, 0 never."""
    value = os.environ.get(PACKED_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"{PACKED_ENV}={value!r}: expected 0 or 1 (or unset)")
    return value != "0"


def packs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether sampling's products on `device` in `dtype` use packed weights."""
    return device.type == "cpu" and packing_wanted() and _probe(dtype)


def pack_head(model: PreTrainedModel) -> None:
    """Give `model`'s LM head a packed fp32 copy for passes without a gradient (sampling);
    a pass with one (training) computes as before. Logits stay fp32 either way. The head is
    frozen (LoRA adapts the projections), so the copy never goes stale; it costs the head's
    size once (its weight is usually tied to the input embeddings, which keep theirs)."""
    head: torch.nn.Module = model.get_output_embeddings()
    own = dict(head.named_parameters(recurse=False))
    packed = pack(own["weight"].float())
    bias = own["bias"].detach().float() if "bias" in own else None
    forward = head.forward

    def sampled_or_trained(hidden: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            result: torch.Tensor = forward(hidden)
            return result
        return packed_linear(hidden, packed, bias, torch.float32)

    head.forward = sampled_or_trained
