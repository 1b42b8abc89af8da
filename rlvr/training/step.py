"""One training step, in named phases:

    draw the batch (rlvr.training.pool) -> play a round: roll out groups and score each as it
    finishes -> refill groups without signal -> update the policy on the groups with signal ->
    the step's metrics row

Each phase is a function of what it needs; `train_step` reads top to bottom.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

import art
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict

from rlvr.inference.metrics import serving_metrics
from rlvr.memory import ROLLOUTS, UPDATE
from rlvr.metrics import (
    INDEPENDENT_REWARD,
    M,
    agreement,
    completion_tokens,
    group_stats,
    has_signal,
    peak_rss_gb,
    reward_counts,
    scorer_figures,
    trajectory_metric_means,
)
from rlvr.runs import store
from rlvr.runs.damage import fault_point
from rlvr.runs.records import StepRow
from rlvr.training import pool
from rlvr.training.backends import (
    TRAINS_WITHOUT_LOGPROBS,
    engine_counters,
    step_learning_rate,
    token_metrics,
    train_kwargs,
)
from rlvr.training.evaluation import rollout_groups
from rlvr.training.failures import require_some
from rlvr.training.progress import Progress
from rlvr.training.session import Session
from rlvr.types import Item, Sampling

_SKIPPED = "rlvr_skipped"  # group metadata: the scorer returned None
NUM_TOKENS = "num_tokens"  # trained positions, in the update's metrics (the backends' name)
SAMPLER_KL = "sampler_kl"  # the backends' names of the two KL measures (rlvr.engine.types)
UPDATE_KL = "update_kl"


class Span(BaseModel):
    """When one group's scoring ran."""

    model_config = ConfigDict(frozen=True)

    start: float
    end: float


class Round(BaseModel):
    """The groups of one rollout call (the first draw, or one refill): its items' scored groups (a
    skipped group is left out), and when its last group's rollouts ended."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    groups: list[art.TrajectoryGroup]
    items: list[Item]
    played: int  # items rolled out
    skipped: int  # groups the scorer could not score (a judge failure)
    rollout_errors: int
    spans: list[Span]  # each group's scoring; it starts when the group's rollouts end


class Batch(BaseModel):
    """A step's rounds: the first draw and its refills, which run concurrently with it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    rounds: list[Round]
    started: float
    gathered: float

    @property
    def groups(self) -> list[art.TrajectoryGroup]:
        return [g for r in self.rounds for g in r.groups]

    @property
    def items(self) -> list[Item]:
        return [i for r in self.rounds for i in r.items]

    @property
    def trainable(self) -> list[art.TrajectoryGroup]:
        return [g for g in self.groups if has_signal(g)]


class Update(BaseModel):
    """What the policy update did."""

    model_config = ConfigDict(frozen=True)

    metrics: dict[str, float]
    seconds: float
    turns_without_logprobs: int


async def train_step(run: Session, step: int) -> tuple[StepRow, list[store.TableRow]]:
    """Step `step + 1`: its metrics row and its scored trajectories as table rows."""
    started, counted = time.monotonic(), engine_counters(run.policy)
    with run.memory.phase(ROLLOUTS):
        batch = await gather_batch(run, step)
    fault_point(f"rollouts:{step + 1}")  # nothing of the step is stored yet
    with run.memory.phase(UPDATE):
        update = await update_policy(run, batch.trainable, step + 1)
    row = step_row(run, step + 1, batch, update, started).with_values(
        **token_metrics(counted, engine_counters(run.policy)),
        policy_step=await run.policy.model.get_step(),
        **{M.RSS_ROLLOUTS: run.memory.take(ROLLOUTS), M.RSS_UPDATE: run.memory.take(UPDATE)},
    )
    table = store.trajectory_rows(
        batch.groups, [i.id for i in batch.items], step=step + 1, split="train"
    )
    return row, table


class Refills:
    """The refills of one step (signal strategy): each group scored without signal is replaced at
    once by another drawn item, up to `cap` extra groups, so replacements roll out beside the
    groups still running. The k-th replacement is drawn from its own seeded source, excluding
    every item drawn before it: the same draws for the same outcomes, whatever the timing."""

    def __init__(
        self, run: Session, step: int, drawn: list[str], cap: int, progress: Progress
    ) -> None:
        self.run, self.step, self.drawn, self.cap = run, step, list(drawn), cap
        self.progress = progress
        self.tasks: list[asyncio.Task[Round]] = []

    def after(self, group: art.TrajectoryGroup) -> None:
        """Called with each scored group: replace it if it has no signal and the cap allows."""
        if group.metadata.get(_SKIPPED) or has_signal(group) or len(self.tasks) >= self.cap:
            return
        cfg, train = self.run.cfg, self.run.split.train
        taken = set(self.drawn)
        rng = pool.step_rng(cfg.seed, self.step, len(self.tasks) + 1)
        candidates = [i.id for i in train if i.id not in taken]
        picked = pool.draw(self.run.state.pool, candidates, 1, cfg.draw, rng)
        if not picked:
            return
        self.drawn += picked
        item = next(i for i in train if i.id == picked[0])
        label = f"step {self.step + 1} refill {len(self.tasks) + 1}"
        self.progress.grow()
        play = play_round(self.run, self.step, [item], label, self.after, self.progress)
        self.tasks.append(asyncio.create_task(play))

    async def rounds(self) -> list[Round]:
        """Every replacement's round, the ones they started in turn included."""
        while not all(t.done() for t in self.tasks):
            await asyncio.gather(*self.tasks)  # a replacement may start another meanwhile
        return [t.result() for t in self.tasks]


