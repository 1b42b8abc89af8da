"""ART's idiom runs unchanged: `rollout(model, scenario)` over any objects `load()` returns, the
model's OpenAI client filling in the run's sampling settings and logprobs, choices without
logprobs trained anyway, and rewards of any sign kept as given.

Fast tests use the scripted policy stand-in (tests/helpers/scripted.py) for the endpoint; the slow test
trains a task file written exactly as ART's examples are on the CPU policy: 2 real steps as
written (the second asks `get_inference_name()` for the latest weights), 1 with logprobs refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import art
import polars as pl
import pytest
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from pydantic import BaseModel

import rlvr
from rlvr.config import ConfigError
from rlvr.metrics import M
from rlvr.scoring.scorers import RolloutScorer
from rlvr.task_api.api import as_items, takes_two
from rlvr.task_api.rollout_model import RolloutModel, with_defaults
from rlvr.training.step import turns_without_logprobs
from rlvr.types import Item, Sampling
from tests.helpers.scripted import ScriptedPolicy


class Puzzle(BaseModel):
    id: str
    board: str


@dataclass(frozen=True)
class Game:
    id: int
    opponent: str


@pytest.mark.parametrize(
    ("rows", "ids", "answers"),
    [
        ([Puzzle(id="p1", board="x.o"), Puzzle(id="p2", board="...")], ["p1", "p2"], [None, None]),
        ([Game(id=7, opponent="random")], ["7"], [None]),
        ([{"step": 1}, {"step": 2, "answer": 4}], ["src-1", "src-2"], [None, "4"]),
        (["first", "second"], ["src-1", "src-2"], [None, None]),
    ],
)
def test_any_objects_become_items_carrying_them(
    rows: list[Any], ids: list[str], answers: list[str | None]
) -> None:
    items = as_items(rows, "src", objects=True)
    assert [i.id for i in items] == ids and [i.answer for i in items] == answers
    assert [i.source for i in items] == rows
    assert all("source" not in i.model_dump() for i in items)  # never stored


def test_duplicate_object_ids_are_one_line() -> None:
    with pytest.raises(ConfigError, match="item id 'p1' appears more than once"):
        as_items([Puzzle(id="p1", board=""), Puzzle(id="p1", board="x")], "src", objects=True)


async def _two(model: Any, scenario: Any) -> art.Trajectory: ...


async def _three(model: Any, item: Any, sampling: Any) -> art.Trajectory: ...


async def _optional(model: Any, scenario: Any, sampling: Any = None) -> art.Trajectory: ...


async def _star(*args: Any) -> art.Trajectory: ...


@pytest.mark.parametrize(
    ("fn", "art_idiom"), [(_two, True), (_three, False), (_optional, True), (_star, False)]
)
def test_the_rollouts_arity_picks_the_idiom(fn: Any, art_idiom: bool) -> None:
    assert takes_two(fn) is art_idiom


@pytest.mark.parametrize(
    ("request_", "sent"),
    [
        ({}, {"temperature": 0.3, "top_p": 0.9, "max_tokens": 20, "logprobs": True}),
        ({"temperature": 1.2}, {"temperature": 1.2, "max_tokens": 20, "logprobs": True}),
        ({"max_completion_tokens": 5}, {"max_completion_tokens": 5, "logprobs": True}),
        ({"max_tokens": 50}, {"max_tokens": 50}),
        ({"logprobs": False}, {"logprobs": False, "temperature": 0.3}),
    ],
)
def test_defaults_fill_only_what_the_caller_left_out(
    request_: dict[str, Any], sent: dict[str, Any]
) -> None:
    defaults = {"temperature": 0.3, "top_p": 0.9, "max_tokens": 20, "logprobs": True}
    filled = with_defaults(request_, defaults)
    assert filled.items() >= sent.items()
    assert "max_tokens" not in filled or "max_completion_tokens" not in filled


async def test_the_rollout_model_samples_with_the_runs_settings() -> None:
    policy = ScriptedPolicy(["ok"])
    model = RolloutModel(policy, Sampling(temperature=0.0, max_tokens=12, step=5))  # type: ignore[arg-type]
    assert model.get_inference_name() == "policy@5"
    assert model.get_inference_name(2) == "policy@2"
    client = model.openai_client()
    await client.chat.completions.create(messages=[{"role": "user", "content": "hi"}])
    assert policy.requests[0] == {
        "model": "policy@5",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 12,
        "logprobs": True,
    }
    assert model.finish_reason == "stop"  # everything else is the wrapped model's


async def test_a_two_argument_rollout_gets_its_own_objects() -> None:
    seen: list[Any] = []

    async def rollout(model: Any, game: Game) -> art.Trajectory:
        seen.append(game)
        reply = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(), messages=[{"role": "user", "content": game.opponent}]
        )
        return art.Trajectory(
            messages_and_choices=[{"role": "user", "content": "x"}, reply.choices[0]], reward=-1.0
        )

    task = rlvr.environment(
        name="games",
        load=lambda: [Game(id=1, opponent="a"), Game(id=2, opponent="b")],
        rollout=rollout,
    )
    assert task.default_scorer == "rollout"
    items = task.load()
    policy = ScriptedPolicy(["move"])
    sampling = Sampling(temperature=0.5, max_tokens=8, step=1)
    trajectory = await task.rollout(RolloutModel(policy, sampling), items[1], sampling)  # type: ignore[arg-type]
    assert seen == [Game(id=2, opponent="b")]
    assert policy.requests[0]["model"] == "policy@1" and policy.requests[0]["logprobs"] is True
    assert await task.check(items[1], trajectory) == -1.0  # without a check: the rollout's reward


@pytest.mark.parametrize(
    ("rewards", "kept"),
    [([-1.0, 0.5, 2.0], [-1.0, 0.5, 2.0]), ([-3, 0, 0], [-3.0, 0.0, 0.0]), ([1.0, math.nan], None)],
)
async def test_the_rollout_scorer_keeps_rewards_as_given(
    rewards: list[float], kept: list[float] | None
) -> None:
    group = art.TrajectoryGroup(
        [
            art.Trajectory(messages_and_choices=[{"role": "user", "content": "x"}], reward=r)
            for r in rewards
        ]
    )
    scorer = RolloutScorer()
    scored = await scorer.score(group, Item(id="i"))
    assert (None if scored is None else [t.reward for t in scored.trajectories]) == kept
    assert scorer.pop_metrics()[M.REWARD_ERRORS] == (0 if kept is not None else 1)


def _choice(logprobs: bool) -> Choice:
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": ChatCompletionMessage(role="assistant", content="x").model_dump(),
            "logprobs": {"content": []} if logprobs else None,
        }
    )


def test_turns_without_logprobs_are_counted() -> None:
    trajectories = [
        art.Trajectory(
            messages_and_choices=[{"role": "user", "content": "q"}, _choice(lp)], reward=r
        )
        for lp, r in ((True, 0.0), (False, 1.0), (False, 0.5))
    ]
    assert turns_without_logprobs([art.TrajectoryGroup(trajectories)]) == 2


# --- trained for real -----------------------------------------------------------------------------

ART_STYLE_TASK = '''
"""Written as ART's examples are: scenario objects, rollout(model, scenario), a shaped reward."""
from dataclasses import dataclass

