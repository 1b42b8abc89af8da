"""Typed run records (rlvr.runs.records): rows are told apart by type, parsed once where they are
read, and written back with exactly the keys they had; an old run directory (tests/data/old-run,
written before rows said their kind) still resumes, inspects and evaluates."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from rlvr import inspection as ri
from rlvr.cli.main import app
from rlvr.evaluation.paired_gains import Compared
from rlvr.metrics import M, WarmMetric, scorer_figures
from rlvr.runs import store
from rlvr.runs.records import (
    KIND_KEY,
    EvalRow,
    Row,
    RowKind,
    StepRow,
    WarmStartRow,
    parse_row,
    row_kind,
)
from tests.helpers.repo import DATA, ROOT

OLD_RUN = DATA / "old-run" / "math-old"
TYPED = ("rlvr/training", "rlvr/runs", "rlvr/inspection")

# What telling a row or a summary apart by its keys looks like; only records.py's `row_kind` may.
# (`for value in row` walks a table row; a scorer's counters, `pop_metrics()`, are not a record.)
HOLDERS = r"\b(row|rows|r|summary|warm|warmed|block|metrics|step|values)"
KEY_TESTS = {
    "in row": re.compile(r"^(?!\s*for\b).* in row\b(?!\.)"),
    "in summary": re.compile(r"^(?!\s*for\b).* in summary\b(?!\.)"),
    "a metric key in a dict": re.compile(r"\b(M|WarmMetric)\.[A-Z_]+ (not )?in \w+"),
    ".get(<metric key>)": re.compile(HOLDERS + r"\.get\((M|WarmMetric)\.[A-Z_]+"),
    "<dict>[<metric key>] read": re.compile(HOLDERS + r"\[(M|WarmMetric)\.[A-Z_]+\](?! =)"),
}


def key_tests() -> list[str]:
    """Every line of the typed packages that tests a row or summary by its keys."""
    found = []
    for folder in TYPED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "records.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                for what, pattern in KEY_TESTS.items():
                    if pattern.search(line):
                        found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}")
    return found


def test_no_code_tells_records_apart_by_their_keys() -> None:
    assert key_tests() == []


def test_dict_str_any_is_rare_in_the_typed_packages() -> None:
    folders = [
        *TYPED,
        "rlvr/evaluation/paired_gains.py",
        "rlvr/metrics.py",
        "rlvr/evaluation/passk.py",
    ]
    paths = [p for f in folders for p in ((ROOT / f).rglob("*.py") if "." not in f else [ROOT / f])]
    count = sum(p.read_text().count("dict[str, Any]") for p in paths)
    assert count <= 12, count
    lines = [
        line
        for p in (ROOT / "rlvr").rglob("*.py")
        for line in p.read_text().splitlines()
        if "dict[str, Any]" in line or "dict[str, object]" in line
    ]
    # the openai SDK's, pydantic's, typing's, verifiers' and Hugging Face's own types, and raw
    # settings before pydantic validates them: each says why where it is (issue 68)
    assert len(lines) <= 15, lines


OLD_STEP = {M.STEP: 1, M.REWARD_MEAN: 0.375, M.GROUPS: 2, "rollout/turns": 1.0}
OLD_EVAL = {M.STEP: 1, M.VAL_ACCURACY: 0.5, M.VAL_SCORES: {"a": 1.0}, "alarm/converged": "flat"}
OLD_WARM = {M.STEP: 0, WarmMetric.SECONDS: 12.5, WarmMetric.VAL_BEFORE: 0.25, M.POLICY_STEP: 3}


@pytest.mark.parametrize(
    ("raw", "kind", "record"),
    [
        (OLD_STEP, RowKind.STEP, StepRow),
        (OLD_EVAL, RowKind.EVAL, EvalRow),
        (OLD_WARM, RowKind.WARM_START, WarmStartRow),
        ({M.STEP: 2, "judge/calls": 4}, RowKind.OTHER, Row),
        ({KIND_KEY: "eval", **OLD_EVAL}, RowKind.EVAL, EvalRow),
        # a written kind wins over the keys (a warm-start row also names the start's test)
        (
            {KIND_KEY: "warm_start", **OLD_WARM, M.TEST_CHECKPOINT: "start"},
            RowKind.WARM_START,
            WarmStartRow,
        ),
    ],
)
def test_a_row_is_its_kind_and_keeps_its_keys(raw: dict, kind: RowKind, record: type) -> None:
    row = parse_row(raw)
    assert row_kind(raw) == kind and type(row) is record and row.kind == kind
    on_disk = row.on_disk()
    assert on_disk.pop(KIND_KEY) == kind.value
    assert on_disk == {k: v for k, v in raw.items() if k != KIND_KEY}


def test_typed_fields_read_the_metric_keys() -> None:
    step, val, warm = parse_row(OLD_STEP), parse_row(OLD_EVAL), parse_row(OLD_WARM)
    assert isinstance(step, StepRow) and (step.reward_mean, step.groups) == (0.375, 2)
    assert step.number("rollout/turns") == 1.0 and step.alarms == {}
    assert isinstance(val, EvalRow) and val.scores == {"a": 1.0}
    assert val.alarms == {"converged": "flat"}
    assert isinstance(warm, WarmStartRow) and (warm.seconds, warm.policy_step) == (12.5, 3)
    assert warm.summary() == {"seconds": 12.5, "val_before": 0.25, M.POLICY_STEP: 3}


def test_every_key_a_run_writes_has_a_place_in_its_record() -> None:
    row = StepRow(reward_mean=0.5).with_values(
        **{M.PROMPT_TOKENS: 7, "alarm/converged": "flat", "judge/calls": 3, "rollout/turns": 2.0}
    )
    assert (row.prompt_tokens, row.alarms, row.figures) == (
        7,
        {"converged": "flat"},
        {"judge/calls": 3, "rollout/turns": 2.0},
    )
    written = {k: v for k, v in row.on_disk().items() if k != KIND_KEY}
    assert StepRow.model_validate(written) == row  # its keys as on disk are the row again
    # a key of no field, alarm or figure: a typo, an undeclared loop key, an unknown alarm
    for key, value in (("reward", 0.5), ("train/reward_maen", 0.5), ("alarm/odd", "x")):
        with pytest.raises(ValidationError):
            row.with_values(**{key: value})
    with pytest.raises(ValidationError):
        row.with_values(**{"judge/calls": "many"})  # a figure is a number


def test_only_the_reader_of_old_rows_keeps_keys_it_has_no_place_for() -> None:
    raw = {**OLD_STEP, "train/retired": 1, "note": "x", "alarm/retired": "gone"}
    row = parse_row(raw)
    assert isinstance(row, StepRow) and row.alarms == {} and row.figures == {"rollout/turns": 1.0}
    assert {k: v for k, v in row.on_disk().items() if k != KIND_KEY} == raw
    stamped = row.with_values(wall_s=1.0)  # kept through a new value, and written back
    assert stamped.on_disk() == {**row.on_disk(), M.WALL_SECONDS: 1.0}
    with pytest.raises(ValidationError):
        StepRow.model_validate(raw)


def test_a_scorer_s_counter_never_takes_a_name_of_the_loop_s() -> None:
    counted = {M.REWARD_ERRORS: 1.0, "judge/calls": 2.0, "calls": 3.0, "train/odd": 4.0}
    assert scorer_figures(counted) == {
        M.REWARD_ERRORS: 1.0,
        "judge/calls": 2.0,
        "scorer/calls": 3.0,
        "scorer/train/odd": 4.0,
    }


def test_a_damaged_value_is_one_line_naming_the_file_line_and_key(tmp_path: Path) -> None:
    lines = [json.dumps(OLD_STEP), json.dumps({**OLD_EVAL, M.VAL_ACCURACY: "high"})]
    (tmp_path / store.METRICS).write_text("\n".join(lines) + "\n")
    with pytest.raises(store.MetricsError, match=r"metrics\.jsonl:2: val/accuracy='high': "):
        store.read_metrics(tmp_path)


def test_the_old_run_reads_as_records_with_its_keys_unchanged_but_renamed_ones() -> None:
    rows = store.read_metrics(OLD_RUN)
    assert [type(r) for r in rows] == [EvalRow, StepRow, EvalRow, StepRow, EvalRow]
    written = [json.loads(line) for line in (OLD_RUN / store.METRICS).read_text().splitlines()]
    assert all(KIND_KEY not in w for w in written)  # written before rows said their kind
    # written before the item draw's metrics were draw/*: read as today's keys, values kept
    assert any(k.startswith("sampling/") for w in written for k in w)
    renamed = [{k.replace("sampling/", "draw/", 1): v for k, v in w.items()} for w in written]
    assert [{k: v for k, v in r.on_disk().items() if k != KIND_KEY} for r in rows] == renamed
    steps = [r for r in rows if isinstance(r, StepRow)]
    assert all(s.number(M.SIGNAL_GROUPS) is not None for s in steps)
    summary = store.read_summary(OLD_RUN)
    assert summary.on_disk() == json.loads((OLD_RUN / store.SUMMARY).read_text())
    assert summary.test is not None and summary.test.items == 4
    last = summary.test.compared(Compared.GAIN_LAST)
    assert last is not None and last.gain == summary.test.gain_last


def test_the_old_run_s_config_reads_its_sampling_group_as_draw() -> None:
    from rlvr.runs.results import command_of

    saved = json.loads((OLD_RUN / store.CONFIG).read_text())
    assert "sampling" in saved and "draw" not in saved  # written before the group was `draw`
    cfg = store.read_config(OLD_RUN)
    assert cfg.draw.model_dump() == saved["sampling"]
    command, _ = command_of(cfg)
    assert "draw.max_refill=0" in command.split() and "sampling" not in command


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    """A copy of the old run directory, under its own name (its policy is named after it)."""
    copy = tmp_path / OLD_RUN.name
    shutil.copytree(OLD_RUN, copy)
    return copy


def test_the_old_run_inspects(old_run: Path) -> None:
    run = ri.load_run(old_run)
    assert run.summary is not None and run.summary.stop_reason == "max_steps"
    assert [p.step for p in ri.curves(run).val] == [0, 1, 2]
    shown = CliRunner().invoke(app, ["inspect", str(old_run)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "test (4 paired items)" in shown.output


@pytest.mark.slow
def test_the_old_run_evaluates_and_resumes_one_more_step(old_run: Path) -> None:
    from rlvr.training import evaluate_run, run_training

    accuracy = asyncio.run(evaluate_run(old_run, "test"))
    assert 0.0 <= accuracy <= 1.0
    assert (old_run / store.TRAJECTORIES / "eval-test.parquet").is_file()
    # One more step: the finished run's summary goes, and its config allows a third step, of
    # shorter replies (what is checked is how the old record reads and resumes, not the replies).
    (old_run / store.SUMMARY).unlink()
    config = json.loads((old_run / store.CONFIG).read_text())
    (old_run / store.CONFIG).write_text(json.dumps({**config, "max_steps": 3, "max_tokens": 8}))
    result = asyncio.run(run_training(store.read_config(old_run), resume=old_run))
    assert result.steps == 3 and result.test is not None
    rows = store.read_metrics(old_run)
    assert [r.step for r in rows if isinstance(r, StepRow)] == [1, 2, 3]
    new = json.loads((old_run / store.METRICS).read_text().splitlines()[-1])
    assert new[KIND_KEY] == "eval" and new[M.STEP] == 3  # a new row says its kind
    assert store.read_summary(old_run).steps == 3