async def gather_batch(run: Session, step: int) -> Batch:
    """The step's groups: `groups_per_batch` items drawn by the configured strategy and, under the
    signal strategy, replacements for the groups that came back without signal."""
    cfg, started = run.cfg, time.monotonic()
    train_ids = [i.id for i in run.split.train]
    by_id = {i.id: i for i in run.split.train}
    if cfg.draw.strategy == "uniform":
        drawn = pool.uniform_draw(train_ids, cfg.groups_per_batch, cfg.seed, step)
    else:
        rng = pool.step_rng(cfg.seed, step, 0)
        drawn = pool.draw(run.state.pool, train_ids, cfg.groups_per_batch, cfg.draw, rng)
    cap = 0 if cfg.draw.strategy == "uniform" else cfg.draw.max_refill
    with Progress(f"step {step + 1} rollouts", len(drawn), "group") as progress:
        refills = Refills(run, step, drawn, cfg.groups_per_batch if cap is None else cap, progress)
        items = [by_id[i] for i in drawn]
        first = await play_round(run, step, items, f"step {step + 1}", refills.after, progress)
        rounds = [first, *await refills.rounds()]
    return Batch(rounds=rounds, started=started, gathered=time.monotonic())


async def play_round(
    run: Session,
    step: int,
    items: list[Item],
    label: str,
    after: Callable[[art.TrajectoryGroup], None],
    progress: Progress,
) -> Round:
    """Roll out a group per item at training step `step` (which seeds the rollouts); each group's
    ground truth and training reward are scored as soon as its own rollouts finish (so scoring
    overlaps the other groups' rollouts), then handed to `after`."""
    spans: list[Span] = []
    groups, done, errors, failures = await rollout_groups(
        run.rollout,
        run.policy,
        items,
        run.cfg.group_size,
        Sampling.from_config(run.cfg, "train", train_step=step),
        run.limit,
        progress,
        after_each=functools.partial(score_group, run, {i.id: i for i in items}, spans, after),
    )
    run.failure_log.report(failures, label)
    require_some(len(groups), failures, label)
    kept = [(g, i) for g, i in zip(groups, done, strict=True) if not g.metadata.get(_SKIPPED)]
    return Round(
        groups=[g for g, _ in kept],
        items=[i for _, i in kept],
        played=len(items),
        skipped=len(groups) - len(kept),
        rollout_errors=errors,
        spans=spans,
    )


async def score_group(
    run: Session,
    by_id: dict[str, Item],
    spans: list[Span],
    after: Callable[[art.TrajectoryGroup], None],
    group: art.TrajectoryGroup,
) -> art.TrajectoryGroup:
    """One group's ground truth (`independent_reward`, for judge agreement and the hacking view;
    not where the truth is itself a judge, which would double its bill) and training reward."""
    started = time.monotonic()
    item = by_id[str(group.metadata["item_id"])]
    # An unlabelled item has no truth to check against (rlvr.training.split.unlabelled_ids).
    if not run.environment.judged_check and item.id not in run.split.unlabelled:
        truths = await asyncio.gather(*(run.environment.check(item, t) for t in group.trajectories))
        for t, truth in zip(group.trajectories, truths, strict=True):
            t.metrics[INDEPENDENT_REWARD] = truth
    scored = await run.score(group, item)
    spans.append(Span(start=started, end=time.monotonic()))
    # The loop's bookkeeping (item id, rollout exceptions) survives any scorer; a skipped group
    # (None) is kept with a mark, since ART's gather would drop it uncounted.
    kept = art.TrajectoryGroup(
        (scored or group).trajectories, metadata={**group.metadata, _SKIPPED: scored is None}
    )
    kept.exceptions = list(group.exceptions)  # already ART's records: not re-wrapped
    after(kept)
    return kept