import art
import rlvr


@dataclass
class Scenario:
    id: str
    topic: str


def load():
    return [Scenario(id=f"s{n}", topic=t) for n, t in enumerate(
        ["cats", "rain", "tea", "boats", "maps", "snow", "bees", "owls", "jazz", "salt", "wind",
         "fog", "moss", "ink", "kelp", "dust"])]


async def rollout(model, scenario):
    messages = [{"role": "user", "content": f"Say one word about {scenario.topic}."}]
    client = model.openai_client()
    completion = await client.chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_completion_tokens=8EXTRA
    )
    choice = completion.choices[0]
    text = choice.message.content or ""
    # ART-style shaping: a short answer is rewarded, a long one punished, down to -1.
    reward = max(-1.0, 1.0 - len(text) / 40)
    return art.Trajectory(messages_and_choices=[*messages, choice], reward=reward)


def make():
    return rlvr.environment(name="art-style", load=load, rollout=rollout)
'''


@pytest.mark.slow
@pytest.mark.parametrize("logprobs", ["", ", logprobs=False"], ids=["as-written", "no-logprobs"])
def test_a_rollout_in_arts_idiom_trains_unchanged(tmp_path: Path, logprobs: str) -> None:
    """As ART's examples are written (the client asks for logprobs for them), and with logprobs
    explicitly refused: the turns are then trained with recomputed logprobs, not skipped."""
    from rlvr.runs import store
    from tests.helpers.tiny_runs import TINY, TWO_STEPS, cli, only_run

    task = tmp_path / "elsewhere" / "art_style.py"
    task.parent.mkdir()
    task.write_text(ART_STYLE_TASK.replace("EXTRA", logprobs))
    runs = tmp_path / "runs"
    as_written = not logprobs  # its second step names the latest weights: 2 steps, else 1
    settings = {**TINY, "temperature": 1.0, "max_tokens": 64, **(TWO_STEPS if as_written else {})}
    out = cli(
        "train", f"{task}:make", *(f"{k}={v}" for k, v in settings.items()), f"runs_root={runs}"
    )
    assert "no sampled logprobs" not in out.stderr + out.stdout
    run_dir = only_run(runs)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["scorer"] == "default"
    rows = [r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r]
    assert [r[M.STEP] for r in rows] == list(range(1, settings["max_steps"] + 1))
    trained = [r for r in rows if r[M.TRAINED_GROUPS] > 0]
    assert trained, "no step had a group with signal"
    assert all(r[M.LOSS] is not None and r[M.LOSS] != 0.0 for r in trained)
    refused = [r[M.NO_LOGPROB_TURNS] for r in trained]
    assert all(n > 0 for n in refused) if logprobs else all(n == 0 for n in refused)
    # one update per step whose groups had signal: none skipped for missing logprobs
    assert rows[-1][M.POLICY_STEP] == len(trained)
    frame = pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")
    rewards = frame["reward"].to_list()
    assert (min(rewards) >= -1.0 and any(r < 0 for r in rewards)) or all(r > 0 for r in rewards)
    # max_completion_tokens=8 was honoured (the run's max_tokens is 64); tokens are counted from
    # the sampled logprobs, so only where the rollout kept them
    if not logprobs:
        assert all(0 < r[M.COMPLETION_TOKENS] <= 8 for r in rows)
