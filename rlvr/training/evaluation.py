"""Rollouts of items through ART's gather, and held-out accuracy from the environment's ground
truth."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

import art
from pydantic import BaseModel, ConfigDict

from rlvr import art_private
from rlvr.task_api.rollout_model import RolloutModel
from rlvr.training.backends import Policy
from rlvr.training.failures import Failure, FailureLog, failures_of, require_some
from rlvr.training.progress import Progress
from rlvr.types import Item, Sampling

RolloutFn = Callable[[art.Model[Any, Any], Item, Sampling], Awaitable[art.Trajectory]]

CheckFn = Callable[[Item, art.Trajectory], Awaitable[float]]


class Evaluated(BaseModel):
    """Held-out items evaluated once each by the ground truth: the accuracy over the completed
    items, their groups (one trajectory each) and items, and the failures of the rest."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    accuracy: float
    groups: list[art.TrajectoryGroup]
    items: list[Item]
    failures: list[Failure]

    def scores(self) -> dict[str, float]:
        """Item id -> its score."""
        return {
            i.id: float(g.trajectories[0].reward)
            for i, g in zip(self.items, self.groups, strict=True)
        }


class Validated(Evaluated):
    """A validation pass: its evaluation and how long it took (the test beside it not counted)."""

    seconds: float


def _pending_group(
    rollouts: Iterable[Awaitable[art.Trajectory]], item_id: str
) -> Awaitable[art.TrajectoryGroup]:
    """ART's group of pending rollouts: its `__new__` returns an awaitable for awaitables, which
    its annotations cannot tell a type checker (a `__new__` of another type reads as the class)."""
    return cast(
        "Awaitable[art.TrajectoryGroup]",
        art.TrajectoryGroup(rollouts, metadata={"item_id": item_id}),
    )


async def rollout_groups(
    rollout: RolloutFn,
    policy: Policy,
    items: list[Item],
    n: int,
    sampling: Sampling,
    limit: asyncio.Semaphore,
    progress: Progress,
    after_each: Callable[[art.TrajectoryGroup], Awaitable[art.TrajectoryGroup]] | None = None,
    shown: str = "reward",
) -> tuple[list[art.TrajectoryGroup], list[Item], int, list[Failure]]:
    """n rollouts per item through ART's gather. Returns (groups with trajectories, their items,
    rollout errors, the failures behind them). A rollout that raises is dropped from its group
    and counted, never retried silently.
    `after_each` runs on each group as soon as its own rollouts are done (ART's hook), so scoring
    one group overlaps the rollouts of the others; then `progress` advances by one, noting the
    mean reward so far under the name `shown`. The k-th rollout of an item samples with its own
    seed (`Sampling.for_rollout`): the same seed replays it, whatever the timing."""

    async def one(item: Item, sample: int) -> art.Trajectory:
        own = sampling.for_rollout(item.id, sample)
        async with limit:
            # A RolloutModel stands in for the art.Model it wraps (what it does not fill in is
            # the model's), which is what a rollout is written against.
            model = cast("art.Model[Any, Any]", RolloutModel(policy.model, own))
            trajectory = await rollout(model, item, own)
        trajectory.metadata["item_id"] = item.id
        return trajectory

    rewards: list[float] = []

    async def finished(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
        done = await after_each(group) if after_each and group.trajectories else group
        rewards.extend(t.reward for t in done.trajectories)
        progress.advance(note=f"{shown} {sum(rewards) / len(rewards):.2f}" if rewards else "")
        return done

    by_id = {item.id: item for item in items}
    groups = await art_private.gather_groups(
        (_pending_group((one(item, k) for k in range(n)), item.id) for item in items),
        after_each=finished,
        max_exceptions=len(items) * n,
    )
    errors = sum(len(g.exceptions) for g in groups) + n * (len(items) - len(groups))
    kept = [g for g in groups if g.trajectories]
    return kept, [by_id[str(g.metadata["item_id"])] for g in kept], errors, failures_of(groups)


async def evaluate(
    rollout: RolloutFn,
    check: CheckFn,
    policy: Policy,
    items: list[Item],
    sampling: Sampling,
    limit: asyncio.Semaphore,
    desc: str,
    failure_log: FailureLog | None = None,
) -> Evaluated:
    """Accuracy on held-out items: one rollout each, scored by the environment's ground truth.
    A rollout that raised is an error of the code, not an answer of the policy: it is reported
    (`failure_log`) and counted, and the accuracy is over the completed items; when every
    rollout raised, RunFailed."""
    by_id = {item.id: item for item in items}

    async def checked(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
        trajectory = group.trajectories[0]
        trajectory.reward = await check(by_id[str(group.metadata["item_id"])], trajectory)
        return group

    with Progress(desc, len(items), "item") as progress:
        groups, done, _, failures = await rollout_groups(
            rollout, policy, items, 1, sampling, limit, progress, checked, shown="correct"
        )
    if failure_log is not None:
        failure_log.report(failures, desc)
    require_some(len(done), failures, desc)
    checks = [g.trajectories[0].reward for g in groups]
    accuracy = sum(checks) / len(done) if done else 0.0
    return Evaluated(accuracy=accuracy, groups=groups, items=done, failures=failures)
