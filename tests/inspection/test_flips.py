"""Which test items RL won and lost (rlvr.inspection.flips, `rlvr inspect RUN --flips`): tables
written by the run's own writer, and the real tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import art
import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.inspection import load_run
from rlvr.inspection.flips import flips, flips_frame
from rlvr.runs import layout, store

runner = CliRunner()


def write_test_table(run_dir: Path, checkpoint: str | None, scores: dict[str, float]) -> None:
    """A test table as the loop writes it: one greedy rollout an item, its answer naming its score."""
    groups = [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": f"question {item}"},
                        {"role": "assistant", "content": f"answer {item} scored {score}"},
                    ],
                    reward=score,
                )
            ]
        )
        for item, score in scores.items()
    ]
    rows = store.trajectory_rows(groups, list(scores), step=0, split="test")
    store.write_trajectories(run_dir, layout.test_name(checkpoint), rows)


def make_run(root: Path, tables: dict[str | None, dict[str, float]]) -> Path:
    root.mkdir(parents=True)
    (root / store.CONFIG).write_text(json.dumps({"task": "math"}))
    for checkpoint, scores in tables.items():
        write_test_table(root, checkpoint, scores)
    return root


WARM = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0, "e": 0.5}
LAST = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0, "e": 1.0}


@pytest.mark.parametrize(
    ("tables", "before", "after", "won", "lost", "gain"),
    [
        # the default: after the warm start -> last; a partial score counts as a change too
        (
            {"after-warm-start": WARM, "last": LAST, None: LAST},
            None,
            "last",
            ["b", "e"],
            ["d"],
            0.1,
        ),
        # no warm start: from the start; no separate last table: last is the best one
        ({"start": WARM, None: LAST}, None, "last", ["b", "e"], ["d"], 0.1),
        ({"start": LAST, None: WARM}, "start", "best", ["d"], ["b", "e"], -0.1),
        # nothing changed
        ({"start": WARM, None: WARM}, None, "best", [], [], 0.0),
    ],
    ids=["warm-to-last", "start-to-last-is-best", "start-to-best", "unchanged"],
)
def test_flips_name_the_items_won_and_lost(
    tmp_path: Path,
    tables: dict[str | None, dict[str, float]],
    before: str | None,
    after: str,
    won: list[str],
    lost: list[str],
    gain: float,
) -> None:
    found = flips(load_run(make_run(tmp_path / "run", tables)), before, after)
    assert sorted(f.item_id for f in found.won) == won
    assert sorted(f.item_id for f in found.lost) == lost
    assert found.gain.items == 5 and found.gain.gain == pytest.approx(gain)
    for flip in found.won + found.lost:
        assert flip.before_answer == f"answer {flip.item_id} scored {flip.before}"
        assert flip.after_answer == f"answer {flip.item_id} scored {flip.after}"
        assert flip.prompt == f"question {flip.item_id}"
    frame = flips_frame(found)
    assert frame.height == len(won) + len(lost)


def test_the_cli_prints_the_gain_and_both_answers(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", {"after-warm-start": WARM, "last": LAST, None: LAST})
    result = runner.invoke(app, ["inspect", str(run_dir), "--flips"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "after-warm-start -> last: +0.100" in result.output
    assert "2 won, 1 lost, 2 unchanged" in result.output
    assert "answer d scored 1.0" in result.output and "answer d scored 0.0" in result.output


@pytest.mark.parametrize(
    ("tables", "args", "words"),
    [
        ({None: WARM}, ["--before", "midway"], "checkpoint 'midway': expected one of start"),
        ({None: WARM}, [], "no test rollouts of the start checkpoint"),
        ({"start": {"x": 1.0}, None: {"y": 0.0}}, [], "share no item"),
        ({}, ["--before", "best"], "no test rollouts of the best checkpoint"),
    ],
    ids=["unknown-checkpoint", "no-start-table", "different-items", "unfinished"],
)
def test_bad_flips_requests_get_one_line(
    tmp_path: Path, tables: dict[str | None, dict[str, float]], args: list[str], words: str
) -> None:
    run_dir = make_run(tmp_path / "run", tables)
    result = runner.invoke(app, ["inspect", str(run_dir), "--flips", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_flips_of_the_tiny_run_agree_with_its_test_block(tiny_run) -> None:
    summary = json.loads((tiny_run.run_dir / store.SUMMARY).read_text())
    found = flips(load_run(tiny_run.run_dir), "start", "best")
    assert found.gain.before == pytest.approx(summary["test"]["start"])
    assert found.gain.after == pytest.approx(summary["test"]["final"])
    assert found.gain.items == summary["test"]["items"]
    assert len(found.won) - len(found.lost) == round(found.gain.gain * found.gain.items)
