"""`rlvr bench phases`: the matrix-product peak, the FLOPs counted from a model's parameters, the
share of the peak, and the command's plumbing on the tiny random model (`tiny_model`): what is
checked is that every phase is measured and its ratio is a share of the peak, not how fast the
real policy runs."""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from rlvr.bench import phases
from rlvr.bench.phases import Achieved, ModelSize, achieved, matmul_peak
from tests.helpers.tiny_llama import tiny_llama

WARM_START_PAGE = Path(__file__).parents[2] / "docs" / "concepts" / "warm-start.md"


def page_command() -> list[str]:
    """The warm-start page's `rlvr bench phases` command, as words after `rlvr`."""
    [command] = re.findall(r"```bash\n(rlvr bench phases [^\n]+)\n```", WARM_START_PAGE.read_text())
    return shlex.split(command)[1:]


def test_the_peak_is_the_flops_of_one_product_over_its_fastest_call(monkeypatch) -> None:
    clock = itertools.count(step=0.5)  # every call seems to take half a second
    monkeypatch.setattr(phases.time, "perf_counter", lambda: next(clock))
    assert matmul_peak(torch.float32, size=64, repeats=3) == pytest.approx(2 * 64**3 / 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_peak_is_measured_in_the_precision_asked_for(dtype: torch.dtype) -> None:
    peak = matmul_peak(dtype, size=256, repeats=2)
    assert 1e7 < peak < 1e15  # FLOP/s: a real product of this CPU, in either precision


def test_a_forward_counts_the_decoder_and_the_head_not_the_input_lookup() -> None:
    model = tiny_llama()  # untied: its head and its input embeddings are two 64 x 32 weights
    size = ModelSize.of(model)
    total = sum(p.numel() for p in model.parameters())
    assert size.head == 64 * 32
    assert size.body == total - 2 * 64 * 32
    assert size.forward_flops(10) == 2 * (size.body + size.head) * 10
    assert size.forward_flops(10, head=False) == 2 * size.body * 10
    model.lm_head.weight = model.model.embed_tokens.weight
    assert ModelSize.of(model).head == 64 * 32  # tied: once, as the head


def test_the_share_of_the_peak_is_the_seconds_at_peak_over_the_seconds_taken() -> None:
    # 1 GFLOP at an fp32 peak of 10 GFLOP/s and 2 GFLOP at a bf16 peak of 40: 0.15 s at peak.
    done = achieved([(1e9, 1e10), (2e9, 4e10)], seconds=1.5)
    assert done.flop_s == pytest.approx(2e9)
    assert done.vs_peak == pytest.approx(0.1)
    assert achieved([(0.0, 1e10)], seconds=1.0) == Achieved()  # no work: no figure
    assert achieved([(1e9, 1e10)], seconds=0.0) == Achieved()


def test_the_decoder_counts_its_prefill_seconds_inside_its_sampling_seconds() -> None:
    """What splits a rollout's sampling into prefill and decode steps (EngineCounters)."""
    from transformers import AutoTokenizer

    from rlvr.engine.decoding import Decoder
    from rlvr.engine.models import DEFAULT_MODEL, resolve_model
    from rlvr.engine.types import SampleRow
    from rlvr.engine.weights import BaseWeights
    from tests.helpers.tiny_llama import fp32_loaded

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    model = tiny_llama(vocab_size=len(tokenizer), max_positions=256)
    decoder = Decoder(fp32_loaded(model, tokenizer, max_context=256), BaseWeights())
    rows = [
        SampleRow(prompt_ids=list(range(10, 10 + n)), max_tokens=8, temperature=0.0)
        for n in (40, 60)
    ]
    decoder.sample(rows)
    done = decoder.counters()
    assert done.prefilled_tokens > 0 and done.decoded_tokens == 16  # the shorter is a prefix
    assert 0 < done.prefill_s < done.sampling_s


SCORER = '''
def alternate(group, item):
    """0 and 1 inside every group: the step has a learning signal, so its update trains."""
    return [float(i % 2) for i in range(len(group.trajectories))]
'''
# Every phase measured, each a share of the peak; the rest are raw figures.
RATIOS = ("sft_vs_peak", "eval_vs_peak", "prefill_vs_peak", "decode_vs_peak", "update_vs_peak")
RAW = (
    "sft_tok_s",
    "sft_flop_s",
    "eval_s_per_item",
    "eval_tok_s",
    "prefill_tok_s",
    "decode_tok_s",
    "update_tok_s",
    "step_s",
    "rollout_s",
    "update_s",
    "peak_fp32_flop_s",
)


@pytest.mark.slow
def test_bench_phases_prints_every_phase_against_the_peak(tmp_path: Path, tiny_model: Path) -> None:
    from typer.testing import CliRunner

    from rlvr.cli.main import app

    (tmp_path / "alternate.py").write_text(SCORER)
    args = [
        f"model={tiny_model}",
        f"scorer={tmp_path / 'alternate.py'}:alternate",
        "num_items=20",
        "group_size=2",
        "groups_per_batch=1",
        "max_tokens=6",
        "judge=none",
        "preflight=false",
        "sft_batch_size=2",
    ]
    # the page's command on the tiny model: the later options win, one RL step is measured too
    options = [
        "--demonstrations",
        "2",
        "--items",
        "2",
        "--steps",
        "1",
        "--peak-size",
        "512",
        "--peak-repeats",
        "20",
    ]
    threads = torch.get_num_threads()
    try:  # one thread, as on a busy machine: the peak is measured on the run's threads
        result = CliRunner().invoke(
            app,
            [*page_command(), *args, *options],
            env={"RLVR_PRECISION": "fp32", "RLVR_TORCH_THREADS": "1"},
        )
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["threads"] == 1 and "torch.mm, 1 threads" in result.stderr
    assert figures["bench"] == "phases" and figures["task"] == "email"
    assert figures["seed"] == 1 and figures["sft_schedule"] == "constant"  # the page's, email's
    assert figures["precision"].startswith("fp32") and "peak_bf16_flop_s" not in figures
    assert figures["sft_demonstrations"] == 2 and figures["eval_items"] == 2
    assert figures["steps"] == 1 and figures["trained_tokens"] > 0
    # where the warm start ended: its last batch's loss, and ground truth over the 2 items
    assert figures["sft_loss_last"] > 0 and figures["eval_accuracy"] in (0.0, 0.5, 1.0)
    assert f"evaluation correct {figures['eval_accuracy']}" in result.stderr
    for key in RAW:
        assert figures[key] > 0, key
    for key in RATIOS:
        assert 0 < figures[key] <= 1, key
    assert figures["decode_tok_s"] >= figures["rollout_tok_s"]  # the decoder's own seconds
    assert figures["eval_s_per_item"] == pytest.approx(
        figures["eval_decoded_tokens"] / figures["eval_tok_s"] / 2, rel=0.05
    )
    # The goals are printed beside what was measured, with no exit code.
    assert figures["goal_step_s"] == 30.0 and figures["goal_eval_s_per_item"] == 1.0
    assert figures["step_meets_goal"] == (figures["step_s"] <= 30.0)
    assert "issue 69's goals" in result.stderr and "of peak" in result.stderr
