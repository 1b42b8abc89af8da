"""`rlvr bench step`: a real step of a task, split into where its time and tokens went, against
its bare baselines (rlvr.bench.step)."""

from __future__ import annotations

import asyncio

import pytest

from rlvr.bench.step import run_step_bench

pytestmark = pytest.mark.slow


def test_bench_step_reports_the_split_and_its_bare_figures() -> None:
    figures = asyncio.run(
        run_step_bench(
            "math", steps=1, groups_per_batch=2, group_size=4, max_tokens=16, num_items=40
        )
    )
    for key in ("step_s", "rollout_s", "update_s", "decoded_tokens", "bare_generate_s"):
        assert figures[key] > 0, key
    assert figures["step_s"] >= figures["rollout_s"]
    assert figures["rollout_vs_bare"] == pytest.approx(
        figures["rollout_s"] / figures["bare_generate_s"], rel=0.01
    )
    assert len(figures["per_step"]) == 1
