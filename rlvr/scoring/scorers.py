"""Deterministic scorers and composition.

- VerifierScorer wraps a deterministic reward: a task's own `reward(item, trajectory)` hook (any
  real number, as the task set it) or a verifier-contract `fn(completion, ground_truth)`, whose
  values are bounded to [0, 1] (a value outside is clipped, counted and said once).
- RolloutScorer keeps the reward the rollout set (ART's idiom), unclipped.
- LengthScorer is deliberately hackable (reward grows with reply length); it exists to show the
  divergence alarm and the suspicious-rollout view catching a gamed reward.
- WeightedScorer sums parts with weights; GatedScorer counts B only where A passes.
Composition is data (a list of parts and weights), not subclassing. Every scorer returns a new
group and never mutates its input.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable

import art

from rlvr.metrics import M
from rlvr.types import Environment, Item, Scorer, completion_text

ItemReward = Callable[[Item, art.Trajectory], float | Awaitable[float]]
UNIT = (0.0, 1.0)  # the verifier contract's range
CLIP_FIX = (
    "return rewards in [0, 1], or give the reward as a task's reward= hook or set it on the "
    "trajectory with scorer=rollout, which keep any real number"
)
GroupFn = Callable[
    [art.TrajectoryGroup, Item],
    "list[float] | art.TrajectoryGroup | Awaitable[list[float] | art.TrajectoryGroup | None] | None",
]
log = logging.getLogger("rlvr.scoring.scorers")


def rescored(
    group: art.TrajectoryGroup,
    rewards: list[float],
    extra: list[dict[str, float | int | bool]] | None = None,
) -> art.TrajectoryGroup:
    """A copy of `group` with new rewards (and extra per-trajectory metrics)."""
    extra = extra or [{} for _ in rewards]
    return art.TrajectoryGroup(
        [
            t.model_copy(update={"reward": r, "metrics": {**t.metrics, **e}}, deep=True)
            for t, r, e in zip(group.trajectories, rewards, extra, strict=True)
        ],
        exceptions=[],
    )


async def _value(reward: ItemReward, item: Item, trajectory: art.Trajectory) -> float | None:
    """The reward (sync or async) as a finite number; None when it raised, is not a number or is
    not finite (a reward error)."""
    try:
        value = reward(item, trajectory)
        if inspect.isawaitable(value):
            value = await value
    except Exception:
        return None
    return _number(value)


class VerifierScorer:
    """A deterministic reward per trajectory (sync or async). An error (raised, NaN, not a
    number) is 0.0 and counted (`train/reward_errors`). With `bounds` (the verifier contract:
    [0, 1]) a value outside is clipped to them, counted (`train/reward_clipped`) and said once
    with the value and the item; without, the reward is kept as the task set it."""

    def __init__(
        self, reward: ItemReward, name: str = "verifier", bounds: tuple[float, float] | None = None
    ) -> None:
        self._reward = reward
        self.name, self.bounds = name, bounds
        self._counts: Counter[str] = Counter()
        self._said_clipped = False

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup:
        values = [await _value(self._reward, item, t) for t in group.trajectories]
        self._counts[M.REWARD_ERRORS] += sum(v is None for v in values)
        rewards = [self._bounded(0.0 if v is None else v, item) for v in values]
        return rescored(group, rewards, [{"reward_error": int(v is None)} for v in values])

    def _bounded(self, value: float, item: Item) -> float:
        if self.bounds is None:
            return value
        low, high = self.bounds
        kept = min(high, max(low, value))
        if kept != value:
            self._counts[M.REWARD_CLIPPED] += 1
            if not self._said_clipped:
                self._said_clipped = True
                log.warning(
                    "scorer %s: reward %g of item %s is outside the verifier contract's "
                    "[%g, %g] and was clipped to %g; each clipped reward is counted in %s (%s)",
                    self.name,
                    value,
                    item.id,
                    low,
                    high,
                    kept,
                    M.REWARD_CLIPPED,
                    CLIP_FIX,
                )
        return kept

    def pop_metrics(self) -> dict[str, float]:
        counts, self._counts = dict(self._counts), Counter()
        bounded: dict[str, float] = {M.REWARD_CLIPPED: 0.0} if self.bounds is not None else {}
        return {M.REWARD_ERRORS: 0.0, **bounded, **counts}


class RolloutScorer:
    """The reward each rollout set, as it is (ART's idiom: shaped rewards, negative ones too;
    group-relative advantages need no [0, 1]). A reward that is not a finite number is a reward
    error: its group is skipped and counted, never trained on as a made-up 0.0."""

    name = "rollout"

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        rewards = [_number(t.reward) for t in group.trajectories]
        bad = sum(r is None for r in rewards)
        if bad:
            self._counts[M.REWARD_ERRORS] += bad
            return None
        return rescored(group, [r for r in rewards if r is not None])

    def pop_metrics(self) -> dict[str, float]:
        counts, self._counts = dict(self._counts), Counter()
        return {M.REWARD_ERRORS: 0.0, **counts}


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]  # any object: float() tells numbers apart
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class LengthScorer:
    """Reward = reply length in characters / `full_length`, capped at 1. Hackable on purpose."""

    name = "length"

    def __init__(self, full_length: int = 200) -> None:
        self.full_length = full_length

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup:
        rewards = [min(1.0, len(completion_text(t)) / self.full_length) for t in group.trajectories]
        return rescored(group, rewards)

    def pop_metrics(self) -> dict[str, float]:
        return {}


class WeightedScorer:
    """reward = Σ wᵢ · partᵢ / Σ wᵢ; each part's reward is kept as `reward/<part>`. If any part
    cannot score the group, neither can the sum."""

    def __init__(self, parts: list[tuple[Scorer, float]]) -> None:
        if not parts or any(w < 0 for _, w in parts) or sum(w for _, w in parts) <= 0:
            raise ValueError("WeightedScorer needs parts with non-negative weights summing above 0")
        self.parts = parts
        self.name = "+".join(scorer.name for scorer, _ in parts)

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        scored = await asyncio.gather(*(scorer.score(group, item) for scorer, _ in self.parts))
        if any(s is None for s in scored):
            return None
        total = sum(w for _, w in self.parts)
        per_part = [[t.reward for t in s.trajectories] for s in scored if s is not None]
        rewards = [
            sum(w * rewards[i] for (_, w), rewards in zip(self.parts, per_part, strict=True))
            / total
            for i in range(len(group.trajectories))
        ]
        extra = [
            {
                f"reward/{scorer.name}": rewards_[i]
                for (scorer, _), rewards_ in zip(self.parts, per_part, strict=True)
            }
            for i in range(len(group.trajectories))
        ]
        return rescored(group, rewards, extra)

    def pop_metrics(self) -> dict[str, float]:
        merged: Counter[str] = Counter()
        for scorer, _ in self.parts:
            merged.update(scorer.pop_metrics())
        return dict(merged)


class GatedScorer:
    """reward = B where A passes (A ≥ threshold), else 0. E.g. a format check gating a judge."""

    def __init__(self, gate: Scorer, scorer: Scorer, threshold: float = 1.0) -> None:
        self.gate, self.scorer, self.threshold = gate, scorer, threshold
        self.name = f"{gate.name}>{scorer.name}"

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        gated, scored = await asyncio.gather(
            self.gate.score(group, item), self.scorer.score(group, item)
        )
        if gated is None or scored is None:
            return None
        passes = [t.reward >= self.threshold for t in gated.trajectories]
        rewards = [
            t.reward if ok else 0.0 for t, ok in zip(scored.trajectories, passes, strict=True)
        ]
        extra = [
            {f"reward/{self.gate.name}": g.reward, f"reward/{self.scorer.name}": s.reward}
            for g, s in zip(gated.trajectories, scored.trajectories, strict=True)
        ]
        return rescored(group, rewards, extra)

    def pop_metrics(self) -> dict[str, float]:
        merged: Counter[str] = Counter(self.gate.pop_metrics())
        merged.update(self.scorer.pop_metrics())
        return dict(merged)


class GroupFunctionScorer:
    """A plain function over a group as a Scorer: `fn(group, item)` (sync or async) returns one
    reward per trajectory, a scored group, or None (cannot score). An exception or a wrong-sized
    answer is retried, then counted as `train/reward_errors` and the group is skipped: never a
    fake 0.0."""

    def __init__(self, fn: GroupFn, name: str, retries: int = 2) -> None:
        self.fn, self.name, self.retries = fn, name, retries
        self._counts: Counter[str] = Counter()

    async def _once(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        result = self.fn(group, item)
        if inspect.isawaitable(result):
            result = await result
        if result is None or isinstance(result, art.TrajectoryGroup):
            return result
        rewards = [float(r) for r in result]
        if len(rewards) != len(group.trajectories):
            raise ValueError(f"{len(rewards)} rewards for {len(group.trajectories)} trajectories")
        return rescored(group, rewards)

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        for attempt in range(self.retries + 1):
            try:
                return await self._once(group, item)
            except Exception as error:
                self._counts[M.REWARD_ERRORS] += 1
                log.warning(
                    "scorer %s failed on %s (try %d): %s", self.name, item.id, attempt + 1, error
                )
        return None

    def pop_metrics(self) -> dict[str, float]:
        counts, self._counts = dict(self._counts), Counter()
        return {M.REWARD_ERRORS: 0.0, **counts}


def group_scorer(fn: GroupFn, name: str | None = None, retries: int = 2) -> Scorer:
    """Lift `fn(group, item) -> list[float] | TrajectoryGroup | None` to a Scorer."""
    return GroupFunctionScorer(fn, name or str(getattr(fn, "__name__", "group_scorer")), retries)


def reward_scorer(fn: Callable[[str, str], float], name: str | None = None) -> Scorer:
    """Lift a verifier-contract `compute_reward(completion, ground_truth) -> float` to a Scorer
    over the last assistant message and the item's answer; its values are bounded to [0, 1]."""
    return VerifierScorer(
        lambda item, t: fn(completion_text(t), item.answer or ""),
        name or str(getattr(fn, "__name__", "reward")),
        bounds=UNIT,
    )


def verifier_scorer(environment: Environment) -> Scorer:
    """`scorer=verifier`: the environment's own deterministic training reward, any real number as
    the task returns it (ART's idiom: negative and shaped rewards included)."""
    return VerifierScorer(environment.reward)
