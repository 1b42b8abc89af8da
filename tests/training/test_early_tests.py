"""The test split of the start and of the model after the warm start is evaluated right after
their validations, on the weights being validated (rlvr.training.session.evaluate_with_test): the
time budget leaves room only for what the end still has to test, and a resumed run reads those
results back from their tables instead of evaluating them again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlvr.config import RunConfig
from rlvr.metrics import M, WarmMetric
from rlvr.runs import layout, store
from rlvr.runs.records import Row, StopReason, parse_row
from rlvr.training import state as st
from rlvr.training.state import early_tested, read_early_tests, restore_state
from rlvr.training.stop_rules import remaining_tests, stop_after_eval

WARM_POLICY_STEP = 3


def history(marked: bool, val2: float = 0.35) -> list[Row]:
    """A run with a warm start, validated at 0 (wall 100 s, 0.3) and 2 (wall 200 s, `val2`), 1 s
    an item; `marked`: its rows name the test splits evaluated beside the two first validations."""
    warm = {M.STEP: 0, WarmMetric.SECONDS: 50.0, M.POLICY_STEP: WARM_POLICY_STEP}
    val0 = {
        M.STEP: 0,
        M.VAL_ACCURACY: 0.3,
        M.POLICY_STEP: WARM_POLICY_STEP,
        M.WALL_SECONDS: 100.0,
        M.EVAL_SECONDS: 10.0,
        M.EVAL_ITEM_SECONDS: 1.0,
    }
    if marked:
        warm[M.TEST_CHECKPOINT] = st.Tested.START.value
        val0[M.TEST_CHECKPOINT] = st.Tested.AFTER_WARM_START.value
    steps = [{M.STEP: s, M.REWARD_MEAN: 0.5, M.WALL_SECONDS: 100.0 + 40 * s} for s in (1, 2)]
    val2 = {**val0, M.STEP: 2, M.POLICY_STEP: 5, M.WALL_SECONDS: 200.0, M.VAL_ACCURACY: val2}
    val2.pop(M.TEST_CHECKPOINT, None)
    return [parse_row(r) for r in (warm, val0, *steps, val2)]


@pytest.mark.parametrize(
    ("marked", "expected"),
    [
        # 200 s now + 100 s for the next period + the best and the last on 10 test items (20 s)
        (True, None),
        # ... + the start and the warm start too (40 s): over 330 s
        (False, StopReason.TIME_BUDGET),
    ],
)
def test_the_time_budget_leaves_room_for_the_tests_still_to_come(
    marked: bool, expected: StopReason | None
) -> None:
    rows = history(marked)
    cfg = RunConfig(max_minutes=5.5, eval_every=2)
    state = restore_state(rows)
    assert stop_after_eval(cfg, state, rows, test_items=10, val_items=10) == expected


@pytest.mark.parametrize(
    ("marked", "val2", "expected"),
    [
        # The best stays the warm start (no gain at step 2): only the next checkpoint is still
        # to test, or the start and the warm start too.
        (True, 0.3, 1),
        (False, 0.3, 3),
        # The best is step 2: it is tested at the end beside the next checkpoint.
        (True, 0.35, 2),
        (False, 0.35, 4),
    ],
)
def test_the_remaining_tests_count_the_best_once(marked: bool, val2: float, expected: int) -> None:
    rows = history(marked, val2)
    state = restore_state(rows)
    assert remaining_tests(state, rows, RunConfig().stopping) == expected


def test_the_rows_name_the_checkpoints_tested_early() -> None:
    assert early_tested(history(True)) == [st.Tested.START, st.Tested.AFTER_WARM_START]
    assert early_tested(history(False)) == []


def table_rows(scores: dict[str, float]) -> list[dict[str, Any]]:
    return [
        {"step": 0, "split": "test", "item_id": i, "group": n, "index": 0, "reward": r}
        | {k: None for k in ("independent_reward", "tools", "metrics", "metadata", "logs")}
        | {"messages": "[]"}
        for n, (i, r) in enumerate(scores.items())
    ]


def test_a_resumed_run_reads_its_early_test_results_back(tmp_path: Path) -> None:
    start, warm = {"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 1.0}
    store.write_trajectories(tmp_path, layout.test_name(st.Tested.START), table_rows(start))
    store.write_trajectories(
        tmp_path, layout.test_name(st.Tested.AFTER_WARM_START), table_rows(warm)
    )
    found = read_early_tests(tmp_path, history(True))
    assert set(found) == {st.Tested.START, st.Tested.AFTER_WARM_START}
    assert (found[st.Tested.START].policy_step, found[st.Tested.START].scores) == (0, start)
    assert found[st.Tested.AFTER_WARM_START].policy_step == WARM_POLICY_STEP
    assert found[st.Tested.AFTER_WARM_START].accuracy == 1.0
    assert len(found[st.Tested.START].rows) == 2
    # A table the rows do not name (its validation row was never written) is evaluated again.
    assert read_early_tests(tmp_path, history(False)) == {}


def test_a_named_table_that_is_missing_is_left_for_the_end(tmp_path: Path) -> None:
    store.write_trajectories(tmp_path, layout.test_name(st.Tested.START), table_rows({"a": 1.0}))
    assert set(read_early_tests(tmp_path, history(True))) == {st.Tested.START}


def flat_history(evaluations: int, seconds_each: float) -> list[Row]:
    """Validation flat at 0.3 for `evaluations` evaluations, one step apart, `seconds_each`
    apart on the wall clock: the plateau rule alone would stop it after `patience` of them."""
    rows: list[dict[str, Any]] = []
    for step in range(evaluations):
        wall = seconds_each * (step + 1)
        if step:
            rows.append({M.STEP: step, M.REWARD_MEAN: 0.2, M.WALL_SECONDS: wall - 1})
        rows.append(
            {
                M.STEP: step,
                M.VAL_ACCURACY: 0.3,
                M.POLICY_STEP: step,
                M.WALL_SECONDS: wall,
                M.EVAL_SECONDS: 1.0,
                M.EVAL_ITEM_SECONDS: 0.01,
            }
        )
    return [parse_row(r) for r in rows]


@pytest.mark.parametrize(
    ("settings", "seconds_each", "expected"),
    [
        # 4 evaluations 30 s apart: 120 s of a 10-minute budget spent, the plateau waits
        ({"max_minutes": 10}, 30.0, None),
        # the same history 90 s apart: 360 s of 600 spent, over half: the plateau stops it
        ({"max_minutes": 10}, 90.0, StopReason.PLATEAU),
        # no time budget: the share of max_steps (3 of 40 steps; 3 of 5)
        ({"max_steps": 40}, 30.0, None),
        ({"max_steps": 5}, 30.0, StopReason.PLATEAU),
        # 0: the plateau rule alone
        ({"max_minutes": 10, "stopping.min_budget_share": 0.0}, 30.0, StopReason.PLATEAU),
    ],
    ids=["time-left", "time-spent", "steps-left", "steps-spent", "share-0"],
)
def test_the_plateau_stop_waits_for_a_share_of_the_budget(
    settings: dict[str, Any], seconds_each: float, expected: StopReason | None
) -> None:
    rows = flat_history(4, seconds_each)
    cfg = RunConfig(**{"eval_every": 1, "stopping.rule": "best", **settings})
    state = restore_state(rows)
    assert stop_after_eval(cfg, state, rows, test_items=10, val_items=10) == expected
