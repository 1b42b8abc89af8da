"""Replays of recorded real runs through the alarm rules (fast tier).

`tests/data/hack_run.json` was recorded by `rlvr bench hack --record` on the real CPU policy: math
trained on `scorer=length` (reward grows with reply length) while validation checks the answer.
`tests/data/math_run.json` is a real default `make train TASK=math` run (verifier reward).
`tests/data/email_seed1_runs.json` holds three default seed-1 `make train TASK=email` runs
that stopped on the plateau rule, with their per-item validation scores and evaluation times.
`tests/data/game2048_run.json` is a real default `rlvr train 2048 sampling=uniform` run that the
independent-noise rule stopped as reward hacking on one validation dip, with per-item scores and
the test split's verdict on its last checkpoint. `tests/data/email_seed0_verifier_run.json` is
a real default `make train TASK=email` run (verifier reward) that one validation dip stopped as
reward hacking while the ground truth of its training rollouts rose with the reward, with
`truth` per evaluation. The real runs are too slow for CI; their
evaluation histories are not, and the rules are pure.
"""

import json

import pytest

from rlvr.runs.records import AlarmName
from rlvr.training.alarms import Thresholds, divergence
from rlvr.training.trends import EvalPoint
from tests.helpers.repo import DATA


def replay(record: dict) -> list[tuple[int, AlarmName]]:
    """Alarms the rules raise evaluation by evaluation, as the loop would, with the run's config."""
    config = record["config"]
    cfg = config.get("stopping", config)  # nested since the stopping group, flat before
    thresholds = Thresholds(
        window=cfg["divergence_window"],
        reward_rise=cfg["divergence_reward_rise"],
        val_drop=cfg["divergence_val_drop"],
        val_z=cfg.get("divergence_z", 2.0),
    )
    points = [EvalPoint(**point) for point in record["history"]]
    fired = [divergence(points[: i + 1], thresholds) for i in range(len(points))]
    return [(alarm.step, alarm.name) for alarm in fired if alarm is not None]


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_the_recorded_hack_fires_the_alarm_where_the_real_run_did():
    """While the length reward and the answers' ground truth rose together on the training
    rollouts, validation's fall only warned; the alarm fired at the evaluation where the reward
    rose on and the ground truth of the same rollouts fell."""
    record = load("hack_run.json")
    fired = replay(record)
    hacking = [step for step, name in fired if name == AlarmName.REWARD_HACKING]
    assert hacking, fired
    assert record["stop_reason"] == "reward_hacking"
    assert hacking[0] == record["steps"]  # the real run stopped at the first alarm
    assert (hacking[0] - 1, AlarmName.VAL_FALLING) in fired
    history = record["history"]
    assert history[-1]["val"] < history[0]["val"]  # validation really fell ...
    assert history[-1]["reward"] > history[1]["reward"]  # ... while the length reward rose ...
    assert history[-1]["truth"] < history[-2]["truth"]  # ... and parted from the ground truth


@pytest.mark.parametrize("name", ["math_run.json"])
def test_a_recorded_clean_run_raises_no_hacking_alarm(name):
    record = load(name)
    assert all(alarm != AlarmName.REWARD_HACKING for _, alarm in replay(record))
    assert record["best_val"] - record["baseline_val"] >= 0.10


def test_a_game_s_validation_dip_within_its_paired_noise_only_warns():
    """2048 on 40 boards: validation 0.325, 0.35, 0.2 while the shaped reward rose. The run that
    treated the dip as gaming stopped at step 4; its last checkpoint then gained on the 80 test
    boards, so the dip was noise. Paired over the same boards it is 1.4 standard errors: a
    warning, and the run goes on."""
    record = load("game2048_run.json")
    assert record["stop_reason"] == "reward_hacking" and record["steps"] == 4
    assert record["test"]["rl_gain_last_ci95"][0] > 0  # the test boards say RL helped
    assert replay(record) == [(4, AlarmName.VAL_FALLING)]
    points = [EvalPoint(**point) for point in record["history"]]
    assert all(p.scores is not None and len(p.scores) == p.val_items for p in points)


def test_a_fall_while_the_reward_follows_its_ground_truth_only_warns():
    """Email on the verifier: validation 0.450, 0.450, 0.325 over steps 18-24 while the training
    reward rose. Read without the truth (as the run was), the fall stops it as reward hacking;
    but the ground truth of the same training rollouts rose with the reward, so nothing was
    gamed, and the test split says its RL helped."""
    record = load("email_seed0_verifier_run.json")
    assert record["stop_reason"] == "reward_hacking" and record["steps"] == 24
    assert record["test"]["rl_gain_ci95"][0] > 0 and record["test"]["rl_gain_last_ci95"][0] > 0
    without_truth = {**record, "history": [{**p, "truth": None} for p in record["history"]]}
    assert (24, AlarmName.REWARD_HACKING) in replay(without_truth)
    assert replay(record) == [(24, AlarmName.VAL_FALLING)]


