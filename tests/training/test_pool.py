"""The training pool and the step's draw (rlvr.training.pool, rlvr.training.step.gather_batch):
pure functions over item histories, then the real step gathering groups from a task whose
rewards are fixed per item (the model is never asked, so no policy is loaded)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import art
import pytest

from rlvr.config import ItemDraw, RunConfig
from rlvr.integrations import open_tracker
from rlvr.memory import RssWatch
from rlvr.metrics import M
from rlvr.runs.records import Outcome
from rlvr.scoring.scorers import RolloutScorer
from rlvr.task_api.api import environment
from rlvr.training import pool
from rlvr.training.backends import open_policy
from rlvr.training.labels import held_out
from rlvr.training.session import Session
from rlvr.training.split import split_items
from rlvr.training.state import restore_state
from rlvr.training.step import gather_batch, step_row

SETTINGS = ItemDraw()


def history(*signals: bool) -> pool.History:
    return pool.record(
        {}, [Outcome(item_id="x", mean=0.5 if s else 0.0, signal=s) for s in signals]
    )["x"]


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ((), 1.0),  # untried
        ((True,), SETTINGS.prefer),
        ((False, True), SETTINGS.prefer),  # the last group counts
        ((False,), SETTINGS.revisit),
        ((True, False, False), SETTINGS.revisit * SETTINGS.decay),
        ((False, False, False), SETTINGS.revisit * SETTINGS.decay**2),
    ],
)
def test_weight_follows_the_last_groups(signals, expected):
    h = history(*signals) if signals else None
    assert pool.weight(h, SETTINGS) == pytest.approx(expected)


def test_record_counts_tries_signal_and_the_streak():
    h = history(True, False, False)
    assert (h.tries, h.signal, h.equal_streak, h.mean) == (3, 1, 2, 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_draw_takes_only_candidates_distinct(seed):
    histories = {f"t{i}": history(i % 2 == 0) for i in range(10)}
    candidates = [f"t{i}" for i in range(10)]  # held-out ids are simply not candidates
    drawn = pool.draw(histories, candidates, 4, SETTINGS, random.Random(seed))
    assert len(drawn) == len(set(drawn)) == 4
    assert set(drawn) <= set(candidates)
    assert pool.draw(histories, candidates[:2], 4, SETTINGS, random.Random(seed)) != []
    assert len(pool.draw(histories, candidates[:2], 4, SETTINGS, random.Random(seed))) == 2


@pytest.mark.parametrize(
    ("kind_a", "kind_b", "ratio"),
    [
        ("mixed", "untried", SETTINGS.prefer),  # items with signal are preferred
        ("untried", "equal", 1 / SETTINGS.revisit),  # untried items are explored
        ("mixed", "equal", SETTINGS.prefer / SETTINGS.revisit),
    ],
)
def test_draw_prefers_by_kind(kind_a, kind_b, ratio):
    kinds = {"mixed": history(True), "equal": history(False), "untried": None}
    histories = {
        k: h
        for k, h in (("a", kinds[kind_a]), ("b", kinds[kind_b]))
        if h is not None  # an untried item has no history
    }
    picks = Counter(
        pool.draw(histories, ["a", "b"], 1, SETTINGS, random.Random(seed))[0]
        for seed in range(4000)
    )
    # A single weighted draw picks a with probability w_a / (w_a + w_b).
    assert picks["a"] / 4000 == pytest.approx(ratio / (ratio + 1), abs=0.03)


def test_counts_by_last_group():
    histories = {"a": history(True), "b": history(True, False), "c": history(False, True)}
    counts = pool.counts(histories, ["a", "b", "c", "d"])
    assert (counts.mixed, counts.all_equal, counts.untried) == (2, 1, 1)


@pytest.mark.parametrize(
    ("rewards", "signal", "mean"),
    [([0.0, 0.0], False, 0.0), ([1.0, 0.0], True, 0.5), ([0.3], False, 0.3), ([], False, 0.0)],
)
def test_outcome_of_a_group(rewards, signal, mean):
    outcome = pool.outcome_of("i", rewards)
    assert (outcome.signal, outcome.mean) == (signal, pytest.approx(mean))


def test_uniform_draw_is_todays_draw():
    """The uniform strategy draws what the loop drew before the pool existed."""
    ids = [f"i{n}" for n in range(30)]
    assert pool.uniform_draw(ids, 4, 7, 3) == random.Random("7-3").sample(ids, 4)


# --- The step's draw on a real session ------------------------------------------------------------

FLAT, MIXED = "flat", "mixed"


def fixed_task() -> object:
    """Items whose groups are all 0 (`flat-*`) or alternate 0/1 (`mixed-*`): the rollout sets the
    reward and never calls the model."""
    counter: Counter[str] = Counter()

    async def rollout(model, item, sampling) -> art.Trajectory:
        counter[item.id] += 1
        reward = float(item.id.startswith(MIXED) and counter[item.id] % 2 == 0)
        messages = [{"role": "user", "content": item.prompt}]
        return art.Trajectory(
            messages_and_choices=[*messages, {"role": "assistant", "content": "ok"}],
            reward=reward,
        )

    def load() -> list[dict]:
        return [{"id": f"{kind}-{n}", "prompt": "?"} for kind in (FLAT, MIXED) for n in range(20)]

    return environment(name="fixed", load=load, rollout=rollout)


async def open_fixed_session(stack: AsyncExitStack, run_dir: Path, **overrides) -> Session:
    cfg = RunConfig(task="fixed", group_size=4, groups_per_batch=4, judge="none", **overrides)
    built = fixed_task()
    items = built.load()
    split = split_items(items, val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.seed)
    tracker = stack.enter_context(open_tracker(cfg, run_dir))
    policy = await stack.enter_async_context(open_policy(cfg, run_dir))
    memory = stack.enter_context(RssWatch())
    scorer = RolloutScorer()
    return Session(
        cfg,
        built,
        scorer,
        run_dir,
        [],
        split,
        tracker,
        policy,
        False,
        memory,
        held=held_out(split, len(split.val), scorer),
        rollout=built.rollout,
        score=scorer.score,
    )


@pytest.mark.parametrize("max_refill", [0, 1, 3, 8])
def test_refills_replace_groups_without_signal_within_the_cap(tmp_path, max_refill):
    async def main() -> None:
        async with AsyncExitStack() as stack:
            run = await open_fixed_session(
                stack, tmp_path / "run", **{"draw.max_refill": max_refill}
            )
            batch = await gather_batch(run, 0)
            held_out = {i.id for i in run.split.val + run.split.test}
            firsts = batch.rounds[0].items
            refills = [i for r in batch.rounds[1:] for i in r.items]
            assert len(firsts) == 4
            assert not held_out & {i.id for i in batch.items}  # never a held-out item
            assert len({i.id for i in batch.items}) == len(batch.items)  # each item once
            flats = sum(i.id.startswith(FLAT) for i in firsts)
            assert len(refills) <= max_refill
            assert len(batch.trainable) <= 4
            # Each group without signal is replaced until the cap: one refill per flat group,
            # and a refill that is flat itself is replaced too.
            flats_total = sum(i.id.startswith(FLAT) for i in batch.items)
            assert len(refills) == min(max_refill, flats_total)
            assert flats_total >= flats
            row = step_row(run, 1, batch, _no_update(), batch.started)
            assert row.value(M.REFILLED) == len(refills)
            assert row.value(M.EXTRA_ROLLOUTS) == 4 * len(refills)
            assert row.value(M.SIGNAL_GROUPS) == len(batch.trainable)

    asyncio.run(main())


def test_a_resumed_run_draws_the_same_items(tmp_path):
    """The pool is re-derived from the step rows, so the next step's first draw is the same."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            run = await open_fixed_session(stack, tmp_path / "run")
            rows = []
            for step in range(3):
                batch = await gather_batch(run, step)
                row = step_row(run, step + 1, batch, _no_update(), batch.started)
                rows.append(row)
                run.state.pool = pool.record(run.state.pool, row.outcomes)
            resumed = restore_state(rows).pool
            assert resumed == run.state.pool
            ids = [i.id for i in run.split.train]
            rng = pool.step_rng(run.cfg.seed, 3, 0)
            here = pool.draw(run.state.pool, ids, 4, run.cfg.draw, rng)
            again = pool.draw(resumed, ids, 4, run.cfg.draw, pool.step_rng(run.cfg.seed, 3, 0))
            assert here == again
            # Flat items were seen without signal and are drawn rarely from then on.
            assert sum(i.startswith(MIXED) for i in here) >= 2

    asyncio.run(main())


def _no_update():
    from rlvr.training.step import Update

    return Update(metrics={}, seconds=0.0, turns_without_logprobs=0)


def test_uniform_strategy_never_refills(tmp_path):
    async def main() -> None:
        async with AsyncExitStack() as stack:
            run = await open_fixed_session(stack, tmp_path / "run", draw="uniform")
            batch = await gather_batch(run, 0)
            assert len(batch.rounds) == 1
            ids = [i.id for i in run.split.train]
            assert [i.id for i in batch.items] == pool.uniform_draw(ids, 4, run.cfg.seed, 0)

    asyncio.run(main())
