"""Rollouts of items through ART's gather, and held-out accuracy from the scenario's ground truth."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import art

from rlvr.tasks.rollout_model import RolloutModel
from rlvr.training.backends import Policy
from rlvr.training.failures import Failure, FailureLog, failures_of, require_some
from rlvr.types import Item, Sampling

RolloutFn = Callable[[art.Model, Item, Sampling], Awaitable[art.Trajectory]]

CheckFn = Callable[[Item, art.Trajectory], Awaitable[float]]


async def rollout_groups(
    rollout: RolloutFn,
    policy: Policy,
    items: list[Item],
    n: int,
    sampling: Sampling,
    limit: asyncio.Semaphore,
    desc: str,
    after_each: Callable[[art.TrajectoryGroup], Awaitable[art.TrajectoryGroup]] | None = None,
) -> tuple[list[art.TrajectoryGroup], list[Item], int, list[Failure]]:
    """n rollouts per item through ART's gather. Returns (groups with trajectories, their items,
    rollout errors, the failures behind them). A rollout that raises is dropped from its group
    and counted, never retried silently.
    `after_each` runs on each group as soon as its own rollouts are done (ART's hook), so scoring
    one group overlaps the rollouts of the others."""

    async def one(item: Item) -> art.Trajectory:
        async with limit:
            trajectory = await rollout(RolloutModel(policy.model, sampling), item, sampling)
        trajectory.metadata["item_id"] = item.id
        return trajectory

    by_id = {item.id: item for item in items}
    groups = await art.gather_trajectory_groups(
        (
            art.TrajectoryGroup((one(item) for _ in range(n)), metadata={"item_id": item.id})
            for item in items
        ),
        pbar_desc=desc,
        max_exceptions=len(items) * n,
        after_each=(lambda g: after_each(g) if g.trajectories else _same(g))
        if after_each
        else None,
    )
    errors = sum(len(g.exceptions) for g in groups) + n * (len(items) - len(groups))
    kept = [g for g in groups if g.trajectories]
    return kept, [by_id[str(g.metadata["item_id"])] for g in kept], errors, failures_of(groups)


async def _same(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
    return group


async def evaluate(
    rollout: RolloutFn,
    check: CheckFn,
    policy: Policy,
    items: list[Item],
    sampling: Sampling,
    limit: asyncio.Semaphore,
    desc: str,
    failure_log: FailureLog | None = None,
) -> tuple[float, list[art.TrajectoryGroup], list[Item], list[Failure]]:
    """Accuracy on held-out items: one rollout each, scored by the scenario's ground truth.
    A rollout that raised is an error of the code, not an answer of the policy: it is reported
    (`failure_log`) and counted, and the accuracy is over the completed items; when every
    rollout raised, RunFailed."""
    groups, done, _, failures = await rollout_groups(
        rollout, policy, items, 1, sampling, limit, desc
    )
    if failure_log is not None:
        failure_log.report(failures, desc)
    require_some(len(done), failures, desc)
    checks = await asyncio.gather(
        *(check(item, g.trajectories[0]) for g, item in zip(groups, done, strict=True))
    )
    for group, value in zip(groups, checks, strict=True):
        group.trajectories[0].reward = value
    return sum(checks) / len(done) if done else 0.0, groups, done, failures
