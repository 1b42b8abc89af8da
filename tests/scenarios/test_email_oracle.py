"""The scripted oracle and `EmailEnvironment.demonstrate`: demonstrations that pass the check, made
of valid actions, shaped like real rollouts, deterministic, and grounded in what the tools show.

No model: the oracle plays through the real store and the rollout's own episode loop (fast tier).
"""

from __future__ import annotations

import functools
import re
from itertools import product
from types import SimpleNamespace
from typing import Any

import art
import pytest
from openai.types.chat.chat_completion import ChatCompletion, Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage

from rlvr.agent import Call, EpisodeEnd, as_tools
from rlvr.agent.budget import approx_tokens
from rlvr.agent.episode import LAST_TURN_NOTE, scripted_message, turn_calls
from rlvr.agent.tools import parse_json_arguments, text_arguments
from rlvr.types import Item, Sampling
from scenarios.email import OBSERVATION_TOKENS, Options, oracle
from scenarios.email.environment import EmailEnvironment, Metric, make_environment
from scenarios.email.inbox import NOT_IN_INBOX
from scenarios.email.scoring import ANSWER_WEIGHT
from scenarios.email.tools import Answer, answer_line, inbox_tools, parse_answer

NUM_ITEMS = 150  # per level
MIN_SOLVE_RATE = 0.95
SETTINGS = list(product(("easy", "medium", "hard"), ("text", "tools")))
each_setting = pytest.mark.parametrize(("level", "protocol"), SETTINGS)
OBSERVATION_ROLE = {"text": "user", "tools": "tool"}

Demos = list[tuple[Item, art.Trajectory]]
CUT = "tokens cut]"


@functools.cache
def environment(level: str, protocol: str) -> EmailEnvironment:
    return make_environment(Options(difficulty=level, tool_protocol=protocol, num_items=NUM_ITEMS))


_demos: dict[tuple[str, str], Demos] = {}


async def demonstrations(level: str, protocol: str) -> Demos:
    """Every item's demonstration, made once per setting (tests only read them)."""
    if (level, protocol) not in _demos:
        played = environment(level, protocol)
        _demos[level, protocol] = [(item, await played.demonstrate(item)) for item in played.load()]
    return _demos[level, protocol]


def assistant_messages(trajectory: art.Trajectory) -> list[dict[str, Any]]:
    return [m for m in trajectory.messages() if m["role"] == "assistant"]


@each_setting
async def test_demonstrations_pass_the_check(level: str, protocol: str) -> None:
    played = environment(level, protocol)
    demos = await demonstrations(level, protocol)
    scores = [await played.check(item, trajectory) for item, trajectory in demos]
    assert len(demos) == NUM_ITEMS
    # The reward is the training reward; the oracle cites every supporting email but reads only
    # those stating the fact, so a citation it did not read earns no source credit.
    assert [t.reward for _, t in demos] == [played.reward(i, t) for i, t in demos]
    assert all(t.reward >= ANSWER_WEIGHT for (_, t), s in zip(demos, scores, strict=True) if s)
    solved = sum(score == 1.0 for score in scores) / len(scores)
    assert solved >= MIN_SOLVE_RATE, f"{level}/{protocol}: {solved:.1%} of demonstrations solved"
    correct = [t.metrics[Metric.CORRECT] for _, t in demos]
    assert sum(correct) / len(correct) >= MIN_SOLVE_RATE
    assert all(t.metadata["policy"] == "scripted" for _, t in demos)


def parsed_turn(tools: dict, message: dict[str, Any], protocol: str) -> Call | str:
    """What the episode layer reads in one assistant message: its one call, or the final reply."""
    calls = turn_calls(message, tools, protocol)  # type: ignore[arg-type]
    if not calls:
        return message["content"]
    assert len(calls) == 1
    name, arguments, rest, _ = calls[0]
    tool = tools[name]
    values = (
        text_arguments(tool, rest) if rest is not None else parse_json_arguments(tool, arguments)
    )
    return Call(name=name, arguments=values)


@each_setting
async def test_assistant_turns_are_the_planned_turns(level: str, protocol: str) -> None:
    played = environment(level, protocol)
    for item, trajectory in await demonstrations(level, protocol):
        inbox = played.inboxes[item.data["inbox"]]
        spec = played.spec
        plan = oracle.plan(item, inbox, played.store, spec.evidence_in_prompt, spec.max_turns)
        tools = as_tools(inbox_tools(played.store, inbox.id))
        # The layer reads back exactly the planned turns: the calls, then the answer line.
        parsed = [parsed_turn(tools, m, protocol) for m in assistant_messages(trajectory)]
        assert parsed == list(plan)
        answer = parse_answer(plan[-1])  # type: ignore[arg-type]
        assert answer is not None and not answer.implicit
        assert trajectory.metrics["tool_errors"] == 0
        assert trajectory.metrics["tool_calls"] == len(plan) - 1
        assert trajectory.metrics["turns"] == len(plan)


