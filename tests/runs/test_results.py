"""`rlvr results`: run records from run directories, and the Markdown tables made from records
and `rlvr bench` lines. The run directories here are written the way a run writes them: the
config through the run store, the test block by rlvr.evaluation.paired_gains from per-item scores, metrics rows
with the memory peak; a slow test records the shared real run (tests/conftest.py `tiny_run`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import RunConfig, pairs_to_dict
from rlvr.evaluation import paired_gains
from rlvr.runs import layout, store
from rlvr.runs.records import RunResult, parse_row
from rlvr.runs.results import (
    Gain,
    ResultsError,
    RunRecord,
    command_of,
    cpu_kind,
    current,
    gather,
    read_record,
    record_from_run,
    results_page,
    summary_table,
    write_record,
)
from rlvr.task_api.plugins import task_config
from tests.helpers.repo import ROOT

RUNNER = CliRunner()


def scores(hits: int, items: int = 20) -> dict[str, float]:
    """Per-item test scores: the first `hits` items right."""
    return {f"q{i}": float(i < hits) for i in range(items)}


def write_run(
    root: Path,
    name: str,
    cfg: RunConfig,
    *,
    warm: bool = True,
    final: int = 12,
    last: int = 14,
    rss: list[float] | None = None,
) -> Path:
    """A finished run directory as the loop leaves it (config.json, metrics.jsonl, summary.json)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    store.write_config(run_dir, cfg)
    for step, peak in enumerate(rss or [], start=1):
        store.append_metrics(
            run_dir, parse_row({"step": step, "train/reward_mean": 0.5, "sys/peak_rss_gb": peak})
        )
    block = paired_gains.test_block(
        scores(2), scores(6) if warm else None, scores(final), scores(last)
    )
    summary = RunResult.model_validate(
        {
            "run_dir": str(run_dir),
            "task": cfg.task,
            "scorer": "verifier",
            "stop_reason": "plateau",
            "steps": 9,
            "baseline_val": 0.3,
            "best_val": 0.5,
            "best_step": 6,
            "test_accuracy": block.final,
            "alarms": [],
            "wall_s": 940.5,
            "gain": 0.2,
            "last_step": 9,
            "val_items": 20,
            "test": block,
        }
    )
    store.write_summary(run_dir, summary)
    return run_dir


@pytest.mark.parametrize(
    ("warm", "final", "last", "before", "best", "last_gain"),
    [
        pytest.param(True, 12, 14, 0.3, 0.3, 0.4, id="warm start: RL's gain over it"),
        pytest.param(False, 12, 14, 0.1, 0.5, 0.6, id="no warm start: over the start"),
        pytest.param(True, 6, 6, 0.3, 0.0, 0.0, id="RL moved nothing"),
    ],
)
def test_a_run_directory_becomes_its_record(
    tmp_path: Path,
    warm: bool,
    final: int,
    last: int,
    before: float,
    best: float,
    last_gain: float,
) -> None:
    cfg = task_config("math", group_size=4)
    run = write_run(
        tmp_path,
        "math-20261128-101500",
        cfg,
        warm=warm,
        final=final,
        last=last,
        rss=[6.5, 7.25, 7.0],
    )
    record = record_from_run(run, commit="abc1234", cpu="AVX2")
    assert record.task == "math" and record.date == "2026-11-28" and record.run == run.name
    assert record.command == "rlvr train math group_size=4" and not record.defaults
    assert (record.commit, record.cpu, record.test_items) == ("abc1234", "AVX2", 20)
    assert record.test_before == pytest.approx(before)
    assert record.rl_gain_best is not None and record.rl_gain_last is not None
    assert record.rl_gain_best.value == pytest.approx(best)
    assert record.rl_gain_last.value == pytest.approx(last_gain)
    assert record.rl_gain_best.low <= record.rl_gain_best.value <= record.rl_gain_best.high
    assert (record.steps, record.stop_reason, record.wall_s) == (9, "plateau", 940.5)
    assert record.peak_rss_gb == 7.25
    files = [p for p in run.rglob("*") if p.is_file()]
    assert record.run_mb == pytest.approx(sum(p.stat().st_size for p in files) / 1e6)
    (run / "linked").hardlink_to(files[0])  # as ART links the run's checkpoint files
    assert record_from_run(run, commit="abc1234", cpu="AVX2").run_mb == record.run_mb
    path = write_record(record, tmp_path / "records")
    assert read_record(path) == record  # the file holds exactly the record


