"""A multi-turn tool episode, the one loop every agent task shares.

`tool_episode` plays: the task's messages, then up to `max_turns` assistant turns. A turn that
calls tools gets one observation per call (a `tool` message for an OpenAI tool call, a user
message for a text action) and the episode goes on; the first turn without a tool call is the
final reply and ends it (`rlvr.completion_text` returns it). A turn cut at `max_tokens` that
calls a tool also ends it, without running the call: the cut turn is not the action the model
meant (its arguments may be cut short), and a policy that rambles would otherwise repeat cut turns
up to the turn limit while the rest of its group waits. Failed calls — an unknown tool, bad
arguments, a tool that raises — are one-line errors the model reads; nothing raises out of the
episode except a first request the policy endpoint refuses (a setup error, not the model's). A
call without an answer within `tool_timeout_s` is abandoned (`rlvr.agent.tools`): its observation
says so, it is counted (`tool_timeouts`), and the episode goes on without holding its group.

Protocols: `tools` sends the OpenAI tool schemas and executes `tool_calls`; `text` shows the
one-line action protocol (`rlvr.agent.tools`) in the system prompt and parses the reply; `auto`
does both and uses the tool calls when the model emits them. The trajectory holds exactly what
the model saw: the instructions, the schemas (`trajectory.tools`), every sampled `Choice` (its
logprobs are what ART trains on) and every observation.

A `script` in place of the model plays the same episode with a scripted policy — its turns are
plain dict messages — which is how a task makes demonstrations for the supervised warm start.

`observation_tokens=N` holds every observation within N tokens (`rlvr.agent.budget`): a longer
one is cut around the terms of the call — and of the episode's calls before it, so a `read`
keeps the window around what the last search asked for — and ends with a marker saying how much
was cut. Every episode counts its observations' tokens and the observations it cut.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Literal, TypedDict, cast

import art
import openai
from art.types import MessageOrChoice, Messages, MessagesAndChoices, Tools
from openai.types.chat import ChatCompletionAssistantMessageParam
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict

from rlvr.agent.budget import (
    MIN_BUDGET,
    Asked,
    Fitted,
    TokenCounter,
    approx_tokens,
    call_terms,
    fit,
)
from rlvr.agent.tools import (
    TOOL_TIMEOUT_S,
    Call,
    Tool,
    ToolError,
    ToolTimeout,
    as_tools,
    find_text_call,
    lookup,
    parse_json_arguments,
    text_arguments,
    text_call,
    text_instructions,
)
from rlvr.json_types import JsonObject
from rlvr.types import Item, Sampling

Protocol = Literal["auto", "tools", "text"]
PROTOCOLS: tuple[str, ...] = ("auto", "tools", "text")
LAST_TURN_NOTE = "One turn left: give your final answer now."

ScriptTurn = Call | list[Call] | str
Script = Callable[[Sequence[Mapping[str, Any]], int], ScriptTurn | Awaitable[ScriptTurn]]
"""A scripted policy: given the messages so far and the turn's number, the turn's tool call(s),
or its final reply."""


class EpisodeEnd(StrEnum):
    """Why an episode ended (trajectory.metadata["end"])."""

    REPLIED = "replied"  # a turn without a tool call: the final reply
    TURN_LIMIT = "turn_limit"  # max_turns turns, all calling tools
    CUT_CALL = "cut_call"  # a turn cut at max_tokens called a tool: the call was not run
    POLICY_ERROR = "policy_error"  # the endpoint refused a later turn (e.g. context too long)


class EpisodeMetric(StrEnum):
    """Per-episode metrics (the loop reports their means as rollout/<name>)."""

    TURNS = "turns"
    TOOL_CALLS = "tool_calls"
    TOOL_ERRORS = "tool_errors"  # unknown tools, bad arguments, tools that raised or timed out
    TOOL_TIMEOUTS = "tool_timeouts"  # calls abandoned without an answer within their timeout
    TRUNCATED = "truncated"  # a sampled turn hit max_tokens
    TURN_LIMIT = "turn_limit"  # ended at max_turns without a final reply
    CUT_CALL = "cut_call"  # ended at a turn cut at max_tokens that called a tool
    OBSERVATION_TOKENS = "observation_tokens"  # tokens of the observations as shown
    TRIMMED_OBSERVATIONS = "trimmed_observations"  # observations cut to observation_tokens
    OBSERVATION_TOKENS_CUT = "observation_tokens_cut"  # tokens cut from them


CALLS_PREFIX = "calls/"  # + tool name: that tool's successful calls in the episode


class _Counts:
    """Mutable tallies of one episode (never leave `tool_episode`), and the terms its calls
    asked for."""

    def __init__(self, tools: Iterable[str]) -> None:
        self.turns = self.calls = self.errors = self.timeouts = 0
        self.truncated = False
        self.by_tool = dict.fromkeys(tools, 0)
        self.observation_tokens = self.trimmed = self.cut = 0
        self.asked: list[str] = []  # the terms of the episode's calls, the latest first

    async def call(
        self,
        tools: Mapping[str, Tool],
        name: str | None,
        arguments: str | None,
        rest: str | None,
        budget: int | None,
        count: TokenCounter,
        timeout_s: float | None = TOOL_TIMEOUT_S,
    ) -> str:
        """Run one call, tally it, and return its observation as the model sees it: cut to the
        budget around its terms (and, where its own find nothing, those of earlier calls)."""
        done = await played_call(tools, name, arguments, rest, timeout_s)
        observation, ran = done.observation, done.tool
        self.calls += 1
        self.errors += ran is None
        self.timeouts += done.timed_out
        if ran is not None:
            self.by_tool[ran] += 1
        terms = asked_terms(tools, name, arguments, rest)
        asked = Asked(terms=tuple(terms), earlier=tuple(self.asked))
        self.asked = list(dict.fromkeys([*terms, *self.asked]))
        shown = shown_observation(observation, asked, budget, count)
        self.observation_tokens += shown.tokens
        self.trimmed += shown.cut > 0
        self.cut += shown.cut
        return shown.text

    def metrics(self, end: EpisodeEnd) -> dict[str, float]:
        """The episode's metrics (module docstring), for its trajectory."""
        return {
            EpisodeMetric.TURNS: float(self.turns),
            EpisodeMetric.TOOL_CALLS: float(self.calls),
            EpisodeMetric.TOOL_ERRORS: float(self.errors),
            EpisodeMetric.TOOL_TIMEOUTS: float(self.timeouts),
            EpisodeMetric.TRUNCATED: float(self.truncated),
            EpisodeMetric.TURN_LIMIT: float(end is EpisodeEnd.TURN_LIMIT),
            EpisodeMetric.CUT_CALL: float(end is EpisodeEnd.CUT_CALL),
            EpisodeMetric.OBSERVATION_TOKENS: float(self.observation_tokens),
            EpisodeMetric.TRIMMED_OBSERVATIONS: float(self.trimmed),
            EpisodeMetric.OBSERVATION_TOKENS_CUT: float(self.cut),
            **{f"{CALLS_PREFIX}{name}": float(n) for name, n in self.by_tool.items()},
        }