@each_setting
async def test_structure_is_a_rollouts(level: str, protocol: str) -> None:
    """system, user, then assistant and observation in turn, ending with the answer."""
    played = environment(level, protocol)
    for item, trajectory in await demonstrations(level, protocol):
        messages = trajectory.messages()
        roles = [m["role"] for m in messages]
        turns = len(assistant_messages(trajectory))
        assert roles == ["system", "user", *["assistant", OBSERVATION_ROLE[protocol]] * turns][:-1]
        assert 1 <= trajectory.metrics["turns"] == turns <= played.spec.max_turns
        assert trajectory.metadata["end"] == EpisodeEnd.REPLIED
        assert parse_answer(messages[-1]["content"]) is not None
        tools = as_tools(inbox_tools(played.store, item.data["inbox"]))
        schemas = [t.schema() for t in tools.values()]
        assert trajectory.tools == (schemas if protocol == "tools" else None)
        if level == "easy":
            assert turns == 1  # the evidence is in the prompt: answer at once
        else:
            first = parsed_turn(tools, messages[2], protocol)
            assert isinstance(first, Call) and first.name == "search"
        if protocol == "tools":  # each tool reply answers the call before it
            calls = [m["tool_calls"] for m in messages[2:-1:2]]
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
    played = environment(level, protocol)
    for item, demo in (await demonstrations(level, protocol))[:40]:
        model = Replay(assistant_messages(demo))
        rollout = await played.rollout(model, item, Sampling())  # type: ignore[arg-type]
        assert rollout.messages() == demo.messages()
        without_duration = {k: v for k, v in rollout.metrics.items() if k != "duration"}
        assert without_duration == {k: v for k, v in demo.metrics.items() if k != "duration"}
        assert await played.check(item, rollout) == await played.check(item, demo)
        assert played.reward(item, rollout) == demo.reward


@each_setting
async def test_demonstrations_are_deterministic(level: str, protocol: str) -> None:
    fresh = make_environment(Options(difficulty=level, tool_protocol=protocol, num_items=NUM_ITEMS))
    demos = (await demonstrations(level, protocol))[::10]
    for item, demo in demos:
        again = await fresh.demonstrate(item)
        assert again.messages() == demo.messages() and again.reward == demo.reward
        assert (await environment(level, protocol).demonstrate(item)).messages() == demo.messages()


@pytest.mark.parametrize("level", ["medium", "hard"])
async def test_demonstrations_are_grounded(level: str) -> None:
    """The oracle finds what it cites through the tools and never reads the label: every cited
    email appeared in a search result first, a stated fact (single, latest) appeared in a READ
    observation, and absent entities appear in no search result."""
    played = environment(level, "text")
    for item, demo in await demonstrations(level, "text"):
        inbox = played.inboxes[item.data["inbox"]]
        spec = played.spec
        plan = oracle.plan(item, inbox, played.store, spec.evidence_in_prompt, spec.max_turns)
        blind = item.model_copy(update={"answer": "?"})
        assert oracle.plan(blind, inbox, played.store, False, spec.max_turns) == plan
        messages = demo.messages()
        search_result = messages[3]["content"]
        answer = parse_answer(plan[-1])  # type: ignore[arg-type]
        assert isinstance(answer, Answer)
        assert all(f"[{i}]" in search_result for i in answer.source_ids)
        if item.data["kind"] in ("single", "latest"):
            assert any(answer.answer in m["content"] for m in messages[3:-1:2])
        if item.data["kind"] == "absent":
            assert item.data["entity"].lower() not in search_result.lower()
            assert answer.answer == NOT_IN_INBOX and answer.source_ids == ()


