"""Tools are plain Python functions: the schema comes from the signature, arguments are validated.

`as_tool(fn)` reads a function's type hints and docstring once: the OpenAI tool schema is the
pydantic model of its parameters, and `Tool.run(arguments)` validates a call's arguments against
that model before calling the function (sync or async). Every way a call can fail — an unknown
tool, arguments that are not JSON, a missing or mistyped argument, the function raising — becomes a
`ToolError` whose message is one line for the model to read; nothing else escapes.

A call that does not answer within its timeout (`TOOL_TIMEOUT_S` unless the episode or the tool
says otherwise) is abandoned with a `ToolTimeout`, and the episode goes on. An async tool is
cancelled at its timeout. A sync tool runs on a daemon thread of its own, so a blocking one holds
neither the event loop nor the other episodes of its group; Python cannot stop a thread, so a sync
call that never returns keeps its thread until the function returns or the process exits (the
`rlvr` commands exit at the end of the run; `running_tool_threads()` counts them). An async tool
that blocks the event loop itself (`time.sleep` inside `async def`) cannot be cut by anyone.

The same tools serve the one-line text protocol that a 135M model can follow:

    SEARCH: free text | second argument name:value

The verb is the tool's name (any case). Arguments named `name:value` (one word) are taken first;
the rest of the line, split at ` | `, fills the remaining parameters in signature order. A list
parameter given as text is split at commas. `text_call` renders a call back into the same line,
so a scripted policy's demonstrations read exactly as the parser expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import re
import threading
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_origin

from openai.types.chat import ChatCompletionFunctionToolParam
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from rlvr.json_types import JsonObject, as_object

MAX_ERROR_CHARS = 300
TOOL_TIMEOUT_S = 60.0  # a call's default limit: long enough for a slow search, short of a hang
THREAD_PREFIX = "rlvr tool "  # the name of a sync tool call's thread


class ToolError(Exception):
    """A failed tool call; `str(error)` is the one line the model sees."""


class ToolTimeout(ToolError):
    """A tool call that did not answer within its timeout; it was abandoned."""


def timed_out(name: str, limit: float) -> ToolTimeout:
    return ToolTimeout(f"{name}: no answer within {limit:g} s; the call was abandoned")


def running_tool_threads() -> int:
    """Sync tool calls still running on their threads (abandoned ones included)."""
    return sum(t.name.startswith(THREAD_PREFIX) for t in threading.enumerate())


async def _in_thread(fn: Callable[..., Any], kwargs: Mapping[str, object], name: str) -> Any:
    """`fn(**kwargs)` on a daemon thread of its own, awaited without blocking the loop; when
    the awaiting is cancelled the thread is left to finish alone and its result is dropped."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not done.done():
            done.set_result(value) if ok else done.set_exception(value)

    def work() -> None:
        try:
            value, ok = context.run(fn, **kwargs), True
        except Exception as error:
            value, ok = error, False
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(settle, ok, value)

    threading.Thread(target=work, name=f"{THREAD_PREFIX}{name}", daemon=True).start()
    return await done


async def _call(fn: Callable[..., Any], kwargs: Mapping[str, object], name: str) -> Any:
    """An async function awaited here, a sync one on its own thread (module docstring)."""
    result = fn(**kwargs) if inspect.iscoroutinefunction(fn) else await _in_thread(fn, kwargs, name)
    return await result if inspect.isawaitable(result) else result


class Tool(BaseModel):
    """One tool: its name, what the model is told about it, and the function behind it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    description: str
    fn: Callable[..., Any]
    arguments: type[BaseModel]  # the parameters as a pydantic model (extra keys forbidden)
    timeout_s: float | None = None  # the tool's own limit per call, over the episode's

    @property
    def params(self) -> list[str]:
        return list(self.arguments.model_fields)

    @property
    def required(self) -> list[str]:
        return [n for n, f in self.arguments.model_fields.items() if f.is_required()]

    # Shadows pydantic v1's deprecated `BaseModel.schema` classmethod: a tool's schema is the
    # OpenAI function-tool one, under the name the OpenAI and ART idioms use.
    def schema(self) -> ChatCompletionFunctionToolParam:  # type: ignore[override]
        """The OpenAI function-tool schema."""
        parameters = _strip_titles(self.arguments.model_json_schema())
        parameters["properties"] = {
            name: _without_null(value) for name, value in parameters.get("properties", {}).items()
        }
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    def validate_arguments(self, values: Mapping[str, Any]) -> BaseModel:
        try:
            return self.arguments.model_validate(dict(values))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            raise ToolError(f"{self.name}: {where}: {first['msg']}") from None

    async def run(self, values: Mapping[str, Any], timeout_s: float | None = TOOL_TIMEOUT_S) -> str:
        """Validate, call, and render the result as text; any failure is a ToolError, a call
        without an answer within the tool's `timeout_s` (else the given one; None: no limit)
        a ToolTimeout."""
        parsed = self.validate_arguments(values)
        limit = self.timeout_s if self.timeout_s is not None else timeout_s
        kwargs = {name: getattr(parsed, name) for name in self.params}
        clock = asyncio.timeout(limit)
        try:
            async with clock:
                result = await _call(self.fn, kwargs, self.name)
        except ToolTimeout:  # the tool's own client timed out (an MCP call)
            raise
        except TimeoutError as error:
            if clock.expired() and limit is not None:
                raise timed_out(self.name, limit) from None
            text = " ".join(str(error).split())[:MAX_ERROR_CHARS]
            raise ToolError(f"{self.name} failed: TimeoutError: {text}") from error
        except ToolError as error:  # the tool's own words for the model
            raise ToolError(f"{self.name}: {error}") from error
        except Exception as error:  # the tool's own failure is the model's observation
            text = " ".join(str(error).split())[:MAX_ERROR_CHARS]
            raise ToolError(f"{self.name} failed: {type(error).__name__}: {text}") from error
        return render_result(result)


def render_result(result: Any) -> str:
    """A tool's result as the observation text: strings as they are, a list of strings one per
    line, pydantic models and other data as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, list | tuple) and all(isinstance(r, str) for r in result):
        return "\n".join(result) if result else "(no results)"
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    if result is None:
        return "(no result)"
    try:
        return json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


