"""The results pages' pictures (tools/docsite.py, rlvr.runs.pictures): a record keeps the curves
its run's report.png is drawn from, and the docs hook draws each task's run from its record with
that same code, byte for byte; a record without curves draws its paired gains and says so; the
benchmarks are charted against their baselines; a picture the pages name but the hook did not
draw fails the strict build; and a real browser shows the pictures on the built site."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import Abort

from rlvr.runs import store
from rlvr.runs.pictures import NO_CURVES, bench_figure, measured, png, record_figure
from rlvr.runs.report import DRAWN_KEYS, report_figure, story_lines
from rlvr.runs.results import (
    Gain,
    RunRecord,
    read_bench,
    read_record,
    record_from_run,
    write_record,
)
from tests.helpers.repo import DATA, ROOT
from tools import docshots, docsite

RUN = DATA / "old-run" / "math-old"
PNG = b"\x89PNG\r\n\x1a\n"
SERVE = {"bench": "serve", "endpoint_concurrent_tok_s": 40.0, "bare_generate_tok_s": 32.0}
TRAIN = {"bench": "train", "backend_step_s": 6.0, "bare_step_s": 5.0, "peak_rss_gb": 3.5}


def kept_record(folder: Path) -> Path:
    """The record `rlvr results record` writes of the recorded math run, in `folder`."""
    record = record_from_run(RUN, command="rlvr train math", commit="0", cpu="AVX2")
    return write_record(record, folder)


def bench_folder(folder: Path) -> Path:
    folder.mkdir()
    (folder / "serve.jsonl").write_text(json.dumps(SERVE) + "\n")
    (folder / "train.jsonl").write_text("progress line\n" + json.dumps(TRAIN) + "\n")
    return folder


def test_the_hook_draws_a_task_s_run_from_its_record_as_its_report_png(tmp_path: Path) -> None:
    kept_record(tmp_path / "records")
    pictures = docsite.results_pictures(tmp_path / "records", tmp_path / "no-bench")
    drawn_by_the_run = png(report_figure(store.read_metrics(RUN), store.read_summary(RUN)))
    assert pictures == {"results/figures/math.png": drawn_by_the_run}
    page, _ = docsite.results_pages(tmp_path / "records", tmp_path / "no-bench")
    assert "](figures/math.png)" in page


def test_a_record_keeps_only_what_its_report_reads(tmp_path: Path) -> None:
    record = read_record(kept_record(tmp_path))
    assert record.curves is not None
    rows, summary = record.curves.parsed()
    assert story_lines(rows, summary) == story_lines(
        store.read_metrics(RUN), store.read_summary(RUN)
    )
    assert all(key in DRAWN_KEYS for row in record.curves.rows for key in row)
    assert summary.run_dir == Path(RUN.name)  # not the recording machine's path


def test_a_record_without_curves_draws_its_paired_gains_and_says_so() -> None:
    record = RunRecord(
        task="email",
        command="rlvr train email",
        defaults=True,
        date="2026-01-01",
        test_items=120,
        test_before=0.3,
        test_best=0.5,
        rl_gain_best=Gain(value=0.2, low=0.1, high=0.3, p=0.001),
        rl_gain_last=Gain(value=0.15, low=0.05, high=0.25),
        source="transcribed",
    )
    figure = record_figure(record)
    [axes] = figure.axes
    said = " ".join(t.get_text() for t in figure.texts)
    labels = [t.get_text() for t in axes.get_yticklabels()]
    png(figure)
    assert NO_CURVES in said
    assert "+0.200 [+0.100, +0.300]" in said
    assert len(labels) == 2 and "120 items" in axes.get_title()


def test_the_benchmark_chart_is_drawn_from_the_bench_lines(tmp_path: Path) -> None:
    bench = bench_folder(tmp_path / "bench")
    pictures = docsite.results_pictures(tmp_path / "no-records", bench)
    assert list(pictures) == [docsite.BENCH_FIGURE]
    assert pictures[docsite.BENCH_FIGURE].startswith(PNG)
    lines = [*read_bench(bench / "serve.jsonl"), *read_bench(bench / "train.jsonl")]
    speeds = [(m.speed, m.peak_rss_gb) for m in measured(lines)]
    # a throughput over bare's, and bare's time over ours: above 1 is faster either way
    assert speeds == [(40.0 / 32.0, None), (5.0 / 6.0, 3.5)]
    assert len(bench_figure(lines).axes) == 2
    _, page = docsite.results_pages(tmp_path / "no-records", bench)
    assert "](figures/benchmarks.png)" in page


def test_every_kept_record_and_bench_line_is_drawn() -> None:
    pictures = docsite.results_pictures()
    results, bench = docsite.results_pages()
    for path, picture in pictures.items():
        assert picture.startswith(PNG), path
        shown = str(Path(path).relative_to("results"))
        assert f"]({shown})" in (bench if path == docsite.BENCH_FIGURE else results), path


# --- the strict build and the browser -------------------------------------------------------------

HOOK_WITHOUT_PICTURES = """
from tools import docsite


def on_files(files, config):
    files = docsite.on_files(files, config)
    for drawn in [f for f in files if f.src_uri.startswith(docsite.FIGURES + "/")]:
        files.remove(drawn)
    return files
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site as `make docs` builds it."""
    out = tmp_path_factory.mktemp("site")
    built(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(out)))
    return out


def built(config: MkDocsConfig) -> None:
    """`mkdocs build` in this process: its plugins started and shut down as its CLI does."""
    config.plugins.on_startup(command="build", dirty=False)
    try:
        build(config)
    finally:
        config.plugins.on_shutdown()


@pytest.mark.slow
def test_the_strict_build_puts_the_pictures_in_the_site(site: Path) -> None:
    for path in docsite.results_pictures():
        assert (site / path).read_bytes().startswith(PNG), path


@pytest.mark.slow
def test_a_picture_the_hook_did_not_draw_fails_the_strict_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hook = tmp_path / "hook_without_pictures.py"
    hook.write_text(HOOK_WITHOUT_PICTURES)
    config = load_config(
        str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), hooks=[str(hook)]
    )
    with caplog.at_level(logging.WARNING), pytest.raises(Abort):
        built(config)
    missing = [r.getMessage() for r in caplog.records if "figures/" in r.getMessage()]
    for path in docsite.results_pictures():
        assert any(str(Path(path).relative_to("results")) in m for m in missing), path


@pytest.mark.slow
@pytest.mark.skipif(
    not docshots.CHROMIUM.is_file(),
    reason=f"{docshots.CHROMIUM} is absent: the screenshots need Debian's chromium package",
)
def test_headless_chromium_shows_the_results_and_benchmarks_pages(
    site: Path, tmp_path: Path
) -> None:
    shots = docshots.take(site, tmp_path / "shots")
    assert [p.name for p in shots] == [s.name for s in docshots.SHOTS]
    for shot in shots:
        # a page of text and pictures, not a blank or error page
        assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 100_000, shot


def test_make_docs_builds_strict_and_not_quiet() -> None:
    # mkdocs' -q lowers its logger to errors: --strict then counts no warning and a missing
    # picture builds
    [line] = [
        s for s in (ROOT / "Makefile").read_text().splitlines() if s.startswith("MKDOCS_BUILD")
    ]
    assert "--strict" in line.split() and not {"-q", "--quiet"} & set(line.split())
