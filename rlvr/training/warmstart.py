"""Warm start: supervised fine-tuning on demonstrations before RL.

A scenario that can play its own items correctly (a scripted oracle through the same tools and
protocol as the policy) offers `demonstrate(item) -> art.Trajectory` with plain dict assistant
turns. Before RL, `sft_steps` batches of such demonstrations of *training* items — only those the
ground truth accepts — train the policy with cross-entropy on the assistant tokens through the
backend's own SFT path (`rlvr.art_private.train_sft`, ART's `model.train_sft`; ART's tokenisation). It gives a small
policy the protocol and the answer format, so RL starts from groups that sometimes succeed.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import art
from art.types import TrainSFTConfig

from rlvr import art_private
from rlvr.config import ConfigError, TrainConfig
from rlvr.types import Item, Scenario


class WarmMetric:
    """Keys of the warm-start row in metrics.jsonl (written once, before the baseline)."""

    DEMONSTRATIONS = "warm/demonstrations"  # demonstrations trained on (correct ones only)
    REJECTED = "warm/rejected"  # demonstrations the ground truth failed (left out)
    LOSS_FIRST = "warm/loss_first"  # cross-entropy per assistant token, first batch
    LOSS_LAST = "warm/loss_last"  # ... last batch (measured before its update)
    VAL_BEFORE = "warm/val_before"  # validation accuracy before the warm start
    SECONDS = "warm/seconds"


def check_can_demonstrate(cfg: TrainConfig, scenario: Scenario) -> None:
    """A warm start needs `scenario.demonstrate`; say so before anything is written."""
    if cfg.sft_steps > 0 and scenario.demonstrate is None:
        raise ConfigError(
            f"config: sft_steps={cfg.sft_steps}: task {scenario.name} has no demonstrate(item) "
            "to warm-start from; set sft_steps=0 or add one to the scenario"
        )


def demo_items(train: list[Item], count: int) -> list[Item]:
    """`count` training items, cycling through them in order (epochs when there are fewer)."""
    return [train[i % len(train)] for i in range(count)] if train else []


async def demonstrations(scenario: Any, items: list[Item]) -> tuple[list[art.Trajectory], int]:
    """The scenario's demonstrations of `items` that its own check accepts, and how many it
    rejected (an oracle that fails an item must not teach the failure)."""

    async def one(item: Item) -> art.Trajectory | None:
        made = scenario.demonstrate(item)
        demo = await made if inspect.isawaitable(made) else made
        return demo if demo is not None and await scenario.check(item, demo) >= 1.0 else None

    made = await asyncio.gather(*(one(i) for i in items))
    kept = [d for d in made if d is not None]
    return kept, len(made) - len(kept)


async def warm_start(
    cfg: TrainConfig, scenario: Any, model: art.TrainableModel, train: list[Item]
) -> dict[str, float]:
    """Train `cfg.sft_steps` batches of demonstrations; returns the warm-start metrics."""
    started = time.monotonic()
    demos, rejected = await demonstrations(
        scenario, demo_items(train, cfg.sft_steps * cfg.sft_batch_size)
    )
    if not demos:
        raise ConfigError(
            f"warm start: task {scenario.name} produced no correct demonstration of "
            f"{rejected} training items; check its demonstrate()"
        )
    config = TrainSFTConfig(learning_rate=cfg.sft_learning_rate, batch_size=cfg.sft_batch_size)
    losses = [float(m["loss"]) async for m in art_private.train_sft(model, demos, config)]
    return {
        WarmMetric.DEMONSTRATIONS: len(demos),
        WarmMetric.REJECTED: rejected,
        WarmMetric.LOSS_FIRST: losses[0] if losses else float("nan"),
        WarmMetric.LOSS_LAST: losses[-1] if losses else float("nan"),
        WarmMetric.SECONDS: time.monotonic() - started,
    }