@pytest.mark.parametrize(
    ("overrides", "command", "defaults"),
    [
        pytest.param({}, "rlvr train math", True, id="the task's defaults"),
        pytest.param(
            {"group_size": 4, "stopping.patience": 6},
            "rlvr train math group_size=4 stopping.patience=6",
            False,
            id="a RunConfig key and a nested one",
        ),
        pytest.param(
            {"difficulty": "hard"}, "rlvr train math difficulty=hard", False, id="a task option"
        ),
        pytest.param({"seed": 1}, "rlvr train math seed=1", True, id="another seed"),
        pytest.param(
            {"seed": 1, "data_seed": 2},
            "rlvr train math seed=1 data_seed=2",
            True,
            id="another seed on other data",
        ),
    ],
)
def test_the_command_is_rebuilt_from_config_json(
    overrides: dict[str, Any], command: str, defaults: bool
) -> None:
    cfg = task_config("math", **overrides)
    # Where a run was written is not how it trained.
    cfg = cfg.model_copy(update={"run_dir": Path("/somewhere/else")})
    assert command_of(cfg) == (command, defaults)
    assert rerun(command) == {**cfg.model_dump(mode="json"), "run_dir": None}


def rerun(command: str) -> dict[str, Any]:
    """The config `command` (`rlvr train TASK key=value ...`) runs with."""
    task, *pairs = shlex.split(command)[2:]
    return task_config(task, **pairs_to_dict(pairs)).model_dump(mode="json")


def record(task: str, date: str, defaults: bool, gain: float, **more: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "command": f"rlvr train {task}" + ("" if defaults else " seed=1"),
        "source": "test",
        **more,
    }
    return RunRecord(
        task=task,
        defaults=defaults,
        date=date,
        rl_gain_best=Gain(value=gain, low=gain - 0.1, high=gain + 0.1),
        **fields,
    )


@pytest.mark.parametrize(
    ("records", "chosen"),
    [
        pytest.param(
            [record("email", "2026-11-26", True, 0.1), record("email", "2026-11-28", True, 0.2)],
            [0.2],
            id="the newest run of the defaults",
        ),
        pytest.param(
            [
                record("email", "2026-11-26", True, 0.1),
                record("email", "2026-11-28", True, 0.2, command="rlvr train email seed=2"),
            ],
            [0.1],
            id="the bare command over a newer run of the defaults on another seed",
        ),
        pytest.param(
            [record("email", "2026-11-26", True, 0.1), record("email", "2026-11-28", False, 0.3)],
            [0.1],
            id="the defaults over a newer run with overrides",
        ),
        pytest.param(
            [record("math", "2026-11-26", False, 0.4), record("email", "2026-11-26", True, 0.1)],
            [0.1, 0.4],
            id="one row per task, by name; overrides where no run has the defaults",
        ),
    ],
)
def test_the_summary_holds_one_current_run_per_task(
    records: list[RunRecord], chosen: list[float]
) -> None:
    assert [r.rl_gain_best.value for r in current(records) if r.rl_gain_best] == chosen
    table = summary_table(records).splitlines()
    assert len(table) == 2 + len(chosen)


@pytest.mark.parametrize(
    ("gain", "shown"),
    [
        pytest.param(
            Gain(value=0.142, low=0.042, high=0.242), "**+0.142 [+0.042, +0.242]**", id="resolved"
        ),
        pytest.param(
            Gain(value=0.075, low=-0.075, high=0.225), "+0.075 [-0.075, +0.225]", id="not"
        ),
        pytest.param(Gain(value=0.0, low=0.0, high=0.0), "+0.000 [+0.000, +0.000]", id="zero"),
    ],
)
def test_a_gain_is_bold_only_when_its_interval_clears_zero(gain: Gain, shown: str) -> None:
    assert gain.text() == shown


def test_the_page_names_its_command_and_every_record(tmp_path: Path) -> None:
    records = [
        record("email", "2026-11-28", True, 0.1, commit="f0e2b0d", cpu="AVX512-BF16", wall_s=940),
        record(
            "math", "2026-11-26", True, 0.4, peak_rss_gb=7.6, steps=26, stop_reason="time_budget"
        ),
    ]
    bench = tmp_path / "serve.jsonl"
    bench.write_text('loading...\n{"bench": "serve", "base_tok_s": 39.0, "ratio_vs_bare": 0.94}\n')
    inputs = gather([bench])
    page = results_page(inputs.model_copy(update={"records": tuple(records)}), [Path("x")])
    assert page.startswith("*Made by `rlvr results x`;")
    for text in ("## `email`", "## `math`", "f0e2b0d", "AVX512-BF16", "15.7 min", "7.6 GB"):
        assert text in page, text
    assert (
        "26 (time_budget)" in page and "### `rlvr bench serve`" in page and "| 39 | 0.94 |" in page
    )


