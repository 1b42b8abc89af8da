"""What the agent can do, in two protocols, and what each action shows it.

Tools protocol: OpenAI tool calls (`search_inbox`, `read_email`, `return_final_answer`).
Text protocol: one action line in the assistant's text, for models that ignore `tools`
(SmolLM2-135M answers in plain text under tool_choice=auto):

    SEARCH: keywords [from:ADDRESS] [to:ADDRESS] [after:YYYY-MM-DD] [before:YYYY-MM-DD]
    READ: email-id
    ANSWER: answer text | id, id

Both protocols parse into the same small action models; whatever the model writes, parsing returns
an action (possibly `Invalid`, whose error becomes the observation) and never raises.

Under the text and auto protocols a non-empty reply with no action line is the final answer
(`Answer.implicit`): a model that ignores the format still answers, and its answer is scored like
any other, which gives small models a graded reward instead of a wall of zeros. Under the tools
protocol such a reply is an error and the episode goes on. `turn_actions` holds these rules for
the rollout and for the check alike.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlvr.rollouts import tool_arguments
from scenarios.email.inbox import NOT_IN_INBOX, Email
from scenarios.email.store import SearchHit

MAX_ANSWER_CHARS = 500
MAX_BODY_CHARS = 1500
MAX_SOURCE_IDS = 20


class ToolName(StrEnum):
    SEARCH = "search_inbox"
    READ = "read_email"
    ANSWER = "return_final_answer"


class TextVerb(StrEnum):
    SEARCH = "SEARCH"
    READ = "READ"
    ANSWER = "ANSWER"


class Search(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    keywords: str = ""
    sender: str | None = Field(None, alias="from")
    to: str | None = None
    after: str | None = None
    before: str | None = None

    @field_validator("keywords", mode="before")
    @classmethod
    def _join_lists(cls, value: Any) -> Any:
        # Models often pass ["a", "b"] for a string parameter; the intent is clear.
        if isinstance(value, list):
            return " ".join(str(v) for v in value)
        return "" if value is None else value


class Read(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str

    @field_validator("id", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    answer: str
    source_ids: tuple[str, ...] = ()
    implicit: bool = False  # a plain reply taken as the answer (text and auto protocols)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_text(cls, value: Any) -> Any:
        if isinstance(value, int | float):
            return str(value)
        return value[:MAX_ANSWER_CHARS] if isinstance(value, str) else value

    @field_validator("source_ids", mode="before")
    @classmethod
    def _ids(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            value = re.findall(r"[\w-]+", value)
        if isinstance(value, list | tuple):
            return tuple(str(v).strip()[:40] for v in value[:MAX_SOURCE_IDS])
        return value


class Invalid(BaseModel):
    """A malformed action; `error` is shown to the model as the observation."""

    model_config = ConfigDict(frozen=True)

    error: str


Action = Search | Read | Answer | Invalid
Protocol = Literal["auto", "tools", "text"]

_ARG_MODELS: dict[str, type[Search] | type[Read] | type[Answer]] = {
    ToolName.SEARCH: Search,
    ToolName.READ: Read,
    ToolName.ANSWER: Answer,
}

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": ToolName.SEARCH.value,
            "description": "Search the inbox. Returns up to 5 emails (id, date, sender, subject, snippet), best match first.",
            "parameters": {
                "type": "object",
                "properties": {
                    "keywords": {"type": "string", "description": "words to look for"},
                    "from": {"type": "string", "description": "only emails whose sender contains this"},
                    "to": {"type": "string", "description": "only emails whose recipients contain this"},
                    "after": {"type": "string", "description": "only emails on or after this date, YYYY-MM-DD"},
                    "before": {"type": "string", "description": "only emails before this date, YYYY-MM-DD"},
                },
                "required": ["keywords"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": ToolName.READ.value,
            "description": "Read one email in full by its id.",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "string", "description": "email id, e.g. e012"}},
                "required": ["id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": ToolName.ANSWER.value,
            "description": f"Give the final answer and the ids of the emails it comes from. If the inbox does not say, answer '{NOT_IN_INBOX}'.",
            "parameters": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string"},
                    "source_ids": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["answer", "source_ids"],
            },
        },
    },
]  # fmt: skip


def parse_tool_call(name: str | None, arguments: str | None) -> Action:
    """An OpenAI tool call (function name, JSON arguments) as an action."""
    parsed = tool_arguments(name, arguments, _ARG_MODELS)
    return Invalid(error=parsed) if isinstance(parsed, str) else parsed


# One action per line; markdown decoration around the verb ("**ANSWER:**", "- READ:") is tolerated.
_ACTION_LINE = re.compile(
    r"^[\s>*_`#\-]*(SEARCH|READ|ANSWER)[\s*_`]*[:：][\s*_`]*(.*)$", re.IGNORECASE
)
_FILTER = re.compile(r"\b(from|to|after|before):\s*(\S+)", re.IGNORECASE)
_EMAIL_ID = re.compile(r"\be\d{1,4}\b", re.IGNORECASE)


def parse_text_action(text: str | None) -> Action | None:
    """The first action line in `text`, or None when the text holds no action."""
    lines = (text or "").splitlines()
    for n, line in enumerate(lines):
        found = _ACTION_LINE.match(line)
        if found is None:
            continue
        verb, rest = TextVerb(found.group(1).upper()), found.group(2).strip()
        if not rest:  # "ANSWER:" with the answer on the next non-empty line
            rest = next((later.strip() for later in lines[n + 1 :] if later.strip()), "")
        return _text_action(verb, rest)
    return None


def turn_actions(
    content: str | None, calls: list[tuple[str | None, str | None, str]], protocol: Protocol
) -> list[tuple[Action, str | None]]:
    """The actions of one assistant turn, each with the id of its tool call (None for text).

    `calls` are (function name, JSON arguments, call id). Under auto, a turn with tool calls is
    judged by them alone; without any, by its text.
    """
    if calls and protocol != "text":
        return [(parse_tool_call(name, arguments), call_id) for name, arguments, call_id in calls]
    if protocol == "tools":
        return [(Invalid(error="No tool call found. Call one of the tools."), None)]
    action = parse_text_action(content)
    if action is None and (content or "").strip():
        text = (content or "").strip()
        action = Answer(
            answer=text, source_ids=tuple(_EMAIL_ID.findall(text.lower())), implicit=True
        )
    if action is None:
        action = Invalid(error="Empty reply. Write one action line: SEARCH:, READ: or ANSWER:.")
    return [(action, None)]


def _text_action(verb: TextVerb, rest: str) -> Action:
    if verb is TextVerb.SEARCH:
        filters = {key.lower(): value for key, value in _FILTER.findall(rest)}
        keywords = _FILTER.sub(" ", rest).strip()
        return Search(
            keywords=keywords,
            sender=filters.get("from"),
            to=filters.get("to"),
            after=filters.get("after"),
            before=filters.get("before"),
        )
    if verb is TextVerb.READ:
        found = _EMAIL_ID.search(rest)
        email_id = found.group(0).lower() if found else rest.strip(" []()<>\"'`.")
        return (
            Read(id=email_id)
            if email_id
            else Invalid(error="READ: give an email id, e.g. READ: e012")
        )
    answer, bar, ids = rest.rpartition("|") if "|" in rest else (rest, "", "")
    answer = answer.strip().strip("\"'`").strip()
    if not answer:
        return Invalid(error="ANSWER: give the answer text, e.g. ANSWER: Room 4B | e012")
    return Answer(answer=answer, source_ids=_EMAIL_ID.findall(ids.lower()) if bar else ())


# --- Writing actions (the inverse of parsing: scripted agents, demonstrations) -----------------


def text_action(action: Search | Read | Answer) -> str:
    """The one-line text action that `parse_text_action` reads back as `action`. Filter values
    must be single words (dates, ids), as the parser reads them."""
    if isinstance(action, Search):
        filters = zip(
            ("from", "to", "after", "before"),
            (action.sender, action.to, action.after, action.before),
            strict=True,
        )
        words = [action.keywords, *(f"{key}:{value}" for key, value in filters if value)]
        return f"{TextVerb.SEARCH}: {' '.join(w for w in words if w)}"
    if isinstance(action, Read):
        return f"{TextVerb.READ}: {action.id}"
    return f"{TextVerb.ANSWER}: {action.answer} | {', '.join(action.source_ids)}".rstrip()


def tool_call(action: Search | Read | Answer, call_id: str) -> dict[str, Any]:
    """The OpenAI tool call that `parse_tool_call` reads back as `action`, shaped like a sampled
    call in `art.Trajectory.messages()`."""
    name, arguments = (
        (ToolName.SEARCH, action.model_dump(by_alias=True, exclude_none=True))
        if isinstance(action, Search)
        else (ToolName.READ, action.model_dump())
        if isinstance(action, Read)
        else (ToolName.ANSWER, action.model_dump(include={"answer", "source_ids"}))
    )
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name.value, "arguments": json.dumps(arguments)},
    }


# --- Observations ---------------------------------------------------------------------------------


def show_hits(hits: list[SearchHit]) -> str:
    if not hits:
        return "No emails match. Try other keywords."
    lines = [
        f"[{h.id}] {h.date:%Y-%m-%d} | {h.sender} | {h.subject} | {' '.join(h.snippet.split())}"
        for h in hits
    ]
    return f"{len(hits)} emails found:\n" + "\n".join(lines)


def show_email(email: Email) -> str:
    body = email.body if len(email.body) <= MAX_BODY_CHARS else email.body[:MAX_BODY_CHARS] + " ..."
    header = [
        f"[{email.id}]",
        f"From: {email.sender}",
        f"To: {', '.join(email.to)}",
        *([f"Cc: {', '.join(email.cc)}"] if email.cc else []),
        f"Date: {email.date:%Y-%m-%d %H:%M}",
        f"Subject: {email.subject}",
    ]
    return "\n".join(header) + "\n\n" + body
