"""Frozen base weights kept once in bf16 (rlvr.engine.autocast_copies) give bit for bit what autocast's
per-call cast gives, forward and backward, and leave fp32 passes on the fp32 weights."""

from __future__ import annotations

import pytest
import torch

from rlvr.engine.autocast_copies import lower_frozen
from rlvr.engine.device import run_head_in_fp32
from tests.helpers.tiny_llama import perturb, tiny_loaded


def forward_backward(model, ids: torch.Tensor, autocast: bool) -> tuple[torch.Tensor, list]:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits
    (logits.float() * torch.linspace(0.5, 1.5, logits.shape[-1])).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return logits.detach(), grads


@pytest.mark.parametrize("autocast", [True, False], ids=["bf16-autocast", "fp32"])
def test_lowered_weights_compute_exactly_what_autocast_computes(autocast: bool) -> None:
    loaded = tiny_loaded()
    perturb(loaded)  # a non-zero adapter, so the LoRA path takes part
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    before, before_grads = forward_backward(loaded.model, ids, autocast)
    fp32_weights = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    assert lower_frozen(loaded.model, torch.bfloat16) == 2 * 7  # every projection of both layers
    after, after_grads = forward_backward(loaded.model, ids, autocast)
    assert before.dtype == after.dtype
    assert torch.equal(before, after)
    assert len(before_grads) == len(after_grads) > 0
    assert all(torch.equal(a, b) for a, b in zip(before_grads, after_grads, strict=True))
    for name, parameter in loaded.model.named_parameters():  # the fp32 weights are untouched
        assert parameter.dtype == torch.float32 and torch.equal(parameter, fp32_weights[name])


def weight_casts(model, ids: torch.Tensor) -> int:
    """Casts of a frozen projection weight in one bf16-autocast forward (profiled)."""
    shapes = {tuple(p.shape) for n, p in model.named_parameters() if "base_layer.weight" in n}
    with (
        torch.profiler.profile(record_shapes=True) as profile,
        torch.autocast("cpu", dtype=torch.bfloat16),
    ):
        model(input_ids=ids)
    return sum(
        1
        for event in profile.events()
        if event.name == "aten::_to_copy" and tuple(event.input_shapes[0]) in shapes
    )


def test_a_lowered_model_casts_no_frozen_weight_per_forward() -> None:
    loaded = tiny_loaded()
    run_head_in_fp32(loaded.model)  # as the engine loads it wherever a phase is bf16
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    assert weight_casts(loaded.model, ids) >= 2 * 7  # autocast casts each one, every call
    lower_frozen(loaded.model, torch.bfloat16)
    assert weight_casts(loaded.model, ids) == 0
