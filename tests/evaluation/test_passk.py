"""pass@k, pass^k and avg@k estimators (fast tier)."""

from math import comb

import pytest

from rlvr.evaluation.passk import ks_for, pass_at_k, pass_hat_k, sampled_eval


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 0, 1, 0.0),
        (4, 4, 4, 1.0),
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),  # 3 of the C(4, 2) = 6 pairs hold the correct sample
        (10, 3, 5, 1 - comb(7, 5) / comb(10, 5)),
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(4, 4, 4, 1.0), (4, 3, 4, 0.0), (4, 2, 1, 0.5), (4, 2, 2, 1 / 6)],
)
def test_pass_hat_k(n, c, k, expected):
    assert pass_hat_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("samples", "ks"), [(1, [1]), (3, [1, 2, 3]), (8, [1, 2, 4, 8])])
def test_reported_ks(samples, ks):
    assert ks_for(samples) == ks


def test_sampled_eval_orders_and_intervals():
    scores = {"a": [1.0, 0.0, 0.0, 1.0], "b": [0.0] * 4, "c": [1.0] * 4, "d": [0.5, 1.0, 0.0, 0.0]}
    result = sampled_eval(scores, temperature=1.0)
    assert [row.k for row in result.by_k] == [1, 2, 4]
    first = result.by_k[0]
    assert first.pass_at_k.value == pytest.approx((0.5 + 0 + 1 + 0.25) / 4)
    assert first.avg_at_k.value == pytest.approx((0.5 + 0 + 1 + 0.375) / 4)  # partial credit
    for row in result.by_k:
        for figure in (row.pass_at_k, row.pass_hat_k, row.avg_at_k):
            low, high = figure.ci95
            assert low <= figure.value <= high
    assert result.by_k[-1].pass_at_k.value == pytest.approx(3 / 4)  # any of 4 correct
    assert result.by_k[-1].pass_hat_k.value == pytest.approx(1 / 4)  # all 4 correct
    assert any("pass@k" in line for line in result.lines())


@pytest.mark.parametrize("scores", [{}, {"a": [1.0], "b": [1.0, 0.0]}, {"a": []}])
def test_sampled_eval_refuses_uneven_or_empty_samples(scores):
    with pytest.raises(ValueError):
        sampled_eval(scores, temperature=1.0)
