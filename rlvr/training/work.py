"""A run's work, its estimate on this machine, and `max_minutes` as a ceiling on it.

A run is sized in work: warm-start steps, RL steps, evaluations and stop rules, the same on every
CPU. `max_minutes` is an optional cap on top, and a cap holds: every evaluation and the final
tests included. The seconds kept back for what must still come are this run's own measured
per-item evaluation time times the items still to evaluate, so

- a cap too small for the fixed work (the held-out evaluations of the start and of the warm start)
  is refused once the first validation has measured that time, before any training
  (`refuse_small_cap`);
- the warm start gets at most its share of the cap and never the time those evaluations need
  (`warm_room_s`);
- before each RL step, the step, the validation of its checkpoint and the tests still to come
  must fit, or the run validates where it is and stops (`step_fits`);
- a test of the last checkpoint that no longer fits is left out (`fits_a_test`);
- what the cap cut is said at the end in one line (`cut_line`).

All are pure functions of the run's measurements.
"""

from __future__ import annotations

import math

from rlvr.config import ConfigError, RunConfig
from rlvr.runs.records import Row, StepRow, WarmStartRow


def item_seconds(measured: list[float]) -> float:
    """The per-item evaluation time to plan with: the slowest this run has measured (episodes
    lengthen as the policy moves; a cap must not be planned on its fastest evaluation)."""
    return max(measured, default=0.0)


def smallest_cap(elapsed_s: float, items: int, item_s: float) -> float:
    """The smallest `max_minutes` (to a tenth of a minute, rounded up) that holds what has run and
    `items` more evaluation items at `item_s` seconds each."""
    return math.ceil((elapsed_s + items * item_s) / 6) / 10


def refuse_small_cap(
    cfg: RunConfig, elapsed_s: float, items: int, item_s: float, measured_on: int
) -> None:
    """ConfigError (one line) when `cfg.max_minutes` cannot hold the `items` of the fixed
    evaluations still to come after `elapsed_s`; `measured_on`: the items the speed is from."""
    if cfg.max_minutes is None or elapsed_s + items * item_s <= cfg.max_minutes * 60:
        return
    need = smallest_cap(elapsed_s, items, item_s)
    raise ConfigError(
        f"config: max_minutes={cfg.max_minutes:g} is too small for this run's held-out "
        f"evaluations: at {item_s:.2f}s an item on this machine (measured on {measured_on} items), the "
        f"{items} items still to evaluate need {items * item_s:.0f}s after {elapsed_s:.0f}s; the "
        f"smallest cap that fits is max_minutes={need:g} (no RL step), or leave max_minutes unset"
    )


def fixed_items(val_items: int, test_items: int, warmed: bool, start_tested: bool) -> int:
    """The evaluation items a run must still run after its first validation: the start's test
    (unless done) and, with a warm start, the validation and test after it."""
    return (0 if start_tested else test_items) + (val_items + test_items if warmed else 0)


def warm_room_s(
    cap_s: float | None, share: float, elapsed_s: float, reserve_s: float
) -> float | None:
    """The seconds the warm start may take: its `share` of the cap, and no more than the cap
    leaves after `elapsed_s` and the `reserve_s` of the evaluations after it (None: no cap)."""
    if cap_s is None:
        return None
    return max(0.0, min(cap_s * share, cap_s - elapsed_s - reserve_s))


def rollouts_per_step(cfg: RunConfig) -> int:
    """The most rollouts one RL step makes (its groups and their refills)."""
    refill = cfg.draw.max_refill if cfg.draw.max_refill is not None else cfg.groups_per_batch
    return (cfg.groups_per_batch + refill) * cfg.group_size


def next_step_s(rows: list[Row], cfg: RunConfig, item_s: float) -> float:
    """The seconds the next RL step is planned at: the last step's plus its growth over the one
    before (steps lengthen as episodes do); before any step, its most rollouts at the
    evaluation's per-item time."""
    steps = [r.step_s for r in rows if isinstance(r, StepRow) and r.step_s is not None]
    if not steps:
        return rollouts_per_step(cfg) * item_s
    growth = steps[-1] - steps[-2] if len(steps) >= 2 else 0.0
    return steps[-1] + max(0.0, growth)


