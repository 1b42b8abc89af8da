"""How much did training change held-out accuracy? A paired comparison over the same items.

Two checkpoints are scored on the same test items with the same greedy sampling, so each item
gives a difference `after - before`, and the gain is their mean. Its 95% interval is a seeded
paired bootstrap (resampling items, percentile interval); its p-value a paired sign-flip
permutation test of "no change" (exact over all 2^k sign patterns of the k non-zero differences
when k <= 16, else 20,000 seeded random flips). Pairing removes the items' own difficulty from
the noise, which is why a gain that a best-of-N validation curve cannot resolve can be resolved
here.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

RESAMPLES = 10_000
EXACT_UP_TO = 16  # non-zero differences; 2^16 sign patterns
FLIPS = 20_000


class PairedGain(BaseModel):
    """Mean accuracy before and after on the same items, their mean difference, its interval."""

    model_config = ConfigDict(frozen=True)

    items: int
    before: float
    after: float
    gain: float
    ci95: tuple[float, float]
    p_value: float

    def describe(self, what: str = "test items") -> str:
        low, high = self.ci95
        return (
            f"{self.gain:+.3f} [{low:+.3f}, {high:+.3f}] on {self.items} {what} "
            f"(p={self.p_value:.3g}; {self.before:.3f} -> {self.after:.3f})"
        )


def paired_gain(
    before: list[float], after: list[float], *, resamples: int = RESAMPLES, seed: int = 0
) -> PairedGain:
    """The paired gain of `after` over `before` (same items, same order)."""
    if len(before) != len(after):
        raise ValueError(f"paired scores differ in length: {len(before)} vs {len(after)}")
    if not before:
        raise ValueError("no items to compare")
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    diff = b - a
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return PairedGain(
        items=len(diff),
        before=float(a.mean()),
        after=float(b.mean()),
        gain=float(diff.mean()),
        ci95=(float(low), float(high)),
        p_value=sign_flip_p(diff, seed=seed),
    )


def sign_flip_p(diff: np.ndarray, *, seed: int = 0) -> float:
    """Two-sided p-value of mean(diff) under random signs (items whose scores did not change
    carry no evidence either way and drop out)."""
    moved = diff[diff != 0]
    if len(moved) == 0:
        return 1.0
    observed = abs(moved.sum())
    if len(moved) <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(moved))))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(FLIPS, len(moved)))
    sums = np.abs(signs @ moved)
    return float(np.mean(sums >= observed - 1e-12))


METHOD = (
    f"paired bootstrap 95% interval over items ({RESAMPLES:,} resamples, seed 0); "
    "sign-flip permutation p-value"
)


def test_block(
    start: dict[str, float],
    after_warm_start: dict[str, float] | None,
    final: dict[str, float],
    last: dict[str, float] | None = None,
) -> dict[str, Any]:
    """summary.json's `test` block from per-item test scores of the starting model, the model
    after the warm start (None without one), the final (best) checkpoint and the last checkpoint
    (None where it could not be evaluated; the final's scores where it is the final one): the items
    all of them completed, each accuracy, and each checkpoint's gain over the start (`gain`,
    `gain_last`) and over the warm start (`rl_gain`, `rl_gain_last`; over the start without a
    warm start), each with its interval and p-value."""
    tables = [start, final, *(t for t in (after_warm_start, last) if t is not None)]
    common = sorted(set.intersection(*(set(t) for t in tables)))
    if not common:
        return {"items": 0, "method": METHOD}
    base = after_warm_start if after_warm_start is not None else start
    block: dict[str, Any] = {
        "items": len(common),
        "start": float(np.mean([start[i] for i in common])),
        "after_warm_start": (
            float(np.mean([after_warm_start[i] for i in common]))
            if after_warm_start is not None
            else None
        ),
    }
    for suffix, scores in (("", final), ("_last", last)):
        if scores is None:
            continue
        gain = paired_gain([start[i] for i in common], [scores[i] for i in common])
        rl = paired_gain([base[i] for i in common], [scores[i] for i in common])
        block |= {
            "final" if not suffix else "last": gain.after,
            f"gain{suffix}": gain.gain,
            f"gain{suffix}_ci95": list(gain.ci95),
            f"gain{suffix}_p": gain.p_value,
            f"rl_gain{suffix}": rl.gain,
            f"rl_gain{suffix}_ci95": list(rl.ci95),
            f"rl_gain{suffix}_p": rl.p_value,
        }
    return block | {"method": METHOD}


def describe_block(block: dict[str, Any]) -> list[str]:
    """The block in words a user reads at a glance, one line per comparison."""
    if not block.get("items"):
        return ["test: no item completed in every evaluation"]

    def line(key: str, label: str) -> str:
        low, high = block[f"{key}_ci95"]
        return (
            f"{label}: {block[key]:+.3f} [{low:+.3f}, {high:+.3f}] on {block['items']} test "
            f"items (p={block[f'{key}_p']:.3g})"
        )

    start, final = block["start"], block["final"]
    lines = [f"test accuracy {start:.3f} -> {final:.3f} (best checkpoint); " + line("gain", "gain")]
    warmed = block.get("after_warm_start") is not None
    if warmed:
        lines.append(
            f"after the warm start {block['after_warm_start']:.3f}; " + line("rl_gain", "RL gain")
        )
    if block.get("last") is not None:
        key = "rl_gain_last" if warmed else "gain_last"
        label = "RL gain" if warmed else "gain"
        lines.append(f"last checkpoint {block['last']:.3f}; " + line(key, f"{label} (last)"))
    return lines
