"""Numerics in both precisions the engine runs: fp32 and bf16 autocast, whatever this CPU has.

The rest of the suite runs at the machine's automatic precision, with exactness tests of the
serving and training logic pinned to fp32; here the precisions run explicitly, so fp32 is covered
on CPUs with bf16 units too. On a CPU without them the engine runs fp32 and bf16 is emulated by
naive kernels, many times slower: there the bf16 and mixed steps are in the `full` tier
(`make test-all`), and `make test` checks them only on CPUs with bf16 units. The bound that
matters is the one PPO's ratio feels: the k3 KL between the sampler's log-probabilities (merged
weights) and the trainer's (the adapter's own layers) for the same tokens at step 1
(`train/sampler_kl`); docs/results/performance.md has the measured figures. `mixed` (bf16
training, fp32 sampling: the automatic choice on CPUs with bf16 units) is measured beside them.

The step here is the smallest that still runs every path (one group of 4 rollouts: sampling,
packing, loss, update), of 16 tokens each, or 8 where bf16 is emulated.
"""

from __future__ import annotations

import asyncio
import math

import art
import pytest
import pytest_asyncio
import torch

from rlvr.engine.backend import LocalTorchBackend, pack_groups
from rlvr.engine.decoding import as_decoded
from rlvr.engine.device import _cpu_has_native_bf16, choose_autocast, native_bf16, run_head_in_fp32
from rlvr.engine.models import DEFAULT_MODEL
from rlvr.engine.trainer import (
    _trimmed,
    sequences_of,
    trained_positions,
)
from rlvr.engine.types import PRECISION_ENV
from tests.helpers.real_policy import logprobs_alone

# Upper bounds on step-1 `train/sampler_kl` (k3, per sampled token), with margin over what was measured:
# 4 × 16 sampled tokens make the bf16 figures vary from sample to sample
# (docs/results/performance.md).
KL_BOUND = {"fp32": 1e-5, "bf16": 2e-3, "mixed": 4e-3}
# The same log-probabilities from the tree of a step's sequences (other matrix shapes than each
# sequence alone: bf16 rounds them differently): bounds on the mean and the largest gap over the
# trained tokens (the largest is the tail of bf16 rounding over a few dozen sampled tokens, so it
# varies from sample to sample).
TREE_GAP = {"fp32": (1e-5, 1e-4), "bf16": (0.05, 0.5), "mixed": (0.05, 0.5)}


def sampled_tokens(precision: str) -> int:
    """Tokens a rollout samples: 16, or 8 where this precision trains in emulated bf16."""
    return 8 if precision != "fp32" and not _cpu_has_native_bf16() else 16


@pytest.mark.parametrize(
    ("precision", "env", "phase", "expected"),
    [
        ("fp32", "bf16", "train", None),  # an explicit choice wins over the environment
        ("bf16", "fp32", "sample", torch.bfloat16),
        (None, "bf16", "sample", torch.bfloat16),  # the environment wins over the hardware
        (None, "fp32", "train", None),
        (None, "BF16", "train", torch.bfloat16),
        (None, "mixed", "train", torch.bfloat16),  # mixed: bf16 training ...
        (None, "mixed", "sample", None),  # ... fp32 decoding ...
        (None, "mixed", "prefill", torch.bfloat16),  # ... bf16 prefill
        ("mixed", "fp32", "train", torch.bfloat16),
    ],
)
def test_the_precision_is_chosen_explicitly_then_by_environment(
    monkeypatch, precision, env, phase, expected
) -> None:
    monkeypatch.setenv(PRECISION_ENV, env)
    assert choose_autocast(torch.device("cpu"), precision, phase) == expected


@pytest.mark.parametrize("env", ["fp16", "bfloat16", "auto"])
def test_an_unknown_precision_is_refused_by_name(monkeypatch, env) -> None:
    monkeypatch.setenv(PRECISION_ENV, env)
    with pytest.raises(ValueError, match=f"{PRECISION_ENV}='{env}': expected fp32, bf16 or mixed"):
        choose_autocast(torch.device("cpu"))


@pytest.mark.parametrize(("bf16_units", "train"), [(True, torch.bfloat16), (False, None)])
def test_a_cpu_decodes_in_fp32_and_trains_and_prefills_in_bf16_only_with_bf16_units(
    monkeypatch, bf16_units, train
) -> None:
    """The automatic choice, per phase, on both kinds of CPU (whatever this one is)."""
    from rlvr.engine import device

    monkeypatch.delenv(PRECISION_ENV, raising=False)
    monkeypatch.setattr(device, "_cpu_has_native_bf16", lambda: bf16_units)
    assert choose_autocast(torch.device("cpu"), None, "sample") is None
    assert choose_autocast(torch.device("cpu"), None, "train") == train
    assert choose_autocast(torch.device("cpu"), None, "prefill") == train


@pytest.mark.parametrize(
    ("flags", "kernels", "native"),
    [
        ("fpu avx2 avx512f avx512_bf16", "AVX512", True),  # AVX512-BF16 (an EPYC)
        ("fpu avx2 avx512f amx_bf16 amx_tile", "AVX512", True),  # AMX (a Xeon)
        ("fpu avx2 avx512f avx512_bf16", "AVX2", False),  # torch held to AVX2 kernels
        ("fpu avx2 avx512f", "AVX512", False),  # AVX-512 without bf16 units
        ("fpu avx2 fma", "AVX2", False),  # AVX2 only
    ],
)
def test_bf16_is_native_only_with_bf16_units_and_kernels_that_use_them(
    flags, kernels, native
) -> None:
    assert native_bf16(flags, kernels) is native


