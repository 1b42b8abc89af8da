"""rlvr.inspection on run directories written with rlvr.runs.store from real art.Trajectory objects."""

from __future__ import annotations

import json
from pathlib import Path

import art
import polars as pl
import pytest
from rich.console import Console

from rlvr import inspection as ri
from rlvr.config import RunConfig
from rlvr.inspection.conversations import RUBRIC_VERDICTS, RULER_EXPLANATION
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.runs.records import StepRow, parse_row
from tests.helpers.run_dirs import SYSTEM, choice, make_run, trajectory


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run")


# --- loading and the step table -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no such run directory"),
        (lambda d: d.mkdir(), "not a run directory (no config.json)"),
        (
            lambda d: (d.mkdir(), (d / "config.json").write_text("{oops")),
            "config.json: not valid JSON",
        ),
        (lambda d: (d.mkdir(), (d / "config.json").write_text("[1]")), "expected a JSON object"),
    ],
)
def test_load_run_rejects_what_is_not_a_run(tmp_path, setup, message):
    target = tmp_path / "x"
    setup(target)
    with pytest.raises(ri.InspectError, match="^" + str(target).replace(".", r"\.")) as error:
        ri.load_run(target)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_metrics_row_that_is_not_an_object_is_named(run_dir):
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write("[1, 2]\n")
    with pytest.raises(
        ri.InspectError, match=r"metrics\.jsonl:6: expected a JSON object, got list"
    ):
        ri.load_run(run_dir)


def test_step_table_merges_training_and_evaluation(run_dir):
    table = ri.step_table(ri.load_run(run_dir))
    assert table["step"].to_list() == [0, 1, 2]
    assert table["step"].dtype == pl.Int64
    assert table[M.VAL_ACCURACY].to_list() == [0.25, 0.5, 0.25]
    assert table[M.REWARD_MEAN].to_list() == [None, 0.25, 0.875]
    assert table["alarms"].to_list() == [None, None, "reward_hacking: reward up, val down"]
    assert table["hints"].to_list()[1] == "raise max_tokens"
    assert table.columns[:2] == ["step", M.REWARD_MEAN]


def test_step_table_of_a_run_without_metrics(tmp_path):
    store.write_config(tmp_path, RunConfig())
    run = ri.load_run(tmp_path)
    assert run.summary is None
    assert ri.step_table(run).height == 0
    assert ri.curves(run).stop_step is None


def test_curves_mark_alarms_best_and_stop(run_dir):
    c = ri.curves(ri.load_run(run_dir))
    assert [(p.step, p.value) for p in c.reward] == [(1, 0.25), (2, 0.875)]
    assert [p.step for p in c.val] == [0, 1, 2]
    assert [(a.step, a.name) for a in c.alarms] == [(2, "reward_hacking")]
    assert (c.best_step, c.best_val, c.stop_step, c.stop_reason) == (1, 0.5, 2, "reward_hacking")


def test_plot_curves_draws_lines_alarm_and_stop(run_dir):
    run = ri.load_run(run_dir)
    fig = ri.plot_curves(run, ri.suspicious(run))
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert {"train reward (mean)", "validation accuracy", "train ground truth", "best"} <= set(
        labels
    )
    texts = [t.get_text() for t in ax.texts]
    assert "reward_hacking" in texts and "stop: reward_hacking" in texts
    assert ax.patches  # the reward jump 1 -> 2 is shaded


# --- trajectories and groups --------------------------------------------------------------------


def test_available_lists_steps_per_split(run_dir):
    assert ri.available(ri.load_run(run_dir)) == {"train": [1, 2], "val": [0, 2], "test": [1]}


def test_trajectories_default_to_latest_step_with_text_columns(run_dir):
    run = ri.load_run(run_dir)
    frame = ri.trajectories(run)
    assert set(frame["step"]) == {2}
    assert frame["completion"].to_list()[:4] == ["five five five"] * 3 + ["5"]
    assert set(frame["prompt"]) == {"What is 2+3?"}
    assert ri.trajectories(run, 0, "val")["completion"].to_list() == ["5", "4"]
    assert ri.trajectories(run, split="test")["split"].to_list() == ["test", "test"]


