"""report.png tells the whole story, and `rlvr inspect`, the notebook and the end of a run say the
same in words: validation before and after the warm start, the test before training, after the
warm start, at the best and at the last checkpoint, the paired gains with their intervals,
integer steps. Hand-written summaries and metrics rows here (unknown keys among them); the real
tiny run in tests/inspection/test_inspect_run.py and tests/test_notebooks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlvr import inspection as ri
from rlvr.cli.main import app
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.runs.records import Row, RunResult, parse_row
from rlvr.runs.report import (
    BEFORE_WARM,
    checkpoints_tested,
    gains,
    plot_report,
    report_figure,
    story_lines,
)

# An email-like run: the warm start made the gain, RL kept it, the last checkpoint fell back.
RAW_ROWS: list[dict[str, Any]] = [
    {M.STEP: 0, "warm/val_before": 0.0, "warm/seconds": 485.0, "warm/steps": 12},
    {M.STEP: 0, M.VAL_ACCURACY: 0.125, M.VAL_ITEMS: 16, M.POLICY_STEP: 1},
    {M.STEP: 1, M.REWARD_MEAN: -0.4, M.REWARD_STD: 0.5, "rollout/prefix_hits": 0.5},
    {M.STEP: 2, M.REWARD_MEAN: 0.3, M.REWARD_STD: 0.2, "pool/refills": 1, "hints": ["x"]},
    {M.STEP: 2, M.VAL_ACCURACY: 0.1875, M.VAL_ITEMS: 16},
    {M.STEP: 3, M.REWARD_MEAN: 0.2, M.REWARD_STD: 0.1},
    {M.STEP: 4, M.REWARD_MEAN: 0.25, M.REWARD_STD: 0.1},
    {M.STEP: 4, M.VAL_ACCURACY: 0.125, M.VAL_ITEMS: 16, "alarm/converged": "reward up, val flat"},
]

ROWS = [parse_row(r) for r in RAW_ROWS]

TEST_BLOCK = {
    "items": 40,
    "start": 0.025,
    "after_warm_start": 0.175,
    "final": 0.2,
    "gain": 0.175,
    "gain_ci95": [0.05, 0.3],
    "gain_p": 0.039,
    "rl_gain": 0.025,
    "rl_gain_ci95": [-0.05, 0.1],
    "rl_gain_p": 0.62,
    "last": 0.15,
    "gain_last": 0.125,
    "gain_last_ci95": [0.0, 0.25],
    "gain_last_p": 0.07,
    "rl_gain_last": -0.025,
    "rl_gain_last_ci95": [-0.1, 0.05],
    "rl_gain_last_p": 0.75,
    "method": "paired bootstrap",
}

SUMMARY: dict[str, Any] = {
    "run_dir": "runs/email-1",
    "wall_s": 600.0,
    "task": "email",
    "scorer": "verifier",
    "stop_reason": "no_signal",  # a reason this reader has never seen
    "steps": 4,
    "baseline_val": 0.125,
    "best_val": 0.1875,
    "best_step": 2,
    "test_accuracy": 0.2,
    "val_items": 16,
    "alarms": [],
    "test": TEST_BLOCK,
    "warm_start": {"val_before": 0.0, "steps": 12, "seconds": 485.0},
}

STORY = [
    "validation (16 items): 0.000 before the warm start -> 0.125 after it -> best 0.188 at step "
    "2 -> 0.125 at the last evaluation (step 4)",
    "test (40 paired items): start 0.025 -> after the warm start 0.175 -> best (step 2) 0.200 "
    "-> last (step 4) 0.150",
    "gain, best - start: +0.175 [+0.050, +0.300] on 40 test items (p=0.039)",
    "RL gain, best - after the warm start: +0.025 [-0.050, +0.100] on 40 test items (p=0.62)",
    "gain, last - start: +0.125 [+0.000, +0.250] on 40 test items (p=0.07)",
    "RL gain, last - after the warm start: -0.025 [-0.100, +0.050] on 40 test items (p=0.75)",
]


def run_of(summary: dict[str, Any]) -> tuple[list[Row], RunResult]:
    """The rows and the summary record of a run whose summary.json is `summary`: its warm-start
    row is the one the summary copies (none without a warm start)."""
    warm = summary.get("warm_start")
    rows = [r for r in RAW_ROWS if "warm/seconds" not in r]
    if warm is not None:
        rows = [{M.STEP: 0, **{f"warm/{k}": v for k, v in warm.items()}}, *rows]
    return [parse_row(r) for r in rows], RunResult.model_validate(summary)


def without_last(summary: dict[str, Any]) -> dict[str, Any]:
    """The last checkpoint is the best one: the lead's block holds None for it."""
    last_keys = [k for k in TEST_BLOCK if "last" in k]
    return {**summary, "test": {**TEST_BLOCK, **dict.fromkeys(last_keys)}}


def without_warm_start(summary: dict[str, Any]) -> dict[str, Any]:
    block = {**summary["test"], "after_warm_start": None, "rl_gain": 0.175}
    return {k: v for k, v in summary.items() if k != "warm_start"} | {"test": block}


