"""The training pool: what each training item's groups looked like so far, and which items a step
draws from it.

GRPO learns only from a group whose rewards differ; a group that is all 0 (hopeless) or all 1
(solved) costs its rollouts and teaches nothing. So, as the GRPO template asks, the pool keeps every
training item's history — above all whether its groups' *training reward* had any spread, which
needs no label and so works with judges too — and each step draws by that history:
- items whose last group had signal are preferred (`prefer`);
- items never tried are explored (weight 1);
- items whose last groups were all equal are revisited rarely (`revisit`), less with each
  all-equal group in a row (`decay`), since the policy moves and a hopeless item may become mixed.
A group that comes back without signal is replaced within the step by another drawn item, up to
`max_refill` extra groups (DAPO's dynamic sampling), so the update trains on `groups_per_batch`
groups with signal whenever the pool still has them.

Everything here is a pure function of immutable data. The loop folds each step's outcomes into the
pool and writes them in the step's metrics row, so a resumed run re-derives the same pool and, from
the same seed, draws the same items. Held-out items never enter: the pool is the training split.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from rlvr.config import ItemDraw
from rlvr.runs.records import Outcome


class History(BaseModel):
    """An item's groups so far: how many, how many had signal, the last group's mean, and how many
    of the last groups in a row were all equal."""

    model_config = ConfigDict(frozen=True)

    tries: int = 0
    signal: int = 0
    mean: float | None = None
    equal_streak: int = 0


class PoolCounts(BaseModel):
    """Training items by their last group: with signal, all equal, never tried."""

    model_config = ConfigDict(frozen=True)

    mixed: int
    all_equal: int
    untried: int


def record(pool: dict[str, History], outcomes: Iterable[Outcome]) -> dict[str, History]:
    """The pool with `outcomes` folded in, in order."""
    updated = dict(pool)
    for outcome in outcomes:
        old = updated.get(outcome.item_id, History())
        updated[outcome.item_id] = History(
            tries=old.tries + 1,
            signal=old.signal + outcome.signal,
            mean=outcome.mean,
            equal_streak=0 if outcome.signal else old.equal_streak + 1,
        )
    return updated


def weight(history: History | None, settings: ItemDraw) -> float:
    """How likely an item is drawn, relative to an untried one."""
    if history is None or history.tries == 0:
        return 1.0
    if history.equal_streak == 0:
        return settings.prefer
    return settings.revisit * settings.decay ** (history.equal_streak - 1)


def draw(
    pool: dict[str, History],
    candidates: list[str],
    n: int,
    settings: ItemDraw,
    rng: random.Random,
) -> list[str]:
    """`n` distinct candidates (fewer if there are not that many), weighted by their history:
    weighted sampling without replacement (each item's key u ** (1 / weight), the largest win)."""
    keys = [
        (rng.random() ** (1.0 / max(weight(pool.get(c), settings), 1e-12)), c) for c in candidates
    ]
    return [c for _, c in sorted(keys, reverse=True)[: max(0, n)]]


def step_rng(seed: int, step: int, round_: int) -> random.Random:
    """The random source of a step's draw (round 0) and of its refills: the same after a resume."""
    return random.Random(f"{seed}-{step}-{round_}")


def uniform_draw(candidates: list[str], n: int, seed: int, step: int) -> list[str]:
    """The uniform strategy: `n` items at random, the same for the same seed and step."""
    return random.Random(f"{seed}-{step}").sample(candidates, min(n, len(candidates)))


def counts(pool: dict[str, History], train_ids: list[str]) -> PoolCounts:
    histories = [pool.get(i) for i in train_ids]
    tried = [h for h in histories if h is not None and h.tries]
    mixed = sum(h.equal_streak == 0 for h in tried)
    return PoolCounts(
        mixed=mixed, all_equal=len(tried) - mixed, untried=len(train_ids) - len(tried)
    )


def outcome_of(item_id: str, rewards: list[float], tolerance: float = 1e-9) -> Outcome:
    """A scored group's outcome (no rewards: no signal, mean 0)."""
    finite = [r for r in rewards if math.isfinite(r)]
    spread = max(finite) - min(finite) if len(finite) > 1 else 0.0
    mean = sum(finite) / len(finite) if finite else 0.0
    return Outcome(item_id=item_id, mean=mean, signal=spread > tolerance)
