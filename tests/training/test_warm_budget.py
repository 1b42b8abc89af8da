"""The warm start fits the budget: at most its share of `max_minutes` on any CPU, demonstrations
counted in tokens, and what the budget cut (steps, tokens) said and recorded.

A CPU's speed is simulated by a backend whose SFT path advances a fake clock by the tokens it
trains (fault injection of slowness: the warm start's planning, the email task's real oracle
demonstrations and the policy's real tokenizer are the real ones). The slow test runs the real
backend under a clock that runs ten thousand times fast."""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import art
import pytest
from rich.console import Console

import rlvr
from rlvr.task_api.plugins import resolve_task, task_config
from rlvr.training.split import split_items
from rlvr.training.warmstart import (
    WARM_SHARE,
    demo_items,
    demonstrations,
    sft_rates,
    steps_that_fit,
    token_counter,
    warm_budget_s,
    warm_start,
)
from rlvr.types import Item


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowCPU:
    """A backend's SFT path on a CPU that trains `seconds_per_token`, plus `save_s` per call
    (its checkpoint), on the fake clock; it records the demonstrations of each call."""

    def __init__(
        self, clock: FakeClock, seconds_per_token: float, count: Any, save_s: float = 1.0
    ) -> None:
        self.clock, self.rate, self.count, self.save_s = clock, seconds_per_token, count, save_s
        self.calls: list[int] = []
        self.rates: list[float] = []  # each step's learning rate, as the calls gave them

    async def _train_sft(
        self, model: Any, trajectories: Iterable[art.Trajectory], config: Any, dev: Any
    ) -> AsyncIterator[dict[str, float]]:
        demos = list(trajectories)
        self.calls.append(len(demos))
        self.rates += config.learning_rate
        size = int(config.batch_size)
        for start in range(0, len(demos), size):
            batch = demos[start : start + size]
            self.clock.now += sum(self.count(d) for d in batch) * self.rate
            yield {"loss": 2.0 / (1 + len(self.calls) + start)}
        self.clock.now += self.save_s


class Model:
    """What the warm start reaches the backend through (`model.backend()`)."""

    def __init__(self, backend: SlowCPU) -> None:
        self._backend = backend

    def backend(self) -> SlowCPU:
        return self._backend


@pytest.mark.parametrize(
    ("tokens", "rate", "remaining", "fit"),
    [
        ([100] * 5, None, None, 5),  # no budget: everything in one call
        ([100] * 5, None, 10.0, 1),  # speed unmeasured: the first step alone
        ([100] * 5, None, -5.0, 1),  # ... even past the budget: one step is the least
        ([100] * 5, 0.1, 35.0, 3),
        ([100, 300, 100], 0.1, 35.0, 1),  # a long step does not fit: none after it either
        ([100] * 5, 0.1, 5.0, 0),
        ([], 0.1, 100.0, 0),
    ],
)
def test_steps_are_planned_in_tokens(
    tokens: list[int], rate: float | None, remaining: float | None, fit: int
) -> None:
    assert steps_that_fit(tokens, rate, remaining) == fit


@pytest.mark.parametrize(("minutes", "seconds"), [(None, None), (27, 27 * 60 * WARM_SHARE)])
def test_the_budget_is_a_share_of_max_minutes(minutes: float | None, seconds: float | None) -> None:
    assert warm_budget_s(minutes, WARM_SHARE) == seconds


@pytest.fixture(scope="module")
def email() -> tuple[Any, Any, list[Item], list[int]]:
    """The email task at its defaults: config, environment, training items and the real token
    counts of its warm start's demonstrations."""
    import asyncio

    cfg = task_config("email", judge="none", max_minutes=27)  # the defaults cap no minutes
    environment = resolve_task("email").build(cfg)
    train = split_items(
        environment.load(), val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.data_seed
    ).train
    count = token_counter(cfg.model)
    items = demo_items(train, cfg.sft_steps * cfg.sft_batch_size, cfg.seed)
    demos, _ = asyncio.run(demonstrations(environment, items))
    return cfg, environment, train, [count(d) for d in demos]


