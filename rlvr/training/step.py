"""One training step: sample a batch, roll out groups, score them as they finish, train on the
groups with signal, and the step's metrics row."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import art
from openai.types.chat.chat_completion import Choice

from rlvr import faults
from rlvr.config import TrainConfig
from rlvr.metrics import (
    INDEPENDENT_REWARD,
    M,
    agreement,
    group_stats,
    has_signal,
    peak_rss_gb,
    trajectory_metric_means,
)
from rlvr.runs import store
from rlvr.training.backends import TRAINS_WITHOUT_LOGPROBS, Policy, train_kwargs
from rlvr.training.evaluation import RolloutFn, rollout_groups
from rlvr.training.failures import FailureLog, require_some
from rlvr.training.output import console
from rlvr.training.split import Split
from rlvr.types import Item, Sampling, Scenario, Scorer

ScoreFn = Callable[[art.TrajectoryGroup, Item], Awaitable[art.TrajectoryGroup | None]]

_SKIPPED = "rlvr_skipped"  # group metadata: the scorer returned None


class _ScoreTiming:
    """When each group's scoring ran, to tell how much of it hid behind other groups' rollouts."""

    def __init__(self) -> None:
        self.first_start: float | None = None
        self.last_start: float | None = None  # the last group's rollouts ended here
        self.busy_s = 0.0

    def begin(self) -> float:
        now = time.monotonic()
        self.first_start = self.first_start or now
        self.last_start = now
        return now

    def end(self, began: float) -> None:
        self.busy_s += time.monotonic() - began

    def metrics(self, gathered: float) -> dict[str, float]:
        """`time/score_s`: summed scoring time of the groups; `time/score_hidden`: the share of
        the span in which scoring ran that overlapped rollouts (the rest is waited for)."""
        if self.first_start is None or self.last_start is None:
            return {}
        span = gathered - self.first_start
        exposed = gathered - self.last_start
        hidden = 1.0 - exposed / span if span > 0 else 0.0
        return {M.SCORE_SECONDS: self.busy_s, M.SCORE_HIDDEN: hidden}


async def train_step(
    cfg: TrainConfig,
    step: int,
    split: Split,
    scenario: Scenario,
    scorer: Scorer,
    policy: Policy,
    limit: asyncio.Semaphore,
    rollout: RolloutFn | None = None,
    score: ScoreFn | None = None,
    failure_log: FailureLog | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One step; returns its metrics row and its scored trajectories as table rows. `rollout`
    and `score` default to the scenario's and scorer's own (the loop passes traced ones)."""
    rollout = rollout or scenario.rollout
    score = score or scorer.score
    started = time.monotonic()
    rng = random.Random(
        f"{cfg.seed}-{step}"
    )  # the batch of a step is reproducible, resume included
    batch = rng.sample(split.train, min(cfg.groups_per_batch, len(split.train)))
    sampling = Sampling.from_config(cfg, "train")
    by_id = {item.id: item for item in batch}
    # Ground truth of training trajectories, for judge agreement and the reward-hacking view;
    # skipped where the truth itself is a judge (that would double the judge's bill).
    truth_known = not scenario.judged_check
    timing = _ScoreTiming()

    async def check_and_score(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
        """Truth and training reward of one group, as soon as its rollouts are done."""
        t0 = timing.begin()
        item = by_id[str(group.metadata["item_id"])]
        if truth_known:
            truths = await asyncio.gather(*(scenario.check(item, t) for t in group.trajectories))
            for t, truth in zip(group.trajectories, truths, strict=True):
                t.metrics[INDEPENDENT_REWARD] = truth
        scored = await score(group, item)
        timing.end(t0)
        # The loop's bookkeeping (item id, rollout exceptions) survives any scorer; a skipped
        # group (None) is kept with a mark, since ART's gather would drop it uncounted.
        kept = art.TrajectoryGroup(
            (scored or group).trajectories, metadata={**group.metadata, _SKIPPED: scored is None}
        )
        kept.exceptions = list(group.exceptions)  # already ART's records: not re-wrapped
        return kept

    groups, items, rollout_errors, failures = await rollout_groups(
        rollout,
        policy,
        batch,
        cfg.group_size,
        sampling,
        limit,
        f"step {step} rollouts",
        after_each=check_and_score,
    )
    (failure_log or FailureLog(console)).report(failures, f"step {step + 1}")
    require_some(len(groups), failures, f"step {step + 1}")
    faults.maybe_crash(faults.FaultPoint.ROLLOUTS, step + 1)  # test-only hook (rlvr.faults)
    gathered = time.monotonic()
    rollout_s = (timing.last_start or gathered) - started
    scored = [None if g.metadata.get(_SKIPPED) else g for g in groups]
    kept = [(g, i) for g, i in zip(scored, items, strict=True) if g is not None]
    scored_groups = [g for g, _ in kept]
    trainable = [g for g in scored_groups if has_signal(g)]

    train_started = time.monotonic()
    result_metrics: dict[str, float] = {}
    without_logprobs = turns_without_logprobs(trainable)
    if trainable:
        kwargs = train_kwargs(cfg)
        if without_logprobs and cfg.backend in TRAINS_WITHOUT_LOGPROBS:
            kwargs["allow_training_without_logprobs"] = True
            trainable = [as_messages_without_logprobs(g) for g in trainable]
        result = await policy.backend.train(policy.model, trainable, **kwargs)
        result_metrics = dict(result.metrics)
    train_s = time.monotonic() - train_started

    stats = group_stats(scored_groups)
    judged = [
        t.reward for g in scored_groups for t in g.trajectories if INDEPENDENT_REWARD in t.metrics
    ]
    truths_kept = [
        float(t.metrics[INDEPENDENT_REWARD])
        for g in scored_groups
        for t in g.trajectories
        if INDEPENDENT_REWARD in t.metrics
    ]
    row: dict[str, Any] = {
        M.STEP: step + 1,
        M.REWARD_MEAN: stats.reward_mean,
        M.REWARD_STD: stats.reward_std,
        M.GROUPS: stats.groups,
        M.TRAINED_GROUPS: len(trainable),
        M.NO_SIGNAL_RATE: stats.no_signal_rate,
        M.ALL_ZERO: stats.all_zero,
        M.ALL_ONE: stats.all_one,
        M.TRUNCATED_RATE: stats.truncated_rate,
        M.COMPLETION_TOKENS: stats.completion_tokens_mean,
        M.SKIPPED: len(groups) - len(kept),
        M.ROLLOUT_ERRORS: rollout_errors,
        M.NO_LOGPROB_TURNS: without_logprobs,
        M.KL: result_metrics.get("kl"),
        M.LOSS: result_metrics.get("loss"),
        M.INDEPENDENT: sum(truths_kept) / len(truths_kept) if truths_kept else None,
        M.TRUTH_ROLLOUTS: len(truths_kept),
        M.POLICY_STEP: await policy.model.get_step(),
        M.ROLLOUT_SECONDS: rollout_s,
        **timing.metrics(gathered),
        M.TRAIN_SECONDS: train_s,
        M.STEP_SECONDS: time.monotonic() - started,
        M.PEAK_RSS: peak_rss_gb(),
        **scorer.pop_metrics(),
        **trajectory_metric_means(scored_groups),
    }
    if truths_kept:  # how far the training reward agrees with ground truth (judge or not)
        row[M.JUDGE_AGREEMENT] = agreement(judged, truths_kept)
    table = store.trajectory_rows(
        scored_groups, [i.id for _, i in kept], step=step + 1, split="train"
    )
    return row, table


def turns_without_logprobs(groups: list[art.TrajectoryGroup]) -> int:
    """Sampled turns (Choices) that came back without logprobs (a rollout that asked for none)."""
    return sum(
        isinstance(m, Choice) and m.logprobs is None
        for g in groups
        for t in g.trajectories
        for m in t.messages_and_choices
    )


def as_messages_without_logprobs(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
    """`group` with each Choice that has no logprobs replaced by its assistant message as ART
    renders it. ART trains such messages under allow_training_without_logprobs, its loss taking
    the current (= sampling) adapter's logprobs for the missing ones; a Choice without logprobs
    it cannot tokenise (ART 0.5.18, preprocessing/tokenize.py: no sentinel for it)."""

    def converted(t: art.Trajectory) -> art.Trajectory:
        rendered = t.messages()
        parts = [
            rendered[i] if isinstance(m, Choice) and m.logprobs is None else m
            for i, m in enumerate(t.messages_and_choices)
        ]
        return t.model_copy(update={"messages_and_choices": parts})

    return art.TrajectoryGroup(
        [converted(t) for t in group.trajectories], metadata=dict(group.metadata), exceptions=[]
    )
