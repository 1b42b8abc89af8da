"""What the agent can do, in two protocols, and what each action shows it.

Text protocol (default; SmolLM2-135M ignores `tools`): one action line in the reply,

    SEARCH: keywords
    READ: passage-id (or the passage's exact title)
    ANSWER: answer

Tools protocol: OpenAI tool calls `search(query)`, `read(passage_id)`, `answer(answer)`. Under
`auto`, a turn with tool calls is judged by them, else by its text (the email task's rules).

Parsing never raises: whatever the model writes becomes an action, possibly `Invalid`, whose
error is shown to the model. Under the text and auto protocols a non-empty reply with no action
line is the final answer (`implicit`): the text after "answer is"/"Answer:" (the verifier
library's `final_answer`), else the whole reply, so a model that ignores the format still gets
graded credit (F1 falls with every extra word). Observations tag every passage they show as `[p012]`; `shown_ids` reads the tags
back, which is how the rollout and the reward agree on what was retrieved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlvr.rollouts import tool_arguments
from rlvr.verifiers import final_answer
from scenarios.multihop.corpus import Passage
from scenarios.multihop.index import Hit

MAX_ANSWER_CHARS = 300
MAX_QUERY_CHARS = 500

Protocol = Literal["auto", "tools", "text"]


class ToolName(StrEnum):
    SEARCH = "search"
    READ = "read"
    ANSWER = "answer"


class Search(BaseModel):
    model_config = ConfigDict(frozen=True)

    query: str

    @field_validator("query", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        # Models pass ["a", "b"] for a string parameter; the intent is clear.
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        return str(value)[:MAX_QUERY_CHARS] if value is not None else ""


class Read(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    ref: str = Field(alias="passage_id")  # an id, or a title (small models copy titles)

    @field_validator("ref", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    text: str = Field(alias="answer")
    implicit: bool = False  # a plain reply taken as the answer (text and auto protocols)

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if isinstance(value, int | float):
            value = str(value)
        return value[:MAX_ANSWER_CHARS] if isinstance(value, str) else value


class Invalid(BaseModel):
    """A malformed action; `error` is shown to the model as the observation."""

    model_config = ConfigDict(frozen=True)

    error: str


Action = Search | Read | Answer | Invalid

_ARG_MODELS: dict[str, type[Search] | type[Read] | type[Answer]] = {
    ToolName.SEARCH: Search,
    ToolName.READ: Read,
    ToolName.ANSWER: Answer,
}


def tool_schemas(top_k: int) -> list[dict[str, Any]]:
    """The OpenAI tools, for the tools and auto protocols."""

    def tool(name: ToolName, description: str, param: str, about: str) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": name.value,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {param: {"type": "string", "description": about}},
                    "required": [param],
                },
            },
        }

    return [
        tool(ToolName.SEARCH, f"Search the passages; returns the best {top_k} (id, title, snippet).", "query", "keywords, e.g. a name"),
        tool(ToolName.READ, "Read one passage in full.", "passage_id", "passage id, e.g. p012"),
        tool(ToolName.ANSWER, "Give the final answer: only the name or place.", "answer", "the answer"),
    ]  # fmt: skip


def parse_tool_call(name: str | None, arguments: str | None) -> Action:
    """An OpenAI tool call (function name, JSON arguments) as an action."""
    parsed = tool_arguments(name, arguments, _ARG_MODELS)
    return Invalid(error=parsed) if isinstance(parsed, str) else parsed


# One action per line; markdown decoration around the verb ("**ANSWER:**", "- READ:") is tolerated.
_ACTION_LINE = re.compile(
    r"^[\s>*_`#\-]*(SEARCH|READ|ANSWER)[\s*_`]*[:：][\s*_`]*(.*)$", re.IGNORECASE
)
PASSAGE_ID = re.compile(r"\bp\d{1,4}\b", re.IGNORECASE)
_SHOWN_TAG = re.compile(r"\[(p\d{1,4})\]")


def parse_text_action(text: str | None) -> Action | None:
    """The first action line in `text`, or None when the text holds no action."""
    lines = (text or "").splitlines()
    for n, line in enumerate(lines):
        found = _ACTION_LINE.match(line)
        if found is None:
            continue
        verb, rest = ToolName[found.group(1).upper()], found.group(2).strip()
        if not rest:  # "ANSWER:" with the answer on the next non-empty line
            rest = next((later.strip() for later in lines[n + 1 :] if later.strip()), "")
        return _text_action(verb, rest)
    return None


def _text_action(verb: ToolName, rest: str) -> Action:
    if verb is ToolName.SEARCH:
        return Search(query=rest)
    if verb is ToolName.READ:
        found = PASSAGE_ID.search(rest)
        ref = found.group(0).lower() if found else rest.strip(" []()<>\"'`.")
        return Read(ref=ref) if ref else Invalid(error="READ: give a passage id, e.g. READ: p012")
    answer = rest.split("|")[0].strip().strip("\"'`*").strip()
    if not answer:
        return Invalid(error="ANSWER: give the answer text, e.g. ANSWER: Oslo")
    return Answer(text=answer)


def turn_actions(
    content: str | None, calls: list[tuple[str | None, str | None, str]], protocol: Protocol
) -> list[tuple[Action, str | None]]:
    """The actions of one assistant turn, each with the id of its tool call (None for text).
    `calls` are (function name, JSON arguments, call id)."""
    if calls and protocol != "text":
        return [(parse_tool_call(name, arguments), call_id) for name, arguments, call_id in calls]
    if protocol == "tools":
        return [(Invalid(error="No tool call found. Call one of the tools."), None)]
    text = (content or "").strip()
    action = parse_text_action(text)
    if action is None and text:
        # "... the answer is X." -> "X."; a reply without an answer mark is the answer whole, so
        # F1 gives partial credit for a right name inside a short reply.
        marked = final_answer(text) if "answer" in text.lower() else ""
        action = Answer(text=marked or text, implicit=True)
    if action is None:
        action = Invalid(error="Empty reply. Write one action line: SEARCH:, READ: or ANSWER:.")
    return [(action, None)]


def message_actions(message: dict[str, Any], protocol: Protocol) -> list[tuple[Action, str | None]]:
    """The actions of an assistant message as `art.Trajectory.messages()` renders it (sampled
    turns, stored trajectories and the oracle's demonstrations alike)."""
    content = message.get("content")
    calls = [
        (
            (c.get("function") or {}).get("name"),
            (c.get("function") or {}).get("arguments"),
            str(c.get("id") or ""),
        )
        for c in message.get("tool_calls") or []
    ]
    return turn_actions(content if isinstance(content, str) else None, calls, protocol)


# --- Observations ---------------------------------------------------------------------------------


def show_hits(hits: list[Hit]) -> str:
    if not hits:
        return "No passages match. Try other keywords."
    return f"{len(hits)} passages found:\n" + "\n".join(
        f"[{h.id}] {h.title}: {h.snippet}" for h in hits
    )


def show_passage(passage: Passage) -> str:
    return f"[{passage.id}] {passage.title}\n{passage.text}"


def shown_ids(observations: Iterable[str]) -> set[str]:
    """The passage ids tagged in observations (search hits, passages read or shown)."""
    return {tag.lower() for text in observations for tag in _SHOWN_TAG.findall(text)}