def test_rlvr_results_prints_and_writes_the_tables(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "math-20261128-101500", task_config("math"))
    shown = RUNNER.invoke(app, ["results", str(run)])
    assert shown.exit_code == 0, shown.output
    assert "| `math` | " in shown.output and "`rlvr train math`" in shown.output
    out = tmp_path / "page.md"
    written = RUNNER.invoke(app, ["results", str(run), "--summary", "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text().count("| `math` |") == 1 and "## `math`" not in out.read_text()


def test_rlvr_results_record_keeps_a_run_in_a_folder_of_records(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "math-20261128-101500", task_config("math"))
    folder = tmp_path / "records"
    done = RUNNER.invoke(
        app, ["results", "record", str(run), "--out", str(folder), "--cpu", "AMX", "--note", "n"]
    )
    assert done.exit_code == 0, done.output
    [path] = folder.iterdir()
    assert done.output.strip() == str(path)
    kept = read_record(path)
    assert (kept.cpu, kept.note, kept.defaults) == ("AMX", "n", True)
    again = RUNNER.invoke(app, ["results", str(folder)])
    assert again.exit_code == 0 and "`rlvr train math`" in again.output


def bad_summary(run: Path) -> None:
    (run / layout.SUMMARY).unlink()


def torn_summary(run: Path) -> None:
    (run / layout.SUMMARY).write_text('{"task": "math", "test": {')


def bad_interval(run: Path) -> None:
    summary = json.loads((run / layout.SUMMARY).read_text())
    summary["test"]["rl_gain_ci95"] = "wide"
    (run / layout.SUMMARY).write_text(json.dumps(summary))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        pytest.param(bad_summary, "no summary.json (the run has not finished", id="no summary"),
        pytest.param(torn_summary, "summary.json: damaged, not valid JSON", id="torn summary"),
        pytest.param(
            bad_interval, "test.rl_gain_ci95 is 'wide': input should be a valid tuple", id="bad CI"
        ),
    ],
)
@pytest.mark.parametrize("command", [["results"], ["results", "record"]])
def test_a_bad_run_directory_is_one_line_and_exit_2(
    tmp_path: Path, damage: Any, said: str, command: list[str]
) -> None:
    run = write_run(tmp_path / "runs", "math-20261128-101500", task_config("math"))
    damage(run)
    done = RUNNER.invoke(
        app, [*command, str(run), *(["--out", str(tmp_path / "r")] if "record" in command else [])]
    )
    assert done.exit_code == 2
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], done.output
    assert str(run) in lines[0] and "Traceback" not in done.output
    assert not (tmp_path / "r").exists()  # nothing half-written


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        pytest.param(
            "r.json", "[1, 2]", "r.json: a JSON list; expected a run record", id="not an object"
        ),
        pytest.param(
            "r.json",
            json.dumps(
                {"task": "math", "command": "c", "defaults": True, "date": "28 Nov", "source": "s"}
            ),
            "r.json: field 'date' (got \"28 Nov\"): String should match pattern",
            id="a bad field",
        ),
        pytest.param(
            "r.json",
            json.dumps({"task": "math", "command": "c", "defaults": True, "date": "2026-11-28"}),
            "r.json: field 'source': Field required",
            id="a missing field",
        ),
        pytest.param("b.jsonl", '{"ratio": 1}\n', "b.jsonl:1: no 'bench' key", id="a bench line"),
        pytest.param(
            "notes.txt", "hello", "notes.txt: expected a run directory, a record", id="a suffix"
        ),
    ],
)
def test_a_bad_record_file_is_one_line_naming_it(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ResultsError, match="^" + str(tmp_path)):
        gather([path])
    done = RUNNER.invoke(app, ["results", str(path), "--out", str(tmp_path / "page.md")])
    assert done.exit_code == 2 and said in done.output, done.output
    assert len(done.output.strip().splitlines()) == 1 and not (tmp_path / "page.md").exists()


