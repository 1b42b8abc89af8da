"""Tool-call parsing (no model): the shapes a small model emits, and everything else as content."""

import json

import pytest

from rlvr.engine.toolcalls import call_prefix, parse_tool_calls

TOOLS = {"add", "search"}


@pytest.mark.parametrize(
    ("text", "calls", "content"),
    [
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
            [("add", {"a": 1, "b": 2})],
            None,
        ),
        (
            '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
            [("add", {"a": 1})],
            None,
        ),
        # closing tag cut off at the end of the reply
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}', [("search", {"q": "x"})], None),
        # two calls with text around them
        (
            'Sure.<tool_call>{"name": "add", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "search", "arguments": {"q": "y"}}</tool_call> done',
            [("add", {}), ("search", {"q": "y"})],
            "Sure. done",
        ),
        # arguments given as a JSON string, and `parameters` instead of `arguments`
        (
            '<tool_call>{"name": "add", "arguments": "{\\"a\\": 3}"}</tool_call>',
            [("add", {"a": 3})],
            None,
        ),
        ('{"name": "add", "parameters": {"a": 5}}', [("add", {"a": 5})], None),
        # bare JSON with text before it, fenced JSON, a list of calls
        ('I will add. {"name": "add", "arguments": {"a": 1}}', [("add", {"a": 1})], "I will add."),
        (
            '```json\n{"name": "search", "arguments": {"q": "z"}}\n```',
            [("search", {"q": "z"})],
            None,
        ),
        (
            '[{"name": "add", "arguments": {}}, {"name": "search", "arguments": {}}]',
            [("add", {}), ("search", {})],
            None,
        ),
        # raw newline inside a string (strict=False)
        ('{"name": "search", "arguments": {"q": "a\nb"}}', [("search", {"q": "a\nb"})], None),
    ],
)
def test_parses_calls(text: str, calls: list[tuple[str, dict]], content: str | None) -> None:
    reply = parse_tool_calls(text, TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in reply.calls] == calls
    assert reply.content == content


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 3.",
        "",
        '<tool_call>{"name": "add", "arguments": 2, "type": "function"',  # arguments not an object
        "<tool_call>not json</tool_call>",
        '<tool_call>{"name": "unknown_tool", "arguments": {}}</tool_call>',  # not an offered tool
        '{"name": "add", "arguments": [1, 2]}',
        '{"answer": 3}',  # JSON, but not a call
        '{"tool": {"name": "add", "arguments": {}}}',  # a call nested in other JSON is not a call
        '<tool_call>{"name": "add", "arguments": {}}</tool_call><tool_call>oops</tool_call>',
        '{"name": "add", "arguments": "{not json"}',
    ],
)
def test_everything_else_is_plain_content(text: str) -> None:
    reply = parse_tool_calls(text, TOOLS)
    assert reply.calls == []
    assert reply.content == text


def test_without_a_tool_list_any_name_is_accepted() -> None:
    reply = parse_tool_calls('{"name": "anything", "arguments": {}}', None)
    assert [c.name for c in reply.calls] == ["anything"]


@pytest.mark.parametrize("name", ["add", 'we"ird'])
def test_forced_prefix_completes_into_a_parsable_call(name: str) -> None:
    text = call_prefix(name) + '{"a": 1}}</tool_call>'
    reply = parse_tool_calls(text, {name})
    assert [(c.name, json.loads(c.arguments)) for c in reply.calls] == [(name, {"a": 1})]
