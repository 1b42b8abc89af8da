"""`rlvr bench step TASK`: real RL steps of a task at its defaults (its warm start first, when it
has one), and where each step's time and tokens go, each against its bare figure in the same
process: the step's rollouts against one batched `generate` of every sampled turn's prompt, and
its update against a bare forward + backward + AdamW of every trained sequence in full.

The step is the loop's own (rlvr.training.step: draw, play, refill, update, the row), on a run
directory of its own that is removed afterwards.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import art
import torch
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict

from rlvr.engine import Engine, LocalTorchBackend, pack_groups
from rlvr.engine.bench import bare_generate_policy, bare_train_step, log
from rlvr.memory import EVALUATION, ROLLOUTS, UPDATE, WARM_START, RssWatch
from rlvr.metrics import Figures, M, VllmMetric, peak_rss_gb
from rlvr.task_api.plugins import task_config
from rlvr.training.backends import engine_counters, token_metrics
from rlvr.training.pool import record
from rlvr.training.session import Session, open_session
from rlvr.training.state import Tested
from rlvr.training.step import Batch, gather_batch, step_row, update_policy
from rlvr.training.warmstart import warm_start

# The figures of a step row the benchmark reports (medians over the steps).
REPORTED = {
    "step_s": M.STEP_SECONDS,
    "rollout_s": M.ROLLOUT_SECONDS,
    "score_s": M.SCORE_SECONDS,
    "update_s": M.UPDATE_SECONDS,
    "prompt_tokens": M.PROMPT_TOKENS,
    "cached_prompt_tokens": M.CACHED_PROMPT_TOKENS,
    "prefilled_tokens": M.PREFILLED_TOKENS,
    "decoded_tokens": M.DECODED_TOKENS,
    "trained_tokens": M.TRAINED_TOKENS,
    "sequence_tokens": M.SEQUENCE_TOKENS,
    "forwarded_tokens": M.FORWARDED_TOKENS,
    # inference=vllm only (absent, so left out, on rlvr's engine)
    "adapter_load_s": VllmMetric.ADAPTER_LOAD_S,
    "vllm_startup_s": VllmMetric.STARTUP_S,
    "vllm_rss_gb": VllmMetric.RSS_GB,
    "mismatch_kl": VllmMetric.MISMATCH_KL,
}
# The figures `--inference vllm` sets side by side (vLLM's ÷ rlvr's engine's).
COMPARED = ("step_s", "rollout_s", "update_s", "eval_s_per_item")


def turn_prompts(
    groups: list[art.TrajectoryGroup],
) -> tuple[list[list[ChatCompletionMessageParam]], int]:
    """Every sampled turn's prompt (the chat before it) and the longest completion sampled."""
    prompts: list[list[ChatCompletionMessageParam]] = []
    longest = 1
    for t in (t for g in groups for t in g.trajectories):
        rendered = t.messages()
        for i, part in enumerate(t.messages_and_choices):
            if isinstance(part, Choice):
                prompts.append(list(rendered[:i]))
                if part.logprobs is not None:
                    longest = max(longest, len(part.logprobs.content or []))
    return prompts, longest


# The phases of the peak resident memory the benchmark reports (PEAK_RSS_BY_PHASE): a run's own,
# and its bare baselines.
BARE = "bare"
PEAK_RSS_BY_PHASE = "peak_rss_gb_by_phase"