@pytest.mark.parametrize(
    ("paths", "said"),
    [
        pytest.param(["missing"], "missing: no such file or directory", id="missing"),
        pytest.param(
            ["empty"], "empty: no run directory, record (.json) or bench", id="empty folder"
        ),
    ],
)
def test_a_path_that_holds_nothing_is_one_line(tmp_path: Path, paths: list[str], said: str) -> None:
    (tmp_path / "empty").mkdir()
    done = RUNNER.invoke(app, ["results", *(str(tmp_path / p) for p in paths)])
    assert done.exit_code == 2 and said in done.output, done.output


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        pytest.param("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "AMX", id="AMX"),
        pytest.param("fpu avx2 avx512f avx512_bf16", "AVX512-BF16", id="AVX512-BF16"),
        pytest.param("fpu avx2 avx512f", "AVX512", id="AVX512"),
        pytest.param("fpu sse4_2 avx2 fma", "AVX2", id="AVX2"),
        pytest.param("fpu neon", "other", id="other"),
    ],
)
def test_cpu_kind(flags: str, kind: str) -> None:
    assert cpu_kind(flags) == kind


def test_the_kept_records_read_and_make_a_row_per_task() -> None:
    """results/records/ (what the README's table and the results page are made from) reads
    whole, and every record there says where its figures came from."""
    folder = ROOT / "results" / "records"
    records = gather([folder]).records
    assert records and all(r.source for r in records)
    tasks = {r.task for r in records}
    assert len(summary_table(records).splitlines()) == 2 + len(tasks)


@pytest.mark.parametrize(
    ("run_mb", "wall_s", "shown"),
    [(None, 600.0, "—"), (30.0, None, "30 MB"), (30.0, 600.0, "30 MB (3.0 MB/min)")],
)
def test_the_runs_table_gives_the_run_directory_s_size_a_minute(
    run_mb: float | None, wall_s: float | None, shown: str
) -> None:
    from rlvr.runs.results import RunRecord, runs_table

    record = RunRecord(
        task="math",
        command="rlvr train math",
        defaults=True,
        date="2026-12-02",
        source="test",
        run_mb=run_mb,
        wall_s=wall_s,
    )
    header, _, row = runs_table([record]).splitlines()
    cells = [c.strip() for c in row.strip("|").split("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    assert cells[names.index("run dir")] == shown


@pytest.mark.slow
def test_a_real_run_is_recorded_and_tabled(tiny_run: Any, tmp_path: Path) -> None:
    record_path = write_record(record_from_run(tiny_run.run_dir), tmp_path)
    kept = read_record(record_path)
    summary = json.loads((tiny_run.run_dir / layout.SUMMARY).read_text())  # its keys on disk
    assert kept.task == "math" and kept.steps == summary["steps"]
    assert kept.test_items == summary["test"]["items"]
    assert kept.rl_gain_best is not None and kept.rl_gain_best.value == pytest.approx(
        summary["test"]["rl_gain"]
    )
    assert kept.peak_rss_gb is not None and kept.peak_rss_gb > 0
    assert kept.run_mb is not None and kept.run_mb > 0
    assert kept.command.startswith("rlvr train math ") and "num_items=40" in kept.command
    config = store.read_config(tiny_run.run_dir).model_dump(mode="json")
    assert rerun(kept.command) == {**config, "run_dir": None}  # the command runs the same config
    shown = RUNNER.invoke(app, ["results", str(tiny_run.run_dir), str(record_path)])
    # the summary row, then a row for the run directory and one for its record
    assert shown.exit_code == 0 and shown.output.count(kept.command) == 3


def test_the_readme_shows_the_table_the_records_make() -> None:
    """README.md's results table is pasted from the generator: after adding a record, paste
    `rlvr results results/records --summary` into README.md's Results section again."""
    folder = Path("results/records")
    table = results_page(gather([ROOT / folder]), [folder], summary_only=True).strip()
    assert table in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    ("command", "defaults"),
    [
        pytest.param("rlvr train math", True, id="rlvr train"),
        pytest.param("make train TASK=math", True, id="make train"),
        pytest.param("make train TASK=math ARGS='seed=0'", True, id="make train with ARGS"),
    ],
)
def test_a_given_command_of_the_defaults_counts_as_the_defaults(
    tmp_path: Path, command: str, defaults: bool
) -> None:
    run = write_run(
        tmp_path, "math-20261128-101500", task_config("math"), warm=True, final=12, last=14
    )
    record = record_from_run(run, command=command, commit="abc1234", cpu="AVX2")
    assert record.defaults == defaults


def test_on_one_date_a_kept_run_comes_before_a_transcribed_one(tmp_path: Path) -> None:
    kept = record_from_run(
        write_run(
            tmp_path, "math-20261128-101500", task_config("math"), warm=True, final=12, last=14
        ),
        commit="abc1234",
        cpu="AVX2",
    )
    transcribed = kept.model_copy(update={"run": None, "source": "README measurement log"})
    assert current([transcribed, kept]) == [kept]
