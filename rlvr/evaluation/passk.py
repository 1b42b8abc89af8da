"""Sampled evaluation: pass@k, pass^k and avg@k from K sampled answers per item.

With `n` samples of an item of which `c` are correct, the unbiased estimates are
pass@k = 1 - C(n-c, k) / C(n, k) (at least one of k draws correct), pass^k = C(c, k) / C(n, k)
(all k correct: reliability) and avg@k = the mean score (any k: its expectation does not depend on
k). A sample is correct when it gets full credit (score >= 1); avg@k uses the scores as they are,
so a fractional check counts partly. Each figure is the mean over items, with a seeded bootstrap
95% interval over items (the items are the unit of noise, as in rlvr.evaluation.paired_gains). RL that
sharpens a small model's answers raises pass@1 and may lower pass@k at larger k: both are
reported.
"""

from __future__ import annotations

from math import comb

import numpy as np
from pydantic import BaseModel, ConfigDict

RESAMPLES = 10_000
FULL_CREDIT = 1.0 - 1e-9


class Estimate(BaseModel):
    """A mean over items and its 95% interval."""

    model_config = ConfigDict(frozen=True)

    value: float
    ci95: tuple[float, float]

    def describe(self) -> str:
        low, high = self.ci95
        return f"{self.value:.3f} [{low:.3f}, {high:.3f}]"


class AtK(BaseModel):
    """pass@k, pass^k and avg@k for one k."""

    model_config = ConfigDict(frozen=True)

    k: int
    pass_at_k: Estimate
    pass_hat_k: Estimate
    avg_at_k: Estimate


class SampledEval(BaseModel):
    """A sampled evaluation: `samples` answers per item at `temperature`, each item's scores."""

    model_config = ConfigDict(frozen=True)

    items: int
    samples: int
    temperature: float
    by_k: list[AtK]
    scores: dict[str, list[float]]

    def lines(self) -> list[str]:
        head = f"{self.items} items x {self.samples} samples at temperature {self.temperature:g}"
        return [
            head,
            *(
                f"k={row.k}: pass@k {row.pass_at_k.describe()}  pass^k "
                f"{row.pass_hat_k.describe()}  avg@k {row.avg_at_k.describe()}"
                for row in self.by_k
            ),
        ]


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples, c correct, is correct)."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """P(all k draws without replacement from n samples, c correct, are correct)."""
    return comb(c, k) / comb(n, k)


def ks_for(samples: int) -> list[int]:
    """The k reported for `samples` samples an item: powers of two up to it, and itself."""
    ks, k = [], 1
    while k < samples:
        ks.append(k)
        k *= 2
    return [*ks, samples]


def estimate(values: list[float], seed: int = 0, resamples: int = RESAMPLES) -> Estimate:
    """The mean of per-item `values` with a seeded percentile bootstrap interval over items."""
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Estimate(value=float(data.mean()), ci95=(float(low), float(high)))


def sampled_eval(scores: dict[str, list[float]], temperature: float, seed: int = 0) -> SampledEval:
    """pass@k, pass^k and avg@k for every reported k from each item's sample scores (every item
    with the same number of samples; ValueError otherwise, or with none)."""
    if not scores:
        raise ValueError("no items were evaluated")
    counts = {len(s) for s in scores.values()}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"items have different numbers of samples: {sorted(counts)}")
    n = counts.pop()
    correct = [sum(v >= FULL_CREDIT for v in s) for s in scores.values()]
    means = [sum(s) / n for s in scores.values()]
    by_k = [
        AtK(
            k=k,
            pass_at_k=estimate([pass_at_k(n, c, k) for c in correct], seed),
            pass_hat_k=estimate([pass_hat_k(n, c, k) for c in correct], seed),
            avg_at_k=estimate(means, seed),
        )
        for k in ks_for(n)
    ]
    return SampledEval(
        items=len(scores), samples=n, temperature=temperature, by_k=by_k, scores=dict(scores)
    )
