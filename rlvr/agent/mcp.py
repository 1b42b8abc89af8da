"""An MCP server's tools as tool-agent tools: `rlvr.mcp_tools`.

    weather = rlvr.mcp_tools(command=["python", "weather_server.py"], env={"UNITS": "metric"})
    search = rlvr.mcp_tools(url="http://127.0.0.1:8000/mcp")
    trajectory = await rlvr.tool_episode(model, item, messages, [*weather, *search], sampling)

`mcp_tools` starts the server (stdio: a child process; streamable HTTP: a session with a running
server), lists its tools and returns them as `Tool`s: the schema the model is shown is the
server's own `inputSchema`, arguments are validated against it before the call (so the text
protocol works too), and each call goes through the official `mcp` client. A call that fails —
the server's own error result, a timeout, a server that went away — is a one-line observation,
as for any tool; a call without an answer within `call_timeout_s` is cancelled and its
observation says so (a `ToolTimeout`, counted as the episode's `tool_timeouts`). A server that fails to start, or an `include` naming a tool the server does not
have, is one line (`McpError`, a ConfigError: exit 2 when the task is built).

Lifetime: the client runs on a thread of its own (its own event loop), so the server is started
once, where `mcp_tools` is called — in a task's `make`, once per run — and every concurrent
episode of the run shares its one session. It is stopped when the run that built the task ends
(rlvr.lifetime), by `close()` (or `with`), when the returned object and its tools are no longer
referenced, and at interpreter exit; a stdio server is also killed by Linux when the run dies without cleanup
(`rlvr/agent/mcp_launch.py`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import os
import shlex
import sys
import tempfile
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.shared_params import FunctionParameters
from pydantic import BaseModel, ConfigDict, Field, create_model

from rlvr.agent.tools import MAX_ERROR_CHARS, Tool, ToolError, timed_out
from rlvr.config import ConfigError
from rlvr.json_types import JsonObject
from rlvr.lifetime import close_with_the_run

LAUNCHER = Path(__file__).with_name("mcp_launch.py")
REQUEST_TIMEOUT = 408  # the code of the SDK's error for a call without an answer in time
STOP_TIMEOUT_S = 10.0  # the SDK closes stdin, waits 2 s, then SIGTERM and SIGKILL
# JSON Schema type -> the annotation its values validate as
_JSON_TYPES: dict[str, type[str | int | float | bool | JsonObject]] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": JsonObject,
}


class McpError(ConfigError):
    """An MCP server that cannot serve the run (it did not start, it lacks a named tool); the
    message is one line naming the server."""


def _one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return " ".join(text.split())[:limit]


# --- schemas --------------------------------------------------------------------------------------


def _annotation(schema: Mapping[str, Any]) -> Any:
    """A JSON-schema property as a Python type; unions, enums' shapes and the rest are left to
    the server to check (Any)."""
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        inner = _annotation(items) if isinstance(items, Mapping) else Any
        return list[inner]  # type: ignore[valid-type]  # a type built at run time
    return _JSON_TYPES.get(kind, Any) if isinstance(kind, str) else Any


def arguments_model(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A pydantic model of a tool's `inputSchema` (extra keys forbidden unless the schema allows
    them), for validating a call before it is sent and for the text protocol."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields: dict[str, Any] = {}  # pydantic's create_model takes its field definitions as Any
    for key, prop in properties.items():
        prop = prop if isinstance(prop, Mapping) else {}
        default = ... if key in required else None
        annotation = _annotation(prop)
        annotation = annotation if key in required else annotation | None
        fields[f"p_{key}" if not key.isidentifier() else key] = (
            annotation,
            Field(default, alias=key, description=prop.get("description")),
        )
    extra: Literal["allow", "forbid"] = (
        "allow" if schema.get("additionalProperties") is True else "forbid"
    )
    return create_model(
        f"{name}_arguments",
        __config__=ConfigDict(extra=extra, frozen=True, populate_by_name=True),
        **fields,
    )


class McpTool(Tool):
    """A tool served by an MCP server: shown with the server's own schema."""

    parameters: FunctionParameters

    def schema(self) -> ChatCompletionFunctionToolParam:  # type: ignore[override]  # see Tool.schema
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def observation(result: Any) -> str:
    """A `CallToolResult` as text: its text parts, other parts by kind, else its structured
    content. An error result raises ToolError (one line) for the model to read."""
    from mcp.types import TextContent

    parts = [c.text if isinstance(c, TextContent) else f"[{c.type}]" for c in result.content]
    text = "\n".join(parts)
    if not text and result.structuredContent is not None:
        text = json.dumps(result.structuredContent, ensure_ascii=False)
    if result.isError:
        raise ToolError(_one_line(text) or "the server reported an error")
    return text or "(no result)"


