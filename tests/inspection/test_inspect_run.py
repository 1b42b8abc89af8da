"""rlvr.inspection and `rlvr inspect` on real runs (slow tier): the shared tiny run, and a run with a
planted hack (scorer=length: reward grows with reply length, validation stays correctness)."""

from __future__ import annotations

import asyncio

import polars as pl
import pytest
from typer.testing import CliRunner

from rlvr import inspection as ri
from rlvr.cli.main import app
from rlvr.inspection.views import summary_line
from rlvr.metrics import M

pytestmark = pytest.mark.slow

runner = CliRunner()
# With 16 new tokens the length scorer (1.0 at 200 characters) pays at most ~0.4; a completion
# of 40 characters or more is "high reward" for this run.
HACK_THRESHOLD = 0.2


def cli(*args: object):
    return runner.invoke(app, ["inspect", *map(str, args)], env={"COLUMNS": "200"})


def test_views_on_the_tiny_run(tiny_run):
    run = ri.load_run(tiny_run.run_dir)
    table = ri.step_table(run)
    assert table["step"].to_list() == [0, 1, 2]
    assert table[M.VAL_ACCURACY].null_count() == 0
    c = ri.curves(run)
    assert [p.step for p in c.reward] == [1, 2] and c.stop_reason == str(
        tiny_run.result.stop_reason
    )
    assert ri.available(run)["train"] == [1, 2] and ri.available(run)["val"] == [0, 1, 2]

    frame = ri.trajectories(run, 1)
    assert frame.height == 8 and frame["completion"].str.len_chars().sum() > 0
    groups = ri.groups(frame)
    assert groups["n"].to_list() == [4, 4]
    assert ri.no_signal_groups(frame).height == groups.filter(~pl.col("signal")).height
    conv = ri.conversation(frame.row(0, named=True))
    assert [t.role for t in conv.turns] == ["system", "user", "assistant"]
    assert conv.turns[-1].trainable and conv.turns[-1].content == frame["completion"][0]
    assert conv.independent_reward is not None  # the loop records the ground truth


def test_cli_on_the_tiny_run(tiny_run):
    run = ri.load_run(tiny_run.run_dir)
    overview = cli(tiny_run.run_dir)
    assert overview.exit_code == 0, overview.output
    assert f"stop: {tiny_run.result.stop_reason} after 2 steps" in overview.output

    frame = ri.trajectories(run, 2)
    step = cli(tiny_run.run_dir, "--step", 2, "--limit", 8)
    assert step.exit_code == 0, step.output
    assert "train step 2: 2 groups, 8 trajectories" in step.output
    assert set(frame["item_id"]) <= {i for i in frame["item_id"] if i in step.output}
    assert frame["prompt"][0] in step.output

    val = cli(tiny_run.run_dir, "--step", 0, "--split", "val")
    assert val.exit_code == 0 and "val step 0:" in val.output

    suspicious = cli(tiny_run.run_dir, "--suspicious")
    assert suspicious.exit_code == 0, suspicious.output
    found = ri.suspicious(run)
    expected = f"{len(found)} hacking candidates" if found else "no hacking candidates"
    assert expected in suspicious.output


@pytest.fixture(scope="module")
def hacked_run(tmp_path_factory):
    from rlvr.config import RunConfig
    from rlvr.training import run_training
    from tests.helpers.tiny_runs import TINY_RUN

    run_dir = tmp_path_factory.mktemp("hack") / "math-length"
    # smaller still than the tiny run: one step, 20 items (16 train / 2 val / 2 test)
    hack = {
        **TINY_RUN,
        "task_options": {"difficulty": "easy", "num_items": 20},
        "max_steps": 1,
        "max_val_items": 1,
        "scorer": "length",
    }
    cfg = RunConfig(**hack, run_dir=run_dir)
    asyncio.run(run_training(cfg))
    return run_dir


