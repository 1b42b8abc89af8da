"""Nothing silently changed: a task's own `reward=` hook keeps any real number (ART's idiom), a
verifier-contract `fn(completion, ground_truth)` is bounded to [0, 1] and every value clipped there
is counted (`train/reward_clipped`), said once with the value and the item, and turned into a
hint that names the fix. The slow test trains both for real."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import art
import polars as pl
import pytest

import rlvr
from rlvr.config import RunConfig
from rlvr.metrics import HINT_KEY, M, has_signal
from rlvr.runs.records import StepRow
from rlvr.scoring.scorers import CLIP_FIX, reward_scorer, verifier_scorer
from rlvr.task_api.plugins import make_scorer
from rlvr.training.hints import decision_hints
from rlvr.types import Item


def hints_of(metrics: dict, cfg: RunConfig) -> list[str]:
    """The hints of a step whose row holds `metrics`."""
    return decision_hints(StepRow.model_validate({M.REWARD_MEAN: 0.0, **metrics}), cfg)


ITEM = Item(id="board-7", prompt="Move.", answer="up")


def group(*replies: str, reward: float = 0.0) -> art.TrajectoryGroup:
    return art.TrajectoryGroup(
        art.Trajectory(
            messages_and_choices=[
                {"role": "user", "content": ITEM.prompt},
                {"role": "assistant", "content": r},
            ],
            reward=reward,
        )
        for r in replies
    )


def shaped(completion: str, ground_truth: str) -> float:
    """A verifier-contract function that strays outside [0, 1]: -1 invalid, 2 for a bonus."""
    return {"bad": -1.0, "bonus": 2.0}.get(completion, 0.5)


async def _game(model: object, scenario: object) -> art.Trajectory:
    raise AssertionError("not rolled out here")


def art_task() -> rlvr.Environment:
    """ART's idiom with a check: `reward=` hands back the reward the rollout set."""
    return rlvr.environment(
        name="game",
        load=lambda: [],
        rollout=_game,
        check=lambda scenario, t: float(t.reward > 0),
        reward=lambda scenario, t: t.reward,
    )


@pytest.mark.parametrize(
    ("replies", "rewards", "clipped"),
    [
        (["bad", "ok", "bonus"], [0.0, 0.5, 1.0], 2),
        (["ok", "ok"], [0.5, 0.5], 0),
        (["bad", "bad"], [0.0, 0.0], 2),
    ],
)
async def test_the_verifier_contract_clips_counts_and_says_it_once(
    replies: list[str], rewards: list[float], clipped: int, caplog: pytest.LogCaptureFixture
) -> None:
    scorer = reward_scorer(shaped, name="shaped.py:shaped")
    with caplog.at_level(logging.WARNING, logger="rlvr.scoring.scorers"):
        scored = await scorer.score(group(*replies), ITEM)
        again = await scorer.score(group(*replies), ITEM)
    assert [t.reward for t in scored.trajectories] == rewards
    assert [t.reward for t in again.trajectories] == rewards
    assert scorer.pop_metrics() == {M.REWARD_ERRORS: 0.0, M.REWARD_CLIPPED: 2.0 * clipped}
    assert scorer.pop_metrics()[M.REWARD_CLIPPED] == 0.0  # popped counters reset
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == (1 if clipped else 0)  # once, however many were clipped
    if clipped:
        value = -1 if "bad" in replies else 2
        assert f"reward {value} of item board-7" in said[0]
        assert M.REWARD_CLIPPED in said[0] and "scorer=rollout" in said[0]


