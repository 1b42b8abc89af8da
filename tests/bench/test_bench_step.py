"""`rlvr bench step`: a real step of a task, split into where its time, tokens and memory went,
against its bare baselines (rlvr.bench.step); the per-phase memory watch (rlvr.memory)."""

from __future__ import annotations

import json
import time

import pytest

from rlvr.memory import INTERVAL_S, RssWatch, read_resident_gb, resident_gb


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("Name:\tpython\nVmHWM:\t 9000 kB\nVmRSS:\t 2500000 kB\n", 2.5),
        ("VmRSS:\t1000 kB", 0.001),
        ("Name:\tpython\nVmHWM:\t 9000 kB\n", None),
    ],
)
def test_resident_memory_is_read_from_the_status_line(status: str, expected: float | None) -> None:
    assert resident_gb(status) == (None if expected is None else pytest.approx(expected))


def test_a_phase_keeps_the_peak_of_what_was_resident_inside_it() -> None:
    assert read_resident_gb() is not None  # Linux: /proc/self/status
    with RssWatch() as watch:
        with watch.phase("small"):
            pass
        with watch.phase("large"):
            held = b"\x01" * 200_000_000  # touched, so resident
            with watch.phase("inner"):
                time.sleep(5 * INTERVAL_S)  # the sampler gets its turn on a loaded machine too
            time.sleep(5 * INTERVAL_S)  # and once more in the outer phase, the bytes still held
            del held
    peaks = watch.rounded()
    assert set(peaks) == {"small", "large", "inner"}
    assert peaks["large"] - peaks["small"] >= 0.15
    assert peaks["inner"] - peaks["small"] >= 0.15


def test_take_gives_a_phases_peak_since_it_was_last_taken() -> None:
    with RssWatch() as watch:
        with watch.phase("update"):
            held = b"\x01" * 200_000_000
            time.sleep(5 * INTERVAL_S)
            del held
        first = watch.take("update")
        assert watch.take("update") is None  # nothing read since
        with watch.phase("update"):
            time.sleep(5 * INTERVAL_S)
        second = watch.take("update")
    assert first is not None and second is not None
    assert first - second >= 0.15  # the second update's peak, not the run's
    assert watch.rounded()["update"] == first  # the benchmark's figure keeps the highest


@pytest.mark.slow
def test_bench_step_prints_the_split_its_bare_figures_and_peak_memory() -> None:
    from typer.testing import CliRunner

    from rlvr.bench.step import PEAK_RSS_BY_PHASE
    from rlvr.cli.main import app
    from rlvr.memory import ROLLOUTS, UPDATE
    from tests.helpers.tiny_runs import tiny_model_path

    # the tiny random model: the bench's figures and their arithmetic are checked, not its speed
    # (it never answers a sum: the length scorer gives its groups the spread an update needs)
    args = ["groups_per_batch=2", "group_size=4", "max_tokens=16", "num_items=40"]
    args += [f"model={tiny_model_path()}", "scorer=length"]
    result = CliRunner().invoke(app, ["bench", "step", "math", "--steps", "1", *args])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("step_s", "rollout_s", "update_s", "decoded_tokens", "bare_generate_s"):
        assert figures[key] > 0, key
    assert figures["step_s"] >= figures["rollout_s"]
    assert figures["rollout_vs_bare"] == pytest.approx(
        figures["rollout_s"] / figures["bare_generate_s"], rel=0.01
    )
    assert len(figures["per_step"]) == 1
    phases = figures[PEAK_RSS_BY_PHASE]
    assert {ROLLOUTS, UPDATE} <= set(phases)
    # torch alone is ~0.3 GB resident (the figures are in GB, not MB); no phase is above the
    # process's high-water mark.
    assert all(0.1 < peak <= figures["peak_rss_gb"] + 0.01 for peak in phases.values()), phases


@pytest.mark.parametrize(
    "args",
    [
        ["--inference", "sglang"],
        ["inference=vllm"],
        ["inference.engine=vllm"],
    ],
)
def test_bench_step_refuses_an_engine_it_cannot_compare_in_one_line(args: list[str]) -> None:
    from typer.testing import CliRunner

    from rlvr.cli.main import app

    result = CliRunner().invoke(app, ["bench", "step", "math", *args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "inference" in result.output


@pytest.mark.slow
@pytest.mark.vllm
def test_bench_step_sets_vllm_beside_rlvr_on_the_same_steps() -> None:
    """`rlvr bench step --inference vllm`: both engines' figures, and vLLM's ÷ rlvr's."""
    from typer.testing import CliRunner

    from rlvr.bench.step import COMPARED
    from rlvr.cli.main import app

    args = ["groups_per_batch=2", "group_size=4", "max_tokens=16", "num_items=40", "sft_steps=0"]
    result = CliRunner().invoke(
        app, ["bench", "step", "math", "--steps", "1", "--inference", "vllm", "--no-bare", *args]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    vllm, rlvr = figures["vllm"], figures["rlvr"]
    assert vllm["vllm_startup_s"] > 0 and vllm["vllm_rss_gb"] > 0.1
    assert "vllm_startup_s" not in rlvr  # rlvr's own engine has no server to start
    for key in COMPARED:
        assert vllm[key] > 0 and rlvr[key] > 0, key
        assert figures[f"{key}_vllm_vs_rlvr"] == pytest.approx(vllm[key] / rlvr[key], rel=0.01)