# --- the client thread ----------------------------------------------------------------------------

Transport = Callable[[Path], contextlib.AbstractAsyncContextManager[tuple[Any, Any]]]


class _Client:
    """The MCP session on a thread of its own: `start()` blocks until the server's tools are
    listed (or raises McpError), `call()` may be awaited from any event loop, `stop()` is
    idempotent and synchronous (usable from atexit). The thread refers to this object only,
    never to the `_Handle` the tools hold, so dropping those stops the server."""

    def __init__(self, label: str, transport: Transport, call_timeout_s: float) -> None:
        self.label, self._transport, self.call_timeout_s = label, transport, call_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._stopping: asyncio.Event | None = None
        self._ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, name=f"mcp {label}", daemon=True)
        fd, name = tempfile.mkstemp(prefix="rlvr-mcp-", suffix=".log")
        os.close(fd)
        self.log = Path(name)

    def start(self, timeout_s: float) -> list[Any]:
        self._thread.start()
        try:
            return self._ready.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            reason = f"no tool list within {timeout_s:.0f} s"
        except Exception as error:
            cause = _innermost(error)
            reason = f"failed to start: {_one_line(f'{type(cause).__name__}: {cause}')}"
        tail = self._tail()  # read before stop() removes the log
        self.stop()
        raise McpError(f"MCP server {self.label}: {reason}{tail}")

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
            if lines:
                return f"; its stderr: {_one_line(lines[-1], 200)}"
        return ""

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from mcp import ClientSession

        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with (
                self._transport(self.log) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                listed = await _all_tools(session)
                self._session = session
                self._ready.set_result(listed)
                await self._stopping.wait()
        except BaseException as error:  # the starter reads it; after start, stop() was asked
            if not self._ready.done():
                self._ready.set_exception(error)
        finally:
            self._session = None

    async def call(self, name: str, arguments: Mapping[str, object]) -> Any:
        """One tool call, awaited from the caller's loop; the result is a `CallToolResult`."""
        session, loop = self._session, self._loop
        if session is None or loop is None or loop.is_closed():
            raise ToolError(f"the MCP server {self.label} is not running")
        from mcp.shared.exceptions import McpError as SdkError

        call = session.call_tool(
            name, arguments, read_timeout_seconds=timedelta(seconds=self.call_timeout_s)
        )
        # Cancelling this await (the episode's timeout) cancels the call on the client's loop.
        try:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, loop))
        except SdkError as error:
            if error.error.code == REQUEST_TIMEOUT:
                raise timed_out(name, self.call_timeout_s) from None
            raise

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(stopping.set)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            self.log.unlink()


def _innermost(error: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio's task groups wrap the SDK's errors)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


async def _all_tools(session: Any) -> list[Any]:
    tools, cursor = [], None
    while True:
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools


_LIVE: weakref.WeakSet[_Client] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for client in list(_LIVE):
        client.stop()


# --- transports -----------------------------------------------------------------------------------


