"""An OpenAI-compatible chat endpoint for policy engines, run in a background thread.

`/v1/chat/completions` and `/v1/models` on 127.0.0.1. A request names a model as `name` (the
latest step) or `name@step` (that step's adapter), the way ART names inference models. Requests
are batched continuously (rlvr.engine.scheduler): a request joins the running decode at the next
step, and a request whose client has gone (its connection closed, or the timeout it announced
passed) is dropped there, so neither a late arrival nor an abandoned request waits for or costs
a whole pass.

Structured output: `response_format` (`json_schema`, or `json_object` with or without a schema)
constrains decoding to the schema (rlvr.engine.grammar); this is how the local judge answers.

Log-probability tokens are `token_id:<id>` so ART's tokeniser recovers the exact sampled ids;
`bytes` is the token's text as UTF-8. Errors follow OpenAI's shape: `{"error": {"message": ...}}`
with 400 (bad request), 404 (unknown model or step) or 408 (the client went away first).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCallUnion
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob, TopLogprob
from openai.types.completion_usage import CompletionUsage
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Receive, Scope, Send

from rlvr.engine.decoding import Decoder  # a trained engine's or a frozen one
from rlvr.engine.grammar import GrammarError, schema_of
from rlvr.engine.scheduler import MAX_BATCH_ROWS, ClientGone, Scheduler, Submission
from rlvr.engine.toolcalls import call_prefix, new_call_id, parse_tool_calls
from rlvr.engine.types import Sampled, SampleRow, UnknownStep
from rlvr.json_types import JsonObject, as_object

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
BATCH_WINDOW_S = 0.01  # how long the first request into an idle engine waits for company
TIMEOUT_HEADER = "x-stainless-read-timeout"
DEFAULT_MAX_TOKENS = 256  # for free text; structured output runs to its document's end
TOOLS_HEADER = "# Tools\nYou can call the functions described by these JSON schemas:\n"
TOOLS_FOOTER = (
    'To call one, reply with exactly <tool_call>{"name": NAME, "arguments": {ARGUMENTS}}'
    "</tool_call> and nothing else."
)


class ApiError(Exception):
    """An error answered to the client as OpenAI does: status code plus one-line message."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[JsonObject] | None = None


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat-completions body this server honours; other fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessageIn] = Field(min_length=1)
    n: int = Field(1, ge=1, le=MAX_BATCH_ROWS)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[JsonObject] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    stream: bool = False
    response_format: JsonObject | None = None
    chat_template_kwargs: JsonObject | None = None


