"""Episodes: tool calls and text actions, bad model output, the turn limit, the real model.

The fast tests drive the rollout (the episode layer with the inbox tools) with scripted policy
replies (fault injection: malformed arguments, unknown tools, a refused request). The slow test runs the real
SmolLM2-135M through rlvr's LocalTorchBackend.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import art
import httpx
import openai
import pytest
from openai.types.chat.chat_completion import Choice

from rlvr.agent import EpisodeEnd, as_tools
from rlvr.metrics import has_signal
from rlvr.scoring.scorers import verifier_scorer
from rlvr.types import Item, Sampling
from scenarios.email import REPEAT_COST, Options, SourceCredit
from scenarios.email.environment import EmailEnvironment, Metric, make_environment
from scenarios.email.scoring import SOURCE_WEIGHT
from scenarios.email.tools import SHOWN_ABOVE, inbox_tools
from tests.helpers.scripted import BAD_TURNS, ScriptedPolicy, Turn, choices


def environment_for(difficulty: str = "medium", protocol: str = "auto") -> EmailEnvironment:
    return make_environment(Options(difficulty=difficulty, tool_protocol=protocol, num_items=40))


def first_item(environment: EmailEnvironment, kind: str) -> Item:
    return next(item for item in environment.load() if item.data["kind"] == kind)


SAMPLING = Sampling(temperature=0.7, top_p=0.9, max_tokens=40, step=3)


def schemas(environment: EmailEnvironment, item: Item) -> list[dict]:
    tools = as_tools(inbox_tools(environment.store, item.data["inbox"]))
    return [t.schema() for t in tools.values()]


async def test_tool_call_episode_answers_correctly() -> None:
    environment = environment_for(protocol="tools")
    item = first_item(environment, "single")
    source = item.data["supporting_ids"][0]
    policy = ScriptedPolicy(
        [
            [("search", json.dumps({"keywords": item.prompt}))],
            [("read", json.dumps({"id": source}))],
            f"ANSWER: {item.answer} | {source}",
        ]
    )
    trajectory = await environment.rollout(policy, item, SAMPLING)

    assert trajectory.tools == schemas(environment, item)
    request = policy.requests[0]
    assert request["model"] == "policy@3" and request["logprobs"] is True
    assert (request["max_tokens"], request["temperature"], request["top_p"]) == (40, 0.7, 0.9)
    assert request["tools"] == trajectory.tools
    kinds = [
        "choice" if isinstance(m, Choice) else m["role"] for m in trajectory.messages_and_choices
    ]
    assert kinds == ["system", "user", "choice", "tool", "choice", "tool", "choice"]
    tool_messages = [m for m in trajectory.messages_and_choices if isinstance(m, dict)][2:]
    assert tool_messages[0]["tool_call_id"] == "call1-0" and source in tool_messages[0]["content"]
    assert item.answer in tool_messages[1]["content"]
    metrics = trajectory.metrics
    assert metrics["turns"] == 3 and metrics["tool_calls"] == 2 and metrics["tool_errors"] == 0
    assert metrics[Metric.SOURCE_FOUND] == 1.0 and metrics[Metric.ANSWERED] == 1.0
    assert metrics[Metric.CORRECT] == 1.0 and trajectory.metadata["end"] == EpisodeEnd.REPLIED
    assert trajectory.metadata["inbox"] == item.data["inbox"]
    assert trajectory.metadata["question_id"] == item.data["question_id"]
    assert trajectory.metadata["difficulty"] == "medium"
    assert await environment.check(item, trajectory) == 1.0


async def test_text_protocol_episode() -> None:
    environment = environment_for(protocol="text")
    item = first_item(environment, "absent")
    policy = ScriptedPolicy([f"SEARCH: {item.prompt}", "ANSWER: not in the inbox |"])
    trajectory = await environment.rollout(policy, item, SAMPLING)

    assert trajectory.tools is None and "tools" not in policy.requests[0]
    assert "SEARCH:" in policy.requests[0]["messages"][0]["content"]
    observation = trajectory.messages_and_choices[3]
    assert observation["role"] == "user" and "emails found" in observation["content"]
    assert trajectory.metrics["tool_calls"] == 1
    assert Metric.SOURCE_FOUND not in trajectory.metrics  # nothing to find for absent questions
    assert await environment.check(item, trajectory) == 1.0


@pytest.mark.parametrize(
    ("repeat", "shown"),
    [("read", "was read earlier"), ("search", "the same search ran earlier")],
)
async def test_a_repeated_call_is_answered_in_one_line(repeat: str, shown: str) -> None:
    """A call repeated within an episode gets one line, not the text again, is counted and costs
    `repeat_cost` of the training reward (not of the check); the next episode's tools start
    afresh."""
    environment = environment_for(protocol="text")
    item = first_item(environment, "single")
    call = (
        f"READ: {item.data['supporting_ids'][0]}" if repeat == "read" else f"SEARCH: {item.prompt}"
    )
    script = [call, call, f"ANSWER: {item.answer}"]
    trajectory = await environment.rollout(ScriptedPolicy(script), item, SAMPLING)

    first, again = (m["content"] for m in trajectory.messages()[3:7:2])
    assert SHOWN_ABOVE not in first and len(first.splitlines()) > 1
    assert again.startswith(SHOWN_ABOVE) and shown in again and "\n" not in again
    assert trajectory.metrics[Metric.REPEATED_CALLS] == 1.0
    assert trajectory.metrics["tool_calls"] == 2 and trajectory.metrics["tool_errors"] == 0
    fresh = await environment.rollout(ScriptedPolicy(script[1:]), item, SAMPLING)
    assert fresh.messages()[3]["content"] == first
    assert fresh.metrics[Metric.REPEATED_CALLS] == 0.0
    assert await environment.check(item, trajectory) == await environment.check(item, fresh) == 1.0
    assert environment.reward(item, fresh) == pytest.approx(0.8)  # correct, no source cited
    assert environment.reward(item, trajectory) == pytest.approx(0.8 - REPEAT_COST)


async def test_auto_protocol_accepts_both() -> None:
    environment = environment_for(protocol="auto")
    item = first_item(environment, "single")
    source = item.data["supporting_ids"][0]
    policy = ScriptedPolicy(
        [f"READ: {source}", [("search", json.dumps({"keywords": item.prompt}))], item.answer]
    )
    trajectory = await environment.rollout(policy, item, SAMPLING)
    assert trajectory.tools == schemas(environment, item) == policy.requests[0]["tools"]
    assert trajectory.metrics["tool_calls"] == 2
    assert trajectory.metrics[Metric.ANSWERED] == 1.0
    assert trajectory.metrics[Metric.SOURCE_FOUND] == 1.0
    assert await environment.check(item, trajectory) == 1.0  # a correct answer
    assert environment.reward(item, trajectory) == pytest.approx(0.8)  # no source cited


@pytest.mark.parametrize("turn", BAD_TURNS, ids=range(len(BAD_TURNS)))
async def test_bad_model_output_becomes_an_observation(turn: Turn) -> None:
    environment = environment_for(protocol="auto")
    item = first_item(environment, "single")
    before = environment.store.count()
    policy = ScriptedPolicy([turn, "ANSWER: not sure | e001"])
    trajectory = await environment.rollout(policy, item, SAMPLING)
    observation = trajectory.messages_and_choices[3]
    assert isinstance(observation, dict) and observation["role"] in ("tool", "user")
    failed = observation["content"].startswith("Error: ")  # or, for FTS syntax, no match
    assert failed or observation["content"].startswith("No emails match")
    assert "\n" not in observation["content"]
    assert len(choices(trajectory)) == 2  # the episode went on to the answer
    assert trajectory.metrics["tool_errors"] == failed
    assert trajectory.metrics[Metric.ANSWERED] == 1.0
    assert environment.store.count() == before and environment.store.integrity()


@pytest.mark.parametrize("protocol", ["auto", "text", "tools"])
async def test_plain_reply_is_the_answer(protocol: str) -> None:
    environment = environment_for(protocol=protocol)
    item = first_item(environment, "single")
    source = item.data["supporting_ids"][0]
    policy = ScriptedPolicy([f"I believe it is {item.answer} ({source})."])
    trajectory = await environment.rollout(policy, item, SAMPLING)
    assert len(policy.requests) == 1
    assert trajectory.metrics[Metric.ANSWERED] == trajectory.metrics[Metric.IMPLICIT_ANSWER] == 1.0
    assert trajectory.metadata["source_ids"] == source
    assert await environment.check(item, trajectory) == 1.0


async def test_turn_limit_ends_the_episode() -> None:
    environment = environment_for(protocol="text")
    item = first_item(environment, "aggregate")
    policy = ScriptedPolicy(["SEARCH: invoice"] * 20)
    trajectory = await environment.rollout(policy, item, SAMPLING)
    assert len(policy.requests) == environment.spec.max_turns == trajectory.metrics["turns"]
    assert trajectory.metrics["turn_limit"] == 1.0
    assert trajectory.metadata["end"] == EpisodeEnd.TURN_LIMIT
    assert trajectory.metrics[Metric.ANSWERED] == 0.0
    last_observation = policy.requests[-1]["messages"][-1]["content"]
    assert "One turn left" in last_observation
    assert await environment.check(item, trajectory) == 0.0


def _bad_request() -> openai.BadRequestError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(400, request=request, json={"error": "context length exceeded"})
    return openai.BadRequestError("context length exceeded", response=response, body=None)


async def test_refused_later_turn_ends_cleanly_but_first_turn_raises() -> None:
    environment = environment_for(protocol="text")
    item = first_item(environment, "single")
    trajectory = await environment.rollout(
        ScriptedPolicy(["SEARCH: meeting", _bad_request()]), item, SAMPLING
    )
    assert trajectory.metadata["end"] == EpisodeEnd.POLICY_ERROR
    assert len(choices(trajectory)) == 1
    with pytest.raises(openai.BadRequestError):
        await environment.rollout(ScriptedPolicy([_bad_request()]), item, SAMPLING)


async def test_easy_level_shows_the_evidence() -> None:
    environment = environment_for(difficulty="easy", protocol="text")
    item = first_item(environment, "latest")
    policy = ScriptedPolicy([f"ANSWER: {item.answer} | {', '.join(item.data['supporting_ids'])}"])
    trajectory = await environment.rollout(policy, item, SAMPLING)
    prompt = policy.requests[0]["messages"][1]["content"]
    assert item.answer in prompt
    assert all(f"[{i}]" in prompt for i in item.data["supporting_ids"])
    assert environment.spec.max_turns == 2
    assert await environment.check(item, trajectory) == 1.0


# --- The real model -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_rollout_on_real_model(tmp_path: Path) -> None:
    """SmolLM2-135M served by rlvr's LocalTorchBackend plays real episodes: each yields a valid
    trajectory (trainable Choices with logprobs, observations, metrics) and can be checked."""
    backend_module = pytest.importorskip(
        "rlvr.engine.backend", reason="LocalTorchBackend not built yet"
    )
    from rlvr.engine.models import resolve_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    environment = environment_for(difficulty="easy", protocol="auto")
    items = environment.load()[:1]  # one short episode: CPU decoding is the cost here
    model = art.TrainableModel(
        name="email-test",
        project="rlvr-tests",
        base_model=str(resolve_model("smollm2-135m")),
        base_path=str(tmp_path),
    )
    backend = backend_module.LocalTorchBackend(path=str(tmp_path))
    try:
        await model.register(backend)
        sampling = Sampling(temperature=1.0, max_tokens=24)
        trajectories = [await environment.rollout(model, item, sampling) for item in items]
    finally:
        await backend.close()
    for item, trajectory in zip(items, trajectories, strict=True):
        sampled = choices(trajectory)
        assert sampled and all(c.logprobs is not None for c in sampled)
        assert trajectory.messages()[0]["role"] == "system"
        assert trajectory.metrics["turns"] == len(sampled)
        # every turn but a final reply made a call (or an error)
        assert trajectory.metrics["tool_calls"] >= len(sampled) - 1
        assert 0.0 <= await environment.check(item, trajectory) <= 1.0
        art.TrajectoryGroup([trajectory])  # a valid ART trajectory


@pytest.mark.parametrize(("repeat_cost", "signal"), [(REPEAT_COST, True), (0.0, False)])
async def test_a_group_of_wrong_answers_learns_which_of_them_repeated(
    repeat_cost: float, signal: bool
) -> None:
    """Every answer of the group is wrong; one episode repeated its search. With the repeat cost
    the group has signal against the repeat (GRPO trains on it); without, it has none."""
    environment = make_environment(
        Options(tool_protocol="text", num_items=40, repeat_cost=repeat_cost)
    )
    item = first_item(environment, "single")
    search = f"SEARCH: {item.prompt}"
    scripts = [[search, "ANSWER: zzz"], [search, search, "ANSWER: zzz"]]
    group = art.TrajectoryGroup(
        [await environment.rollout(ScriptedPolicy(s), item, SAMPLING) for s in scripts]
    )
    scored = await verifier_scorer(environment).score(group, item)

    assert [t.reward for t in scored.trajectories] == pytest.approx([0.0, -repeat_cost])
    assert has_signal(scored) is signal


@pytest.mark.parametrize(
    ("source_credit", "rewards"),
    [("cited", [SOURCE_WEIGHT, SOURCE_WEIGHT]), ("read", [0.0, SOURCE_WEIGHT])],
)
async def test_source_credit_pays_for_citing_or_only_for_reading(
    source_credit: SourceCredit, rewards: list[float]
) -> None:
    """Two wrong answers cite the supporting email: one after a search listed it, one after it
    was read. With `source_credit=cited` both earn the source credit, so searching and citing
    pays as much as reading; with `read` only the episode that read it earns, and the group's
    signal is for reading."""
    environment = make_environment(
        Options(tool_protocol="text", num_items=40, source_credit=source_credit)
    )
    item = next(
        i
        for i in environment.load()
        if i.data["kind"] == "single" and len(i.data["supporting_ids"]) == 1
    )
    (email,) = item.data["supporting_ids"]
    search, answer = f"SEARCH: {item.prompt}", f"ANSWER: zzz | {email}"
    searched, read = [
        await environment.rollout(ScriptedPolicy(script), item, SAMPLING)
        for script in ([search, answer], [search, f"READ: {email}", answer])
    ]

    assert f"[{email}]" in searched.messages()[3]["content"]  # the search listed it
    assert [t.metrics[Metric.SOURCE_FOUND] for t in (searched, read)] == [1.0, 1.0]
    assert [t.metrics[Metric.SOURCE_READ] for t in (searched, read)] == [0.0, 1.0]
    assert [environment.reward(item, t) for t in (searched, read)] == pytest.approx(rewards)
    assert await environment.check(item, searched) == await environment.check(item, read) == 0.0


async def test_the_prompts_evidence_counts_as_read() -> None:
    """At the easy level the prompt shows the supporting emails whole: citing them earns the
    source credit under `source_credit=read` without a read call."""
    environment = make_environment(
        Options(difficulty="easy", tool_protocol="text", num_items=40, source_credit="read")
    )
    item = first_item(environment, "latest")
    cited = ", ".join(item.data["supporting_ids"])
    trajectory = await environment.rollout(
        ScriptedPolicy([f"ANSWER: {item.answer} | {cited}"]), item, SAMPLING
    )
    assert trajectory.metrics[Metric.SOURCE_READ] == 1.0
    assert environment.reward(item, trajectory) == pytest.approx(1.0)