async def update_policy(run: Session, groups: list[art.TrajectoryGroup], step: int) -> Update:
    """Step `step`'s update of the policy on the groups with signal (none: no update)."""
    started = time.monotonic()
    without_logprobs = turns_without_logprobs(groups)
    if not groups:
        return Update(metrics={}, seconds=0.0, turns_without_logprobs=0)
    kwargs = train_kwargs(run.cfg, step)
    if without_logprobs and run.cfg.backend in TRAINS_WITHOUT_LOGPROBS:
        kwargs["allow_training_without_logprobs"] = True
        groups = [as_messages_without_logprobs(g) for g in groups]
    result = await run.policy.backend.train(run.policy.model, groups, **kwargs)
    return Update(
        metrics={k: float(v) for k, v in result.metrics.items() if isinstance(v, int | float)},
        seconds=time.monotonic() - started,
        turns_without_logprobs=without_logprobs,
    )


def step_row(run: Session, step: int, batch: Batch, update: Update, started: float) -> StepRow:
    """The step's metrics row (rlvr.metrics.M)."""
    groups = batch.groups
    stats = group_stats(groups)
    scored = [t for g in groups for t in g.trajectories if INDEPENDENT_REWARD in t.metrics]
    truths = [float(t.metrics[INDEPENDENT_REWARD]) for t in scored]
    outcomes = [
        pool.outcome_of(i.id, [t.reward for t in g.trajectories])
        for g, i in zip(groups, batch.items, strict=True)
    ]
    counts = pool.counts(pool.record(run.state.pool, outcomes), [i.id for i in run.split.train])
    refills = batch.rounds[1:]
    timing = rollout_timing(batch)
    row = StepRow(
        step=step,
        reward_mean=stats.reward_mean,
        reward_std=stats.reward_std,
        groups=stats.groups,
        trained_groups=len(batch.trainable),
        no_signal_rate=stats.no_signal_rate,
        all_zero=stats.all_zero,
        all_one=stats.all_one,
        truncated_rate=stats.truncated_rate,
        looping_rate=stats.looping_rate,
        completion_tokens=stats.completion_tokens_mean,
        skipped=sum(r.skipped for r in batch.rounds),
        rollout_errors=sum(r.rollout_errors for r in batch.rounds),
        no_logprob_turns=update.turns_without_logprobs,
        sampler_kl=update.metrics.get(SAMPLER_KL),
        update_kl=update.metrics.get(UPDATE_KL),
        learning_rate=step_learning_rate(run.cfg, step),
        loss=update.metrics.get("loss"),
        independent=sum(truths) / len(truths) if truths else None,
        truth_rollouts=len(truths),
        signal_groups=len(batch.trainable),
        refilled=sum(r.played for r in refills),
        extra_rollouts=sum(r.played for r in refills) * run.cfg.group_size,
        pool_mixed=counts.mixed,
        pool_equal=counts.all_equal,
        pool_untried=counts.untried,
        outcomes=outcomes,
        reward_counts=reward_counts([t.reward for g in groups for t in g.trajectories]),
        rollout_s=timing.rollout_s,
        update_s=update.seconds,
        decoded_tokens=sum(completion_tokens(t) for g in groups for t in g.trajectories),
        trained_tokens=update.metrics.get(NUM_TOKENS),
        step_s=time.monotonic() - started,
        peak_rss_gb=peak_rss_gb(),
    )
    if timing.score_s is not None:  # no group scored: no scoring span to time
        row = row.with_values(score_s=timing.score_s, score_hidden=timing.score_hidden)
    # Keys a scorer, a task's rollouts and a serving backend name themselves: the row's figures.
    row = row.with_values(
        **scorer_figures(run.scorer.pop_metrics()),
        **trajectory_metric_means(groups),
        **serving_metrics(run.policy.backend, run.policy.model, update.metrics),
    )
    if truths:  # how far the training reward agrees with ground truth (judge or not)
        row = row.with_values(judge_agreement=agreement([t.reward for t in scored], truths))
    return row


class RolloutTiming(BaseModel):
    """`rollout_s`: from the step's start to the end of its last group's rollouts; `score_s`:
    scoring summed over the groups; `score_hidden`: the share of the span in which scoring ran
    that overlapped rollouts (the rest was waited for). No scoring span: no scoring figures."""

    model_config = ConfigDict(frozen=True)

    rollout_s: float
    score_s: float | None = None
    score_hidden: float | None = None


def rollout_timing(batch: Batch) -> RolloutTiming:
    """The step's rollout and scoring times (RolloutTiming)."""
    spans = [s for r in batch.rounds for s in r.spans]
    if not spans:
        return RolloutTiming(rollout_s=batch.gathered - batch.started)
    last_rollout = max(s.start for s in spans)
    span = batch.gathered - min(s.start for s in spans)
    return RolloutTiming(
        rollout_s=last_rollout - batch.started,
        score_s=sum(s.end - s.start for s in spans),
        score_hidden=1.0 - (batch.gathered - last_rollout) / span if span > 0 else 0.0,
    )


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