def chat(system: str, user: str) -> Messages:
    """The usual start of an episode: a system prompt and the user's message."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def with_instructions(messages: Messages, text: str) -> Messages:
    """`messages` with `text` appended to the system message (one is added when there is none)."""
    head = messages[0] if messages else None
    if head is not None and head["role"] == "system":
        said = head["content"] if isinstance(head["content"], str) else ""
        return [{**head, "content": f"{said}\n\n{text}".strip()}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def turn_calls(
    message: Mapping[str, Any], tools: Mapping[str, Tool], protocol: Protocol
) -> list[tuple[str | None, str | None, str | None, str | None]]:
    """The calls of one assistant message as (tool name, JSON arguments, text rest, call id).
    Under `auto`, a turn with tool calls is judged by them alone; without any, by its text. An
    empty list: the message is the final reply."""
    calls: list[tuple[str | None, str | None, str | None, str | None]] = [
        (
            (call.get("function") or {}).get("name"),
            (call.get("function") or {}).get("arguments"),
            None,
            str(call.get("id") or f"call_{n}"),
        )
        for n, call in enumerate(message.get("tool_calls") or [])
    ]
    if calls and protocol != "text":
        return calls
    if protocol == "tools":
        return []
    content = message.get("content")
    try:
        found = find_text_call(content if isinstance(content, str) else None, tools)
    except ToolError:
        return []
    return [] if found is None else [(found[0].name, None, found[1], None)]


def call_values(
    tools: Mapping[str, Tool], name: str | None, arguments: str | None, rest: str | None
) -> tuple[Tool, JsonObject]:
    """The tool a call names and its argument values, as written (not yet validated); raises
    ToolError for an unknown tool or unreadable arguments."""
    tool = lookup(tools, name)
    if rest is not None:
        return tool, text_arguments(tool, rest)
    return tool, parse_json_arguments(tool, arguments)


class PlayedCall(BaseModel):
    """One call as played: its observation, the tool that ran (None: the call failed), and
    whether it was abandoned at its timeout."""

    model_config = ConfigDict(frozen=True)

    observation: str
    tool: str | None
    timed_out: bool = False


async def played_call(
    tools: Mapping[str, Tool],
    name: str | None,
    arguments: str | None,
    rest: str | None,
    timeout_s: float | None = TOOL_TIMEOUT_S,
) -> PlayedCall:
    """Play one call; never raises."""
    try:
        tool, values = call_values(tools, name, arguments, rest)
        return PlayedCall(observation=await tool.run(values, timeout_s), tool=tool.name)
    except ToolError as error:
        timed_out = isinstance(error, ToolTimeout)
        return PlayedCall(observation=f"Error: {error}", tool=None, timed_out=timed_out)


async def run_call(
    tools: Mapping[str, Tool],
    name: str | None,
    arguments: str | None,
    rest: str | None,
    timeout_s: float | None = TOOL_TIMEOUT_S,
) -> tuple[str, str | None]:
    """One call's observation, and the tool's name when it ran (None: the call failed); never
    raises."""
    done = await played_call(tools, name, arguments, rest, timeout_s)
    return done.observation, done.tool


def asked_terms(
    tools: Mapping[str, Tool], name: str | None, arguments: str | None, rest: str | None
) -> list[str]:
    """The search terms of a call's arguments ([] when they cannot be read)."""
    try:
        return call_terms(call_values(tools, name, arguments, rest)[1].values())
    except ToolError:
        return []


