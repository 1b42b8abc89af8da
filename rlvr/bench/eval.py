"""rlvr bench eval: how fast one evaluation runs — a task's held-out items, greedy, one rollout
each, checked by ground truth, exactly as the loop validates (`rlvr.training.evaluation`).

Three figures on the same items and the same weights:
- concurrent: every item in flight at once (`rollout_concurrency`), so the engine decodes them
  as one batch — what a run does;
- one at a time: the same items with one rollout in flight (what a naive loop would do);
- bare generate: one batched greedy `model.generate` of every item's first-turn prompt, nothing
  else (no endpoint, no tools, no check). For a single-turn task this is the whole work, so
  `ratio_vs_bare` (bare seconds ÷ ours) is the share of the bare speed the evaluation keeps; for a
  multi-turn task it covers the first turn only and the ratio understates ours.

For a tool agent it also reports what its episodes showed the model (`episode_figures`): the
observation tokens per episode and the share of observations cut to the task's budget
(`rlvr.tool_episode(..., observation_tokens=N)`), to compare runs with and without one:
`rlvr bench eval email observation_tokens=none`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import art
import torch
from openai.types.chat import ChatCompletionMessageParam

from rlvr.agent import EpisodeMetric
from rlvr.engine import EngineCounters, LocalTorchBackend
from rlvr.engine.bench import bare_generate_policy, log
from rlvr.metrics import Figures, peak_rss_gb
from rlvr.runs import store
from rlvr.task_api.plugins import task_config
from rlvr.training.backends import Policy
from rlvr.training.evaluation import evaluate
from rlvr.training.session import Session, open_finished, open_scratch
from rlvr.types import Environment, Item, Sampling


def first_prompt(trajectory: art.Trajectory) -> list[ChatCompletionMessageParam]:
    """The messages the model saw before its first reply."""
    messages: list[ChatCompletionMessageParam] = []
    for message in trajectory.messages_and_choices:
        if not isinstance(message, dict):
            break  # a Choice: the first reply
        if message.get("role") == "assistant":
            break
        messages.append(message)
    return messages


EPISODE_FIGURES = {
    "observation_tokens_mean": EpisodeMetric.OBSERVATION_TOKENS,
    "trimmed_observations_mean": EpisodeMetric.TRIMMED_OBSERVATIONS,
    "turns_mean": EpisodeMetric.TURNS,
}


def episode_figures(groups: list[art.TrajectoryGroup]) -> dict[str, float | None]:
    """Means over the evaluated episodes of what the episode layer counts (None for a task
    whose rollouts do not count it, e.g. a single-turn one)."""
    trajectories = [t for g in groups for t in g.trajectories]
    figures: dict[str, float | None] = {}
    for name, metric in EPISODE_FIGURES.items():
        values = [float(t.metrics[metric]) for t in trajectories if metric in t.metrics]
        figures[name] = round(statistics.mean(values), 2) if values else None
    return figures


class EvalFigures(Figures):
    """`rlvr bench eval`: items/s of one evaluation three ways, and what the engine did."""

    bench: str = "eval"
    task: str
    run: str | None  # the finished run whose best checkpoint was evaluated
    items: int
    observation_tokens_mean: float | None
    trimmed_observations_mean: float | None
    turns_mean: float | None
    max_tokens: int
    accuracy: float
    threads: int
    concurrent_items_s: float
    one_at_a_time_items_s: float
    bare_generate_items_s: float
    eval_s_per_item: float
    # what the engine did in the last concurrent pass
    prefilled_tokens: int
    decoded_tokens: int
    decode_steps: int
    drafted_tokens: int
    kept_draft_tokens: int
    speedup_vs_one_at_a_time: float
    peak_rss_gb: float
    ratio_vs_bare: float


async def timed_eval(
    environment: Environment,
    policy: Policy,
    items: list[Item],
    sampling: Sampling,
    concurrency: int,
) -> tuple[float, float, list[art.TrajectoryGroup]]:
    """Seconds, accuracy and groups of one evaluation of `items`, `concurrency` in flight."""
    started = time.perf_counter()
    evaluated = await evaluate(
        environment.rollout,
        environment.check,
        policy,
        items,
        sampling,
        asyncio.Semaphore(concurrency),
        f"eval x{concurrency}",
    )
    return time.perf_counter() - started, evaluated.accuracy, evaluated.groups


@asynccontextmanager
async def bench_session(
    task: str, run_dir: Path | None, overrides: Mapping[str, object]
) -> AsyncIterator[tuple[Session, int | None]]:
    """The session evaluated and the policy step sampled: a finished run's best checkpoint
    (`run_dir`: the trained agent, as its validations saw it), else the task's fresh policy."""
    if run_dir is not None:
        best_step = store.read_summary(run_dir).best_step
        async with open_finished(run_dir, None) as run:
            yield run, run.state.policy_steps.get(best_step, 0)
        return
    cfg = task_config(task, **{"judge": "none", **overrides})  # no judge: ground truth only
    async with open_scratch(cfg) as run:
        yield run, None