@pytest.mark.parametrize(
    ("step", "split", "message"),
    [
        (7, "train", "no train trajectories for step 7; steps with train trajectories: 1, 2"),
        (1, "val", "no val trajectories for step 1; steps with val trajectories: 0, 2"),
        (None, "holdout", "split 'holdout': expected one of train, val, test"),
    ],
)
def test_trajectories_name_what_exists(run_dir, step, split, message):
    with pytest.raises(ri.InspectError, match=message):
        ri.trajectories(ri.load_run(run_dir), step, split)


def test_a_damaged_trajectory_file_is_one_line_error(run_dir):
    (run_dir / "trajectories" / "step-0001.parquet").write_bytes(b"not parquet")
    with pytest.raises(ri.InspectError, match=r"step-0001\.parquet: not a readable parquet file"):
        ri.trajectories(ri.load_run(run_dir), 1)


def test_a_bad_messages_cell_names_file_row_and_field(run_dir):
    path = run_dir / "trajectories" / "step-0001.parquet"
    frame = pl.read_parquet(path)
    frame.with_columns(
        pl.when(pl.col("index") == 2)
        .then(pl.lit("{not json"))
        .otherwise(pl.col("messages"))
        .alias("messages")
    ).write_parquet(path)
    with pytest.raises(
        ri.InspectError, match=r"step-0001\.parquet: row 2: messages: not valid JSON"
    ):
        ri.trajectories(ri.load_run(run_dir), 1)


def test_groups_and_no_signal_groups(run_dir):
    frame = ri.trajectories(ri.load_run(run_dir), 1)
    table = ri.groups(frame)
    assert table["signal"].to_list() == [True, False]
    assert table["rewards"].to_list() == [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    assert table["reward_mean"].to_list() == [0.5, 0.0]
    none = ri.no_signal_groups(frame)
    assert none["group"].to_list() == [1] and none["item_id"].to_list() == ["item-1"]


def test_a_single_rollout_group_has_no_signal(run_dir):
    assert ri.groups(ri.trajectories(ri.load_run(run_dir), 0, "val"))["signal"].to_list() == [
        False,
        False,
    ]


# --- conversations and judge notes --------------------------------------------------------------


def _row(t: art.Trajectory) -> dict:
    return store.trajectory_rows([art.TrajectoryGroup([t])], ["item-x"], step=3, split="train")[0]


def test_conversation_keeps_tool_calls_and_tool_results():
    t = art.Trajectory(
        messages_and_choices=[
            SYSTEM,
            {"role": "user", "content": [{"type": "text", "text": "find the memo"}]},
            choice("", tool=("search_inbox", '{"query": "memo"}')),
            {"role": "tool", "tool_call_id": "call_1", "content": "memo-7: budget"},
            choice("The memo is memo-7."),
        ],
        tools=[{"type": "function", "function": {"name": "search_inbox", "parameters": {}}}],
        reward=1.0,
    )
    conv = ri.conversation(_row(t))
    assert [turn.role for turn in conv.turns] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert conv.turns[1].content == "find the memo"
    assert conv.turns[2].tool_calls == [
        ri.ToolCall(name="search_inbox", arguments='{"query": "memo"}', id="call_1")
    ]
    assert conv.turns[2].trainable and not conv.turns[3].trainable
    assert conv.turns[3].tool_call_id == "call_1"
    assert conv.tools == ["search_inbox"]
    text = _render(ri.render_conversation(conv))
    for expected in (
        "→ search_inbox",
        "result of call_1",
        "memo-7: budget",
        "tools offered: search_inbox",
        "trained",
    ):
        assert expected in text, expected


def _render(renderable) -> str:
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_ruler_explanation_and_score_come_from_logs_and_metrics():
    t = trajectory("5", 0.9, 1.0)
    t.metrics["ruler_score"] = 0.9
    t.log(f"{RULER_EXPLANATION}Correct and concise.")
    conv = ri.conversation(_row(t))
    assert conv.judge.scores == {"ruler_score": 0.9}
    assert conv.judge.explanations == ["Correct and concise."]
    assert "Correct and concise." in _render(ri.render_conversation(conv))


def test_rubric_verdicts_from_the_real_rubric_scorer_output():
    from judges.rubric import VERDICTS_KEY, Verdict, with_verdicts

    assert VERDICTS_KEY == RUBRIC_VERDICTS
    verdicts = [
        Verdict(criterion=1, text="Gives the number", points=2, met=True, rationale="It says 5."),
        Verdict(criterion=2, text="Rambles", points=-1, met=True, rationale="Three sentences."),
    ]
    conv = ri.conversation(_row(with_verdicts(trajectory("5 because...", 0.0, None), verdicts)))
    assert [(v.criterion, v.passed, v.rationale) for v in conv.judge.verdicts] == [
        (1, True, "It says 5."),
        (2, False, "Three sentences."),
    ]
    assert conv.judge.scores["rubric_pass_rate"] == 0.5  # (2 - 1) / 2
    text = _render(ri.render_conversation(conv))
    assert "criterion 2 [-1]" in text and "FAIL" in text and "Rambles — Three sentences." in text


def test_rubric_verdicts_fall_back_to_log_lines():
    t = trajectory("5", 0.5, None, logs=["rubric FAIL 3. [+1] Shows work -- No steps given."])
    notes = ri.conversation(_row(t)).judge
    assert notes.verdicts == [
        ri.Verdict(
            criterion=3, points=1.0, text="Shows work", rationale="No steps given.", passed=False
        )
    ]


def test_ruler_log_prefix_is_arts():
    import importlib
    import inspect as stdlib_inspect

    source = stdlib_inspect.getsource(importlib.import_module("art.rewards.ruler"))
    assert f'f"{RULER_EXPLANATION}{{score.explanation}}"' in source


# --- hacking candidates -------------------------------------------------------------------------


def frame_of(
    group_rows: list[tuple[str, float, float | None]], step: int = 1, group: int = 0
) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "step": step,
                "split": "train",
                "item_id": "i",
                "group": group,
                "index": i,
                "reward": r,
                "independent_reward": t,
                "completion": c,
            }
            for i, (c, r, t) in enumerate(group_rows)
        ],
        schema={
            "step": pl.Int64,
            "split": pl.Utf8,
            "item_id": pl.Utf8,
            "group": pl.Int64,
            "index": pl.Int64,
            "reward": pl.Float64,
            "independent_reward": pl.Float64,
            "completion": pl.Utf8,
        },
    )