class Route(BaseModel):
    """Where a model name leads: an engine and a step (None = the latest)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    engine: Decoder
    step: int | None


Router = Callable[[str], Route]  # raises ApiError(404) for unknown names or steps
# What a server makes of a request before sampling it (the judge pins ART's RULER schema);
# raises ApiError(400) for a request it cannot serve.
Prepare = Callable[[ChatRequest, Decoder], ChatRequest]


class ClientWatch:
    """Whether a request's client has gone: its connection closed (seen by `watch`), or the
    timeout it announced (OpenAI's clients send `x-stainless-read-timeout`) has passed, after
    which it has given up and, if it retries, sent the request again."""

    def __init__(self, timeout_s: float | None) -> None:
        self._closed = threading.Event()
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def gone(self) -> bool:
        """Thread-safe: asked by the decoding thread before every step."""
        closed = self._closed.is_set()
        return closed or (self._deadline is not None and time.monotonic() > self._deadline)

    async def watch(self, raw: Request) -> None:
        """Wait for the client to disconnect (the body is read: the next message is the end)."""
        while (await raw.receive())["type"] != "http.disconnect":
            pass
        self._closed.set()


def announced_timeout(raw: Request) -> float | None:
    """The client's own read timeout in seconds, if its request says (a bad value: none)."""
    try:
        value = float(raw.headers.get(TIMEOUT_HEADER, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def _settle(future: asyncio.Future[list[Sampled]], result: list[Sampled] | BaseException) -> None:
    if future.done():  # the handler was cancelled
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class _Batcher:
    """Feeds one decoder's requests to its scheduler (rlvr.engine.scheduler), which decodes them
    in a worker thread while any are waiting or live."""

    def __init__(self, decoder: Decoder) -> None:
        self.scheduler = Scheduler(decoder)
        self.running: asyncio.Task[None] | None = None

    async def submit(
        self, rows: list[SampleRow], step: int | None, gone: Callable[[], bool]
    ) -> list[Sampled]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Sampled]] = loop.create_future()

        def done(result: list[Sampled] | BaseException) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: no one left to answer
                loop.call_soon_threadsafe(_settle, future, result)

        self.scheduler.submit(Submission(rows, step, gone, done))
        if self.running is None or self.running.done():
            self.running = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        await asyncio.sleep(BATCH_WINDOW_S)
        while self.scheduler.busy():  # asked here, between runs: a request may have come late
            try:
                await asyncio.to_thread(self.scheduler.run)
            except Exception as error:  # the loop itself failed: every request hears it
                logger.exception("the decoding loop failed; its requests are answered with 500")
                self.scheduler.fail_all(
                    ApiError(
                        500,
                        f"engine: the decoding loop failed ({type(error).__name__}: {error}); "
                        "a fault in rlvr's engine, not in this request: retry, and report it "
                        "with the server's log if it repeats",
                        "server_error",
                    )
                )


def function_of(tool: JsonObject) -> JsonObject:
    """A tool's function description: OpenAI's `{"type": "function", "function": {...}}` or the
    function object given bare."""
    return as_object(tool.get("function", tool), "tools[].function")


def tool_names(tools: list[JsonObject]) -> list[str]:
    return [str(function_of(t).get("name")) for t in tools]


def tools_system_text(tools: list[JsonObject]) -> str:
    """The tool description for chat templates that cannot render tools themselves."""
    schemas = "".join(json.dumps(function_of(t), ensure_ascii=False) + "\n" for t in tools)
    return TOOLS_HEADER + schemas + TOOLS_FOOTER


def _messages(request: ChatRequest, template_has_tools: bool) -> list[JsonObject]:
    messages: list[JsonObject] = [m.model_dump(exclude_none=True) for m in request.messages]
    if request.tools and not template_has_tools:
        text = tools_system_text(request.tools)
        first = messages[0].get("content")
        if messages[0]["role"] == "system" and isinstance(first, str):
            messages[0] = {**messages[0], "content": first + "\n\n" + text}
        else:
            messages.insert(0, {"role": "system", "content": text})
    return messages


def check_tool_choice(request: ChatRequest) -> None:
    """A named tool choice must name one of the request's tools (as OpenAI answers: 400)."""
    choice = request.tool_choice
    if not isinstance(choice, NamedToolChoice):
        return
    names = tool_names(request.tools or [])
    if choice.function.name not in names:
        offered = ", ".join(repr(n) for n in names) or "none"
        raise ApiError(
            400,
            f"tool_choice: function {choice.function.name!r} is not among tools (tools: {offered})",
        )


def _forced_prefix(request: ChatRequest) -> str:
    choice = request.tool_choice
    if not request.tools or choice is None or choice in ("auto", "none"):
        return ""
    return call_prefix(choice.function.name if isinstance(choice, NamedToolChoice) else None)


def _grammar(engine: Decoder, request: ChatRequest) -> str | None:
    """The grammar of the request's `response_format` (structured output), None for free text."""
    try:
        schema = schema_of(request.response_format)
        if schema is not None and _forced_prefix(request):
            raise GrammarError("response_format: cannot be combined with a forced tool choice")
        return None if schema is None else engine.compile_grammar(schema)
    except GrammarError as error:
        raise ApiError(400, str(error)) from None


def build_rows(engine: Decoder, request: ChatRequest) -> tuple[list[SampleRow], int]:
    """The request's prompt, tokenised by the model's chat template, as `n` rows to sample."""
    tokenizer = engine.tokenizer
    template_has_tools = "tools" in str(tokenizer.chat_template or "")
    try:
        prompt_ids = tokenizer.apply_chat_template(
            _messages(request, template_has_tools),
            tools=request.tools if template_has_tools else None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **(request.chat_template_kwargs or {}),
        )
    except Exception as error:  # template errors are the request's fault (odd roles, contents)
        raise ApiError(400, f"messages: the chat template failed: {error}") from None
    forced = tokenizer.encode(_forced_prefix(request), add_special_tokens=False)
    grammar = _grammar(engine, request)
    # Structured output ends where its document ends; free text is cut at a default length.
    default = engine.max_context - len(prompt_ids) if grammar else DEFAULT_MAX_TOKENS
    max_tokens = request.max_completion_tokens or request.max_tokens or default
    if len(prompt_ids) + max_tokens > engine.max_context:
        raise ApiError(
            400,
            f"max_tokens: prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds "
            f"the model's context of {engine.max_context} tokens",
        )
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    rows = [
        SampleRow(
            prompt_ids=list(prompt_ids),
            forced_ids=forced,
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            stop=stop,
            seed=None if request.seed is None else request.seed + i,
            top_logprobs=(request.top_logprobs or 0) if request.logprobs else 0,
            grammar=grammar,
        )
        for i in range(request.n)
    ]
    return rows, len(prompt_ids)


def to_choice(index: int, sampled: Sampled, engine: Decoder, request: ChatRequest) -> Choice:
    content: str | None = sampled.text
    finish: Literal["stop", "length", "tool_calls"] = sampled.finish_reason
    tool_calls: list[ChatCompletionMessageToolCallUnion] | None = None
    if request.tools and request.tool_choice != "none":
        names = set(tool_names(request.tools))
        reply = parse_tool_calls(sampled.text, names)
        if reply.calls:
            content = reply.content
            tool_calls = [
                ChatCompletionMessageFunctionToolCall(
                    id=new_call_id(),
                    type="function",
                    function=Function(name=call.name, arguments=call.arguments),
                )
                for call in reply.calls
            ]
            finish = "tool_calls" if finish == "stop" else finish
    logprobs = None
    if request.logprobs:
        logprobs = ChoiceLogprobs(
            content=[
                ChatCompletionTokenLogprob(
                    token=f"token_id:{token}",
                    bytes=list(engine.token_bytes(token)),
                    logprob=logprob,
                    top_logprobs=[
                        TopLogprob(
                            token=f"token_id:{t}", bytes=list(engine.token_bytes(t)), logprob=lp
                        )
                        for t, lp in (sampled.top_logprobs[i] if sampled.top_logprobs else [])
                    ],
                )
                for i, (token, logprob) in enumerate(
                    zip(sampled.token_ids, sampled.logprobs, strict=True)
                )
            ]
        )
    message = ChatCompletionMessage(role="assistant", content=content, tool_calls=tool_calls)
    return Choice(index=index, message=message, finish_reason=finish, logprobs=logprobs)


def completion_body(
    request: ChatRequest, engine: Decoder, sampled: list[Sampled], prompt_tokens: int
) -> JsonObject:
    """OpenAI's chat-completion body for the request's sampled choices."""
    completion_tokens = sum(len(s.token_ids) for s in sampled)
    completion = ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        object="chat.completion",
        created=int(time.time()),
        model=request.model,
        choices=[to_choice(i, s, engine, request) for i, s in enumerate(sampled)],
        usage=CompletionUsage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        ),
    )
    return completion.model_dump(mode="json", exclude_none=True)


