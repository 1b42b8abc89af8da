import pytest

from rlvr.config import RunConfig
from rlvr.runs.records import Alarm, AlarmName
from rlvr.task_api.api import environment
from rlvr.task_api.plugins import compared_with_truth
from rlvr.training.alarms import StepPoint, Thresholds, divergence, is_new, judge_disagrees
from rlvr.training.stop_rules import out_of_time, plateau
from rlvr.training.trends import EvalPoint, best_eval, gain_threshold, trend, val_trend

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
    # item count unknown (an old run): min_delta alone decides what counts
    assert plateau(evals(vals, None), patience, min_delta, "best", 6, 1.0) is expected


def test_the_best_evaluation_ignores_gains_below_min_delta():
    assert best_eval(evals([0.3, 0.5, 0.51, 0.49], None), min_delta=0.02) == 1
    assert best_eval(evals([0.3, 0.5, 0.53], None), min_delta=0.02) == 2


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
    task = environment(name="t", load=list, rollout=_rollout, check=_check)
    assert compared_with_truth(RunConfig(scorer=spec), task) is applies


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
    points = evals(vals, items)
    assert best_eval(points, 0.01) == best
    assert plateau(points, 3, 0.01, "best", 6, 1.0) is stops


# Validation histories (every 2 steps) and what each plateau rule decides after the last one.
MATH_RISE = [0.388, 0.463, 0.500, 0.563, 0.600, 0.625, 0.638, 0.663]  # measured, 80 items
TREND_HISTORIES = {
    # name: (validation, items, stops under `best`, stops under `trend`)
    "slow steady rise (math, 80 items)": (MATH_RISE, 80, True, False),
    "flat after a rise": ([0.40, 0.60, 0.60, 0.60, 0.60, 0.60, 0.60, 0.60], 80, True, True),
    "noisy flat": ([0.50, 0.55, 0.45, 0.50, 0.55, 0.45, 0.50], 40, True, True),
    "noisy, at a new high": ([0.50, 0.55, 0.45, 0.50, 0.55, 0.45, 0.56], 40, True, False),
    "back to its high": ([0.50, 0.55, 0.45, 0.50, 0.55, 0.45, 0.55], 40, True, True),
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


# --- paired noise: the same validation items at every evaluation ---------------------------------


def scored(
    columns: list[list[float]], rewards: list[float | None] | None = None
) -> list[EvalPoint]:
    """Evaluations from per-item score columns (item i's scores over time are columns[i])."""
    steps = len(columns[0])
    rewards = rewards or [None] * steps
    return [
        EvalPoint(
            step=2 * t,
            val=sum(c[t] for c in columns) / len(columns),
            reward=rewards[t],
            val_items=len(columns),
            scores={str(i): c[t] for i, c in enumerate(columns)},
        )
        for t in range(steps)
    ]


def shared_rise(items: int, per_eval: float, evals_n: int, start: int) -> list[list[float]]:
    """`start` items solved at first, `per_eval` more at each evaluation (rounded down), none
    lost: a rise every item that moves shares."""
    return [[float(i < start + int(per_eval * t)) for t in range(evals_n)] for i in range(items)]


def scattered(items: int, evals_n: int, seed: int) -> list[list[float]]:
    """Outcomes redrawn at every evaluation (a game's boards once the policy moves), 35 % solved."""
    import random

    rng = random.Random(seed)
    return [[float(rng.random() < 0.35) for _ in range(evals_n)] for _ in range(items)]


def without_scores(points: list[EvalPoint]) -> list[EvalPoint]:
    return [p.model_copy(update={"scores": None}) for p in points]


def test_a_rise_every_item_shares_counts_paired_but_not_as_independent() -> None:
    # 40 items, one more solved every other evaluation: +0.0125 an evaluation, under the 0.018
    # s.e. of independent accuracies but over its paired s.e.
    points = scored(shared_rise(40, 0.5, 6, 12))
    assert val_trend(points, 6).rising(1.0)
    assert not val_trend(without_scores(points), 6).rising(1.0)
    assert not plateau(points, 3, 0.02, "trend", 6, 1.0)
    assert plateau(without_scores(points), 3, 0.02, "trend", 6, 1.0)


def test_scattered_outcomes_are_as_noisy_paired_as_independent() -> None:
    points = scored(scattered(40, 6, seed=3))
    paired, independent = val_trend(points, 6), val_trend(without_scores(points), 6)
    assert paired.se == pytest.approx(independent.se, rel=0.5)
    assert paired.se > 0.01


@pytest.mark.parametrize(
    ("items", "per_eval", "best"),
    [
        (80, 2, 3),  # +0.025 an evaluation on every moving item: each gain counts paired
        (16, 1, 2),  # one item of 16 (+0.0625) is within its own s.e. (0.0625); two are not
    ],
)
def test_the_best_evaluation_counts_paired_gains(items: int, per_eval: int, best: int) -> None:
    points = scored(shared_rise(items, per_eval, 4, items // 4))
    assert best_eval(points, 0.02) == best


@pytest.mark.parametrize(("items", "best"), [(16, 0), (1600, 1)])
def test_the_best_evaluation_without_scores_is_the_independent_rule(items, best) -> None:
    # +0.12 against the 0.17 / 0.017 s.e. of two independent accuracies on 16 / 1,600 items
    assert best_eval(evals([0.5, 0.62, 0.56, 0.62], items), 0.01) == best


def dropping(items: int, losses: list[int], start: int) -> list[list[float]]:
    """`start` items solved, then `losses[t]` more of them lost by evaluation t (cumulative)."""
    return [[float(i < start - losses[t]) for t in range(len(losses))] for i in range(items)]


RISING = [None, 0.3, 0.5, 0.7, 0.9]


@pytest.mark.parametrize(
    ("losses", "expected"),
    [
        # 40 items, reward rising: validation losing items it had solved
        ([0, 0, 2, 0, 0], AlarmName.VAL_FALLING),  # -0.05 once, then recovered: a warning
        ([0, 0, 3, 3, 3], AlarmName.REWARD_HACKING),  # within 2 s.e., not recovered at the next
        ([0, 0, 12, 12, 12], AlarmName.REWARD_HACKING),  # -0.30 at once: far beyond 2 s.e.
        ([0, 0, 0, 0, 0], AlarmName.CONVERGED),  # flat while the reward rises
    ],
)
def test_the_divergence_alarm_on_paired_falls(losses: list[int], expected: AlarmName) -> None:
    points = scored(dropping(40, losses, 20), RISING)
    fired = [divergence(points[: k + 1], T) for k in range(len(points))]
    names = [a.name for a in fired if a is not None]
    assert expected in names
    if expected == AlarmName.VAL_FALLING:
        assert AlarmName.REWARD_HACKING not in names


def test_the_hacking_alarm_waits_for_a_second_fall_within_two_standard_errors() -> None:
    points = scored(dropping(40, [0, 0, 3, 3, 3], 20), RISING)
    first = divergence(points[:3], T)  # -0.075, 1.8 s.e.
    second = divergence(points[:4], T)
    assert first is not None and first.name == AlarmName.VAL_FALLING
    assert "s.e." in first.message and "second fall" in first.message
    assert second is not None and second.name == AlarmName.REWARD_HACKING


@pytest.mark.parametrize(
    ("truths", "expected"),
    [
        ([None, 0.3, 0.5, 0.7, 0.9], AlarmName.VAL_FALLING),  # the truth rose with the reward
        ([None, 0.3, 0.46, 0.62, 0.85], AlarmName.VAL_FALLING),  # within reward_rise of it
        ([None, 0.3, 0.3, 0.3, 0.3], AlarmName.REWARD_HACKING),  # the reward rose alone
        ([None, 0.3, 0.4, 0.5, 0.6], AlarmName.REWARD_HACKING),  # it rose 0.2 beyond the truth
        (None, AlarmName.REWARD_HACKING),  # unlabelled training items: no truth to read
    ],
)
def test_a_reward_that_rises_with_its_ground_truth_is_not_hacking(
    truths: list[float | None] | None, expected: AlarmName
) -> None:
    """A validation fall of 12 of 40 items (far beyond 2 s.e.), held for two evaluations, while
    the training reward rises: reward hacking only where the reward rose beyond the ground truth
    of the same rollouts, or where that truth is unknown."""
    points = scored(dropping(40, [0, 0, 12, 12, 12], 20), RISING)
    if truths is not None:
        points = [p.model_copy(update={"truth": t}) for p, t in zip(points, truths, strict=True)]
    fired = [divergence(points[: k + 1], T) for k in range(len(points))]
    names = {a.name for a in fired if a is not None}
    assert expected in names
    if expected == AlarmName.VAL_FALLING:
        assert AlarmName.REWARD_HACKING not in names
        falls = [a for a in fired if a is not None and a.name == AlarmName.VAL_FALLING]
        assert falls and all("not gamed" in a.message for a in falls), falls


def test_a_stricter_val_z_turns_a_stop_into_a_warning() -> None:
    points = scored(dropping(40, [0, 0, 6, 6, 6], 20), RISING)[:3]
    assert divergence(points, T).name == AlarmName.REWARD_HACKING
    strict = T.model_copy(update={"val_z": 10.0})
    assert divergence(points, strict).name == AlarmName.VAL_FALLING


@pytest.mark.parametrize("common", [0, 7])
def test_too_few_common_items_fall_back_to_the_independent_noise(common: int) -> None:
    points = scored(shared_rise(40, 1, 4, 12))
    renamed = [
        p.model_copy(
            update={
                "scores": {f"{k}-{t}" if int(k) >= common else k: v for k, v in p.scores.items()}
            }
        )
        for t, p in enumerate(points)
    ]
    assert val_trend(renamed, 6).se == pytest.approx(val_trend(without_scores(points), 6).se)


def test_an_alarm_at_a_step_with_another_alarm_is_still_raised() -> None:
    """A judge-disagreement alarm at step 5 once hid the divergence alarm of the same step."""
    judge = Alarm(name=AlarmName.JUDGE_DISAGREES, step=5, message="judge")
    hacking = Alarm(name=AlarmName.REWARD_HACKING, step=5, message="hacking")
    assert is_new(hacking, [judge])
    assert not is_new(hacking, [judge, hacking])  # a resumed run's re-evaluation: one alarm
    assert is_new(hacking.model_copy(update={"step": 6}), [hacking])
