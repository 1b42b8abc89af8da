"""`rlvr inspect` on a constructed run directory (the real-run check is in test_inspect_run.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from tests.helpers.run_dirs import make_run, trajectory

runner = CliRunner()


@pytest.fixture
def run_dir(tmp_path):
    return make_run(tmp_path / "run")


def invoke(*args: str):
    return runner.invoke(app, ["inspect", *map(str, args)], env={"COLUMNS": "200"})


def test_overview_shows_summary_steps_alarm_and_hints(run_dir):
    result = invoke(run_dir)
    assert result.exit_code == 0, result.output
    for expected in (
        "stop: reward_hacking after 2 steps",
        "0.875",  # step 2 reward
        "ALARM reward_hacking @ step 2",
        "trajectories: train 1, 2 · val 0, 2 · test 1",
    ):
        assert expected in result.output, expected


def test_step_view_shows_groups_no_signal_and_conversations(run_dir):
    result = invoke(run_dir, "--step", "1", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert "train step 1: 2 groups, 8 trajectories" in result.output
    assert "no-signal groups: 1/2 (groups 1)" in result.output
    assert result.output.count("What is 2+3?") == 2  # --limit 2 conversations
    assert "reward 1.000" in result.output and "reward 0.000" in result.output  # best and worst


def test_step_view_of_validation(run_dir):
    result = invoke(run_dir, "--step", "2", "--split", "val")
    assert result.exit_code == 0, result.output
    assert "val step 2: 2 groups, 2 trajectories" in result.output


def test_suspicious_view_lists_candidates_with_reasons_and_rollouts(run_dir):
    result = invoke(run_dir, "--suspicious")
    assert result.exit_code == 0, result.output
    assert "5 hacking candidates" in result.output
    for reason in ("reward_jump", "high_reward_failing_truth", "identical_completions"):
        assert reason in result.output
    assert "suspicious: high_reward_failing_truth" in result.output
    assert "five five five" in result.output


def test_suspicious_view_of_a_clean_step(run_dir):
    result = invoke(run_dir, "--suspicious", "--step", "1")
    assert result.exit_code == 0, result.output
    assert "no hacking candidates" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing"], "missing: no such run directory"),
        (
            ["{run}", "--step", "9"],
            "no train trajectories for step 9; steps with train trajectories: 1, 2",
        ),
        (["{run}", "--split", "holdout"], "split 'holdout': expected one of train, val, test"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_dir, tmp_path, args, message):
    args = [a.format(run=run_dir) if a != "missing" else str(tmp_path / "missing") for a in args]
    result = invoke(*args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output


@pytest.mark.parametrize(
    "markup", ["[/]", "[link=https://example.org]click[/link]", "[bold red]loud", "a [/b] c"]
)
@pytest.mark.parametrize("view", [["--suspicious"], ["--step", "2"], []])
def test_rollout_text_prints_verbatim_never_as_markup(tmp_path, markup: str, view) -> None:
    """A policy can write anything: text that looks like Rich markup is data, shown as written
    (it used to crash --suspicious and --step with a MarkupError)."""
    import art

    from rlvr.runs import store

    run_dir = make_run(tmp_path / "run")
    hack = [(f"answer {markup}", 1.0, 0.0)] * 3 + [("5", 0.5, 1.0)]
    groups = [art.TrajectoryGroup([trajectory(*t) for t in g]) for g in [hack, hack]]
    # the item ids too: a task's own ids reach table cells and panel titles
    rows = store.trajectory_rows(groups, [f"id {markup}", "plain"], step=2, split="train")
    store.write_trajectories(run_dir, "step-0002", rows)
    result = invoke(run_dir, *view)
    assert result.exit_code == 0, result.output
    if view:
        assert f"answer {markup}" in result.output and f"id {markup}" in result.output
