"""What a tool episode costs in the model's own tokens, part by part and turn by turn.

`episode_tokens(trajectory, tokenizer)` renders an episode with the tokenizer's chat template,
message by message, and splits its tokens into the parts a prompt is made of: the task's system
prompt, the tool protocol (the text instructions appended to it, or the tool schemas the template
renders), the question, each tool's observations and the model's replies. Per turn it gives the
request's prompt (what an engine without a prefix cache prefills), the part of it that is new
since the turn before (what a prefix cache still prefills) and the reply. `shared_prefix` is the
longest token prefix a set of prompts has in common: the rollouts of one group share their whole
first prompt, the items of a task share what comes before the first item-specific token.

The figures are exact for the tokenizer given: ChatML-style templates open every message with a
special token, so a message's tokens do not depend on its neighbours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import art
from pydantic import BaseModel, ConfigDict

from rlvr.agent.tools import marked_line


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer this module uses."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


class TurnTokens(BaseModel):
    """One assistant turn of an episode."""

    model_config = ConfigDict(frozen=True)

    prompt: int  # the request's prompt as rendered: what an engine without a prefix cache prefills
    new: int  # of it, the tokens the previous request did not have (last reply + observations)
    reply: int  # the sampled (or scripted) reply, with its role header and end-of-turn token
    observation: int  # the observations that answer this turn's calls (0 after the final reply)


class EpisodeTokens(BaseModel):
    """One episode's tokens by part (module docstring)."""

    model_config = ConfigDict(frozen=True)

    system: int  # the task's system turn, without the tool protocol
    protocol: int  # the text protocol's instructions, or the rendered tool schemas
    question: int  # the first user message (with the evidence, where a level shows it)
    observations: dict[str, int]  # per tool: the observations answering its calls
    replies: int
    sequence: int  # the whole episode rendered: what training forwards and back-propagates
    first_prompt: tuple[int, ...]  # the first request's token ids (shared by a group's rollouts)
    turns: tuple[TurnTokens, ...]

    @property
    def prefill(self) -> int:
        """Prompt tokens over all turns without any prefix cache."""
        return sum(t.prompt for t in self.turns)

    @property
    def observation_total(self) -> int:
        return sum(self.observations.values())


def rendered(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    generation: bool = False,
) -> list[int]:
    """The token ids of `messages` rendered by the chat template (with the assistant prompt when
    `generation`)."""
    ids = tokenizer.apply_chat_template(
        list(messages),
        tools=None if tools is None else list(tools),
        tokenize=True,
        add_generation_prompt=generation,
    )
    return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)


def shared_prefix(prompts: Iterable[Sequence[int]]) -> int:
    """The length of the longest token prefix all `prompts` share (0 for none)."""
    rows = list(prompts)
    if not rows:
        return 0
    first = rows[0]
    length = min(len(r) for r in rows)
    for n in range(length):
        if any(r[n] != first[n] for r in rows[1:]):
            return n
    return length


def called_tool(message: Mapping[str, Any], tools: Iterable[str]) -> str:
    """The tool an assistant message calls: its first tool call, else its text action line."""
    calls = message.get("tool_calls") or []
    if calls:
        return str((calls[0].get("function") or {}).get("name") or "?")
    content = message.get("content")
    found = marked_line(content if isinstance(content, str) else None, tools)
    return found[0].lower() if found else "?"


def episode_tokens(
    trajectory: art.Trajectory,
    tokenizer: ChatTokenizer,
    protocol_text: str = "",
    tool_names: Iterable[str] = (),
) -> EpisodeTokens:
    """The episode's tokens by part and by turn. `protocol_text` is the part of the system
    message that is the tool protocol (`rlvr.agent.text_instructions`), counted apart from the
    task's system prompt; under the tools protocol the schemas are counted as the protocol.
    `tool_names` name the text protocol's verbs (observations are counted per tool)."""
    messages = trajectory.messages()
    tools = trajectory.tools or None
    names = [str(t["function"]["name"]) for t in tools or []] or list(tool_names)

    def length(upto: int, generation: bool = False) -> int:
        return len(rendered(tokenizer, messages[:upto], tools, generation))

    system = messages[0]
    bare = {**system, "content": str(system.get("content") or "").replace(protocol_text, "")}
    bare_system = len(rendered(tokenizer, [bare], None))
    ends = [0, *(length(n) for n in range(1, len(messages) + 1))]
    observations: dict[str, int] = {}
    turns: list[TurnTokens] = []
    previous_prompt = 0
    for n, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = length(n, generation=True)
        after = next(
            (k for k in range(n + 1, len(messages)) if messages[k]["role"] == "assistant"),
            len(messages),
        )
        seen = ends[after] - ends[n + 1]
        tool = called_tool(message, names)
        if seen:
            observations[tool] = observations.get(tool, 0) + seen
        turns.append(
            TurnTokens(
                prompt=prompt,
                new=prompt - previous_prompt,
                reply=ends[n + 1] - ends[n],
                observation=seen,
            )
        )
        previous_prompt = prompt
    return EpisodeTokens(
        system=bare_system,
        protocol=ends[1] - bare_system,
        question=ends[2] - ends[1] if len(messages) > 1 else 0,
        observations=observations,
        replies=sum(t.reply for t in turns),
        sequence=ends[-1],
        first_prompt=tuple(rendered(tokenizer, messages[:2], tools, generation=True)),
        turns=tuple(turns),
    )
