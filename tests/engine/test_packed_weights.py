"""Sampling's products over packed weights (rlvr.engine.packed_weights): the same results as the plain
product, used only where a probe agrees and nothing takes a gradient, and off on request.

Packing in bf16 needs a CPU with bf16 instructions; where the probe says it does not run, those
cases are skipped (and the engine samples with plain weights there, as the choice test checks)."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import ConfigError
from rlvr.engine import loaded_model as loaded_module
from rlvr.engine import packed_weights as packed_module
from rlvr.engine.merged_weights import MergedLinear, pack_frozen
from rlvr.engine.packed_weights import PACKED_ENV, pack, pack_head, packed_linear, packs
from tests.helpers.tiny_llama import tiny_llama

CPU = torch.device("cpu")


def runs_here(dtype: torch.dtype) -> bool:
    return packs(CPU, dtype)


@pytest.mark.parametrize(
    ("dtype", "rows", "tolerance"),
    [
        (torch.float32, 1, 1e-5),
        (torch.float32, 9, 1e-5),
        (torch.float32, 300, 1e-5),  # a prefill's rows, other than the layout's
        (torch.bfloat16, 9, 1e-2),
    ],
)
def test_a_packed_product_equals_the_plain_one(dtype, rows, tolerance) -> None:
    if not runs_here(dtype):
        pytest.skip(f"no packed {dtype} products on this CPU")
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(48, 40, generator=generator).to(dtype)
    bias = torch.randn(48, generator=generator).to(dtype)
    x = torch.randn(rows, 40, generator=generator)
    result = packed_linear(x, pack(weight), bias, dtype)
    assert result.dtype == dtype and result.shape == (rows, 48)
    plain = torch.nn.functional.linear(x.to(dtype), weight, bias)
    assert torch.allclose(result.float(), plain.float(), rtol=tolerance, atol=tolerance)


def test_a_packed_layer_answers_in_its_inputs_dtype_under_autocast() -> None:
    if not runs_here(torch.float32):
        pytest.skip("no packed products on this CPU")
    weight = torch.randn(8, 6)
    layer = MergedLinear(weight, None, packed=True)
    x = torch.randn(2, 6)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.float32  # computed in the weight's dtype, not autocast's
    assert torch.allclose(y, x @ weight.T, atol=1e-5)
    assert layer.nbytes == weight.numel() * 4


@pytest.mark.parametrize(
    ("env", "wanted"),
    [("", True), ("1", True), ("0", False)],
)
def test_packing_is_switched_off_by_the_environment(monkeypatch, env, wanted) -> None:
    monkeypatch.setenv(PACKED_ENV, env)
    assert packed_module.packing_wanted() is wanted
    if not wanted:
        assert not packs(CPU, torch.float32)


@pytest.mark.parametrize("env", ["yes", "off", "2"])
def test_an_unknown_packing_setting_is_refused_by_name(monkeypatch, env) -> None:
    monkeypatch.setenv(PACKED_ENV, env)
    with pytest.raises(ConfigError, match=f"{PACKED_ENV}='{env}': expected 0 or 1"):
        packs(CPU, torch.float32)


@pytest.mark.parametrize(
    ("device", "prefill", "sample", "probe", "expected"),
    [
        # A CPU with bf16 units (mixed): packed bf16 for prefill and decoding alike.
        ("cpu", torch.bfloat16, None, True, (torch.bfloat16, True)),
        # An AVX2-only CPU (fp32 throughout): packed fp32.
        ("cpu", None, None, True, (torch.float32, True)),
        # Where packing does not run: plain weights in the decode precision, as before.
        ("cpu", torch.bfloat16, None, False, (torch.float32, False)),
        ("cpu", torch.bfloat16, torch.bfloat16, False, (torch.bfloat16, False)),
        # A GPU never packs.
        ("cuda", torch.bfloat16, torch.bfloat16, True, (torch.bfloat16, False)),
    ],
)
def test_sampling_products_are_packed_only_where_the_probe_agrees(
    monkeypatch, device, prefill, sample, probe, expected
) -> None:
    monkeypatch.delenv(PACKED_ENV, raising=False)
    monkeypatch.setattr(packed_module, "_probe", lambda dtype: probe)
    assert loaded_module.sampling_products(torch.device(device), prefill, sample) == expected


def test_the_probe_says_no_where_the_kernel_refuses(monkeypatch) -> None:
    def refuses(weight: torch.Tensor, rows: int) -> torch.Tensor:
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support")

    packed_module._probe.cache_clear()
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuses)
    try:
        assert not packed_module._probe(torch.bfloat16)
    finally:
        packed_module._probe.cache_clear()


def test_a_packed_head_samples_fp32_logits_and_still_trains() -> None:
    if not runs_here(torch.float32):
        pytest.skip("no packed products on this CPU")
    model = tiny_llama(max_positions=64)
    ids = torch.randint(0, 64, (2, 5))
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    pack_head(model)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        sampled = model(input_ids=ids).logits
    assert sampled.dtype == torch.float32
    with torch.inference_mode():
        assert torch.allclose(model(input_ids=ids).logits, before, atol=1e-5)
    # With a gradient the plain head computes, so training back-propagates through it.
    hidden = torch.randn(2, 32, requires_grad=True)
    model.get_output_embeddings()(hidden).sum().backward()
    assert hidden.grad is not None and hidden.grad.abs().sum() > 0


def test_a_frozen_models_projections_are_packed_in_place_and_compute_the_same() -> None:
    if not runs_here(torch.float32):
        pytest.skip("no packed products on this CPU")
    model = tiny_llama(max_positions=64)
    ids = torch.randint(0, 64, (3, 7))
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    assert pack_frozen(model, torch.float32) == 2 * 7  # seven projections in each layer
    assert type(model.get_output_embeddings()) is torch.nn.Linear  # the head stays as it was
    assert not any(type(m) is torch.nn.Linear for m in model.model.layers.modules())
    with torch.inference_mode():
        assert torch.allclose(model(input_ids=ids).logits, before, atol=1e-5)
