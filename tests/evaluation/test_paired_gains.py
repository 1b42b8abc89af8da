"""The paired gain on the test split: known cases for the interval and the p-value."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr.evaluation import paired_gains
from rlvr.evaluation.paired_gains import paired_gain, sign_flip_p
from rlvr.runs.report import gains


@pytest.mark.parametrize(
    ("before", "after", "gain", "ci", "p"),
    [
        # nothing changed: no gain, a zero-width interval, no evidence
        ([1, 0, 1, 0] * 10, [1, 0, 1, 0] * 10, 0.0, (0.0, 0.0), 1.0),
        # every item improved: the interval is the gain itself; exact p = 2 / 2^16
        ([0] * 16, [1] * 16, 1.0, (1.0, 1.0), 2 / 2**16),
        # 30 of 120 items fixed, 6 broken: clearly positive
        ([0] * 30 + [1] * 6 + [0] * 84, [1] * 30 + [0] * 6 + [0] * 84, 0.2, (0.107, 0.293), 0.001),
        # one item of two fixed: no test of two items can reject, so every gain the scores allow
        ([0, 0], [1, 0], 0.5, (-1.0, 1.0), 1.0),
        # graded scores, four items: the same, within the scores' span
        ([0.2, 0.5, 0.9, 0.4], [0.6, 0.5, 0.7, 0.8], 0.15, (-0.7, 0.7), 0.5),
        # 5 of 40 fixed, none broken: exact p = 2 / 2^5, so the interval reaches 0
        ([0] * 40, [1] * 5 + [0] * 35, 0.125, (0.0, 0.235), 0.0625),
    ],
    ids=["all-same", "all-improved", "mixed-120", "tiny-n", "graded", "five-of-40"],
)
def test_known_cases(before, after, gain, ci, p) -> None:
    result = paired_gain(before, after)
    assert result.items == len(before)
    assert result.gain == pytest.approx(gain)
    assert result.ci95[0] == pytest.approx(ci[0], abs=0.005)
    assert result.ci95[1] == pytest.approx(ci[1], abs=0.005)
    assert result.ci95[0] <= result.gain <= result.ci95[1]
    if p < 0.01:
        assert result.p_value < 0.01
    else:
        assert result.p_value == pytest.approx(p, abs=1e-9)


def _bootstrap(diff: np.ndarray) -> tuple[float, float]:
    """The percentile bootstrap interval the p-value used to stand beside (10,000 resamples)."""
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(10_000, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


@pytest.mark.parametrize(
    ("wins", "losses", "items"),
    [(5, 0, 40), (6, 1, 40), (7, 2, 40), (9, 3, 40), (14, 5, 120), (10, 2, 20), (3, 0, 12)],
)
def test_zero_is_outside_the_interval_exactly_when_p_is_below_5_percent(
    wins: int, losses: int, items: int
) -> None:
    """Real-shaped 0/1 differences, among them runs where a bootstrap interval and the sign-flip
    p-value disagreed (5 wins of 40: the bootstrap excluded 0 beside p = 0.0625)."""
    before = [0] * wins + [1] * losses + [0] * (items - wins - losses)
    after = [1] * wins + [0] * losses + [0] * (items - wins - losses)
    result = paired_gain(before, after)
    excluded = result.ci95[0] > 0 or result.ci95[1] < 0
    assert excluded == (result.p_value < 0.05), result.describe()
    if (wins, losses) == (5, 0):  # the case that disagreed before
        low, _ = _bootstrap(np.array(after, dtype=float) - np.array(before, dtype=float))
        assert low > 0 and result.p_value == pytest.approx(0.0625) and not excluded


@pytest.mark.parametrize("seed", range(12))
def test_interval_and_p_value_agree_on_random_runs(seed: int) -> None:
    """Random 0/1, three-valued and continuous scores (the last through random sign patterns):
    the interval holds the gain, and excludes 0 exactly when p < 0.05."""
    rng = np.random.default_rng(seed)
    items = int(rng.integers(6, 80))
    before = rng.random(items) < 0.3
    after = rng.random(items) < 0.3 + 0.3 * rng.random()
    kinds = [
        (before.astype(float), after.astype(float)),
        (np.round(before * rng.random(items) * 2) / 2, np.round(after * rng.random(items) * 2) / 2),
        (rng.random(items), rng.random(items) + 0.2 * rng.random()),
    ]
    for a, b in kinds:
        result = paired_gain(a.tolist(), b.tolist(), seed=seed)
        low, high = result.ci95
        assert low <= result.gain <= high
        assert (low > 0 or high < 0) == (result.p_value < 0.05), result.describe()


def test_the_interval_is_the_set_of_shifts_the_test_does_not_reject() -> None:
    """Brute force on 9 items: every sign pattern, the test of `diff - d` on a fine grid of d."""
    import itertools

    diff = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, -0.5, 0.0])
    result = paired_gain([0.0] * len(diff), diff.tolist())
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(diff))))
    grid = np.linspace(-1, 1, 4001)
    shifted = diff[None, :] - grid[:, None]  # [grid, items]
    observed = np.abs(shifted.sum(axis=1))
    p = (np.abs(shifted @ signs.T) >= observed[:, None] - 1e-9).mean(axis=1)
    accepted = grid[p >= 0.05]
    assert result.ci95[0] == pytest.approx(accepted.min(), abs=1e-3)
    assert result.ci95[1] == pytest.approx(accepted.max(), abs=1e-3)
    assert result.p_value == pytest.approx(p[np.argmin(np.abs(grid))])


def test_the_interval_is_seeded_and_the_description_reads_at_a_glance() -> None:
    before, after = [0, 1, 0, 1, 0, 0] * 20, [1, 1, 0, 1, 1, 0] * 20
    assert paired_gain(before, after) == paired_gain(before, after)
    text = paired_gain(before, after).describe()
    assert text.startswith("+0.333 [+") and "on 120 test items (p=" in text


def test_a_loss_is_negative_and_symmetric() -> None:
    up, down = (
        paired_gain([0] * 10 + [1] * 10, [1] * 10 + [1] * 10),
        paired_gain([1] * 10 + [1] * 10, [0] * 10 + [1] * 10),
    )
    assert down.gain == -up.gain and down.p_value == up.p_value
    assert down.ci95 == pytest.approx((-up.ci95[1], -up.ci95[0]), abs=1e-6)


def test_many_moved_items_are_counted_exactly() -> None:
    diff = np.array([1.0] * 15 + [-1.0] * 10)  # 25 moved items: P(|2W - 25| >= 5), W ~ B(25, .5)
    assert sign_flip_p(diff) == pytest.approx(0.4244, abs=1e-4)


@pytest.mark.parametrize(("before", "after"), [([1, 0], [1]), ([], [])])
def test_unpaired_input_is_refused(before, after) -> None:
    with pytest.raises(ValueError):
        paired_gain(before, after)


def _run_with_test_scores(run_dir, scores: dict[str, float]):
    import art

    from rlvr.runs import store

    groups = [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": "q"},
                        {"role": "assistant", "content": "a"},
                    ],
                    reward=score,
                )
            ]
        )
        for score in scores.values()
    ]
    rows = store.trajectory_rows(groups, list(scores), step=2, split="test")
    store.write_trajectories(run_dir, "test", rows)
    return run_dir


@pytest.mark.parametrize(
    ("a", "b", "code", "words"),
    [
        (
            {f"i{k}": 0.0 for k in range(40)},
            {f"i{k}": float(k < 20) for k in range(40)},
            0,
            ["+0.500 [+", "on 40 test items (p="],
        ),
        (
            {"i1": 1.0, "i2": 0.0},
            {"i1": 1.0, "i3": 0.0},
            2,
            ["tested on different items", "1 shared"],
        ),
        ({"i1": 1.0}, None, 2, ["no test rollouts"]),
    ],
    ids=["same-items", "different-items", "unfinished"],
)
def test_compare_two_runs_on_their_shared_test_items(tmp_path, a, b, code, words) -> None:
    from typer.testing import CliRunner

    from rlvr.cli.main import app

    run_a = _run_with_test_scores(tmp_path / "a", a)
    run_b = tmp_path / "b"
    run_b.mkdir()
    if b is not None:
        _run_with_test_scores(run_b, b)
    result = CliRunner().invoke(app, ["compare", str(run_a), str(run_b)], env={"COLUMNS": "300"})
    assert result.exit_code == code, result.output
    assert all(w in result.output for w in words), result.output


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("with_last", [False, True])
def test_the_test_block_reports_the_best_and_the_last_checkpoint(warm, with_last) -> None:
    ids = [f"i{n}" for n in range(20)]
    start = {i: 0.0 for i in ids}
    after_warm = {i: float(n < 5) for n, i in enumerate(ids)} if warm else None
    final = {i: float(n < 8) for n, i in enumerate(ids)}
    last = {i: float(n < 10) for n, i in enumerate(ids)} if with_last else None
    block = paired_gains.test_block(start, after_warm, final, last)
    base = 0.25 if warm else 0.0
    assert block.items == 20
    assert (block.final, block.gain, block.rl_gain) == pytest.approx((0.4, 0.4, 0.4 - base))
    on_disk = block.model_dump(exclude_unset=True)
    if with_last:
        assert (block.last, block.gain_last, block.rl_gain_last) == pytest.approx(
            (0.5, 0.5, 0.5 - base)
        )
        rl_last = block.compared(paired_gains.Compared.RL_GAIN_LAST)
        assert rl_last is not None and rl_last.ci95[0] <= rl_last.gain <= rl_last.ci95[1]
        shown = [g.label for g in gains(block)]  # what a person reads at the run's end
        assert shown[-1] == (
            "RL gain, last - after the warm start" if warm else "gain, last - start"
        )
        assert len(shown) == (4 if warm else 2)
    else:
        # summary.json has no key for a comparison that was not made
        assert "last" not in on_disk and "rl_gain_last" not in on_disk
        assert block.compared(paired_gains.Compared.RL_GAIN_LAST) is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-1e-9, "+0.000"),
        (0.0, "+0.000"),
        (-0.0004, "+0.000"),
        (-0.0006, "-0.001"),
        (0.2354, "+0.235"),
    ],
)
def test_an_interval_end_a_tie_below_zero_reads_as_zero(value: float, shown: str) -> None:
    assert paired_gains.signed(value) == shown
    assert "[+0.000, +0.235]" in paired_gain([0] * 40, [1] * 5 + [0] * 35).describe()
