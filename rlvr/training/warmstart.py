"""Warm start: supervised fine-tuning on demonstrations before RL.

An environment that can play its own items correctly (a scripted oracle through the same tools and
protocol as the policy) offers `demonstrate(item) -> art.Trajectory` with plain dict assistant
turns. Before RL, `sft_steps` batches of such demonstrations of *training* items — only those the
ground truth accepts — train the policy with cross-entropy on the assistant tokens through the
backend's own SFT path (`rlvr.art_private.train_sft`, ART's `model.train_sft`; ART's
tokenisation). It gives a small policy the protocol and the answer format, so RL starts from
groups that sometimes succeed.

The warm start fits the budget: with `max_minutes` set it may take at most `sft_budget_share` of
it, on any CPU. Demonstrations are counted in tokens (what a step forwards and back-propagates): the first
step is trained alone to measure seconds per token, then as many further steps as that speed fits
in what is left, re-measured after each call. What the budget cut (steps, tokens) is said once and
recorded in the warm-start row.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import art
from art.types import TrainSFTConfig
from rich.console import Console

from rlvr import art_private
from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import WarmMetric
from rlvr.runs.records import WarmStartRow
from rlvr.training.progress import Clock, Progress, console
from rlvr.types import Environment, Item, derived_seed

# The share of `max_minutes` the warm start may take by default (`sft_budget_share`), so RL always
# keeps the rest (validation, steps, the test split).
WARM_SHARE: float = RunConfig.model_fields["sft_budget_share"].default
CHARS_PER_TOKEN = 4  # the estimate where no tokenizer of the policy can be loaded

TokenCount = Callable[[art.Trajectory], int]


def check_can_demonstrate(cfg: RunConfig, environment: Environment) -> None:
    """A warm start needs `environment.demonstrate`; say so before anything is written."""
    if cfg.sft_steps > 0 and environment.demonstrate is None:
        raise ConfigError(
            f"config: sft_steps={cfg.sft_steps}: task {environment.name} has no demonstrate(item) "
            "to warm-start from; set sft_steps=0 or add one to the environment"
        )


def demo_items(train: list[Item], count: int, seed: int) -> list[Item]:
    """`count` training items in an order the run's `seed` draws: each epoch a fresh permutation of
    all of them (epochs when there are fewer). The training seed picks them, not the split's, so
    that seeds on the same data (`data_seed`) warm-start from different demonstrations."""
    drawn: list[Item] = []
    epoch = 0
    while train and len(drawn) < count:
        order = list(train)
        random.Random(derived_seed(seed, "demonstrations", epoch)).shuffle(order)
        drawn += order[: count - len(drawn)]
        epoch += 1
    return drawn


def warm_budget_s(max_minutes: float | None, share: float) -> float | None:
    """The seconds a warm start may take: `share` of the run's budget (None: no budget)."""
    return None if max_minutes is None else max_minutes * 60 * share


async def demonstrated(
    environment: Environment, items: list[Item], progress: Progress | None = None
) -> list[art.Trajectory | None]:
    """Each item's demonstration where the environment's own check accepts it, else None (an oracle
    that fails an item must not teach the failure); in the items' order."""
    demonstrate = environment.demonstrate
    assert demonstrate is not None, "check_can_demonstrate runs before any demonstration"

    async def one(item: Item) -> art.Trajectory | None:
        made: art.Trajectory | Awaitable[art.Trajectory] = demonstrate(item)
        demo = await made if inspect.isawaitable(made) else made
        passed = demo is not None and await environment.check(item, demo) >= 1.0
        if progress is not None:
            progress.advance()
        return demo if passed else None

    return list(await asyncio.gather(*(one(i) for i in items)))


async def demonstrations(
    environment: Environment, items: list[Item], progress: Progress | None = None
) -> tuple[list[art.Trajectory], int]:
    """The environment's demonstrations of `items` that its own check accepts, and how many it
    rejected."""
    made = await demonstrated(environment, items, progress)
    kept = [d for d in made if d is not None]
    return kept, len(made) - len(kept)


def token_counter(model: str, out: Console = console) -> TokenCount:
    """Tokens of a demonstration as the policy's tokenizer renders it (its chat template, with
    the trajectory's tools). Where no tokenizer can be loaded or a trajectory cannot be rendered,
    characters / 4, said once."""
    from transformers import AutoTokenizer

    from rlvr.engine import ALIASES, ModelError, resolve_model

    said: list[str] = []

    def estimate(trajectory: art.Trajectory, why: str) -> int:
        if not said:
            said.append(why)
            out.print(f"warm start: demonstration tokens estimated as characters / 4 ({why})")
        return len(str(trajectory.messages())) // CHARS_PER_TOKEN

    # A hub id (a remote backend's model) fetches its tokenizer alone, never the weights.
    local = model in ALIASES or Path(model).expanduser().is_dir()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)) if local else model)
    except (ModelError, OSError, ValueError) as error:
        why = f"no tokenizer for {model}: {type(error).__name__}"
        return lambda t: estimate(t, why)

    def count(trajectory: art.Trajectory) -> int:
        try:
            rendered = tokenizer.apply_chat_template(
                trajectory.messages(),
                tools=trajectory.tools or None,
                tokenize=True,
            )
        except Exception as error:  # a template that cannot render these turns
            return estimate(trajectory, f"the chat template failed: {type(error).__name__}")
        ids = rendered["input_ids"] if isinstance(rendered, Mapping) else rendered
        return len(ids)

    return count