@pytest.mark.parametrize(
    ("keys", "values"),
    [
        (torch.float32, torch.bfloat16),
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.float32),
    ],
    ids=["rotary-promoted-keys", "all-bf16", "already-fp32"],
)
def test_a_cache_prefilled_in_bf16_is_decoded_from_in_fp32(keys, values) -> None:
    """Under bf16 autocast the keys come out of the rotary embedding in fp32 and the values in
    bf16; decoding in fp32 continues from one dtype."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    cache.update(torch.randn(1, 3, 5, 8).to(keys), torch.randn(1, 3, 5, 8).to(values), 0)
    before = cache.layers[0].keys.float(), cache.layers[0].values.float()
    as_decoded(cache, torch.float32)
    layer = cache.layers[0]
    assert layer.keys.dtype == layer.values.dtype == torch.float32
    assert torch.equal(layer.keys, before[0]) and torch.equal(layer.values, before[1])


def test_the_head_computes_fp32_logits_under_bf16_autocast() -> None:
    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(8, 32, bias=False)

        def get_output_embeddings(self) -> torch.nn.Module:
            return self.head

    model = Tiny()
    hidden = torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.head(hidden).dtype == torch.bfloat16
        run_head_in_fp32(model)
        logits = model.head(hidden)
    assert logits.dtype == torch.float32
    assert torch.equal(logits, hidden @ model.head.weight.T)


# bf16 where the CPU emulates it: checked by `make test-all` (see the module's docstring).
EMULATED = () if _cpu_has_native_bf16() else (pytest.mark.full,)


@pytest_asyncio.fixture(
    scope="module",
    loop_scope="module",
    params=["fp32", *(pytest.param(p, marks=EMULATED) for p in ("bf16", "mixed"))],
)
async def trained(request, tmp_path_factory):
    """One real GRPO step at each precision, on rollouts sampled from a non-trivial adapter (a
    fresh one adds nothing: merged, it is the base): (precision, engine, groups, its metrics)."""
    precision = request.param
    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")), precision=precision)
    model = art.TrainableModel(name=f"p-{precision}", project="tests", base_model=DEFAULT_MODEL)
    torch.manual_seed(0)  # the fresh adapter's A matrices: the same step every run
    await model.register(backend)
    engine = backend.engine(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad(), engine.loaded.lock:  # an adapter that changes what is sampled
        for name, parameter in engine.loaded.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.02, generator=generator)
        engine.adapters.changed()
    tokens = sampled_tokens(precision)
    groups = [await _group(model, "Name a planet and describe it.", [0, 1, 2, 3], tokens)]
    result = await backend.train(model, groups, learning_rate=1e-4)
    yield precision, engine, groups, result.metrics
    await backend.close()


async def _group(
    model: art.TrainableModel, question: str, seeds: list[int], max_tokens: int
) -> art.TrajectoryGroup:
    messages = [{"role": "user", "content": question}]

    async def one(seed: int) -> art.Trajectory:
        response = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            logprobs=True,
            temperature=1.0,
            max_tokens=max_tokens,
            seed=seed,
        )
        return art.Trajectory(
            messages_and_choices=[*messages, response.choices[0]], reward=float(seed % 2)
        )

    return art.TrajectoryGroup(await asyncio.gather(*(one(s) for s in seeds)))


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_sampler_and_trainer_log_probabilities_agree_at_step_one(trained) -> None:
    precision, engine, _, metrics = trained
    assert engine.loaded.train_dtype == (None if precision == "fp32" else torch.bfloat16)
    assert engine.loaded.sample_dtype == (torch.bfloat16 if precision == "bf16" else None)
    assert engine.loaded.prefill_dtype == (None if precision == "fp32" else torch.bfloat16)
    assert metrics["num_tokens"] > 0 and math.isfinite(metrics["loss"])
    # the figure docs/results/performance.md states
    print(f"{precision}: train/sampler_kl at step 1 = {metrics['sampler_kl']:.2e}")
    assert 0.0 <= metrics["sampler_kl"] < KL_BOUND[precision]


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_training_logprobs_equal_each_sequences_full_forward(trained) -> None:
    """The tree of a step's sequences (prompts and alike turns computed once, the LM head on the
    trained positions only) gives each sequence's own full forward's log-probabilities: exactly in
    fp32, within the rounding of other shapes under bf16."""
    precision, engine, groups, _ = trained
    tensors = _trimmed(pack_groups(engine.loaded.tokenizer, groups), engine.loaded.device)
    trained_at = trained_positions(tensors)
    gaps = []
    with torch.no_grad(), engine.loaded.autocast("train"):
        tree = engine.trainer.forward_logprobs(tensors)
        for row, sequence in enumerate(sequences_of(tensors)):
            full = logprobs_alone(engine.loaded.model, sequence)
            at = trained_at[row, : len(full)]
            gaps.append((tree.logprobs[row, : len(full)][at] - full[at]).abs())
    gap = torch.cat(gaps)
    assert gap.numel() > 0 and tree.tokens < sum(len(s) for s in sequences_of(tensors))
    mean, largest = float(gap.mean()), float(gap.max())
    print(
        f"{precision}: the tree vs each sequence alone, log-prob gap mean {mean:.1e} max {largest:.1e}"
    )
    mean_bound, largest_bound = TREE_GAP[precision]
    assert mean < mean_bound and largest < largest_bound