class BearerAuth:
    """ASGI middleware: every request must carry `Authorization: Bearer <api_key>` (else 401).
    Plain ASGI, so a request's receive channel (which brings its disconnect) passes untouched."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = _error(
                    401,
                    "missing or wrong API key (Authorization: Bearer <the run's key>)",
                    "authentication_error",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "code": status}}
    )


def _validation_message(error: RequestValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    return f"{where}: {first.get('msg', 'invalid')}"


@dataclass(frozen=True)
class _Served:
    """What an app's endpoints serve from (kept on `app.state`, see `create_app`)."""

    router: Router
    model_names: Callable[[], list[str]]
    prepare: Prepare | None = None
    batchers: dict[int, _Batcher] = field(default_factory=dict)  # one per engine


def _served(request: Request) -> _Served:
    served = request.app.state.served
    assert isinstance(served, _Served)  # create_app put it there
    return served


def create_app(
    router: Router,
    model_names: Callable[[], list[str]],
    api_key: str | None = None,
    prepare: Prepare | None = None,
) -> FastAPI:
    """The FastAPI app; `router` maps a requested model name to an engine and step. With
    `api_key`, every request must carry `Authorization: Bearer <api_key>` (else 401): the port is
    on loopback, but any local process of any user could reach it. `prepare`, where given,
    rewrites each request for its engine before it is sampled.

    The endpoints reach the engines through `app.state`, never through their closure: FastAPI
    keeps every endpoint function in a process-wide cache, so a closure over the router would
    keep each run's models alive after its server stopped (a notebook training twice)."""
    app = FastAPI(title="rlvr policy", docs_url=None, redoc_url=None)
    app.state.served = _Served(router, model_names, prepare)

    if api_key is not None:
        app.add_middleware(BearerAuth, api_key=api_key)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(error))

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return _error(error.status, error.message, error.kind)

    @app.get("/v1/models")
    async def models(raw: Request) -> JsonObject:
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": created, "owned_by": "rlvr"}
                for n in _served(raw).model_names()
            ],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: ChatRequest, raw: Request) -> JsonObject:
        if request.stream:
            raise ApiError(400, "stream: streaming is not supported by this server")
        check_tool_choice(request)
        served = _served(raw)
        route = served.router(request.model)
        if served.prepare is not None:
            request = served.prepare(request, route.engine)
        rows, prompt_tokens = build_rows(route.engine, request)
        batchers = served.batchers
        batcher = batchers.get(id(route.engine)) or batchers.setdefault(
            id(route.engine), _Batcher(route.engine)
        )
        client = ClientWatch(announced_timeout(raw))
        watcher = asyncio.create_task(client.watch(raw))
        try:
            sampled = await batcher.submit(rows, route.step, client.gone)
        except UnknownStep as error:
            raise ApiError(404, f"model: {request.model}: {error}", "not_found_error") from None
        except ClientGone as error:
            raise ApiError(408, f"request: {error}", "timeout_error") from None
        finally:
            watcher.cancel()
        return completion_body(request, route.engine, sampled, prompt_tokens)

    return app


