"""TASK=dataset, the no-code task: reading rows from JSONL / JSON / CSV / parquet, bad rows named
by file, row and field (or skipped and counted), the verifier choice, the rubric format."""

from __future__ import annotations

import json
from pathlib import Path

import art
import polars as pl
import pytest
from typer.testing import CliRunner

import rlvr
from rlvr.cli.main import app
from rlvr.config import ConfigError
from scenarios.dataset import EXAMPLE, Options
from scenarios.dataset.environment import DatasetEnvironment, make_environment

GOOD = [
    {"prompt": "What is 2 + 2?", "answer": "4"},
    {"prompt": "What is 3 + 5?", "answer": 8, "system": "Be brief."},
    {"id": "q-last", "prompt": "Capital of France?", "answer": "Paris"},
]


def write_jsonl(tmp_path: Path, rows: list, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def build(path: Path, **options) -> DatasetEnvironment:
    environment = make_environment(Options(data_path=path, **options))
    assert isinstance(environment, DatasetEnvironment)
    return environment


def answered(text: str) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": text},
        ],
        reward=0.0,
    )


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "parquet"])
def test_rows_load_from_every_format(tmp_path: Path, suffix: str) -> None:
    rows = [{**r, "answer": str(r["answer"]), "system": r.get("system", "")} for r in GOOD]
    path = tmp_path / f"data.{suffix}"
    if suffix == "jsonl":
        write_jsonl(tmp_path, GOOD, path.name)
    elif suffix == "json":
        path.write_text(json.dumps(GOOD))
    elif suffix == "csv":
        pl.DataFrame(rows).write_csv(path)
    else:
        pl.DataFrame(rows).write_parquet(path)
    items = build(path, system="Default.").load()
    assert [i.prompt for i in items] == [r["prompt"] for r in GOOD]
    assert [i.answer for i in items] == ["4", "8", "Paris"]
    assert items[0].id == "data-1" and items[2].id == "q-last"
    assert items[1].data["system"] == "Be brief." and items[0].data["system"] == "Default."


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"answer": "4"}, r"row 2: field 'prompt': missing; expected a non-empty string"),
        ({"prompt": "", "answer": "4"}, r"row 2: field 'prompt': got ''"),
        ({"prompt": 12, "answer": "4"}, r"row 2: field 'prompt': got 12"),
        ({"prompt": "Q?", "answer": True}, r"row 2: field 'answer': got True"),
        (["Q?", "4"], r"row 2: expected an object with fields, got list"),
        ('{"prompt": "Q?", "answer": ', r"row 2: not valid JSON"),
        (
            {"id": "data-1", "prompt": "Q?", "answer": "1"},
            r"row 2: field 'id': 'data-1' appears more than once",
        ),
    ],
)
def test_a_bad_row_names_file_row_and_field(tmp_path: Path, row: object, message: str) -> None:
    path = write_jsonl(tmp_path, [GOOD[0], row, GOOD[2]])
    with pytest.raises(ConfigError, match=rf"data\.jsonl: {message}") as error:
        build(path)
    assert "\n" not in str(error.value)


def test_skip_bad_rows_skips_and_counts(tmp_path: Path) -> None:
    bad = [{"prompt": "Q?", "answer": True}, {"answer": 1}]
    path = write_jsonl(tmp_path, [GOOD[0], bad[0], GOOD[1], bad[1], GOOD[2]])
    environment = build(path, skip_bad_rows=True)
    assert len(environment.load()) == 3 and environment.skipped == 2


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing.jsonl", r"missing\.jsonl: no such file"),
        ("empty.jsonl", r"empty\.jsonl: no usable rows"),
        ("array.json", r"array\.json: expected a JSON array of rows, got dict"),
        ("broken.csv", r"broken\.csv: cannot read as csv"),
    ],
)
def test_unusable_files_are_one_line_errors(tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "array.json").write_text('{"prompt": "x"}')
    (tmp_path / "broken.csv").write_bytes(b'prompt,answer\n"unterminated,1\n')
    with pytest.raises(ConfigError, match=message):
        build(tmp_path / path)