def shown_observation(text: str, asked: Asked, budget: int | None, count: TokenCounter) -> Fitted:
    """An observation as the model sees it: whole without a budget, else fitted to it."""
    return fit(text, budget, asked, count) if budget else Fitted(text=text, tokens=count(text))


def scripted_message(
    turn: ScriptTurn, tools: Mapping[str, Tool], protocol: Protocol, number: int
) -> ChatCompletionAssistantMessageParam:
    """A scripted turn as the assistant message a model would have written: tool calls under
    `tools`, text action lines otherwise (auto shows the text protocol, so it gets text)."""
    if isinstance(turn, str):
        return {"role": "assistant", "content": turn}
    calls = [turn] if isinstance(turn, Call) else turn
    if protocol == "tools":
        import json

        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{number}_{n}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for n, c in enumerate(calls)
            ],
        }
    lines = [text_call(lookup(tools, c.name), c.arguments) for c in calls[:1]]
    return {"role": "assistant", "content": "\n".join(lines)}


def observed(text: str, call_id: str | None) -> MessageOrChoice:
    """A call's observation as the next message: a tool message answering `call_id`, or a user
    message under the text protocol (its calls have no id)."""
    if call_id is None:
        return {"role": "user", "content": text}
    return {"role": "tool", "tool_call_id": call_id, "content": text}


class _Policy:
    """Who plays the assistant's turns of one episode: the model through its OpenAI client (the
    tool schemas offered when the trajectory carries them), or a script."""

    def __init__(
        self,
        model: art.Model[Any, Any] | None,
        script: Script | None,
        tools: Mapping[str, Tool],
        protocol: Protocol,
        sampling: Sampling,
        schemas: Tools | None,
    ) -> None:
        self.model, self.script, self.tools = model, script, tools
        self.protocol, self.sampling, self.schemas = protocol, sampling, schemas

    async def reply(self, history: Messages, turn: int) -> MessageOrChoice:
        if self.script is not None:
            made = self.script(history, turn)
            planned = await made if inspect.isawaitable(made) else made
            message = scripted_message(planned, self.tools, self.protocol, turn)
            return cast("MessageOrChoice", message)
        assert self.model is not None  # check_settings: a model or a script
        # No `tools` key at all without schemas: some servers reject an empty or null one.
        offered: ToolsOffered = {"tools": self.schemas} if self.schemas else {}
        response = await self.model.openai_client().chat.completions.create(
            model=self.model.get_inference_name(self.sampling.step),
            messages=history,
            **self.sampling.request(),
            **offered,
        )
        choice: Choice = response.choices[0]
        return choice


class ToolsOffered(TypedDict, total=False):
    """The tools argument of a chat request, present only when there are tools."""

    tools: Tools


