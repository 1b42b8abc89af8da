"""`rlvr bench serve` on the real model, at the smallest size: every figure it reports is there
and consistent (the speeds themselves are measured on a quiet machine, not here)."""

from __future__ import annotations

import pytest

from rlvr.engine.bench import run_serve_bench


@pytest.mark.slow
async def test_the_serve_bench_reports_the_policy_against_the_base_weights() -> None:
    figures = await run_serve_bench(requests=2, max_tokens=4, repeats=1)
    speeds = (figures.bare_generate_tok_s, figures.endpoint_concurrent_tok_s, figures.base_tok_s)
    assert all(speed > 0 for speed in (*speeds, figures.lora_unmerged_tok_s, figures.ratio_vs_bare))
    assert figures.lora_vs_base == pytest.approx(
        figures.endpoint_concurrent_tok_s / figures.base_tok_s, rel=0.01
    )
    assert figures.merged_mb > 100  # the live adapter's merged projections were built
    assert figures.passes_per_concurrent_run >= 1