@pytest.mark.parametrize(
    ("rows", "flagged"),
    [
        ([("long", 1.0, 0.0), ("5", 1.0, 1.0)], [0]),
        ([("long", 0.5, 0.49), ("x", 0.49, 0.0)], [0]),  # the threshold is inclusive for reward
        ([("5", 1.0, 1.0), ("4", 0.0, 0.0)], []),  # reward and truth agree
        ([("?", 1.0, None)], []),  # no ground truth: not this reason
        ([("4", 0.2, 0.0)], []),  # low reward
    ],
)
def test_high_reward_failing_truth(rows, flagged):
    found = ri.high_reward_failing_truth(frame_of(rows))
    assert [s.index for s in found] == flagged
    assert all(
        s.reason == ri.Reason.HIGH_REWARD_FAILING_TRUTH and "ground truth" in s.detail
        for s in found
    )


@pytest.mark.parametrize(
    ("rows", "flagged"),
    [
        (
            [("aaa", 1.0, 0.0), ("aaa ", 1.0, 0.0), ("b", 0.0, 0.0), ("c", 0.0, 1.0)],
            True,
        ),  # half, rewarded, wrong
        ([("aaa", 1.0, None), ("aaa", 1.0, None)], True),  # rewarded, no truth to confirm it
        (
            [("5", 1.0, 1.0), ("5", 1.0, 1.0), ("5", 1.0, 1.0)],
            False,
        ),  # identical and correct: learning
        ([("4", 0.0, 0.0), ("4", 0.0, 0.0), ("4", 0.0, 0.0)], False),  # identical but not rewarded
        (
            [("aaa", 1.0, 0.0), ("b", 1.0, 0.0), ("c", 1.0, 0.0), ("d", 1.0, 0.0)],
            False,
        ),  # all different
        (
            [
                ("aaa", 1.0, 0.0),
                ("aaa", 1.0, 0.0),
                ("b", 1.0, 0.0),
                ("c", 1.0, 0.0),
                ("d", 1.0, 0.0),
            ],
            False,
        ),  # a minority
    ],
)
def test_identical_completions(rows, flagged):
    found = ri.identical_completions(frame_of(rows))
    assert bool(found) == flagged
    if flagged:
        assert found[0].reason == ri.Reason.IDENTICAL_COMPLETIONS and found[0].index == 0
        assert "identical" in found[0].detail


