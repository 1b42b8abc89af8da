"""Sampling from merged weights (rlvr.engine.merged_weights, the adapter store's merged sets).

The fast tests build a tiny Llama (random weights, no download) with a real PEFT LoRA adapter; the
slow one samples the tiny model directory (SmolLM2's vocabulary) through the engine, merged and
unmerged: which weights a decoder samples is the engine's claim, whatever the model says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.merged_weights import MERGED_KEPT, MergedLinear, merge
from rlvr.engine.packed_weights import packs
from rlvr.engine.trainer import Trainer
from rlvr.engine.types import LIVE_ADAPTER, OptimSettings, UnknownStep
from rlvr.engine.weights import WeightsTag
from tests.helpers.tiny_llama import adapter_store, perturb, tiny_loaded
from tests.helpers.tiny_runs import tiny_model_path


def logits(loaded: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model(input_ids=ids).logits


@pytest.mark.parametrize("packed", [False, True])
def test_merged_layers_compute_what_the_lora_layers_compute(packed) -> None:
    if packed and not packs(torch.device("cpu"), torch.float32):
        pytest.skip("no packed products on this CPU")
    loaded = tiny_loaded()
    perturb(loaded)
    ids = torch.randint(0, 64, (3, 10))
    unmerged = logits(loaded, ids)
    parameters = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    merged = merge(loaded.model, LIVE_ADAPTER, torch.float32, packed)
    assert len(merged.swaps) == 2 * 7  # every projection of both layers
    with merged.applied():
        assert any(isinstance(m, MergedLinear) for m in loaded.model.modules())
        inside = logits(loaded, ids)
    assert not any(isinstance(m, MergedLinear) for m in loaded.model.modules())  # swapped back
    assert torch.allclose(inside, unmerged, atol=1e-5)
    assert not torch.allclose(inside, logits_without_adapter(loaded, ids), atol=1e-3)
    # Nothing trained was touched by the merge or the pass.
    for name, parameter in loaded.model.named_parameters():
        assert torch.equal(parameter, parameters[name]), name


@pytest.mark.parametrize("transposed", [False, True], ids=["fused", "fan-in-fan-out"])
def test_a_merged_weight_is_the_base_plus_pefts_own_delta(transposed) -> None:
    """The merge folds s * B @ A into W in one product; a layer that stores its weight transposed
    (`fan_in_fan_out`, flagged here on the square projections, where either sum is defined) goes
    through PEFT's `get_delta_weight`. Every layer's merged weight is PEFT's."""
    from peft.tuners.lora import Linear as LoraLinear

    loaded = tiny_loaded()
    perturb(loaded)
    layers = [m for m in loaded.model.modules() if isinstance(m, LoraLinear)]
    for layer in layers:
        weight = layer.get_base_layer().weight
        layer.fan_in_fan_out = transposed and weight.shape[0] == weight.shape[1]
    assert any(layer.fan_in_fan_out for layer in layers) == transposed
    with torch.no_grad():
        expected = [m.get_base_layer().weight + m.get_delta_weight(LIVE_ADAPTER) for m in layers]
        merged = merge(loaded.model, LIVE_ADAPTER, torch.float32, packed=False)
    assert len(merged.swaps) == len(layers)
    for swap, weight in zip(merged.swaps, expected, strict=True):
        assert torch.allclose(swap.merged.weight, weight, rtol=0, atol=1e-6)


