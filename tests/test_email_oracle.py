"""The scripted oracle and `EmailScenario.demonstrate`: demonstrations that pass the check, made
of valid actions, shaped like real rollouts, deterministic, and grounded in what the tools show.

No model: the oracle plays through the real store and the rollout's own episode loop (fast tier).
"""

from __future__ import annotations

import functools
from itertools import product
from types import SimpleNamespace
from typing import Any

import art
import pytest
from openai.types.chat.chat_completion import ChatCompletion, Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage

from rlvr.types import Item, Sampling
from scenarios.email import Options, oracle
from scenarios.email.actions import (
    TOOLS,
    Answer,
    Invalid,
    Read,
    Search,
    parse_text_action,
    parse_tool_call,
    text_action,
    tool_call,
)
from scenarios.email.inbox import NOT_IN_INBOX
from scenarios.email.scenario import (
    END_PREFIX,
    EmailScenario,
    EpisodeEnd,
    Metric,
    make_scenario,
    message_actions,
)

NUM_ITEMS = 150  # per level
MIN_SOLVE_RATE = 0.95
SETTINGS = list(product(("easy", "medium", "hard"), ("text", "tools")))
each_setting = pytest.mark.parametrize(("level", "protocol"), SETTINGS)
OBSERVATION_ROLE = {"text": "user", "tools": "tool"}

Demos = list[tuple[Item, art.Trajectory]]


@functools.cache
def scenario(level: str, protocol: str) -> EmailScenario:
    return make_scenario(Options(difficulty=level, tool_protocol=protocol, num_items=NUM_ITEMS))


_demos: dict[tuple[str, str], Demos] = {}


async def demonstrations(level: str, protocol: str) -> Demos:
    """Every item's demonstration, made once per setting (tests only read them)."""
    if (level, protocol) not in _demos:
        played = scenario(level, protocol)
        _demos[level, protocol] = [(item, await played.demonstrate(item)) for item in played.load()]
    return _demos[level, protocol]


def assistant_messages(trajectory: art.Trajectory) -> list[dict[str, Any]]:
    return [m for m in trajectory.messages() if m["role"] == "assistant"]


@each_setting
async def test_demonstrations_pass_the_check(level: str, protocol: str) -> None:
    played = scenario(level, protocol)
    demos = await demonstrations(level, protocol)
    scores = [await played.check(item, trajectory) for item, trajectory in demos]
    assert len(demos) == NUM_ITEMS
    assert [t.reward for _, t in demos] == scores  # the reward is the check's score
    solved = sum(score == 1.0 for score in scores) / len(scores)
    assert solved >= MIN_SOLVE_RATE, f"{level}/{protocol}: {solved:.1%} of demonstrations solved"
    correct = [t.metrics[Metric.CORRECT] for _, t in demos]
    assert sum(correct) / len(correct) >= MIN_SOLVE_RATE
    assert all(t.metadata["policy"] == "oracle" for _, t in demos)


@each_setting
async def test_assistant_turns_are_valid_actions(level: str, protocol: str) -> None:
    played = scenario(level, protocol)
    for item, trajectory in await demonstrations(level, protocol):
        inbox = played.inboxes[item.data["inbox"]]
        spec = played.spec
        plan = oracle.plan(item, inbox, played.store, spec.evidence_in_prompt, spec.max_turns)
        # The rollout's own parser reads back exactly the planned actions, one per turn.
        parsed = [message_actions(m, protocol) for m in assistant_messages(trajectory)]
        assert [[action for action, _ in turn] for turn in parsed] == [[a] for a in plan]
        assert not any(isinstance(a, Invalid) for a in plan)
        assert not any(isinstance(a, Answer) and a.implicit for a in plan)
        assert trajectory.metrics[Metric.INVALID_ACTIONS] == 0
        assert trajectory.metrics[Metric.TOOL_CALLS] == len(plan)
        assert trajectory.metrics[Metric.TEXT_ACTIONS] == (len(plan) if protocol == "text" else 0)


@each_setting
async def test_structure_is_a_rollouts(level: str, protocol: str) -> None:
    """system, user, then assistant and observation in turn, ending with the answer."""
    played = scenario(level, protocol)
    for _, trajectory in await demonstrations(level, protocol):
        messages = trajectory.messages()
        roles = [m["role"] for m in messages]
        turns = len(assistant_messages(trajectory))
        assert roles == ["system", "user", *["assistant", OBSERVATION_ROLE[protocol]] * turns][:-1]
        assert 1 <= trajectory.metrics[Metric.TURNS] == turns <= played.spec.max_turns
        assert trajectory.metrics[END_PREFIX + EpisodeEnd.ANSWERED] == 1.0
        assert isinstance(message_actions(messages[-1], protocol)[0][0], Answer)
        assert trajectory.tools == (TOOLS if protocol == "tools" else None)
        if level == "easy":
            assert turns == 1  # the evidence is in the prompt: answer at once
        else:
            assert isinstance(message_actions(messages[2], protocol)[0][0], Search)
        if protocol == "tools":  # each tool reply answers the call before it
            calls = [m["tool_calls"] for m in messages[2::2]]
            assert all(len(c) == 1 for c in calls)
            replies = [m["tool_call_id"] for m in messages[3::2]]
            assert replies == [c[0]["id"] for c in calls[: len(replies)]]