def history(*correct_sets: set[int], items: int = 40, step_every: int = 3) -> list[EvalPoint]:
    """Evaluations on the same `items` items, each scoring 1 on the items of its set."""
    return [
        EvalPoint(
            step=k * step_every,
            val=len(correct) / items,
            reward=None if k == 0 else 0.2,
            val_items=items,
            scores={str(i): float(i in correct) for i in range(items)},
        )
        for k, correct in enumerate(correct_sets)
    ]


START = set(range(15))  # 0.375 on 40 items, as the default email run's warm start


@pytest.mark.parametrize(
    ("points", "fires"),
    [
        # the default email run: 0.375 at steps 0, 3 and 6, then 0.200 at step 9; paired, the
        # fall is 9 items lost and 2 won on the same 40 questions
        (history(START, START, START, set(range(6)) | {30, 31}), True),
        # the control run whose updates change nothing: the same answers every time
        (history(START, START, START), False),
        # a dip of a few items, within paired noise
        (history(START, START, set(range(12)) | {30}), False),
        # learning: more items right than at the start
        (history(START, START | {20, 21}, START | {20, 21, 22, 23}), False),
    ],
    ids=["email-defaults-regressed", "control-flat", "noise-dip", "rising"],
)
def test_rl_regression_fires_when_validation_falls_below_the_start(points, fires):
    from rlvr.training.alarms import rl_regression

    alarm = rl_regression(points, Thresholds())
    assert (alarm is not None) == fires
    if alarm is not None:
        assert alarm.name == AlarmName.RL_REGRESSION and alarm.step == points[-1].step
        assert "learning_rate" in alarm.message


@pytest.mark.parametrize("name", ["math_run.json", "game2048_run.json"])
def test_recorded_runs_that_did_not_regress_raise_no_rl_regression(name):
    from rlvr.training.alarms import rl_regression

    record = load(name)
    points = [EvalPoint(**point) for point in record["history"]]
    assert all(rl_regression(points[: i + 1], Thresholds()) is None for i in range(len(points)))


@pytest.mark.parametrize(
    ("name", "min_delta", "best_step"),
    [
        # a user's fractional check (reasoning-gym's partial credit): validation 0.005 -> 0.020
        # over 12 steps, resolved item by item (the test's last gain: +0.037, p = 0.0001). A
        # floor of 0.02 sized for accuracies kept the start as the best; the paired noise alone
        # follows the rise.
        ("arith_user_run.json", 0.02, 0),
        ("arith_user_run.json", None, 12),
        # 2048's boards: +1 board at step 2 is within its paired noise, the dip at step 4 too
        ("game2048_run.json", None, 0),
    ],
)
def test_the_best_checkpoint_follows_a_rise_its_paired_noise_resolves(name, min_delta, best_step):
    from rlvr.config import StoppingConfig
    from rlvr.training.trends import best_eval

    points = [EvalPoint(**point) for point in load(name)["history"]]
    delta = StoppingConfig().min_delta if min_delta is None else min_delta
    assert points[best_eval(points, delta)].step == best_step


def plateau_stops(record: dict) -> list[int]:
    """The steps at which the plateau stop fires, evaluation by evaluation, as the loop decides
    (rlvr.training.stop_rules.plateau_stop), with the run's stopping config and budget."""
    from rlvr.config import StoppingConfig
    from rlvr.training.stop_rules import budget_spent, plateau_stop

    rules = StoppingConfig(**record["stopping"])
    points = [EvalPoint(**point) for point in record["history"]]
    return [
        point.step
        for k, (point, wall) in enumerate(zip(points, record["eval_wall_s"], strict=True))
        if plateau_stop(
            points[: k + 1], budget_spent(point.step, 1, wall, record["max_minutes"]), rules
        )
    ]


@pytest.mark.parametrize(
    ("run", "stops_at"),
    [
        # validation 0.375, 0.450, 0.350, 0.375, 0.400, 0.425, 0.500: its highest at the last
        # evaluation, which the trend over six (+0.014 ± 0.015 an evaluation) did not resolve
        ("email-20261130-000019", None),
        # flat at 0.350 for five evaluations: a plateau, where the real run stopped
        ("email-20261129-223329", 30),
        # 0.450, 0.475, 0.500, 0.450, 0.450 in fp32: back down, where the real run stopped
        ("email-20261129-233943", 12),
    ],
)
def test_the_plateau_stop_does_not_end_a_run_at_its_highest_validation(run, stops_at):
    record = load("email_seed1_runs.json")[run]
    assert record["stop_reason"] == "plateau"
    stops = plateau_stops(record)
    assert (stops[0] if stops else None) == stops_at
    if stops_at is None:  # the real run stopped there, under the rule without the new high
        assert record["steps"] == record["history"][-1]["step"]
        assert record["history"][-1]["val"] > max(p["val"] for p in record["history"][:-1])