async def run_eval_bench(
    task: str = "math",
    items: int = 32,
    repeats: int = 3,
    threads: int | None = None,
    run_dir: Path | None = None,
    **overrides: Any,
) -> EvalFigures:
    if threads:
        torch.set_num_threads(threads)
    async with bench_session(task, run_dir, overrides) as (run, step):
        cfg, environment, policy = run.cfg, run.environment, run.policy
        chosen = (run.split.val + run.split.test)[:items]
        sampling = Sampling.from_config(cfg, "val", step=step)
        if not isinstance(policy.backend, LocalTorchBackend):
            raise ValueError(
                f"rlvr bench eval measures rlvr's own engine (backend=local), not {cfg.backend}"
            )
        engine = policy.backend.engine(policy.model)

        def timed(concurrency: int) -> Awaitable[tuple[float, float, list[art.TrajectoryGroup]]]:
            return timed_eval(environment, policy, chosen, sampling, concurrency)

        await timed(cfg.rollout_concurrency)  # warm-up: server, caches, first-call costs
        ours: list[float] = []
        alone: list[float] = []
        bare: list[float] = []
        accuracy, groups = 0.0, list[art.TrajectoryGroup]()
        work = EngineCounters()
        for r in range(repeats):
            before = engine.counters()
            seconds, accuracy, groups = await timed(cfg.rollout_concurrency)
            work = engine.counters().minus(before)
            ours.append(seconds)
            chats = [first_prompt(g.trajectories[0]) for g in groups]
            _, seconds = await asyncio.to_thread(
                bare_generate_policy, engine, chats, cfg.max_tokens, temperature=0.0
            )
            bare.append(seconds)
            log(f"eval repeat {r}: concurrent {ours[-1]:.1f} s, bare generate {bare[-1]:.1f} s")
        seconds, _, _ = await timed(1)
        alone.append(seconds)
        log(f"eval one at a time: {alone[-1]:.1f} s")
    n = len(chosen)
    ours_s, bare_s = statistics.median(ours), statistics.median(bare)
    episodes = episode_figures(groups)
    return EvalFigures(
        task=cfg.task,
        run=str(run_dir) if run_dir is not None else None,
        items=n,
        observation_tokens_mean=episodes["observation_tokens_mean"],
        trimmed_observations_mean=episodes["trimmed_observations_mean"],
        turns_mean=episodes["turns_mean"],
        max_tokens=cfg.max_tokens,
        accuracy=round(accuracy, 3),
        threads=torch.get_num_threads(),
        concurrent_items_s=round(n / ours_s, 3),
        one_at_a_time_items_s=round(n / alone[0], 3),
        bare_generate_items_s=round(n / bare_s, 3),
        eval_s_per_item=round(ours_s / n, 3),
        prefilled_tokens=work.prefilled_tokens,
        decoded_tokens=work.decoded_tokens,
        decode_steps=work.decode_steps,
        drafted_tokens=work.drafted_tokens,
        kept_draft_tokens=work.kept_draft_tokens,
        speedup_vs_one_at_a_time=round(alone[0] / ours_s, 2),
        peak_rss_gb=round(peak_rss_gb(), 2),
        ratio_vs_bare=round(bare_s / ours_s, 3),
    )
