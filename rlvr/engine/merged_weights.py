"""Sampling from merged weights: each LoRA-targeted linear layer computed as one matrix product.

A LoRA layer computes `W x + s * B (A x)`: two extra small products per layer and token, which cost
a CPU decode step most of the base model's time again. A policy's weights change once per
optimizer step and every rollout of that step samples the same ones, so the decoder folds them
once per weights version into `W + s * B @ A` and computes with that.

A `MergedSet` holds, for every targeted layer of one adapter, a plain linear layer with the merged
weight in sampling's precision (`LoadedModel.products_dtype`), on a CPU packed for its kernel
(rlvr.engine.packed_weights). `applied()` swaps those
layers into the model in place of PEFT's LoRA layers for one sampling pass and swaps PEFT's back
afterwards: a reference swap under the engine's lock. The trained weights (W, A, B) are never
touched, so training and checkpoints see exactly what they saw before, and nothing drifts.

Memory: a merged set is about the size of the targeted projections in sampling's precision
(SmolLM2-135M with all seven projections of every layer targeted: ~106M weights, ~425 MB in fp32,
half in bf16); the adapter store keeps MERGED_KEPT of them (rlvr.engine.adapters).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch

from rlvr.engine.packed_weights import pack, packed_linear

# Merged sets kept at once: one. A run's own sampling is all on the live weights until its final
# test block, which evaluates the best and the last checkpoint one after the other: a second set
# kept there raises its peak memory to save a re-merge of about a second
# (docs/concepts/cpu-engine.md, Memory). Requests that alternate between two checkpoints merge at each switch.
MERGED_KEPT = 1


class MergedLinear(torch.nn.Module):
    """A linear layer over given tensors (no parameters: nothing here is trained). A packed one
    (rlvr.engine.packed_weights) computes in its weight's dtype and answers in its input's."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, packed: bool) -> None:
        super().__init__()
        self.dtype = weight.dtype
        self.nbytes = weight.numel() * weight.element_size()
        self.packed = packed
        self.weight = pack(weight) if packed else weight
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            return packed_linear(x, self.weight, self.bias, self.dtype).to(x.dtype)
        return torch.nn.functional.linear(x, self.weight, self.bias)


class Swap(NamedTuple):
    """One layer's place in the model: `parent.name` holds `lora`, or `merged` during a pass."""

    parent: torch.nn.Module
    name: str
    lora: torch.nn.Module
    merged: MergedLinear


class MergedSet:
    """The merged layers of one adapter at one weights version."""

    def __init__(self, swaps: list[Swap]) -> None:
        self.swaps = swaps

    @property
    def nbytes(self) -> int:
        return sum(s.merged.nbytes for s in self.swaps)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The model computes with the merged layers inside (the caller holds the lock).

        The swap writes the parents' module tables directly: `Module.__setattr__`'s checks cost
        ten times as much, twice for every layer of every decode step."""
        for swap in self.swaps:
            swap.parent._modules[swap.name] = swap.merged
        try:
            yield
        finally:
            for swap in self.swaps:
                swap.parent._modules[swap.name] = swap.lora


def _merged_layer(layer: Any, adapter: str, dtype: torch.dtype, packed: bool) -> MergedLinear:
    """`layer`'s weight with `adapter` folded in (s * B @ A, PEFT's delta), cast to `dtype`
    (and packed)."""
    if adapter in layer.lora_variant:
        raise ValueError(
            f"adapter {adapter!r} is not plain LoRA ({type(layer.lora_variant[adapter]).__name__}):"
            " the engine samples only plain LoRA adapters merged"
        )
    base = layer.get_base_layer()
    a, b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
    if layer.fan_in_fan_out or a.dtype != base.weight.dtype:  # PEFT transposes or casts it
        weight = base.weight + layer.get_delta_weight(adapter)
    else:
        # One pass over the weight (W + s * B @ A in the product's epilogue) instead of PEFT's
        # three (the product, its scaling, the sum): a third of the memory traffic.
        weight = torch.addmm(base.weight, b, a, alpha=layer.scaling[adapter])
    weight = weight.to(dtype)
    bias = base.bias
    if bias is not None and layer.lora_bias[adapter]:
        bias = bias + layer.lora_B[adapter].bias * layer.scaling[adapter]
    return MergedLinear(weight, None if bias is None else bias.to(dtype), packed)


def merge(model: torch.nn.Module, adapter: str, dtype: torch.dtype, packed: bool) -> MergedSet:
    """The merged set of `adapter` (loaded in PeftModel `model`) in `dtype`, packed or not."""
    from peft.tuners.lora import Linear as LoraLinear

    swaps = []
    with torch.no_grad():
        for path, layer in model.named_modules():
            if isinstance(layer, LoraLinear) and adapter in layer.lora_A:
                parent_path, _, name = path.rpartition(".")
                parent = model.get_submodule(parent_path)
                swaps.append(
                    Swap(parent, name, layer, _merged_layer(layer, adapter, dtype, packed))
                )
    return MergedSet(swaps)


def pack_frozen(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Replace every linear layer of a model that is never trained, but its LM head, by a packed
    one over its own weight in `dtype` (the plain weight is freed); how many were replaced."""
    head = model.get_output_embeddings()  # type: ignore[operator]
    found = [
        (path, layer)
        for path, layer in model.named_modules()
        if type(layer) is torch.nn.Linear and layer is not head
    ]
    with torch.no_grad():
        for path, layer in found:
            parent_path, _, name = path.rpartition(".")
            bias = None if layer.bias is None else layer.bias.to(dtype)
            setattr(
                model.get_submodule(parent_path),
                name,
                MergedLinear(layer.weight.to(dtype), bias, packed=True),
            )
    return len(found)