def _strip_titles(schema: Any) -> Any:
    """pydantic's schema without its generated `title` keys (noise in a small model's prompt)."""
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _without_null(schema: JsonObject) -> JsonObject:
    """An optional parameter's schema without its `null` branch and `"default": null`: it is
    optional by not being required, and the null branch costs tokens in every prompt."""
    any_of = schema.get("anyOf")
    rest = {k: v for k, v in schema.items() if k != "anyOf" and not (k == "default" and v is None)}
    branches = [b for b in any_of if b != {"type": "null"}] if isinstance(any_of, list) else []
    if not isinstance(any_of, list) or len(branches) == len(any_of):
        return rest | ({"anyOf": any_of} if "anyOf" in schema else {})
    only = as_object(branches[0], "anyOf[0]") if len(branches) == 1 else {"anyOf": branches}
    return {**only, **rest}


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The first paragraph of the docstring, and per-parameter lines of an `Args:` section."""
    doc = inspect.cleandoc(fn.__doc__ or "")
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    described: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        if line.strip().lower() in ("args:", "arguments:", "parameters:"):
            in_args = True
            continue
        if in_args:
            found = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?:\s*(.+)$", line)
            if found:
                described[found.group(1)] = found.group(2).strip()
            elif line.strip() and not line.startswith(" "):
                in_args = False
    return summary, described


def as_tool(fn: Callable[..., Any] | Tool, name: str | None = None) -> Tool:
    """A Tool from a function with type hints (an unannotated parameter is a string). Raises
    TypeError for what cannot be a tool (a lambda, `*args`), naming it."""
    if isinstance(fn, Tool):
        return fn
    tool_name = name or str(getattr(fn, "__name__", ""))
    if not tool_name.isidentifier():
        raise TypeError(f"tool {fn!r}: give it a name (a def, or as_tool(fn, name=...))")
    hints = typing.get_type_hints(fn)
    summary, described = _docstring_parts(fn)
    # name -> (annotation, default or Field), as pydantic's create_model takes them
    fields: dict[str, Any] = {}  # create_model's field definitions are Any in pydantic's own type
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {tool_name}: parameter {param.name!r} must be a named argument")
        annotation = hints.get(param.name, str)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            annotation,
            _field(default, described.get(param.name)),
        )
    arguments = create_model(
        f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid", frozen=True), **fields
    )
    return Tool(name=tool_name, description=summary or tool_name, fn=fn, arguments=arguments)


def _field(default: Any, description: str | None) -> Any:
    from pydantic import Field

    return Field(default, description=description) if description else default


def as_tools(tools: Iterable[Callable[..., Any] | Tool]) -> dict[str, Tool]:
    """Tools by name; two tools of one name are an error."""
    made: dict[str, Tool] = {}
    for fn in tools:
        tool = as_tool(fn)
        if tool.name.lower() in {n.lower() for n in made}:
            raise TypeError(f"tool {tool.name}: two tools share this name")
        made[tool.name] = tool
    return made


# --- calls ------------------------------------------------------------------------------------


class Call(BaseModel):
    """A tool call: the tool's name and its arguments (what a scripted policy returns)."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: JsonObject = {}


def parse_json_arguments(tool: Tool, arguments: str | None) -> JsonObject:
    try:
        values = json.loads(arguments or "{}", strict=False)
    except (json.JSONDecodeError, RecursionError):
        raise ToolError(f"{tool.name}: arguments are not valid JSON") from None
    if not isinstance(values, dict):
        raise ToolError(f"{tool.name}: arguments must be a JSON object")
    return values