class StepFigures(BaseModel):
    """One step's figures (REPORTED, from its row) and its bare baselines; None where the step
    has none (a phase it skipped, a vLLM-only figure on rlvr's engine, no bare run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_s: float | None = None
    rollout_s: float | None = None
    score_s: float | None = None
    update_s: float | None = None
    prompt_tokens: float | None = None
    cached_prompt_tokens: float | None = None
    prefilled_tokens: float | None = None
    decoded_tokens: float | None = None
    trained_tokens: float | None = None
    sequence_tokens: float | None = None
    forwarded_tokens: float | None = None
    adapter_load_s: float | None = None
    vllm_startup_s: float | None = None
    vllm_rss_gb: float | None = None
    mismatch_kl: float | None = None
    bare_generate_s: float | None = None
    bare_update_s: float | None = None


class StepBenchFigures(Figures, StepFigures):
    """`rlvr bench step`: the medians of its steps' figures, the warm start, the ratios against
    the bare baselines and the memory by phase."""

    bench: str = "step"
    task: str
    steps: int
    warm_start_s: float
    eval_s_per_item: float
    rollout_vs_bare: float | None
    update_vs_bare: float | None
    peak_rss_gb: float
    peak_rss_gb_by_phase: dict[str, float]
    per_step: list[StepFigures] | None  # None beside the other engine's (side by side)


class SideBySideFigures(Figures):
    """`rlvr bench step --inference vllm`: each engine's figures and vLLM's ÷ rlvr's."""

    bench: str = "step"
    task: str
    steps: int
    vllm: StepBenchFigures
    rlvr: StepBenchFigures
    step_s_vllm_vs_rlvr: float | None
    rollout_s_vllm_vs_rlvr: float | None
    update_s_vllm_vs_rlvr: float | None
    eval_s_per_item_vllm_vs_rlvr: float | None


async def bench_one_step(run: Session, step: int, bare: bool, watch: RssWatch) -> StepFigures:
    """One real step (the loop's phases) and, with `bare`, its bare figures."""
    started, counted = time.monotonic(), engine_counters(run.policy)
    with watch.phase(ROLLOUTS):
        batch = await gather_batch(run, step)
    with watch.phase(UPDATE):
        update = await update_policy(run, batch.trainable, step + 1)
    row = step_row(run, step + 1, batch, update, started).with_values(
        **token_metrics(counted, engine_counters(run.policy))
    )
    run.state.step = step + 1
    run.state.pool = record(run.state.pool, row.outcomes)
    figures = StepFigures.model_validate({name: row.number(key) for name, key in REPORTED.items()})
    backend = run.policy.backend
    if bare and isinstance(backend, LocalTorchBackend):
        with watch.phase(BARE):
            bare_s = await bare_figures(backend.engine(run.policy.model), run, batch)
        figures = figures.model_copy(update=bare_s.model_dump(exclude_none=True))
    log(
        f"step {step + 1}: "
        + ", ".join(f"{k} {v:.1f}" for k, v in figures.model_dump(exclude_none=True).items())
    )
    return figures


class BareFigures(BaseModel):
    """A step's bare baselines (seconds); no update figure where nothing was trained."""

    model_config = ConfigDict(frozen=True)

    bare_generate_s: float
    bare_update_s: float | None = None


async def bare_figures(engine: Engine, run: Session, batch: Batch) -> BareFigures:
    """The bare baselines of one step: a batched generate of its turn prompts, and a forward +
    backward + AdamW of its trained sequences in full."""
    prompts, longest = turn_prompts(batch.groups)
    _, generate_s = await asyncio.to_thread(
        bare_generate_policy, engine, prompts, longest, run.cfg.temperature
    )
    packed = pack_groups(engine.loaded.tokenizer, batch.trainable)
    if packed is None:
        return BareFigures(bare_generate_s=generate_s)
    parameters = engine.adapters.trainable_parameters()
    optimizer = torch.optim.AdamW(parameters, lr=0.0)  # the weights do not move
    update_s = await asyncio.to_thread(bare_train_step, engine.loaded, packed, optimizer)
    return BareFigures(bare_generate_s=generate_s, bare_update_s=update_s)