def check_settings(
    protocol: str, max_turns: int, observation_tokens: int | None, has_policy: bool
) -> None:
    """Raise ValueError, naming the setting, for episode settings that cannot be played."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if max_turns < 1:
        raise ValueError(f"max_turns={max_turns}: expected at least 1")
    if observation_tokens is not None and observation_tokens < MIN_BUDGET:
        raise ValueError(
            f"observation_tokens={observation_tokens}: expected at least {MIN_BUDGET} "
            "(or None for no budget)"
        )
    if not has_policy:
        raise ValueError("tool_episode needs a model to sample from or a script to play")


def opening(
    item: Item,
    messages: Messages,
    by_name: dict[str, Tool],
    protocol: Protocol,
    instructions: bool,
    metadata: Mapping[str, str | int | float | bool | None] | None,
) -> art.Trajectory:
    """An episode's trajectory before its first turn: the messages (the text protocol's
    instructions added unless `instructions` is False), the tools' schemas where the protocol
    offers them, and the metadata."""
    schemas = [t.schema() for t in by_name.values()]
    shown = list(messages)
    if instructions and protocol != "tools" and by_name:
        shown = with_instructions(shown, text_instructions(by_name))
    return art.Trajectory(
        messages_and_choices=cast("MessagesAndChoices", shown),  # Messages is a part of it
        tools=schemas if protocol != "text" and schemas else None,
        metadata={**(metadata or {}), "item_id": item.id, "protocol": protocol},
        reward=0.0,
    )


async def tool_episode(
    model: art.Model[Any, Any] | None,
    item: Item,
    messages: Messages,
    tools: Iterable[Callable[..., Any] | Tool],
    sampling: Sampling,
    max_turns: int = 8,
    protocol: Protocol = "auto",
    *,
    script: Script | None = None,
    instructions: bool = True,
    last_turn_note: str | None = LAST_TURN_NOTE,
    metadata: Mapping[str, str | int | float | bool | None] | None = None,
    observation_tokens: int | None = None,
    count_tokens: TokenCounter = approx_tokens,
    tool_timeout_s: float | None = TOOL_TIMEOUT_S,
) -> art.Trajectory:
    """Play one tool-using episode (module docstring) and return its `art.Trajectory`, reward
    0.0 (the scorer's job) and metrics `turns`, `tool_calls`, `tool_errors`, `tool_timeouts`,
    `truncated`,
    `turn_limit`, `cut_call`, `observation_tokens`, `trimmed_observations`,
    `observation_tokens_cut` and `calls/<tool>` (successful calls per tool). `tools` are plain
    functions (or `rlvr.agent.Tool`s); `script` replaces the model with a scripted policy;
    `instructions=False` leaves the text protocol's instructions out of the system prompt (write
    your own); `last_turn_note` is added to the observations before the last turn (small models
    rarely count turns); `metadata` is added to the trajectory's; `observation_tokens` is the
    budget of one observation (None: no budget) in the tokens of `count_tokens` (by default an
    estimate: `rlvr.agent.budget.approx_tokens`); `tool_timeout_s` is how long a call may take
    before it is abandoned (a tool's own `timeout_s`, e.g. an MCP server's `call_timeout_s`,
    comes first; None: no limit). Under `auto` a script writes text actions (the prompt shows
    them) while the schemas are offered, as a model sees it."""
    check_settings(protocol, max_turns, observation_tokens, model is not None or script is not None)
    by_name = as_tools(tools)
    trajectory = opening(item, messages, by_name, protocol, instructions, metadata)
    policy = _Policy(model, script, by_name, protocol, sampling, trajectory.tools)
    counts = _Counts(by_name)
    end = EpisodeEnd.TURN_LIMIT
    for turn in range(max_turns):
        try:
            reply = await policy.reply(trajectory.messages(), turn)
        except openai.BadRequestError:
            if turn == 0:  # the first request failing is a setup problem, not the model's
                raise
            end = EpisodeEnd.POLICY_ERROR
            break
        trajectory.messages_and_choices.append(reply)
        counts.turns += 1
        cut = isinstance(reply, Choice) and reply.finish_reason == "length"
        counts.truncated |= cut
        # The turn as ART renders it (what the model will see next, and what is trained on).
        message = trajectory.messages()[-1]
        calls = turn_calls(message, by_name, protocol)
        if not calls:
            end = EpisodeEnd.REPLIED
            break
        if cut:
            end = EpisodeEnd.CUT_CALL
            break
        note = f"\n\n{last_turn_note}" if last_turn_note and turn == max_turns - 2 else ""
        for name, arguments, rest, call_id in calls:
            observation = await counts.call(
                by_name, name, arguments, rest, observation_tokens, count_tokens, tool_timeout_s
            )
            trajectory.messages_and_choices.append(observed(observation + note, call_id))
    trajectory.metadata["end"] = end.value
    trajectory.metadata["policy"] = "scripted" if script is not None else "sampled"
    trajectory.metrics.update(counts.metrics(end))
    return trajectory


def final_reply(trajectory: art.Trajectory) -> str | None:
    """The episode's final reply, or None when it ended without one (turn limit, a cut call, a
    refused turn)."""
    if trajectory.metadata.get("end") != EpisodeEnd.REPLIED:
        return None
    from rlvr.types import completion_text

    return completion_text(trajectory)