def stdio_transport(
    command: Sequence[str], env: Mapping[str, str] | None, cwd: str | Path | None
) -> Transport:
    """The SDK's stdio client, the command started through `mcp_launch.py` (dies with us). Its
    environment is the SDK's safe default (HOME, PATH, USER, ...) plus `env`."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(LAUNCHER), str(os.getpid()), *command],
        env=dict(env or {}),
        cwd=cwd,
    )

    @contextlib.asynccontextmanager
    async def open_stdio(log: Path) -> AsyncIterator[tuple[Any, Any]]:
        with log.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                yield read, write

    return open_stdio


def http_transport(url: str, headers: Mapping[str, str] | None) -> Transport:
    """The SDK's streamable HTTP client."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    @contextlib.asynccontextmanager
    async def open_http(log: Path) -> AsyncIterator[tuple[Any, Any]]:
        async with (
            create_mcp_http_client(headers=dict(headers or {})) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
        ):
            yield read, write

    return open_http


# --- the public object ----------------------------------------------------------------------------


class _Handle:
    """What the tools and McpTools hold: when none of them is referenced any more, the handle
    is collected and the server stopped (a finalizer on it calls `_Client.stop`)."""

    def __init__(self, client: _Client) -> None:
        self.client = client


class McpTools(Sequence[Tool]):
    """An MCP server's tools (a sequence of `Tool`s: pass it, or some of it, to
    `rlvr.tool_episode`). `close()` stops the server; so does leaving `with`."""

    def __init__(self, handle: _Handle, tools: list[Tool]) -> None:
        self._handle, self._tools = handle, tools
        self.server = handle.client.label

    def __getitem__(self, index: Any) -> Any:
        return self._tools[index]

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self._tools]

    def close(self) -> None:
        self._handle.client.stop()

    def __enter__(self) -> McpTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"McpTools({self.server}: {', '.join(self.names)})"


def _as_tool(handle: _Handle, listed: Any) -> McpTool:
    name = listed.name
    schema = dict(listed.inputSchema or {"type": "object", "properties": {}})
    model = arguments_model(name, schema)
    aliases = {field: info.alias or field for field, info in model.model_fields.items()}

    async def call(**values: Any) -> str:
        arguments = {aliases[k]: v for k, v in values.items() if v is not None}
        return observation(await handle.client.call(name, arguments))

    return McpTool(
        name=name,
        description=_one_line(listed.description or name, 1000),
        fn=call,
        arguments=model,
        parameters=schema,
        timeout_s=handle.client.call_timeout_s,
    )


def mcp_tools(
    command: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    include: Sequence[str] | None = None,
    startup_timeout_s: float = 60.0,
    call_timeout_s: float = 60.0,
) -> McpTools:
    """Start an MCP server and return its tools (module docstring): `command` (a stdio server,
    with `env` added to a safe default environment, in `cwd`) or `url` (a streamable HTTP
    server, with `headers`). `include` offers only the named tools. Raises McpError (one line)
    when the server does not start or lacks an included tool."""
    if (command is None) == (url is None):
        raise McpError(
            "mcp_tools: give command=[...] (a stdio server) or url=... (streamable HTTP)"
        )
    if command is not None:
        if isinstance(command, str) or not command:
            raise McpError(
                f"mcp_tools: command must be a non-empty list of strings, got {command!r}"
            )
        label, transport = shlex.join(command), stdio_transport(command, env, cwd)
    else:
        assert url is not None
        label, transport = url, http_transport(url, headers)
    client = _Client(label, transport, call_timeout_s)
    _LIVE.add(client)
    listed = {t.name: t for t in client.start(startup_timeout_s)}
    wanted = list(include) if include is not None else list(listed)
    missing = [n for n in wanted if n not in listed]
    if missing:
        client.stop()
        raise McpError(
            f"MCP server {label} has no tool {', '.join(map(repr, missing))}; its tools: "
            f"{', '.join(listed) or 'none'}"
        )
    handle = _Handle(client)
    weakref.finalize(handle, client.stop)
    close_with_the_run(client.stop)  # a run that builds this task stops the server as it ends
    return McpTools(handle, [_as_tool(handle, listed[n]) for n in wanted])