async def bench_warm_start(run: Session, watch: RssWatch) -> tuple[float, float]:
    """The loop's warm start (rlvr.training.loop.warm: validation, then the supervised steps)
    and the validation after it, each its own memory phase: its seconds in all, and the
    validation's seconds per item after the warm start (the policy a run's evaluations sample,
    whose episodes run long; before it, a policy that answers at once is fast and light)."""
    began = time.monotonic()
    with watch.phase(EVALUATION):
        await run.evaluate_with_test("validate before warm start", Tested.START)
    cfg = run.cfg
    if cfg.sft_steps > 0:
        with watch.phase(WARM_START):
            await warm_start(
                cfg, run.environment, run.policy.model, run.split.train, share=cfg.sft_budget_share
            )
    warm_s = time.monotonic() - began
    validated = time.monotonic()
    with watch.phase(EVALUATION):
        await run.evaluate(run.val_items, "val", "validate after warm start")
    return warm_s, (time.monotonic() - validated) / max(1, len(run.val_items))


def medians(per_step: list[StepFigures]) -> StepFigures:
    """Each figure's median over the steps that have it (rounded)."""
    values: dict[str, list[float]] = {}
    for figures in per_step:
        for key, value in figures.model_dump(exclude_none=True).items():
            values.setdefault(key, []).append(value)
    return StepFigures.model_validate(
        {key: rounded(statistics.median(found)) for key, found in values.items()}
    )


def rounded(value: float) -> float:
    """Three decimals, or three significant digits for a figure below 0.001 (a KL of 1e-8 is a
    finding, not a 0)."""
    return round(value, 3) if abs(value) >= 1e-3 else float(f"{value:.3g}")


def ratio(top: object, bottom: object) -> float | None:
    """top ÷ bottom, rounded; None unless both are numbers and bottom is not 0."""
    if not isinstance(top, int | float) or not isinstance(bottom, int | float) or not bottom:
        return None
    return round(top / bottom, 3)


async def run_step_bench(
    task: str, steps: int = 2, bare: bool = True, **overrides: Any
) -> StepBenchFigures:
    """`steps` real steps of `task` at its defaults (with `overrides`); medians and ratios."""
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-step-") as path:
        cfg = task_config(task, **overrides, run_dir=str(Path(path) / "run"))
        with RssWatch() as watch:
            async with open_session(cfg, None, None, None) as run:
                warm_s, eval_s_per_item = await bench_warm_start(run, watch)
                per_step = [await bench_one_step(run, step, bare, watch) for step in range(steps)]
    median = medians(per_step)
    return StepBenchFigures(
        **median.model_dump(),
        task=task,
        steps=steps,
        warm_start_s=round(warm_s, 3),
        eval_s_per_item=round(eval_s_per_item, 3),
        rollout_vs_bare=ratio(median.rollout_s, median.bare_generate_s),
        update_vs_bare=ratio(median.update_s, median.bare_update_s),
        peak_rss_gb=round(peak_rss_gb(), 2),
        peak_rss_gb_by_phase=watch.rounded(),
        per_step=per_step,
    )


async def run_step_side_by_side(
    task: str, steps: int = 2, bare: bool = True, **overrides: Any
) -> SideBySideFigures:
    """The same steps of `task` sampled by a vLLM server, then by rlvr's engine, in this process
    (vLLM first, so rlvr's own run is not measured on a heap the other left behind): each run's
    figures, and vLLM's ÷ rlvr's for COMPARED. The vLLM server's memory is its own processes'
    (`vllm_rss_gb`); `peak_rss_gb` is this process's high-water mark, over both runs."""
    vllm = await run_step_bench(task, steps, False, **overrides, inference="vllm")
    rlvr = await run_step_bench(task, steps, bare, **overrides, inference="rlvr")
    vllm, rlvr = (f.model_copy(update={"per_step": None}) for f in (vllm, rlvr))
    return SideBySideFigures(
        task=task,
        steps=steps,
        vllm=vllm,
        rlvr=rlvr,
        step_s_vllm_vs_rlvr=ratio(vllm.step_s, rlvr.step_s),
        rollout_s_vllm_vs_rlvr=ratio(vllm.rollout_s, rlvr.rollout_s),
        update_s_vllm_vs_rlvr=ratio(vllm.update_s, rlvr.update_s),
        eval_s_per_item_vllm_vs_rlvr=ratio(vllm.eval_s_per_item, rlvr.eval_s_per_item),
    )