class Replay:
    """Stands in for `art.Model`: each request gets the next of the given assistant messages as
    a sampled `Choice`, as an inference server would return it."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.replies = iter(messages)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def openai_client(self) -> Replay:
        return self

    def get_inference_name(self, step: int | None = None) -> str:
        return "replay"

    async def _create(self, **request: Any) -> ChatCompletion:
        message = ChatCompletionMessage.model_validate(next(self.replies))
        choice = Choice(index=0, finish_reason="stop", message=message)
        return ChatCompletion(
            id="r", object="chat.completion", created=0, model="replay", choices=[choice]
        )


@each_setting
async def test_a_rollout_of_the_same_turns_is_the_demonstration(level: str, protocol: str) -> None:
    """A model that samples the oracle's turns gets the same messages, metrics and score."""
    played = scenario(level, protocol)
    for item, demo in (await demonstrations(level, protocol))[:40]:
        model = Replay(assistant_messages(demo))
        rollout = await played.rollout(model, item, Sampling())  # type: ignore[arg-type]
        assert rollout.messages() == demo.messages()
        without_duration = {k: v for k, v in rollout.metrics.items() if k != "duration"}
        assert without_duration == {k: v for k, v in demo.metrics.items() if k != "duration"}
        assert await played.check(item, rollout) == demo.reward


@each_setting
async def test_demonstrations_are_deterministic(level: str, protocol: str) -> None:
    fresh = make_scenario(Options(difficulty=level, tool_protocol=protocol, num_items=NUM_ITEMS))
    demos = (await demonstrations(level, protocol))[::10]
    for item, demo in demos:
        again = await fresh.demonstrate(item)
        assert again.messages() == demo.messages() and again.reward == demo.reward
        assert (await scenario(level, protocol).demonstrate(item)).messages() == demo.messages()


@pytest.mark.parametrize("level", ["medium", "hard"])
async def test_demonstrations_are_grounded(level: str) -> None:
    """The oracle finds what it cites through the tools and never reads the label: every cited
    email appeared in a search result first, a stated fact (single, latest) appeared in a READ
    observation, and absent entities appear in no search result."""
    played = scenario(level, "text")
    for item, demo in await demonstrations(level, "text"):
        inbox = played.inboxes[item.data["inbox"]]
        spec = played.spec
        plan = oracle.plan(item, inbox, played.store, spec.evidence_in_prompt, spec.max_turns)
        blind = item.model_copy(update={"answer": "?"})
        assert oracle.plan(blind, inbox, played.store, False, spec.max_turns) == plan
        messages = demo.messages()
        search_result = messages[3]["content"]
        answer = plan[-1]
        assert isinstance(answer, Answer)
        assert all(f"[{i}]" in search_result for i in answer.source_ids)
        if item.data["kind"] in ("single", "latest"):
            assert any(answer.answer in m["content"] for m in messages[3:-1:2])
        if item.data["kind"] == "absent":
            assert item.data["entity"].lower() not in search_result.lower()
            assert answer.answer == NOT_IN_INBOX and answer.source_ids == ()


async def test_auto_protocol_gets_text_demonstrations() -> None:
    """auto's prompt teaches the text actions (and offers the tools), so demonstrations use text."""
    played = make_scenario(Options(difficulty="medium", tool_protocol="auto", num_items=20))
    for item in played.load():
        demo = await played.demonstrate(item)
        assert demo.tools == TOOLS and demo.reward == 1.0
        assert all("tool_calls" not in m for m in assistant_messages(demo))
        assert demo.metrics[Metric.TEXT_ACTIONS] == demo.metrics[Metric.TOOL_CALLS]


ACTIONS = [
    Search(keywords="invoice Cox-Mills", after="2024-05-01", before="2024-06-01"),
    Search(keywords="flight Lisbon", sender="reservations", to="joseph"),
    Read(id="e012"),
    Answer(answer="$18,599.17", source_ids=("e029", "e030")),
    Answer(answer=NOT_IN_INBOX),
]


@pytest.mark.parametrize("action", ACTIONS, ids=range(len(ACTIONS)))
def test_actions_are_written_as_the_parsers_read_them(action: Search | Read | Answer) -> None:
    assert parse_text_action(text_action(action)) == action
    call = tool_call(action, "call0")
    assert parse_tool_call(call["function"]["name"], call["function"]["arguments"]) == action


def test_unknown_question_form_is_an_error() -> None:
    with pytest.raises(oracle.OracleError):
        oracle.match_form("What is the meaning of life?")