@pytest.mark.parametrize(
    ("cpu", "full_warm_start_s"),
    [("AVX2-only (fp32)", 943.0), ("development (bf16 units)", 485.0), ("very slow", 4000.0)],
)
async def test_the_email_warm_start_stays_within_its_share_on_any_cpu(
    email: tuple[Any, Any, list[Item], list[int]], cpu: str, full_warm_start_s: float
) -> None:
    """The whole email warm start as long as it took on each kind of CPU (docs/results/performance.md)
    and longer, under a cap of 27 minutes."""
    cfg, environment, train, tokens = email
    clock = FakeClock()
    count = token_counter(cfg.model)
    backend = SlowCPU(clock, full_warm_start_s / sum(tokens), count)
    buffer = io.StringIO()
    row = await warm_start(
        cfg,
        environment,
        Model(backend),  # type: ignore[arg-type]
        train,
        count_tokens=count,
        clock=clock,
        out=Console(file=buffer, width=200),
    )
    budget = 27 * 60 * WARM_SHARE
    assert row.budget_s == budget
    assert row.seconds <= budget, (cpu, row)
    planned = cfg.sft_steps
    assert row.steps_planned == planned
    assert row.tokens_planned == sum(tokens)
    steps = int(row.steps)
    assert row.tokens == sum(tokens[: steps * cfg.sft_batch_size])
    assert row.demonstrations == steps * cfg.sft_batch_size
    assert sum(backend.calls) == row.demonstrations
    assert backend.calls[0] == cfg.sft_batch_size  # the first step alone measures the speed
    said = [x for x in buffer.getvalue().splitlines() if x.startswith("warm start cut")]
    if full_warm_start_s + len(backend.calls) <= budget:
        assert steps == planned and row.cut == 0 and not said
        assert len(backend.calls) == 2  # measured, then the rest in one call
    else:
        assert 1 <= steps < planned and row.cut == 1
        # as much as fits: one more step would not have
        per_step = full_warm_start_s / planned
        assert row.seconds + per_step > budget * 0.9 or steps == 1
        assert said == [
            f"warm start cut by its budget ({WARM_SHARE:.0%} of max_minutes=27: {budget:.0f}s): "
            f"trained {steps} of {planned} steps, {row.tokens:,.0f} of "
            f"{sum(tokens):,.0f} demonstration tokens; RL keeps the rest of the budget"
        ]


async def _rollout(model: Any, item: Item, sampling: Any) -> art.Trajectory:
    raise AssertionError("not rolled out here")


def _demo(item: Item) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": item.prompt},
            {"role": "assistant", "content": item.answer or ""},
        ],
        reward=1.0,
    )


def sums() -> rlvr.Environment:
    """A task of six items whose oracle is wrong on every third (two of any six demonstrations)."""

    async def demonstrate(item: Item) -> art.Trajectory:
        return _demo(item.model_copy(update={"answer": "?"}) if int(item.id) % 3 == 0 else item)

    return rlvr.environment(
        name="sums",
        load=lambda: [{"id": str(n), "prompt": f"{n}+1", "answer": str(n + 1)} for n in range(6)],
        rollout=_rollout,
        check=lambda item, t: float(rlvr.completion_text(t) == item.answer),
        demonstrate=demonstrate,
    )


@pytest.mark.parametrize(("minutes", "calls"), [(None, [4]), (600, [2, 2])])
async def test_without_a_budget_one_call_and_rejected_demonstrations_are_said(
    minutes: float | None, calls: list[int]
) -> None:
    environment = sums()
    cfg = rlvr.build_config(
        {"task": "x", "sft_steps": 3, "sft_batch_size": 2, "max_minutes": minutes}
    )
    clock = FakeClock()
    backend = SlowCPU(clock, 0.01, lambda t: 10)
    buffer = io.StringIO()
    row = await warm_start(
        cfg,
        environment,
        Model(backend),  # type: ignore[arg-type]
        environment.load(),
        count_tokens=lambda t: 10,
        clock=clock,
        out=Console(file=buffer, width=200),
    )
    assert backend.calls == calls
    assert row.rejected == 2 and row.demonstrations == 4  # of 6 made
    assert row.steps == row.steps_planned == 2
    assert row.cut == 0 and row.tokens == 40
    assert "2 of 6 demonstrations failed the task's own check" in buffer.getvalue()
    assert not math.isnan(row.loss_last)


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("minutes", [None, 600])  # one call, or steps over several calls
async def test_the_schedule_spans_the_planned_steps_across_calls(
    schedule: str, minutes: float | None
) -> None:
    environment = sums()
    cfg = rlvr.build_config(
        {"task": "x", "sft_steps": 6, "sft_batch_size": 2, "sft_schedule": schedule}
        | {"sft_learning_rate": 1e-3, "max_minutes": minutes}
    )
    clock = FakeClock()
    backend = SlowCPU(clock, 0.01, lambda t: 10)
    await warm_start(
        cfg,
        environment,
        Model(backend),  # type: ignore[arg-type]
        environment.load(),  # two epochs of 6 items, 4 of each correct: 8 demonstrations, 4 steps
        count_tokens=lambda t: 10,
        clock=clock,
        out=Console(file=io.StringIO()),
    )
    planned = sft_rates(cfg, 4)
    assert backend.rates == pytest.approx(planned)
    assert len(backend.calls) == (1 if minutes is None else 2)
    assert planned[0] == pytest.approx(1e-3)
    if schedule == "constant":
        assert planned == pytest.approx([1e-3] * 4)
    else:  # decays, and the last step still trains
        assert all(a > b > 0 for a, b in itertools.pairwise(planned))