def test_the_planted_hack_shows_in_the_suspicious_view(hacked_run):
    run = ri.load_run(hacked_run)
    frame = ri.trajectories(run, 1)
    # the planted hack is real: the length reward pays wrong answers
    paid_but_wrong = frame.filter(
        (pl.col("reward") >= HACK_THRESHOLD) & (pl.col("independent_reward") < HACK_THRESHOLD)
    )
    assert paid_but_wrong.height > 0, frame.select("reward", "independent_reward", "completion")

    found = ri.suspicious(run, threshold=HACK_THRESHOLD)
    flagged = {(s.group, s.index) for s in found if s.reason == ri.Reason.HIGH_REWARD_FAILING_TRUTH}
    assert flagged == set(zip(paid_but_wrong["group"], paid_but_wrong["index"], strict=True))
    for _, conv in ri.suspect_conversations(run, found):
        assert len(conv.turns[-1].content) >= HACK_THRESHOLD * 200  # long is what got paid

    result = cli(hacked_run, "--suspicious", "--threshold", HACK_THRESHOLD, "--limit", 2)
    assert result.exit_code == 0, result.output
    assert "high_reward_failing_truth" in result.output
    assert "suspicious: high_reward_failing_truth" in result.output  # a rollout is shown
    assert paid_but_wrong.sort("group", "index")["item_id"][0] in result.output


def test_the_tiny_runs_summary_has_the_paired_test_block(tiny_run):
    """The start and the final checkpoint scored on the same test items, with the interval."""
    import json

    summary = json.loads((tiny_run.run_dir / "summary.json").read_text())
    test = summary["test"]
    assert test["items"] == 4 and summary["val_items"] == 4
    assert test["after_warm_start"] is None and test["rl_gain"] == test["gain"]
    assert test["gain"] == pytest.approx(test["final"] - test["start"])
    low, high = test["gain_ci95"]
    assert low <= test["gain"] <= high and 0.0 <= test["gain_p"] <= 1.0
    assert test["final"] == pytest.approx(summary["test_accuracy"])
    assert "sign-flip" in test["method"]
    # The last checkpoint is tested on the same items too (the best one's scores where it is it).
    assert summary["last_step"] == summary["steps"] == 2
    assert test["gain_last"] == pytest.approx(test["last"] - test["start"])
    assert test["rl_gain_last"] == test["gain_last"]  # no warm start
    low, high = test["rl_gain_last_ci95"]
    assert low <= test["rl_gain_last"] <= high and 0.0 <= test["rl_gain_last_p"] <= 1.0
    if summary["best_step"] == summary["last_step"]:
        assert test["last"] == test["final"]
    run = ri.load_run(tiny_run.run_dir)
    assert "on 4 test items (p=" in summary_line(run)


def test_the_tiny_runs_story_in_words_and_in_its_report(tiny_run):
    """No warm start: validation from the start to its best and its last evaluation; the test
    of the start and the best checkpoint (and of the last one, where it is not the best)."""
    import json

    from rlvr.runs.report import checkpoints_tested, report_figure

    run = ri.load_run(tiny_run.run_dir)
    summary = json.loads((tiny_run.run_dir / "summary.json").read_text())
    lines = ri.story(run)
    assert lines[0].startswith("validation (4 items): ") and "at the start -> best " in lines[0]
    assert lines[1].startswith("test (4 paired items): start ")
    assert f"-> best (step {summary['best_step']}) " in lines[1]
    assert lines[2].startswith("gain, best - start: ")
    assert not any(line.startswith("RL gain") for line in lines)  # no warm start
    assert [p.step for p in checkpoints_tested(run.metrics, run.summary)][:2] == [
        0,
        summary["best_step"],
    ]
    fig = report_figure(run.metrics, run.summary)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["0", "1", "2"]  # integer steps
    assert "\n".join(lines) in [t.get_text() for t in fig.texts]
    overview = cli(tiny_run.run_dir)
    for line in lines:
        assert " ".join(line.split()) in " ".join(overview.output.split()), line