def steps_that_fit(
    step_tokens: list[int], seconds_per_token: float | None, remaining_s: float | None
) -> int:
    """How many of the next steps (their tokens) to train in one call: all of them without a
    budget; the first alone while the speed is unmeasured; then as many as the measured speed
    fits in the remaining seconds (0: not even the next one)."""
    if remaining_s is None:
        return len(step_tokens)
    if seconds_per_token is None:
        return min(1, len(step_tokens))
    spent, fit = 0.0, 0
    for tokens in step_tokens:
        spent += tokens * seconds_per_token
        if spent > remaining_s:
            break
        fit += 1
    return fit


async def warm_start(
    cfg: RunConfig,
    environment: Environment,
    model: art.TrainableModel[Any, Any],
    train: list[Item],
    *,
    share: float = WARM_SHARE,
    room_s: float | None = None,
    count_tokens: TokenCount | None = None,
    clock: Clock = time.monotonic,
    out: Console = console,
) -> WarmStartRow:
    """Train `cfg.sft_steps` batches of demonstrations within `share` of `cfg.max_minutes` and
    within `room_s` (what the cap leaves after the evaluations to come; rlvr.training.work);
    returns the warm-start row. `count_tokens` defaults to the policy's tokenizer; `clock` is
    the budget's clock."""
    started = clock()
    shared = warm_budget_s(cfg.max_minutes, share)
    budget = shared if room_s is None or (shared is not None and shared <= room_s) else room_s
    items = demo_items(train, cfg.sft_steps * cfg.sft_batch_size, cfg.seed)
    with Progress("warm start: demonstrations", len(items), "demonstration", out, clock) as bar:
        demos, rejected = await demonstrations(environment, items, bar)
    if not demos:
        raise ConfigError(
            f"warm start: task {environment.name} produced no correct demonstration of "
            f"{rejected} training items; check its demonstrate()"
        )
    if rejected:
        out.print(
            f"warm start: {rejected} of {len(items)} demonstrations failed the task's own check "
            "and are left out",
            highlight=False,
        )
    count = count_tokens or token_counter(cfg.model, out)
    size = cfg.sft_batch_size
    steps = [demos[i : i + size] for i in range(0, len(demos), size)]
    tokens = [sum(count(d) for d in step) for step in steps]
    # The first step trains even past a share (it measures the speed), not past what a cap leaves.
    trainable = steps if room_s is None or room_s > 0 else []
    losses, done = await train_within(cfg, model, trainable, tokens, budget, started, clock, out)
    values: dict[str, float | None] = {
        WarmMetric.DEMONSTRATIONS: sum(len(step) for step in steps[:done]),
        WarmMetric.REJECTED: rejected,
        WarmMetric.LOSS_FIRST: losses[0] if losses else float("nan"),
        WarmMetric.LOSS_LAST: losses[-1] if losses else float("nan"),
        WarmMetric.STEPS: done,
        WarmMetric.STEPS_PLANNED: len(steps),
        WarmMetric.TOKENS: sum(tokens[:done]),
        WarmMetric.TOKENS_PLANNED: sum(tokens),
        WarmMetric.BUDGET_S: budget,
        WarmMetric.CUT: int(done < len(steps)),
        WarmMetric.SECONDS: clock() - started,
    }
    row = WarmStartRow.model_validate(values)
    if done < len(steps):
        print_cut(row, cfg.max_minutes, share if budget == shared else None, out)
    return row


async def train_within(
    cfg: RunConfig,
    model: art.TrainableModel[Any, Any],
    steps: list[list[art.Trajectory]],
    tokens: list[int],
    budget: float | None,
    started: float,
    clock: Clock,
    out: Console,
) -> tuple[list[float], int]:
    """SFT on `steps` through the backend, as many as fit in `budget` seconds from `started`
    (rlvr.training.warmstart.steps_that_fit): (each trained batch's loss, steps trained)."""
    rates = sft_rates(cfg, len(steps))
    losses: list[float] = []
    done, spent_s = 0, 0.0
    with Progress("warm start: SFT", len(steps), "step", out, clock) as bar:
        while done < len(steps):
            rate = spent_s / sum(tokens[:done]) if done else None
            remaining = None if budget is None else budget - (clock() - started)
            take = steps_that_fit(tokens[done:], rate, remaining)
            if take == 0:
                break
            began = clock()
            batch = [d for step in steps[done : done + take] for d in step]
            config = TrainSFTConfig(
                learning_rate=rates[done : done + take], batch_size=cfg.sft_batch_size
            )
            async for metrics in art_private.train_sft(model, batch, config):
                losses.append(float(metrics["loss"]))
                bar.advance(note=f"loss {losses[-1]:.3f}")
            spent_s += clock() - began
            done += take
    return losses, done


def sft_rates(cfg: RunConfig, steps: int) -> list[float]:
    """Each planned warm-start step's learning rate: ART's schedule over the planned steps and one
    more, so a decay reaches 0 just past the last step (which then still trains), and a budget
    that cuts the warm start short cuts the schedule, not its shape."""
    from art.utils.sft import create_lr_schedule

    return create_lr_schedule(steps + 1, cfg.sft_learning_rate, method=cfg.sft_schedule)[:steps]


def print_cut(
    row: WarmStartRow, max_minutes: float | None, share: float | None, out: Console
) -> None:
    """What the budget cut; `share`: the warm start's share of the cap, None where what the cap
    leaves after the evaluations still to come was less."""
    of = f"{share:.0%} of" if share is not None else "what the evaluations to come leave of"
    out.print(
        f"[yellow]warm start cut by its budget[/] ({of} max_minutes={max_minutes:g}: "
        f"{row.budget_s or 0:.0f}s): trained {row.steps or 0:.0f} of "
        f"{row.steps_planned or 0:.0f} steps, {row.tokens or 0:,.0f} of "
        f"{row.tokens_planned or 0:,.0f} demonstration tokens; RL keeps the rest of the "
        "budget",
        highlight=False,
    )
