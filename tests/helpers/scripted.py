"""A scripted stand-in for `art.Model` (fault injection in tests only): each chat request gets the
next scripted turn as a real openai `ChatCompletion`, and every request is recorded. A turn is
text, a list of (tool name, JSON arguments) calls, or an exception to raise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import art
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)

Turn = str | list[tuple[str, str]] | Exception | None


class ScriptedPolicy:
    def __init__(
        self,
        turns: list[Turn],
        *,
        then: Turn = "...",
        finish_reason: str = "stop",
        cut: frozenset[int] = frozenset(),
    ) -> None:
        """`then` answers every request after the scripted turns run out; the requests numbered
        in `cut` (from 0) finish with "length", as a turn cut at max_tokens does."""
        self.turns: Iterator[Turn] = iter(turns)
        self.then = then
        self.finish_reason = finish_reason
        self.cut = cut
        self.requests: list[dict[str, Any]] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def openai_client(self) -> ScriptedPolicy:
        return self

    def get_inference_name(self, step: int | None = None) -> str:
        return f"policy@{step}"

    async def _create(self, **request: Any) -> ChatCompletion:
        self.requests.append(request)
        turn = next(self.turns, self.then)
        if isinstance(turn, Exception):
            raise turn
        finish_reason = "length" if len(self.requests) - 1 in self.cut else self.finish_reason
        calls = (
            [
                ChatCompletionMessageFunctionToolCall(
                    id=f"call{len(self.requests)}-{i}",
                    type="function",
                    function=Function(name=name, arguments=args),
                )
                for i, (name, args) in enumerate(turn)
            ]
            if isinstance(turn, list)
            else None
        )
        message = ChatCompletionMessage(
            role="assistant", content=turn if not isinstance(turn, list) else None, tool_calls=calls
        )
        return ChatCompletion(
            id="x",
            object="chat.completion",
            created=0,
            model=request["model"],
            choices=[Choice(index=0, finish_reason=finish_reason, message=message)],
        )


# What a search-and-read tool agent must survive from the model: each becomes an observation
# (an error or no match) and the episode goes on to its answer.
BAD_TURNS: list[Turn] = [
    [("read", "{not json")],
    [("search", '{"keywords": "x", "after": "next tuesday"}')],
    [("drop_table", "{}")],
    [("read", '{"id": "\'; DROP TABLE emails; --"}')],
    [("search", json.dumps({"keywords": "NEAR(a b) OR * \" '" * 500}))],
    "READ: nothing",
    "SEARCH: the of",
]


def choices(trajectory: art.Trajectory) -> list[Choice]:
    """The turns the model sampled, without the messages around them."""
    return [m for m in trajectory.messages_and_choices if isinstance(m, Choice)]