@pytest.mark.parametrize("level", ["medium", "hard"])
async def test_demonstrations_within_the_default_budget_pass_and_show_what_they_use(
    level: str,
) -> None:
    """At the default observation budget every oracle demonstration passes the check, every
    email it reads or cites was shown to it before, and the budget cut the search results (so
    it is really on) while no email as read was cut."""
    played = environment(level, "text")
    assert played.observation_tokens == OBSERVATION_TOKENS
    demos = await demonstrations(level, "text")
    assert [await played.check(item, demo) for item, demo in demos] == [1.0] * len(demos)
    for _, demo in demos:
        messages = demo.messages()
        for n, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = " ".join(m["content"] for m in messages[1:n] if m["role"] == "user")
            used = [*re.findall(r"READ: (e\d+)", message["content"])]
            answer = parse_answer(message["content"]) if n == len(messages) - 1 else None
            used += list(answer.source_ids) if answer else []
            assert all(f"[{i}]" in before for i in used), (used, before)
        reads = [m["content"] for a, m in zip(messages[2::2], messages[3::2], strict=False)
                 if a["content"].startswith("READ")]  # fmt: skip
        assert not any(CUT in r for r in reads)
        shown = [m["content"].removesuffix(f"\n\n{LAST_TURN_NOTE}") for m in messages[3::2]]
        assert demo.metrics["observation_tokens"] == sum(map(approx_tokens, shown))
        assert demo.metrics["trimmed_observations"] == sum(CUT in o for o in shown)
    trimmed = sum(demo.metrics["trimmed_observations"] for _, demo in demos)
    assert trimmed >= len(demos) / 2


async def test_the_budget_spends_fewer_observation_tokens() -> None:
    budgeted = await demonstrations("medium", "text")
    whole = make_environment(
        Options(difficulty="medium", tool_protocol="text", num_items=40, observation_tokens=None)
    )
    spent = {
        budget: sum(demo.metrics["observation_tokens"] for demo in demos)
        for budget, demos in (
            ("on", [demo for _, demo in budgeted[:40]]),
            ("off", [await whole.demonstrate(item) for item in whole.load()]),
        )
    }
    assert spent["on"] < 0.85 * spent["off"]


@pytest.mark.parametrize("level", ["easy", "medium", "hard"])
async def test_every_item_of_a_level_shares_the_system_prompt_and_asks_in_the_user_message(
    level: str,
) -> None:
    """The item-specific parts (whose inbox, the question) come after the task's instructions
    and the tool protocol, so every episode's prompt starts with the same text."""
    played = environment(level, "text")
    items = played.load()[::15]
    openings = [(await played.demonstrate(item)).messages()[:2] for item in items]
    firsts = [(system["content"], user["content"]) for system, user in openings]
    assert len({system for system, _ in firsts}) == 1
    system = firsts[0][0]
    assert "SEARCH:" in system and "ANSWER:" in system
    for item, (_, user) in zip(items, firsts, strict=True):
        owner = played.inboxes[item.data["inbox"]].owner
        assert owner.name not in system and owner.name in user
        assert item.prompt in user and item.prompt not in system


async def test_auto_protocol_gets_text_demonstrations() -> None:
    """auto's prompt teaches the text actions (and offers the tools), so demonstrations use text."""
    played = make_environment(Options(difficulty="medium", tool_protocol="auto", num_items=20))
    for item in played.load():
        demo = await played.demonstrate(item)
        tools = as_tools(inbox_tools(played.store, item.data["inbox"]))
        assert demo.tools == [t.schema() for t in tools.values()]
        assert await played.check(item, demo) == 1.0
        assert all("tool_calls" not in m for m in assistant_messages(demo))
        assert demo.metrics["tool_calls"] == demo.metrics["turns"] - 1


TURNS = [
    Call(
        name="search",
        arguments={"keywords": "invoice Cox-Mills", "after": "2024-05-01", "before": "2024-06-01"},
    ),
    Call(
        name="search",
        arguments={"keywords": "flight Lisbon", "sender": "reservations", "to": "joseph"},
    ),
    Call(name="read", arguments={"id": "e012"}),
]


@pytest.mark.parametrize("turn", TURNS, ids=range(len(TURNS)))
@pytest.mark.parametrize("protocol", ["text", "tools"])
def test_calls_are_written_as_the_layer_reads_them(turn: Call, protocol: str) -> None:
    tools = as_tools(inbox_tools(environment("medium", "text").store, "inbox-000"))
    message = scripted_message(turn, tools, protocol, 0)  # type: ignore[arg-type]
    assert parsed_turn(tools, message, protocol) == turn


@pytest.mark.parametrize(
    "answer",
    [Answer(answer="$18,599.17", source_ids=("e029", "e030")), Answer(answer=NOT_IN_INBOX)],
)
def test_answers_are_written_as_parse_answer_reads_them(answer: Answer) -> None:
    assert parse_answer(answer_line(answer.answer, answer.source_ids)) == answer


def test_unknown_question_form_is_an_error() -> None:
    with pytest.raises(oracle.OracleError):
        oracle.match_form("What is the meaning of life?")