@pytest.mark.parametrize("rewards", [[-1.0, -0.25, -1.0], [-3.0, 0.0, 5.5], [0.2, 0.9, 0.4]])
async def test_a_tasks_own_reward_hook_keeps_any_real_number(
    rewards: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    environment = art_task()
    scorer = make_scorer(RunConfig(judge="none"), environment)
    assert scorer.name == "verifier"  # a check is given: the default scorer is the task's reward
    trajectories = [
        art.Trajectory(messages_and_choices=[{"role": "user", "content": "x"}], reward=r)
        for r in rewards
    ]
    with caplog.at_level(logging.WARNING):
        scored = await scorer.score(art.TrajectoryGroup(trajectories), ITEM)
    assert [t.reward for t in scored.trajectories] == rewards
    assert has_signal(scored)  # the run had every group all-0 after clipping
    assert M.REWARD_CLIPPED not in scorer.pop_metrics() and not caplog.records


async def test_the_environment_verifier_is_unbounded_and_a_reward_function_is_not() -> None:
    environment = art_task()
    assert verifier_scorer(environment).bounds is None  # type: ignore[attr-defined]
    assert reward_scorer(shaped).bounds == (0.0, 1.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("metrics", "expected", "absent"),
    [
        (
            {M.GROUPS: 2, M.ALL_ZERO: 2, M.REWARD_CLIPPED: 16},
            ["16 rewards were outside", "after 16 rewards were clipped"],
            "simplify the data",
        ),
        ({M.GROUPS: 2, M.ALL_ZERO: 0, M.REWARD_CLIPPED: 3}, ["3 rewards were outside"], "all-0"),
        ({M.GROUPS: 2, M.ALL_ZERO: 2, M.REWARD_CLIPPED: 0}, ["simplify the data"], "clipped"),
    ],
)
def test_clipping_becomes_a_hint_that_names_the_fix(
    metrics: dict, expected: list[str], absent: str
) -> None:
    hints = hints_of(metrics, RunConfig())
    text = " | ".join(hints)
    assert all(e in text for e in expected), hints
    assert absent not in text
    if metrics[M.REWARD_CLIPPED]:
        assert CLIP_FIX in text


# --- trained for real -----------------------------------------------------------------------------

SHAPED_TASK = '''
"""ART's idiom with a check: the rollout sets a shaped, sometimes negative reward."""
import art
import rlvr


def load():
    return [{"id": f"w{n}", "prompt": f"Say one word about {t}."} for n, t in enumerate(
        ["cats", "rain", "tea", "boats", "maps", "snow", "bees", "owls", "jazz", "salt", "wind",
         "fog", "moss", "ink", "kelp", "dust"])]


async def rollout(model, scenario):
    messages = [{"role": "user", "content": scenario["prompt"]}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages
    )
    choice = completion.choices[0]
    text = choice.message.content or ""
    reward = -1.0 if len(text.split()) > 3 else 1.0 - len(text) / 40
    return art.Trajectory(messages_and_choices=[*messages, choice], reward=reward)


def shaped(completion, ground_truth):
    """The same shaping as a verifier-contract function: bounded to [0, 1]."""
    return -1.0 if len(completion.split()) > 3 else 1.0 - len(completion) / 40


def make():
    return rlvr.environment(
        name="shaped", load=load, rollout=rollout,
        check=lambda s, t: float(t.reward > 0), reward=lambda s, t: t.reward,
    )
'''


def task_shaping(text: str) -> float:
    """The reward SHAPED_TASK's rollout sets for a reply."""
    return -1.0 if len(text.split()) > 3 else 1.0 - len(text) / 40


@pytest.mark.slow
@pytest.mark.parametrize("scorer", ["default", "shaped"])
def test_negative_rewards_train_as_set_or_are_counted_when_clipped(
    tmp_path: Path, scorer: str
) -> None:
    """`reward=lambda s, t: t.reward` trains on the negative rewards as set; the same shaping
    as `fn(completion, ground_truth)` is clipped, and the run says so: counted in every step's
    row, one console line with the value and the item, and the hint."""
    from rlvr.runs import store
    from tests.helpers.tiny_runs import TINY, cli, only_run

    task = tmp_path / "elsewhere" / "shaped.py"
    task.parent.mkdir()
    task.write_text(SHAPED_TASK)
    runs = tmp_path / "runs"
    spec = "default" if scorer == "default" else f"{task}:shaped"
    settings = {**TINY, "temperature": 1.0, "max_tokens": 24}
    out = cli(
        "train",
        f"{task}:make",
        f"scorer={spec}",
        *(f"{k}={v}" for k, v in settings.items()),
        f"runs_root={runs}",
    )
    run_dir = only_run(runs)
    [row] = [
        r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r
    ]
    frame = pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")
    replies = [json.loads(m)[-1]["content"] or "" for m in frame["messages"].to_list()]
    shaping = [task_shaping(text) for text in replies]
    said = [line for line in (out.stdout + out.stderr).splitlines() if "was clipped to" in line]
    if scorer == "default":  # trained on exactly what the rollout set
        assert frame["reward"].to_list() == pytest.approx(shaping)
        assert M.REWARD_CLIPPED not in row and not said
    else:
        assert frame["reward"].to_list() == pytest.approx([min(1.0, max(0.0, r)) for r in shaping])
        clipped = sum(not 0.0 <= r <= 1.0 for r in shaping)
        assert row[M.REWARD_CLIPPED] == clipped
        assert len(said) == (1 if clipped else 0), said
        if clipped:
            # the first clipped reward is said: -1 (a long reply) or a short reply's shaping
            # below 0 (over 40 characters in at most 3 words), whichever was scored first
            value = float(said[0].split("reward ")[1].split(" of item w")[0])
            assert value in [pytest.approx(r) for r in shaping if not 0.0 <= r <= 1.0]
            assert any(CLIP_FIX in h for h in row[HINT_KEY])
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 1