def serve(server: uvicorn.Server, sockets: list[socket.socket]) -> None:
    """Run a `uvicorn.Server` on `sockets` until it exits, on an event loop of its own.

    Not `server.run()`: on Python 3.12+ that calls `asyncio.run`, which `nest_asyncio.apply()`
    (run by ART's dependencies on import) replaces with a function that refuses uvicorn's
    `loop_factory`, so the server would never start there."""
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(server.serve(sockets=sockets))


def serve_frozen(
    listener: socket.socket,
    model: str,
    served_name: str,
    api_key: str,
    prepare: Prepare | None = None,
) -> None:
    """Serve `model` (an rlvr model name or directory) as it is under `served_name` on the
    inherited `listener` until the process is stopped: the body of an engine child process
    (rlvr.engine.process)."""
    import uvicorn

    from rlvr.engine.frozen import frozen_decoder
    from rlvr.engine.models import resolve_model

    engine = frozen_decoder(resolve_model(model))

    def route(name: str) -> Route:
        if name != served_name:
            raise ApiError(
                404, f"model: '{name}': this engine serves '{served_name}'", "not_found_error"
            )
        return Route(engine=engine, step=None)

    app = create_app(route, lambda: [served_name], api_key=api_key, prepare=prepare)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=600)
    serve(uvicorn.Server(config), [listener])


class ServerThread:
    """uvicorn serving `app` on 127.0.0.1 from a daemon thread of this process."""

    def __init__(self, app: FastAPI, port: int = 0) -> None:
        import uvicorn

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((HOST, port))  # loopback only
        except OSError as error:
            self._socket.close()
            raise RuntimeError(
                f"policy server: cannot bind {HOST}:{port} ({error.strerror}); is a server from "
                "an earlier run still up? port 0 picks a free port"
            ) from None
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=600)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=serve,
            args=(self._server, [self._socket]),
            name="rlvr-policy-server",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"policy server did not start on {HOST}:{self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()


def parse_model_name(name: str) -> tuple[str, int | None]:
    """`name@7` -> ("name", 7); `name` -> ("name", None). A bad step is a 404."""
    base, sep, step = name.rpartition("@")
    if not sep:
        return name, None
    if not step.isdigit():
        raise ApiError(
            404, f"model: '{name}': the step after '@' must be a number", "not_found_error"
        )
    return base, int(step)
