"""The serving figures a vLLM-served run adds to each step's row (named once, as
rlvr.metrics.VllmMetric)."""

from __future__ import annotations

from typing import Any

from rlvr.metrics import VLLM_PREFIX, VllmMetric


def serving_metrics(backend: Any, model: Any, trained: dict[str, float]) -> dict[str, float]:
    """A step row's serving figures: the backend's live ones (every row, trained or not) and
    those its train() returned (adapter load, mismatch KL); none from other backends."""
    live = getattr(backend, "serving_metrics", None)
    figures: dict[str, float] = live(model) if callable(live) else {}
    return figures | {
        k: v for k, v in trained.items() if k.startswith(VLLM_PREFIX) or k == VllmMetric.MISMATCH_KL
    }