def logits_without_adapter(loaded: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    with loaded.model.disable_adapter():
        return logits(loaded, ids)


def test_a_merged_set_holds_the_targeted_weights_in_the_sampling_precision() -> None:
    from peft.tuners.lora import Linear as LoraLinear

    loaded = tiny_loaded()
    targeted = sum(
        m.get_base_layer().weight.numel()
        for m in loaded.model.modules()
        if isinstance(m, LoraLinear)
    )
    for dtype, size in [(torch.float32, 4), (torch.bfloat16, 2)]:
        assert merge(loaded.model, LIVE_ADAPTER, dtype, False).nbytes == size * targeted
        if packs(torch.device("cpu"), dtype):  # packed bf16 needs bf16 instructions
            assert merge(loaded.model, LIVE_ADAPTER, dtype, True).nbytes == size * targeted


def test_the_live_set_is_merged_once_per_weights_version(tmp_path: Path) -> None:
    loaded = tiny_loaded()
    adapters = adapter_store(loaded, tmp_path)
    first = adapters.view(None)
    assert first.tag == WeightsTag("live", 0) and first.merged is not None
    assert adapters.view(0).merged is first.merged  # the live step by number: the same set
    perturb(loaded)
    adapters.changed()  # what every optimizer step calls
    second = adapters.view(None)
    assert second.tag == WeightsTag("live", 1) and second.merged is not first.merged
    ids = torch.randint(0, 64, (2, 6))
    with second.applied():
        now = logits(loaded, ids)
    assert torch.allclose(now, logits(loaded, ids), atol=1e-5)  # the new weights, merged
    with first.applied():  # a pass that began before the step finishes on what it began with
        before = logits(loaded, ids)
    assert not torch.allclose(before, now, atol=1e-3)


def test_older_steps_are_merged_from_their_checkpoints_one_set_kept_at_a_time(
    tmp_path: Path,
) -> None:
    from rlvr.engine.types import OPTIMIZER_FILE

    loaded = tiny_loaded()
    adapters = adapter_store(loaded, tmp_path)
    trainer = Trainer(loaded, adapters, OptimSettings())
    ids = torch.randint(0, 64, (2, 6))
    served = {}
    for step in range(3):
        perturb(loaded)
        adapters.changed()
        trainer.save_step(step)
        served[step] = logits(loaded, ids)
    assert (adapters.checkpoint_dir(0) / OPTIMIZER_FILE).is_file()
    live = adapters.view(None).merged
    for step in (0, 1):
        view = adapters.view(step)
        assert view.tag == WeightsTag("step", step)
        with view.applied():
            assert torch.allclose(logits(loaded, ids), served[step], atol=1e-5)
    size = adapters.view(0).merged.nbytes
    assert MERGED_KEPT == 1 and adapters.merged_bytes == size  # the live set was evicted:
    assert adapters.view(None).merged is not live  # merged again when asked
    assert [n for n, _ in loaded.model.named_parameters() if "step" in n] == []  # none left
    with pytest.raises(UnknownStep, match="step 7 has no checkpoint"):
        adapters.view(7)
    adapters.forget()
    assert adapters.merged_bytes == size  # the live set only


def test_unmerged_views_sample_the_adapter_through_peft(tmp_path: Path) -> None:
    loaded = tiny_loaded()
    view = adapter_store(loaded, tmp_path, merge=False).view(None)
    assert view.merged is None
    assert adapter_store(loaded, tmp_path).view(None).merged is not None


# --- slow: the real model --------------------------------------------------------------------


@pytest.mark.slow
def test_merged_and_unmerged_sampling_give_the_same_greedy_tokens(tmp_path: Path) -> None:
    """The tiny model with a non-trivial adapter (fp32): the decoder (merged) and a decoder
    over the same model through PEFT's LoRA layers pick the same greedy tokens with the same
    log-probabilities, and both differ from the base weights'."""
    from rlvr.engine.decoding import Decoder
    from rlvr.engine.lora_engine import Engine
    from rlvr.engine.types import SampleRow
    from rlvr.engine.weights import BaseWeights

    engine = Engine(tiny_model_path(), tmp_path / "model", precision="fp32")
    perturb(engine.loaded, scale=0.02)
    engine.adapters.changed()
    unmerged = Decoder(engine.loaded, adapter_store(engine.loaded, tmp_path / "model", merge=False))
    base = Decoder(engine.loaded.wrapped(engine.loaded.model.get_base_model()), BaseWeights())
    prompts = ["Name three rivers.", "What is 12 times 3?", "Write a haiku about snow."]
    rows = [
        SampleRow(
            prompt_ids=engine.loaded.tokenizer.apply_chat_template(
                [{"role": "user", "content": p}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            ),
            max_tokens=16,
            temperature=0.0,
        )
        for p in prompts
    ]
    merged_out = engine.decoder.sample(rows)
    unmerged_out = unmerged.sample(rows)
    with engine.loaded.model.disable_adapter():
        base_out = base.sample(rows)
    for merged, plain in zip(merged_out, unmerged_out, strict=True):
        assert merged.token_ids == plain.token_ids
        # the tiny model's log-probabilities lie close together: a tight bound, to fp32 rounding
        assert merged.logprobs == pytest.approx(plain.logprobs, abs=1e-5)
    assert [s.token_ids for s in merged_out] != [s.token_ids for s in base_out]
    assert engine.adapters.merged_bytes > 0
