"""Preflight (the GRPO template's advice): run the reward on sampled items before training and
refuse a constant reward, which would give GRPO nothing to learn from."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from rich.console import Console

from rlvr.config import TrainConfig
from rlvr.metrics import group_stats
from rlvr.training.backends import open_policy
from rlvr.training.evaluation import rollout_groups
from rlvr.training.failures import FailureLog, require_some
from rlvr.training.session import resolve
from rlvr.training.split import split_items
from rlvr.types import Sampling


class PreflightReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    rewards: list[float]
    groups: int
    skipped: int
    no_signal: int
    all_zero: int
    all_one: int
    truncated_rate: float

    @property
    def constant(self) -> bool:
        return len(set(self.rewards)) <= 1

    def histogram(self) -> dict[float, int]:
        return dict(sorted(Counter(round(r, 2) for r in self.rewards).items()))


async def preflight(cfg: TrainConfig, items: int = 4) -> PreflightReport:
    async with AsyncExitStack() as stack:
        cfg, scenario, scorer, _ = await resolve(cfg, stack, None, None, resuming=True)
        split = split_items(
            scenario.load(), val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.seed
        )
        batch = random.Random(cfg.seed).sample(split.train, min(items, len(split.train)))
        with tempfile.TemporaryDirectory(prefix="rlvr-preflight-") as tmp:
            async with open_policy(cfg, Path(tmp) / "preflight") as policy:
                sampling = Sampling.from_config(cfg, "train")
                groups, done, _, failures = await rollout_groups(
                    scenario.rollout,
                    policy,
                    batch,
                    cfg.group_size,
                    sampling,
                    asyncio.Semaphore(cfg.rollout_concurrency),
                    "preflight",
                )
                FailureLog(Console(stderr=True)).report(failures, "preflight")
                require_some(len(done), failures, "preflight")
        scored = await asyncio.gather(
            *(scorer.score(g, i) for g, i in zip(groups, done, strict=True))
        )
    kept = [g for g in scored if g is not None]
    stats = group_stats(kept)
    return PreflightReport(
        rewards=[t.reward for g in kept for t in g.trajectories],
        groups=len(groups),
        skipped=len(groups) - len(kept),
        no_signal=stats.no_signal,
        all_zero=stats.all_zero,
        all_one=stats.all_one,
        truncated_rate=stats.truncated_rate,
    )
