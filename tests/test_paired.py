"""The paired gain on the test split: known cases for the interval and the p-value."""

from __future__ import annotations

import pytest

from rlvr import paired
from rlvr.paired import describe_block, paired_gain, sign_flip_p


@pytest.mark.parametrize(
    ("before", "after", "gain", "ci", "p"),
    [
        # nothing changed: no gain, a zero-width interval, no evidence
        ([1, 0, 1, 0] * 10, [1, 0, 1, 0] * 10, 0.0, (0.0, 0.0), 1.0),
        # every item improved: the interval is the gain itself; exact p = 2 / 2^16
        ([0] * 16, [1] * 16, 1.0, (1.0, 1.0), 2 / 2**16),
        # 30 of 120 items fixed, 6 broken: clearly positive
        ([0] * 30 + [1] * 6 + [0] * 84, [1] * 30 + [0] * 6 + [0] * 84, 0.2, (0.12, 0.28), 0.001),
        # one item of two fixed: no evidence
        ([0, 0], [1, 0], 0.5, (0.0, 1.0), 1.0),
        # graded scores, mixed
        ([0.2, 0.5, 0.9, 0.4], [0.6, 0.5, 0.7, 0.8], 0.15, (-0.1, 0.4), 0.5),
    ],
    ids=["all-same", "all-improved", "mixed-120", "tiny-n", "graded"],
)
def test_known_cases(before, after, gain, ci, p) -> None:
    result = paired_gain(before, after)
    assert result.items == len(before)
    assert result.gain == pytest.approx(gain)
    assert result.ci95[0] == pytest.approx(ci[0], abs=0.03)
    assert result.ci95[1] == pytest.approx(ci[1], abs=0.03)
    assert result.ci95[0] <= result.gain <= result.ci95[1]
    if p < 0.01:
        assert result.p_value < 0.01
    else:
        assert result.p_value == pytest.approx(p, abs=0.01)


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
    assert down.ci95 == pytest.approx((-up.ci95[1], -up.ci95[0]), abs=0.03)


def test_large_samples_use_random_flips() -> None:
    import numpy as np

    diff = np.array([1.0] * 15 + [-1.0] * 10)  # 25 moved items: 20,000 random flips
    assert sign_flip_p(diff) == pytest.approx(0.42, abs=0.05)


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

    from rlvr.cli import app

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
    block = paired.test_block(start, after_warm, final, last)
    base = 0.25 if warm else 0.0
    assert block["items"] == 20
    assert (block["final"], block["gain"], block["rl_gain"]) == pytest.approx(
        (0.4, 0.4, 0.4 - base)
    )
    if with_last:
        assert (block["last"], block["gain_last"], block["rl_gain_last"]) == pytest.approx(
            (0.5, 0.5, 0.5 - base)
        )
        low, high = block["rl_gain_last_ci95"]
        assert low <= block["rl_gain_last"] <= high
        assert any("last checkpoint 0.500" in line for line in describe_block(block))
    else:
        assert "last" not in block and "rl_gain_last" not in block
