"""The serving figures a vLLM-served run adds to each step's row (named once)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class VllmMetric(StrEnum):
    """Keys a step's row gets from the vLLM backend (each a number)."""

    STARTUP_S = "vllm/startup_s"  # seconds the started server took to answer /health
    ADAPTER_LOAD_S = "vllm/adapter_load_s"  # this step's adapter into every server
    RSS_GB = "vllm/rss_gb"  # resident memory of the started server's processes, now
    SERVERS = "vllm/servers"  # servers still answering
    RETRIED = "vllm/retried_requests"  # requests re-sent this step after their server died
    # k3 estimate of KL(vLLM's sampling || the trainer) on the sampled tokens, before the update
    MISMATCH_KL = "train/mismatch_kl"


PREFIX = "vllm/"


def serving_metrics(backend: Any, model: Any, trained: dict[str, float]) -> dict[str, float]:
    """A step row's serving figures: the backend's live ones (every row, trained or not) and
    those its train() returned (adapter load, mismatch KL); none from other backends."""
    live = getattr(backend, "serving_metrics", None)
    figures: dict[str, float] = live(model) if callable(live) else {}
    return figures | {
        k: v for k, v in trained.items() if k.startswith(PREFIX) or k == VllmMetric.MISMATCH_KL
    }