@pytest.mark.parametrize(
    ("length", "said"), [(60, ""), (61, " (+1 characters)"), (90, " (+30 characters)")]
)
def test_a_long_identical_completion_is_cut_and_says_so(length: int, said: str) -> None:
    text = "x" * length
    [found] = ri.identical_completions(frame_of([(text, 1.0, 0.0), (text, 1.0, 0.0)]))
    assert found.detail.endswith(f"{text[:60]!r}{said}")


@pytest.mark.parametrize(
    ("rewards", "truths", "jump_steps"),
    [
        ([0.1, 0.6, 0.7], [0.1, 0.1, 0.1], [2]),  # reward jumps, truth flat
        ([0.1, 0.6], [0.1, 0.5], []),  # truth follows: learning
        ([0.1, 0.6], [None, None], [2]),  # truth unknown
        ([0.1, 0.3, 0.5, 0.7], [0.1, 0.1, 0.1, 0.1], []),  # steady rise, no single jump
        ([0.8, 0.2], [0.8, 0.2], []),  # a fall is not a jump
    ],
)
def test_reward_jumps(rewards, truths, jump_steps):
    rows = [
        parse_row({M.STEP: s + 1, M.REWARD_MEAN: r, M.INDEPENDENT: t})
        for s, (r, t) in enumerate(zip(rewards, truths, strict=True))
    ]
    rows.insert(0, parse_row({M.STEP: 0, M.VAL_ACCURACY: 0.1}))
    found = ri.reward_jumps(rows, jump=0.3)
    assert [s.step for s in found] == jump_steps
    assert all(s.reason == ri.Reason.REWARD_JUMP and s.group is None for s in found)


def test_suspicious_finds_the_planted_hack_with_reasons(run_dir):
    run = ri.load_run(run_dir)
    found = ri.suspicious(run)
    assert [(s.step, s.reason, s.group, s.index) for s in found] == [
        (2, ri.Reason.REWARD_JUMP, None, None),
        (2, ri.Reason.HIGH_REWARD_FAILING_TRUTH, 0, 0),
        (2, ri.Reason.HIGH_REWARD_FAILING_TRUTH, 0, 1),
        (2, ri.Reason.HIGH_REWARD_FAILING_TRUTH, 0, 2),
        (2, ri.Reason.IDENTICAL_COMPLETIONS, 0, 0),
    ]
    assert ri.suspicious(run, step=1) == []
    table = ri.suspects_frame(found)
    assert table.height == 5 and table["reason"].to_list()[0] == "reward_jump"
    pairs = ri.suspect_conversations(run, found)
    assert len(pairs) == 4
    assert all(conv.turns[-1].content == "five five five" for _, conv in pairs)


def test_suspects_frame_of_nothing_has_the_columns():
    assert ri.suspects_frame([]).columns == [
        "step",
        "reason",
        "group",
        "index",
        "item_id",
        "reward",
        "independent_reward",
        "detail",
    ]


def test_frame_table_renders_polars_frames(run_dir):
    text = _render(ri.frame_table(ri.step_table(ri.load_run(run_dir)), title="steps"))
    assert "steps" in text and "0.875" in text and "reward_hacking" in text


def test_metrics_json_round_trip_of_hints(run_dir):
    # hints are lists in metrics.jsonl; the table shows them as text, the raw rows stay lists
    run = ri.load_run(run_dir)
    step = run.metrics[1]
    assert isinstance(step, StepRow) and step.hints == ["raise max_tokens"]
    on_disk = [r.on_disk() for r in run.metrics]
    assert on_disk[1]["hints"] == ["raise max_tokens"]
    assert json.loads(json.dumps(on_disk)) == on_disk


def test_latest_run_picks_the_newest_run_dir(tmp_path):
    import os

    with pytest.raises(ri.InspectError, match="no runs under"):
        ri.latest_run(tmp_path)
    for i, name in enumerate(["math-1", "math-2"]):
        store.write_config(tmp_path / name, RunConfig())
        os.utime(tmp_path / name / "config.json", (1000 + i, 1000 + i))
    (tmp_path / "not-a-run").mkdir()
    assert ri.latest_run(tmp_path) == (tmp_path / "math-2").resolve()
