import pytest

from rlvr.config import TrainConfig
from rlvr.tasks.api import scenario
from rlvr.tasks.scorer_spec import compared_with_truth
from rlvr.training.stopping import (
    AlarmName,
    EvalPoint,
    StepPoint,
    Thresholds,
    best_index,
    divergence,
    gain_threshold,
    judge_disagrees,
    out_of_time,
    plateau,
    plateaued,
    trend,
    val_trend,
)

T = Thresholds(window=3, reward_rise=0.1, val_drop=0.05, val_flat=0.02)


def history(vals, rewards):
    return [
        EvalPoint(step=2 * i, val=v, reward=r)
        for i, (v, r) in enumerate(zip(vals, rewards, strict=True))
    ]


HISTORIES = {
    # name: (validation, training reward, expected alarm)
    "healthy": ([0.30, 0.36, 0.42, 0.50, 0.55], [None, 0.3, 0.4, 0.5, 0.6], None),
    "converged": ([0.30, 0.50, 0.51, 0.50, 0.51], [None, 0.4, 0.5, 0.6, 0.7], AlarmName.CONVERGED),
    "hacking": (
        [0.40, 0.42, 0.38, 0.33, 0.28],
        [None, 0.3, 0.45, 0.6, 0.8],
        AlarmName.REWARD_HACKING,
    ),
    "noisy-flat": ([0.40, 0.44, 0.37, 0.43, 0.39], [None, 0.5, 0.42, 0.55, 0.47], None),
    "reward falls, val falls": ([0.5, 0.45, 0.4, 0.35, 0.3], [None, 0.6, 0.5, 0.4, 0.3], None),
}


@pytest.mark.parametrize("name", list(HISTORIES))
def test_divergence_on_synthetic_histories(name):
    vals, rewards, expected = HISTORIES[name]
    alarm = divergence(history(vals, rewards), T)
    assert (alarm.name if alarm else None) == expected
    if alarm:
        assert alarm.step == 8 and alarm.message


def test_divergence_needs_a_full_window():
    assert divergence(history([0.5, 0.4], [None, 0.9]), T) is None


def test_one_bad_evaluation_does_not_fire():
    # a single dip at the end of an otherwise rising validation
    assert divergence(history([0.3, 0.4, 0.5, 0.46], [None, 0.3, 0.45, 0.6]), T) is None


@pytest.mark.parametrize(
    ("vals", "patience", "min_delta", "expected"),
    [
        ([0.3, 0.4, 0.5, 0.6], 2, 0.02, False),  # still improving
        ([0.3, 0.5, 0.5, 0.51], 2, 0.02, True),  # gains below min_delta don't count
        ([0.3, 0.5, 0.49, 0.48, 0.47], 3, 0.0, True),
        ([0.3, 0.5, 0.49, 0.48], 3, 0.0, False),  # patience not used up yet
        ([0.3], 1, 0.0, False),
        ([], 1, 0.0, False),
    ],
)
def test_plateau(vals, patience, min_delta, expected):
    assert plateaued(vals, patience, min_delta) is expected


def test_best_index_ignores_noise_below_min_delta():
    assert best_index([0.3, 0.5, 0.51, 0.49], min_delta=0.02) == 1
    assert best_index([0.3, 0.5, 0.53], min_delta=0.02) == 2


@pytest.mark.parametrize(
    ("values", "expected"), [([1, 2, 3], 2.0), ([3, 3, 3], 0.0), ([5], 0.0), ([0, 1, 0, 1], 0.6)]
)
def test_trend(values, expected):
    assert trend(values) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("walls", "test_s", "budget_s", "expected"),
    [
        ([20.0], 10.0, 30.0, False),  # baseline only: no period measured yet
        ([20.0, 100.0], 10.0, 300.0, False),  # 100 + 80 + 10 = 190 fits
        ([20.0, 100.0], 10.0, 189.0, True),  # one second short
        # the latest period (50 s, not the first 80 s) is the estimate: 150 + 50 + 30 = 230
        ([20.0, 100.0, 150.0], 30.0, 230.0, False),
        ([20.0, 100.0, 150.0], 30.0, 229.0, True),
        ([20.0, 100.0, 150.0], 0.0, 199.0, True),  # no test split to leave time for
    ],
)
def test_out_of_time(walls, test_s, budget_s, expected):
    assert out_of_time(walls, test_s, budget_s) is expected