@pytest.mark.parametrize(
    ("verifier", "partial", "text", "truth", "reward"),
    [
        ("numeric", True, "The answer is 4", 1.0, 1.0),
        ("numeric", True, "2 + 2 = 4, no wait, 5", 0.0, 0.5),
        ("numeric", False, "2 + 2 = 4, no wait, 5", 0.0, 0.0),
        ("exact", True, "four", 0.0, 0.0),
        ("math", True, "4.0", 1.0, 1.0),
        ("contains", True, "4 is close, I say 5", 0.5, 0.5),
    ],
)
async def test_the_verifier_checks_and_partial_credit_rewards(
    tmp_path: Path, verifier: str, partial: bool, text: str, truth: float, reward: float
) -> None:
    environment = build(write_jsonl(tmp_path, GOOD), verifier=verifier, partial_credit=partial)
    item = environment.load()[0]
    assert await environment.check(item, answered(text)) == truth
    assert environment.reward(item, answered(text)) == reward


def test_a_rubric_file_trains_with_the_rubric_judge(tmp_path: Path) -> None:
    rows = [
        {"task_id": f"t{i}", "prompt": f"p{i}", "rubric - 1. criterion": "Is polite."}
        for i in range(12)
    ]
    path = write_jsonl(tmp_path, rows)
    environment = make_environment(Options(data_path=path), judge=object())
    assert environment.default_scorer == "rubric" and len(environment.load()) == 12
    with pytest.raises(ConfigError, match="a rubric file needs a judge"):
        make_environment(Options(data_path=path), judge=None)


def test_the_shipped_example_is_arithmetic_with_numbers() -> None:
    cfg = rlvr.task_config("dataset", data_path=str(EXAMPLE), verifier="numeric")
    items = rlvr.resolve_task("dataset").build(cfg).load()
    assert len(items) == 400 and all(i.answer.lstrip("-").isdigit() for i in items)
    assert cfg.task_options["verifier"] == "numeric" and cfg.max_tokens == 32


def test_cli_bad_row_exits_2_without_a_run_directory(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, [GOOD[0], {"prompt": "Q?", "answer": [4]}])
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["train", "dataset", f"data_path={path}", f"runs_root={runs}", "judge=none"]
    )
    assert result.exit_code == 2
    assert "data.jsonl: row 2: field 'answer': got [4]" in result.output.replace("\n", " ")
    assert not runs.exists()


def test_dataset_needs_a_data_path() -> None:
    with pytest.raises(ConfigError, match=r"task dataset: option data_path: Field required"):
        rlvr.task_config("dataset")


def _edge_case(tmp_path: Path, case: str) -> Path:
    """A data_path that cannot be trained on, made for real."""
    import os

    from scenarios.dataset.environment import MAX_BYTES

    if case == "one row":
        return write_jsonl(tmp_path, GOOD[:1])
    if case == "two rows":
        return write_jsonl(tmp_path, GOOD[:2])
    if case == "unknown suffix":
        return write_jsonl(tmp_path, GOOD, name="data.txt")
    if case == "no suffix":
        return write_jsonl(tmp_path, GOOD, name="data")
    if case == "device":
        return Path("/dev/zero")
    if case == "fifo":
        os.mkfifo(tmp_path / "pipe.jsonl")
        return tmp_path / "pipe.jsonl"
    if case == "folder":
        (tmp_path / "folder.jsonl").mkdir()
        return tmp_path / "folder.jsonl"
    path = tmp_path / "huge.jsonl"  # sparse: a real file over the cap that takes no disk
    with path.open("wb") as f:
        f.truncate(MAX_BYTES + 1)
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("one row", "1 usable row(s); the train/validation/test split needs at least 3"),
        ("two rows", "2 usable row(s)"),
        ("unknown suffix", "unknown file type '.txt'; expected one of .jsonl"),
        ("no suffix", "unknown file type '(none)'"),
        ("device", "/dev/zero: not a regular file"),
        ("fifo", "pipe.jsonl: not a regular file"),
        ("folder", "folder.jsonl: not a regular file"),
        ("over the cap", "over the 1024 MiB a dataset may have"),
    ],
)
def test_cli_dataset_edge_cases_exit_2_with_one_line(
    tmp_path: Path, case: str, message: str
) -> None:
    path = _edge_case(tmp_path, case)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["train", "dataset", f"data_path={path}", f"runs_root={runs}", "judge=none"]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert message in lines[0]
    assert not runs.exists()