@pytest.mark.parametrize(
    ("summary", "points"),
    [
        (
            SUMMARY,
            [
                ("start", BEFORE_WARM, 0.025),
                ("after the warm start", 0, 0.175),
                ("best", 2, 0.2),
                ("last", 4, 0.15),
            ],
        ),
        (
            without_last(SUMMARY),
            [("start", BEFORE_WARM, 0.025), ("after the warm start", 0, 0.175), ("best", 2, 0.2)],
        ),
        (
            without_warm_start(without_last(SUMMARY)),
            [("start", 0, 0.025), ("best", 2, 0.2)],
        ),
        ({**SUMMARY, "test": {"items": 0, "method": "paired bootstrap"}}, []),
        ({**SUMMARY, "test": None}, []),
    ],
)
def test_each_tested_checkpoint_stands_at_its_step(
    summary: dict[str, Any], points: list[tuple[str, int, float]]
) -> None:
    assert [(p.name, p.step, p.accuracy) for p in checkpoints_tested(*run_of(summary))] == points


@pytest.mark.parametrize(
    ("summary", "labels"),
    [
        (SUMMARY, [label.split(":")[0] for label in STORY[2:]]),
        (without_last(SUMMARY), ["gain, best - start", "RL gain, best - after the warm start"]),
        (without_warm_start(without_last(SUMMARY)), ["gain, best - start"]),
    ],
)
def test_the_gains_with_intervals_that_are_there(
    summary: dict[str, Any], labels: list[str]
) -> None:
    found = gains(run_of(summary)[1].test)
    assert [g.label for g in found] == labels
    assert all(g.low <= g.gain <= g.high for g in found)


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        (SUMMARY, STORY),
        (
            without_last(SUMMARY),
            [
                STORY[0],
                "test (40 paired items): start 0.025 -> after the warm start 0.175 -> best "
                "(step 2) 0.200",
                *STORY[2:4],
                "the last checkpoint is the best one",
            ],
        ),
        (
            without_warm_start(without_last(SUMMARY)),
            [
                "validation (16 items): 0.125 at the start -> best 0.188 at step 2 -> 0.125 at "
                "the last evaluation (step 4)",
                "test (40 paired items): start 0.025 -> best (step 2) 0.200",
                STORY[2],
                "the last checkpoint is the best one",
            ],
        ),
        (
            {
                **SUMMARY,
                "warm_start": {
                    "val_before": 0.0,
                    "seconds": 485.0,
                    "cut": 1,
                    "steps": 7,
                    "steps_planned": 12,
                    "tokens": 41230,
                    "tokens_planned": 70600,
                },
                "test": {"items": 0, "method": "paired bootstrap"},
            },
            [
                STORY[0],
                "warm start cut by its budget: 7 of 12 steps, 41,230 of 70,600 tokens",
                "test: no item completed in every evaluation",
            ],
        ),
    ],
)
def test_the_story_in_words(summary: dict[str, Any], expected: list[str]) -> None:
    assert story_lines(*run_of(summary)) == expected


def test_the_picture_holds_the_whole_story() -> None:
    fig = report_figure(*run_of(SUMMARY))
    curves, side = fig.axes
    ticks = [t.get_text() for t in curves.get_xticklabels()]
    assert ticks[0] == "before\nwarm start"
    assert all(t.isdigit() for t in ticks[1:]) and "4" in ticks  # integer steps only
    labels = curves.get_legend_handles_labels()[1]
    for label in (
        "validation before the warm start (0.000)",
        "warm start",
        "test, start (0.025)",
        "test, after the warm start (0.175)",
        "test, best (0.200)",
        "test, last (0.150)",
        "best validation (0.188)",
    ):
        assert label in labels, labels
    low, high = curves.get_ylim()
    assert low <= -0.9 and high >= 1.0  # a negative reward is shown, not cut off
    assert [t.get_text() for t in side.get_yticklabels()] == [
        label.split(":")[0].replace(", ", "\n") for label in reversed(STORY[2:])
    ]
    texts = [t.get_text() for t in fig.texts]  # the title, then the story below the plots
    assert texts == ["email — stop: no_signal", "\n".join(STORY)]


def test_without_a_warm_start_the_steps_start_at_zero() -> None:
    fig = report_figure(*run_of(without_warm_start(SUMMARY)))
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks[0] == "0" and all(t.isdigit() for t in ticks)


def test_report_png_is_written_and_inspect_says_the_same(tmp_path: Path) -> None:
    from rlvr.config import RunConfig

    store.write_config(tmp_path, RunConfig(task="email", run_dir=tmp_path))
    for row in ROWS:
        store.append_metrics(tmp_path, row)
    (tmp_path / "summary.json").write_text(json.dumps({**SUMMARY, "run_dir": str(tmp_path)}))
    path = plot_report(*run_of(SUMMARY), tmp_path / "report.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    assert ri.story(ri.load_run(tmp_path)) == STORY
    shown = CliRunner().invoke(app, ["inspect", str(tmp_path)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())
    for line in STORY:
        assert " ".join(line.split()) in flat, line