@pytest.mark.parametrize(
    ("val_items", "expected"),
    [
        (None, AlarmName.REWARD_HACKING),  # noise unknown: the configured val_drop alone
        (40, None),  # a 0.075 fall on 40 items is within noise (SE of a difference ~0.11)
        (2000, AlarmName.REWARD_HACKING),  # on 2000 items it is not
    ],
)
def test_validation_noise_guards_the_hacking_alarm(val_items, expected):
    points = [
        EvalPoint(step=2 * i, val=v, reward=r, val_items=val_items)
        for i, (v, r) in enumerate([(0.55, None), (0.575, 0.2), (0.55, 0.3), (0.5, 0.4)])
    ]
    alarm = divergence(points, T)
    assert (alarm.name if alarm else None) == expected


def _steps(pairs: list[tuple[float, float]], n: int = 16) -> list[StepPoint]:
    return [StepPoint(step=i + 1, reward=r, truth=t, n=n) for i, (r, t) in enumerate(pairs)]


@pytest.mark.parametrize(
    ("pairs", "n", "fires"),
    [
        ([(0.97, 0.02)] * 3, 16, True),  # the 135M RULER judge on email, as measured
        ([(0.1, 0.8)] * 3, 16, True),  # a judge stricter than the truth disagrees too
        ([(0.55, 0.45)] * 3, 16, False),  # a small gap is partial credit, not disagreement
        ([(0.97, 0.02)] * 2, 16, False),  # fewer steps than the window
        ([(0.2, 0.0), (0.9, 0.1), (0.2, 0.0)], 16, False),  # one bad step is not sustained
        # the reference-guided 135M judge on email, as measured: one quieter step (0.24)
        ([(0.944, 0.5), (0.9, 0.658), (1.0, 0.424)], 16, True),
        ([(0.9, 0.5), (0.45, 0.5), (1.0, 0.5)], 16, False),  # one step the other way
        ([(0.7, 0.3), (0.55, 0.3), (0.6, 0.3)], 16, False),  # most steps within the gap
        ([(0.6, 0.2)] * 3, 2, False),  # 0.4 apart on 6 rollouts is within the noise
        ([(0.6, 0.2)] * 3, 32, True),  # ... and beyond it on 96
    ],
)
def test_judge_disagrees_is_sustained_and_noise_aware(
    pairs: list[tuple[float, float]], n: int, fires: bool
) -> None:
    alarm = judge_disagrees(_steps(pairs, n), window=3, gap=0.3)
    assert (alarm is not None) == fires
    if alarm is not None:
        assert alarm.name == AlarmName.JUDGE_DISAGREES and alarm.step == len(pairs)
        assert "ground truth" in alarm.message and "scorer=verifier" in alarm.message


@pytest.mark.parametrize(
    ("spec", "applies"),
    [
        ("default", False),  # the task's own partial credit: differs from its check by design
        ("verifier", False),
        ("rollout", False),
        ("length", True),  # a hackable reward is exactly what the alarm is for
        ("verifier*0.5+length*0.5", True),
        ("verifier>ruler", True),
        ("task.py:my_reward", True),  # a user's own reward function is compared
    ],
)
def test_judge_disagrees_applies_to_scorers_other_than_the_tasks_own(spec, applies) -> None:
    task = scenario(name="t", load=list, rollout=_rollout, check=_check)
    assert compared_with_truth(TrainConfig(scorer=spec), task) is applies


async def _rollout(model, item, sampling):
    raise NotImplementedError


def _check(item, trajectory) -> float:
    return 0.0


def evals(vals: list[float], items: int | None) -> list[EvalPoint]:
    return [EvalPoint(step=i, val=v, val_items=items) for i, v in enumerate(vals)]