def lookup(tools: Mapping[str, Tool], name: str | None) -> Tool:
    found = tools.get(name or "") or next(
        (t for n, t in tools.items() if n.lower() == (name or "").lower()), None
    )
    if found is None:
        raise ToolError(f"unknown tool {str(name)[:40]!r}; the tools are {', '.join(tools)}")
    return found


# --- the text protocol ----------------------------------------------------------------------------

# Markdown decoration around the verb ("**SEARCH:**", "- READ:") is tolerated.
_DECOR = r"[\s>*_`#\-]*"


def marked_line(text: str | None, verbs: Iterable[str]) -> tuple[str, str] | None:
    """The first line of `text` that starts with one of `verbs` and a colon (any case, markdown
    decoration tolerated): (the verb as written, the rest of the line — or, when the line ends at
    the colon, the next non-empty line). None when no line does. Final-answer lines
    (`ANSWER: …`) are read with it too."""
    names = "|".join(re.escape(v) for v in sorted(verbs, key=len, reverse=True))
    if not names:
        return None
    pattern = re.compile(rf"^{_DECOR}({names})[\s*_`]*[:：][\s*_`]*(.*)$", re.IGNORECASE)
    lines = (text or "").splitlines()
    for n, line in enumerate(lines):
        found = pattern.match(line)
        if found is None:
            continue
        rest = found.group(2).strip()
        if not rest:
            rest = next((later.strip() for later in lines[n + 1 :] if later.strip()), "")
        return found.group(1), rest
    return None


def find_text_call(text: str | None, tools: Mapping[str, Tool]) -> tuple[Tool, str] | None:
    """The first action line of `text`: its tool and the rest of the line. None when the text
    holds no action."""
    found = marked_line(text, tools)
    return None if found is None else (lookup(tools, found[0]), found[1])


def text_arguments(tool: Tool, rest: str) -> JsonObject:
    """The arguments of one text action line (module docstring): `name:value` first, then the
    ` | `-separated rest in signature order."""
    params = tool.params
    keyed: dict[str, str] = {}
    if params:
        named = "|".join(re.escape(p) for p in params)
        pattern = re.compile(rf"(?<![\w:])({named}):\s*(\S+)", re.IGNORECASE)
        keyed = {m.group(1).lower(): m.group(2) for m in pattern.finditer(rest)}
        rest = pattern.sub(" ", rest)
    by_lower = {p.lower(): p for p in params}
    values: JsonObject = {by_lower[k]: v for k, v in keyed.items()}
    free = [p for p in params if p not in values]
    parts = [part.strip().strip("\"'`").strip() for part in rest.split("|")]
    if len(free) == 1:  # a single free parameter takes the whole rest, bars included
        parts = [" ".join(rest.split()).strip("\"'`").strip()]
    for param, part in zip(free, parts, strict=False):
        if part:
            values[param] = part
    for param in params:
        annotation = tool.arguments.model_fields[param].annotation
        given = values.get(param)
        if isinstance(given, str) and _is_list(annotation):
            values[param] = [v.strip() for v in given.split(",") if v.strip()]
    return values


def _is_list(annotation: Any) -> bool:
    """A list parameter (or an optional one); a parameter that also takes a string keeps it."""
    if get_origin(annotation) in (list, tuple, set):
        return True
    options = typing.get_args(annotation)
    return str not in options and any(get_origin(a) in (list, tuple, set) for a in options)


def text_call(tool: Tool, arguments: Mapping[str, Any]) -> str:
    """The text action line for a call (the inverse of `text_arguments`): required arguments in
    order between bars, optional ones as `name:value`. Raises ValueError for an optional value
    with spaces, which the line cannot carry."""

    def shown(value: Any) -> str:
        if isinstance(value, list | tuple):
            return ", ".join(str(v) for v in value)
        return str(value)

    required = [shown(arguments[p]) for p in tool.required if p in arguments]
    optional = [
        (p, shown(arguments[p]))
        for p in tool.params
        if p not in tool.required and arguments.get(p) is not None
    ]
    for param, value in optional:
        if not value or len(value.split()) != 1:
            raise ValueError(f"{tool.name}: optional argument {param}={value!r} must be one word")
    words = " | ".join(required) if len(tool.required) > 1 else "".join(required)
    keyed = " ".join(f"{p}:{v}" for p, v in optional)
    return f"{tool.name.upper()}: {' '.join(w for w in (words, keyed) if w)}".rstrip()


def text_instructions(tools: Mapping[str, Tool]) -> str:
    """How to call `tools` in the text protocol, for the system prompt: one line per tool, its
    usage (required arguments between bars, optional ones as `[name:VALUE]`) and what it does."""
    rows = []
    for tool in tools.values():
        required = " | ".join(tool.required)
        optional = " ".join(f"[{p}:VALUE]" for p in tool.params if p not in tool.required)
        usage = f"{tool.name.upper()}: {' '.join(w for w in (required, optional) if w)}"
        rows.append(f"{usage} - {tool.description}")
    return "Reply with one tool line, or with your final answer. Tools:\n" + "\n".join(rows)