@pytest.mark.slow
async def test_a_real_warm_start_on_a_slow_clock_trains_one_step_and_says_so(
    tmp_path: Path,
) -> None:
    """The real backend (SmolLM2, LoRA) under a clock ten thousand times fast: the first step
    alone passes the budget, so it is the only one, and the row and the console say so."""
    import time

    from rlvr.task_api.api import Task
    from rlvr.training.backends import open_policy
    from tests.helpers.agents import USER_AGENT

    agent = tmp_path / "capitals_agent.py"
    agent.write_text(USER_AGENT.replace("PROTOCOL", "text"))
    from rlvr.task_api.plugins import load_reference

    task = Task(name="capitals", make=load_reference(f"{agent}:make"))
    cfg = rlvr.build_config(
        {
            "task": f"{agent}:make",
            "judge": "none",
            "sft_steps": 4,
            "sft_batch_size": 2,
            "max_minutes": 1,
        }
    )
    environment = task.build(cfg)
    base = time.monotonic()
    buffer = io.StringIO()
    async with open_policy(cfg, tmp_path / "run") as policy:
        before = await policy.model.get_step()
        row = await warm_start(
            cfg,
            environment,
            policy.model,
            environment.load(),
            clock=lambda: base + (time.monotonic() - base) * 10_000,
            out=Console(file=buffer, width=200),
        )
        assert await policy.model.get_step() == before + 1  # one call, one checkpoint
    assert row.steps == 1 and row.steps_planned == 4
    assert row.cut == 1 and row.demonstrations == 2
    assert 0 < row.tokens < row.tokens_planned
    assert math.isfinite(row.loss_first)
    assert "warm start cut by its budget" in buffer.getvalue()
    assert "trained 1 of 4 steps" in buffer.getvalue()


@pytest.mark.parametrize(("room", "steps"), [(0.0, 0), (1000.0, 2)])
async def test_what_a_cap_leaves_after_the_evaluations_bounds_the_warm_start(
    room: float, steps: int
) -> None:
    """`room_s` (rlvr.training.work.warm_room_s): no time left trains nothing, and says so."""
    environment = sums()
    cfg = rlvr.build_config({"task": "x", "sft_steps": 3, "sft_batch_size": 2, "max_minutes": 600})
    clock = FakeClock()
    backend = SlowCPU(clock, 0.01, lambda t: 10)
    buffer = io.StringIO()
    row = await warm_start(
        cfg,
        environment,
        Model(backend),  # type: ignore[arg-type]
        environment.load(),
        room_s=room,
        count_tokens=lambda t: 10,
        clock=clock,
        out=Console(file=buffer, width=200),
    )
    assert row.steps == steps and row.steps_planned == 2
    assert row.cut == int(steps < 2)
    said = (
        "warm start cut by its budget (what the evaluations to come leave of max_minutes=600: 0s)"
    )
    assert (said in buffer.getvalue()) == (steps == 0)


@pytest.mark.parametrize(("train", "count"), [(10, 4), (10, 10), (4, 10), (0, 3)])
def test_the_training_seed_draws_the_demonstrations_and_their_order(train: int, count: int) -> None:
    """Each epoch takes every training item once, in an order the seed draws; the same seed draws
    the same items, another seed others (the data seed leaves them to it: rlvr.training.labels)."""
    pool = [Item(id=f"i{i}", prompt="q", answer="a") for i in range(train)]
    drawn = demo_items(pool, count, seed=0)
    assert len(drawn) == (count if train else 0)
    for start in range(0, len(drawn), train or 1):
        epoch = [i.id for i in drawn[start : start + train]]
        assert len(set(epoch)) == len(epoch)  # no item twice before every item once
        if len(epoch) == train:
            assert set(epoch) == {i.id for i in pool}
    assert drawn == demo_items(pool, count, seed=0)
    if train > 1:
        assert all(demo_items(pool, count, seed=s) != drawn for s in (1, 2))