def step_fits(
    cap_s: float | None, now_s: float, step_s: float, val_s: float, tests_s: float
) -> bool:
    """Whether one more RL step, the validation of its checkpoint and the tests still to come
    fit in the cap from `now_s`."""
    return cap_s is None or now_s + step_s + val_s + tests_s <= cap_s


def fits_a_test(cap_s: float | None, now_s: float, test_s: float) -> bool:
    """Whether one more test evaluation (not the final one, which always runs) fits the cap."""
    return cap_s is None or now_s + test_s <= cap_s


def cut_line(
    cfg: RunConfig, rows: list[Row], stopped_for_time: bool, steps: int, left_out: list[str]
) -> str | None:
    """What the cap cut, in one line (None: nothing): the warm start's steps, the RL steps, and
    the tests left out."""
    parts = []
    warm = next((r for r in rows if isinstance(r, WarmStartRow)), None)
    if warm is not None and warm.cut:
        parts.append(
            f"the warm start to {warm.steps or 0:.0f} of {warm.steps_planned or 0:.0f} steps"
        )
    if stopped_for_time and steps < cfg.max_steps:
        parts.append(f"RL to {steps} of {cfg.max_steps} steps")
    parts.extend(f"{name} (left out)" for name in left_out)
    if not parts or cfg.max_minutes is None:
        return None
    return f"cut by max_minutes={cfg.max_minutes:g}: " + "; ".join(parts)


def validations(cfg: RunConfig, after: int) -> int:
    """The validations due after step `after` up to `max_steps`."""
    return sum(
        1
        for s in range(after + 1, cfg.max_steps + 1)
        if s % cfg.eval_every == 0 or s == cfg.max_steps
    )


def estimate_line(
    cfg: RunConfig,
    elapsed_s: float,
    step_s: float,
    item_s: float,
    val_items: int,
    test_items: int,
    tests_left: int,
    warm_steps: int,
) -> str:
    """The run's wall time on this machine at its measured speeds (after its first RL step): its
    work, and with a cap how many RL steps the cap gives."""
    val_s, test_s = val_items * item_s, test_items * item_s
    evals_left = validations(cfg, 1)
    rest = (cfg.max_steps - 1) * step_s + evals_left * val_s + tests_left * test_s
    total_min = (elapsed_s + rest) / 60
    share = cfg.stopping.min_budget_share
    plateau = (
        f"; the plateau stop may end it from step {math.ceil(share * cfg.max_steps)}"
        if cfg.max_minutes is None and share
        else ""
    )
    line = (
        f"estimate: ~{total_min:.0f} min on this machine for {warm_steps} warm-start steps, "
        f"{cfg.max_steps} RL steps ({step_s:.0f}s each), {validations(cfg, 0) + 1} validations of "
        f"{val_items} items and {tests_left} more tests of {test_items} "
        f"({item_s:.2f}s an item){plateau}"
    )
    if cfg.max_minutes is None:
        return line
    room = cfg.max_minutes * 60 - elapsed_s - tests_left * test_s
    per_step = step_s + val_s / cfg.eval_every
    fit = max(0, min(cfg.max_steps - 1, math.floor(room / per_step))) + 1 if per_step > 0 else 1
    return f"{line}; max_minutes={cfg.max_minutes:g} gives ~{fit} of them"


def work_line(cfg: RunConfig) -> str:
    """The work a run of `cfg` does, in steps and evaluations (`rlvr tasks`)."""
    warm = (
        f"a warm start of {cfg.sft_steps} steps of {cfg.sft_batch_size} demonstrations; "
        if cfg.sft_steps
        else ""
    )
    share = cfg.stopping.min_budget_share
    plateau = (
        f", the plateau stop may end it from step {math.ceil(share * cfg.max_steps)}"
        if cfg.max_minutes is None and share
        else ""
    )
    val = f"at most {cfg.max_val_items} items" if cfg.max_val_items else "the validation split"
    cap = f"capped at max_minutes={cfg.max_minutes:g}" if cfg.max_minutes else "no clock cap"
    return (
        f"work: {warm}at most {cfg.max_steps} RL steps of {cfg.groups_per_batch} groups of "
        f"{cfg.group_size}{plateau}; a validation of {val} every "
        f"{cfg.eval_every} steps ({validations(cfg, 0) + (2 if cfg.sft_steps else 1)} at most); "
        f"the test split for each checkpoint tested (up to 4); {cap}"
    )
