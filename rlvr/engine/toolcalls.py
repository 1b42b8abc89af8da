"""Tool calls parsed out of a model's text, in the shapes small models actually produce.

Accepted: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (the format rlvr's chat
template asks for; a missing closing tag at the very end is tolerated), and otherwise bare JSON
objects (or a list of them) with `name` and `arguments` (or `parameters`), fenced or not.
Anything else is plain content: parsing never raises.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_TAGGED = re.compile(
    re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.S
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)
_ARGUMENT_KEYS = ("arguments", "parameters")


class ParsedCall(BaseModel):
    """One call: the tool's name and its arguments as a JSON object string (OpenAI's shape)."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str


class ParsedReply(BaseModel):
    """The text around the calls (None when there is none) and the calls, in order."""

    model_config = ConfigDict(frozen=True)

    content: str | None
    calls: list[ParsedCall]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def call_prefix(name: str | None) -> str:
    """What a reply calling `name` starts with (any tool when None); matches the chat template."""
    if name is None:
        return TOOL_CALL_OPEN + '{"name": "'
    return TOOL_CALL_OPEN + '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '


def parse_tool_calls(text: str, tool_names: set[str] | None = None) -> ParsedReply:
    """Split `text` into content and tool calls; calls to names outside `tool_names` (when given)
    or any malformed tagged block make the whole reply plain content."""
    plain = ParsedReply(content=text, calls=[])
    if TOOL_CALL_OPEN in text:
        blocks = list(_TAGGED.finditer(text))
        calls = [_as_call(_first_json(m.group(1)), tool_names) for m in blocks]
        if not calls or any(c is None for c in calls):
            return plain
        rest = _TAGGED.sub("", text).strip()
        return ParsedReply(content=rest or None, calls=[c for c in calls if c is not None])
    for candidate, span in _json_candidates(text):
        items = candidate if isinstance(candidate, list) else [candidate]
        calls = [_as_call(item, tool_names) for item in items]
        if calls and all(c is not None for c in calls):
            rest = (text[: span[0]] + text[span[1] :]).strip()
            return ParsedReply(content=rest or None, calls=[c for c in calls if c is not None])
    return plain


def _as_call(value: object, tool_names: set[str] | None) -> ParsedCall | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    if tool_names is not None and value["name"] not in tool_names:
        return None
    key = next((k for k in _ARGUMENT_KEYS if k in value), None)
    arguments = value.get(key, {}) if key else {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, strict=False)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(name=value["name"], arguments=json.dumps(arguments, ensure_ascii=False))


def _first_json(text: str) -> object:
    """The first JSON value starting at a '{' in `text`, or None."""
    decoder = json.JSONDecoder(strict=False)
    start = text.find("{")
    while start >= 0:
        try:
            return decoder.raw_decode(text, start)[0]
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return None


def _json_candidates(text: str) -> Iterator[tuple[Any, tuple[int, int]]]:
    """(value, (start, end)) for each JSON object or list found in `text`, fences first."""
    decoder = json.JSONDecoder(strict=False)
    for fence in _FENCE.finditer(text):
        try:
            yield json.loads(fence.group(1), strict=False), fence.span()
        except json.JSONDecodeError:
            continue
    start = 0
    while start < len(text):
        if text[start] not in "{[":
            start += 1
            continue
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start += 1
            continue
        yield value, (start, end)
        start = end  # never look inside a value already decoded
