"""Preflight checks what the run will train on: the untrained model's samples for a run without
a warm start; for one with a warm start, its demonstrations (passing the task's own check, scored
beside the untrained samples) or, asked for, the model after a short warm start. The verdict
names which model it judged. The fast tests cover the verdict and its wording for the default
model; the slow ones run `rlvr preflight` on a user's tool agent and on multihop at its task's
defaults (which learns after its warm start), on the tiny random model: what they check is which
samples the route judges and what it measures, which no policy's answers decide."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.training.preflight import (
    Demonstrations,
    PreflightReport,
    Rewards,
    describe,
    no_spread_chance,
    rewards_of,
    suggestions,
    verdict,
)
from tests.helpers.tiny_runs import tiny_model_path


def rewards(*values: float, groups: int = 2) -> Rewards:
    return Rewards(
        rewards=list(values),
        groups=groups,
        skipped=0,
        no_signal=0,
        all_zero=0,
        all_one=0,
        truncated_rate=0.0,
    )


def report(
    samples: Rewards,
    warm_steps: int = 0,
    demos: Demonstrations | None = None,
    warm_trained: int | None = None,
    clipped: int = 0,
) -> PreflightReport:
    return PreflightReport(
        model="smollm2-135m",
        items=2,
        items_asked=4,
        group_size=2,
        warm_steps=warm_steps,
        warm_trained=warm_trained,
        samples=samples,
        demos=demos,
        clipped=clipped,
        reward_errors=0,
    )


UNTRAINED = "samples of the untrained model (smollm2-135m)"


@pytest.mark.parametrize(
    ("case", "ok", "judged", "message"),
    [
        (report(rewards(0.0, 1.0, 0.0, 0.5)), True, f"4 {UNTRAINED}", "the reward varies"),
        (
            report(rewards(0.0, 0.0, 0.0, 0.0)),
            False,
            f"4 {UNTRAINED}",
            "constant (0.00) on every sampled trajectory: GRPO cannot learn from it; give partial "
            "credit, change difficulty, max_tokens or temperature, or warm-start it",
        ),
        (
            report(rewards(0.0, 0.0), clipped=2),
            False,
            f"2 {UNTRAINED}",
            "(2 of them clipped to [0, 1])",
        ),
        # multihop at its defaults: the untrained model never searches, the warm start teaches it
        (
            report(
                rewards(0.0, 0.0, 0.0, 0.0),
                warm_steps=12,
                demos=Demonstrations(made=2, passed=2, rewards=[1.0, 1.0]),
            ),
            True,
            f"2 demonstrations of the 12-step warm start the run trains from, beside 4 {UNTRAINED}",
            "gives the demonstrations 1.00 and the untrained samples 0.00 (constant on the "
            "untrained samples, as expected before the warm start teaches the task): ok to train",
        ),
        (
            report(
                rewards(0.0, 0.0),
                warm_steps=3,
                demos=Demonstrations(made=2, passed=0, rewards=[]),
            ),
            False,
            "0 demonstrations",
            "none of the 2 demonstrations passes the task's own check",
        ),
        (
            report(
                rewards(0.0, 0.0),
                warm_steps=3,
                demos=Demonstrations(made=1, passed=1, rewards=[0.0]),
            ),
            False,
            "1 demonstration of the 3-step warm start",
            "the same reward as the untrained samples (0.00)",
        ),
        (
            report(rewards(0.0, 0.0, 1.0, 0.0), warm_steps=3, warm_trained=2),
            True,
            "4 samples of the model after a 2-step warm start (smollm2-135m)",
            "the reward varies",
        ),
        (
            report(rewards(1.0, 1.0), warm_steps=3, warm_trained=3),
            False,
            "2 samples of the model after a 3-step warm start",
            "constant (1.00)",
        ),
    ],
)
def test_the_verdict_is_about_what_the_run_trains_on(
    case: PreflightReport, ok: bool, judged: str, message: str
) -> None:
    said = verdict(case)
    assert said.ok is ok
    assert said.judged.startswith(judged), said.judged
    assert message in said.message, said.message
    if case.warm_steps and not case.warm_trained:  # never the advice to add a warm start
        assert "warm-start it" not in said.message


def test_a_scorer_preferring_the_untrained_samples_is_a_warning() -> None:
    case = report(
        rewards(0.5, 0.6, 0.4, 0.5),
        warm_steps=2,
        demos=Demonstrations(made=2, passed=2, rewards=[0.1, 0.2]),
    )
    said = verdict(case)
    assert said.ok and len(said.warnings) == 1
    assert (
        "rewards the untrained samples above the demonstrations (0.50 vs 0.15)"
        in (said.warnings[0])
    )


def test_the_report_says_what_was_cut_and_the_warm_start() -> None:
    lines = describe(
        report(
            rewards(0.0, 0.0, 1.0, 0.0),
            warm_steps=12,
            demos=Demonstrations(made=2, passed=1, rewards=[1.0]),
            clipped=1,
        )
    )
    assert lines[0] == (
        "rewards of the untrained model (smollm2-135m): 2 training items (asked for 4: the "
        "split holds no more) × 2 samples (4 trajectories, 2 groups):"
    )
    assert lines[1:3] == ["   0.00 ███ 3", "   1.00 █ 1"]
    assert "clipped 1; reward errors 0" in lines[3]
    assert lines[4] == (
        "warm start: the run trains 12 steps on demonstrations before RL; 1 of 2 demonstrations "
        "pass the task's own check, training reward 1.00"
    )


def test_rewards_of_counts_the_groups_a_scorer_skipped() -> None:
    import art

    group = art.TrajectoryGroup(
        [
            art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=r)
            for r in (0.0, 0.0)
        ]
    )
    counted = rewards_of([group, None])
    assert counted.groups == 2 and counted.skipped == 1 and counted.no_signal == 1
    assert counted.all_zero == 1 and counted.constant


# --- suggestions ----------------------------------------------------------------------------------


def measured(
    values: list[float], truncated: float = 0.0, val_items: int = 200, group_size: int = 8
) -> PreflightReport:
    base = report(rewards(*values)).model_copy(
        update={"val_items": val_items, "group_size": group_size}
    )
    return base.model_copy(
        update={"samples": base.samples.model_copy(update={"truncated_rate": truncated})}
    )


@pytest.mark.parametrize(
    ("values", "truncated", "val_items", "settings", "expected"),
    [
        # spread, room and a large validation: nothing to suggest
        ([0.0, 1.0] * 8, 0.0, 200, {}, []),
        # a third of the replies were cut at 48 tokens
        ([0.0, 1.0] * 8, 0.33, 200, {}, [("max_tokens", "96", "33% of the samples were cut")]),
        # mean 1/16: a group of 8 is all-0 60% of the time; 16 halves it (36%)
        ([1.0] + [0.0] * 15, 0.0, 200, {}, [("group_size", "16", "all equal 60% of the time")]),
        # mean 0.5 on 40 validation items: ±0.16 of noise; 100 items resolve 0.1
        ([0.0, 1.0] * 8, 0.0, 40, {}, [("validation items", "100 or more", "±0.16")]),
        # a constant reward: the verdict's business, not a size to suggest
        ([0.0] * 16, 0.0, 200, {}, []),
    ],
    ids=["none", "cut-replies", "rare-successes", "small-validation", "constant"],
)
def test_preflight_suggests_what_its_measurements_argue_for(
    values: list[float],
    truncated: float,
    val_items: int,
    settings: dict[str, object],
    expected: list[tuple[str, str, str]],
) -> None:
    from rlvr.config import RunConfig

    cfg = RunConfig(task="math", **settings)
    found = suggestions(measured(values, truncated, val_items, cfg.group_size), cfg)
    assert [(s.key, s.value.split(" (")[0]) for s in found] == [(k, v) for k, v, _ in expected]
    for suggestion, (_, _, why) in zip(found, expected, strict=True):
        assert why in suggestion.why, suggestion.why


@pytest.mark.parametrize(
    ("mean", "size", "chance"), [(0.5, 2, 0.5), (0.1, 8, 0.430), (1.0, 4, 1.0)]
)
def test_the_chance_a_pass_fail_group_is_all_equal(mean: float, size: int, chance: float) -> None:
    assert no_spread_chance(mean, size) == pytest.approx(chance, abs=1e-3)


# --- for real -------------------------------------------------------------------------------------


TINY_MODEL = str(tiny_model_path())


def preflight_cli(*args: str) -> tuple[int, str]:
    """`rlvr preflight ARGS` of the tiny random model."""
    from tests.helpers import warm

    done = warm.rlvr("preflight", *args, f"model={TINY_MODEL}", timeout_s=900)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("warm_steps", "judged"),
    [
        (0, "judged: 2 demonstrations of the 2-step warm start the run trains from, beside 8 "),
        (1, f"judged: 8 samples of the model after a 1-step warm start ({TINY_MODEL})"),
    ],
    ids=["demonstrations", "warm-started"],
)
def test_preflight_of_a_tool_agent_with_a_warm_start(
    tmp_path: Path, warm_steps: int, judged: str
) -> None:
    from tests.helpers.agents import USER_AGENT

    agent = tmp_path / "capitals_agent.py"
    agent.write_text(USER_AGENT.replace("PROTOCOL", "text"))
    code, out = preflight_cli(
        f"{agent}:make",
        "--items",
        "2",
        "--warm-steps",
        str(warm_steps),
        "group_size=4",
        "max_tokens=16",
        "sft_steps=2",
        "sft_batch_size=2",
        "judge=none",
    )
    assert judged in out, out[-3000:]
    assert "warm start: the run trains 2 steps on demonstrations before RL" in out
    if warm_steps == 0:
        assert code == 0, out[-3000:]
        assert "2 of 2 demonstrations pass the task's own check, training reward 1.00, 1.00" in out
    else:  # the short warm start ran first, with its progress
        assert "warm start: SFT: 1/1 steps, loss " in out
        assert code in (0, 1) and ("ok to train" in out) == (code == 0)


@pytest.mark.slow
def test_preflight_of_multihop_at_its_defaults_judges_the_warm_start() -> None:
    """`rlvr train multihop` learns (its warm start teaches the protocol first): preflight must
    not call its reward constant because the untrained model never searches (SmolLM2 no more
    than the tiny model)."""
    code, out = preflight_cli("multihop", "--items", "1", "group_size=2")
    assert code == 0, out[-3000:]
    assert "constant (" not in out
    assert "judged: 1 demonstration of the 12-step warm start the run trains from" in out
    assert "1 of 1 demonstrations pass the task's own check" in out


@pytest.mark.slow
def test_preflight_suggests_room_and_a_larger_validation_for_real() -> None:
    """Math at 4 new tokens: most replies are cut; 4 validation items cannot see a change."""
    code, out = preflight_cli(
        "math", "--items", "2", "group_size=2", "max_tokens=4", "num_items=40", "judge=none"
    )
    assert code in (0, 1), out[-3000:]
    assert "suggest max_tokens=8: " in out and "were cut at max_tokens=4" in out, out[-3000:]
    assert "suggest validation items=" in out and "a validation of 4 items" in out, out[-3000:]
    # what the held-out splits can resolve, before any training
    assert "labels: 40 labelled item(s): 32 train, 4 validation, 4 test" in out, out[-3000:]
    assert "test: 4 labelled items; " in out and "too small to stop on" in out
