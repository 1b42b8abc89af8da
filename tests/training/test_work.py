"""A run's work and its cap as pure functions (rlvr.training.work): what a cap keeps back, what it
refuses, what it cut, and the work a task's defaults describe."""

from __future__ import annotations

import pytest

from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import M
from rlvr.runs.records import StepRow, WarmStartRow
from rlvr.task_api.plugins import task_config
from rlvr.training.work import (
    cut_line,
    estimate_line,
    fits_a_test,
    fixed_items,
    item_seconds,
    next_step_s,
    refuse_small_cap,
    smallest_cap,
    step_fits,
    validations,
    warm_room_s,
    work_line,
)


def step(n: int, seconds: float) -> StepRow:
    return StepRow.model_validate({M.STEP: n, M.REWARD_MEAN: 0.0, M.STEP_SECONDS: seconds})


@pytest.mark.parametrize(
    ("elapsed", "items", "item_s", "minutes"),
    [(30.0, 240, 2.5, 10.5), (60.0, 0, 1.0, 1.0), (0.0, 1, 0.1, 0.1)],
)
def test_the_smallest_cap_holds_what_ran_and_the_items_to_come(
    elapsed: float, items: int, item_s: float, minutes: float
) -> None:
    assert smallest_cap(elapsed, items, item_s) == minutes
    assert minutes * 60 >= elapsed + items * item_s


@pytest.mark.parametrize(
    ("warmed", "start_tested", "items"), [(True, False, 280), (False, False, 120), (False, True, 0)]
)
def test_the_fixed_work_is_the_held_out_evaluations(
    warmed: bool, start_tested: bool, items: int
) -> None:
    assert fixed_items(40, 120, warmed, start_tested) == items


def test_a_cap_too_small_is_refused_in_one_line_naming_the_smallest_that_fits() -> None:
    cfg = RunConfig(max_minutes=6)
    refuse_small_cap(cfg, 60.0, 120, 2.0, 40)  # 60 + 240 s fits 360
    with pytest.raises(ConfigError) as refused:
        refuse_small_cap(cfg, 120.0, 280, 2.5, 40)
    message = str(refused.value)
    assert "\n" not in message
    assert "max_minutes=6 is too small" in message
    assert "the smallest cap that fits is max_minutes=13.7" in message
    refuse_small_cap(RunConfig(), 1e6, 10**6, 9.0, 40)  # no cap, nothing to refuse


@pytest.mark.parametrize(
    ("cap", "elapsed", "reserve", "room"),
    [
        (None, 100.0, 50.0, None),
        (600.0, 60.0, 100.0, 240.0),  # the share
        (600.0, 300.0, 200.0, 100.0),  # what the evaluations after it leave
        (600.0, 500.0, 200.0, 0.0),
    ],
)
def test_the_warm_start_gets_its_share_and_never_the_evaluations_time(
    cap: float | None, elapsed: float, reserve: float, room: float | None
) -> None:
    assert warm_room_s(cap, 0.4, elapsed, reserve) == room


@pytest.mark.parametrize(
    ("seconds", "planned"),
    [([], 64 * 2.0), ([40.0], 40.0), ([41.0, 63.0], 85.0), ([82.0, 71.0], 71.0)],
)
def test_the_next_step_is_planned_from_the_last_and_its_growth(
    seconds: list[float], planned: float
) -> None:
    cfg = RunConfig(groups_per_batch=4, group_size=8)  # up to 4 refills: 64 rollouts
    rows = [step(n + 1, s) for n, s in enumerate(seconds)]
    assert next_step_s(rows, cfg, 2.0) == pytest.approx(planned)


def test_a_step_or_a_test_fits_only_with_what_follows_it() -> None:
    assert step_fits(None, 1e9, 1.0, 1.0, 1.0)
    assert step_fits(600.0, 400.0, 80.0, 40.0, 80.0)
    assert not step_fits(600.0, 401.0, 80.0, 40.0, 80.0)
    assert fits_a_test(600.0, 300.0, 300.0) and not fits_a_test(600.0, 301.0, 300.0)
    assert item_seconds([1.5, 2.5, 2.0]) == 2.5 and item_seconds([]) == 0.0


def test_the_end_says_what_the_cap_cut_in_one_line() -> None:
    cfg = RunConfig(max_minutes=6, max_steps=36)
    warm = WarmStartRow.model_validate(
        {"warm/seconds": 140.0, "warm/steps": 6, "warm/steps_planned": 12, "warm/cut": 1}
    )
    line = cut_line(cfg, [warm], True, 4, ["test (last)"])
    assert line == (
        "cut by max_minutes=6: the warm start to 6 of 12 steps; RL to 4 of 36 steps; "
        "test (last) (left out)"
    )
    assert cut_line(cfg, [], False, 36, []) is None
    assert cut_line(RunConfig(), [warm], True, 4, []) is None  # no cap: nothing it cut


def test_the_email_defaults_are_work_and_say_so() -> None:
    cfg = task_config("email")
    assert cfg.max_minutes is None
    line = work_line(cfg)
    assert line.startswith("work: a warm start of 12 steps of 8 demonstrations; at most 36 RL")
    assert "the plateau stop may end it from step 18" in line
    assert "a validation of at most 40 items every 3 steps (14 at most)" in line
    assert "no clock cap" in line and "minute" not in line
    assert validations(cfg, 0) == 12


def test_the_estimate_counts_the_work_and_what_a_cap_gives() -> None:
    cfg = task_config("email")
    line = estimate_line(cfg, 600.0, 40.0, 2.0, 40, 120, 2, 12)
    # 600 s so far, 35 steps of 40 s, 12 validations of 80 s, 2 tests of 240 s: 3,440 s
    assert line == (
        "estimate: ~57 min on this machine for 12 warm-start steps, 36 RL steps (40s each), "
        "13 validations of 40 items and 2 more tests of 120 (2.00s an item); the plateau stop "
        "may end it from step 18"
    )
    capped = estimate_line(
        cfg.model_copy(update={"max_minutes": 30}), 600.0, 40.0, 2.0, 40, 120, 2, 12
    )
    # 1,800 - 600 - 480 s leaves 720 s: 10 steps of 40 s plus a third of an 80 s validation
    assert capped.endswith("max_minutes=30 gives ~11 of them")