@pytest.mark.parametrize(
    ("vals", "items", "min_delta", "expected"),
    [
        ([], 16, 0.01, 0.01),  # nothing measured yet
        ([0.5, 0.5], 16, 0.01, 0.177),  # sqrt(2 * 0.25 / 16): 16 items are noisy
        ([0.5, 0.5], 1600, 0.01, 0.0177),
        ([0.5, 0.5], 40000, 0.01, 0.01),  # min_delta wins once the noise is below it
        ([0.5, 0.5], None, 0.02, 0.02),  # item count unknown (an old run): min_delta alone
        ([1.0, 1.0], 16, 0.0, 0.0),  # a perfect score has no sampling noise
    ],
)
def test_a_validation_gain_counts_above_min_delta_and_the_noise(
    vals, items, min_delta, expected
) -> None:
    assert gain_threshold(evals(vals, items), min_delta) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(
    ("vals", "items", "best", "stops"),
    [
        ([0.5, 0.62, 0.56, 0.62], 16, 0, True),  # +0.12 on 16 items is noise: the start stays
        ([0.5, 0.62, 0.56, 0.62], 1600, 1, False),  # the same gain on 1,600 items is real
        ([0.3, 0.8, 0.8, 0.8], 16, 1, False),  # +0.5 beats the noise of 16 items
    ],
)
def test_the_best_checkpoint_and_the_plateau_ignore_noisy_gains(vals, items, best, stops) -> None:
    threshold = gain_threshold(evals(vals, items), 0.01)
    assert best_index(vals, threshold) == best
    assert plateaued(vals, 3, threshold) is stops


# Validation histories (every 2 steps) and what each plateau rule decides after the last one.
MATH_RISE = [0.388, 0.463, 0.500, 0.563, 0.600, 0.625, 0.638, 0.663]  # measured, 80 items
TREND_HISTORIES = {
    # name: (validation, items, stops under `best`, stops under `trend`)
    "slow steady rise (math, 80 items)": (MATH_RISE, 80, True, False),
    "flat after a rise": ([0.40, 0.60, 0.60, 0.60, 0.60, 0.60, 0.60, 0.60], 80, True, True),
    "noisy flat": ([0.50, 0.55, 0.45, 0.50, 0.55, 0.45, 0.50], 40, True, True),
    "falling": ([0.50, 0.52, 0.48, 0.45, 0.42, 0.40], 40, True, True),
    "rise no evaluation resolves": ([0.25, 0.275, 0.30, 0.30, 0.325, 0.35], 40, True, False),
    "a counted gain within patience": ([0.30, 0.80, 0.80, 0.80], 16, False, False),
}


@pytest.mark.parametrize("name", list(TREND_HISTORIES))
def test_the_trend_rule_keeps_a_slow_rise_and_stops_a_flat_one(name) -> None:
    vals, items, best_stops, trend_stops = TREND_HISTORIES[name]
    points = evals(vals, items)
    assert plateau(points, 3, 0.02, "best", 6, 1.0) is best_stops
    assert plateau(points, 3, 0.02, "trend", 6, 1.0) is trend_stops


@pytest.mark.parametrize(
    ("vals", "items", "slope", "se"),
    [
        ([0.5, 0.6, 0.7], 100, 0.1, (0.24 / 100) ** 0.5 / 2**0.5),  # p = 0.6, sxx = 2
        ([0.2, 0.2, 0.2, 0.2], 25, 0.0, 0.08 / 5**0.5),
        ([1.0, 1.0, 1.0], 10, 0.0, float("inf")),  # no sampling noise at a perfect score
    ],
)
def test_val_trend_slope_and_its_standard_error(vals, items, slope, se) -> None:
    fitted = val_trend(evals(vals, items), 6)
    assert fitted.slope == pytest.approx(slope, abs=1e-9)
    assert fitted.se == pytest.approx(se, rel=1e-3)


def test_the_math_rise_stops_under_the_old_rule_where_it_was_measured() -> None:
    """The run the issue quotes stopped at its 8th evaluation under `best`; `trend` goes on."""
    points = evals(MATH_RISE, 80)
    stops = [plateau(points[: k + 1], 3, 0.02, "best", 6, 1.0) for k in range(len(points))]
    assert stops.index(True) == len(points) - 1
    assert not any(plateau(points[: k + 1], 3, 0.02, "trend", 6, 1.0) for k in range(len(points)))
