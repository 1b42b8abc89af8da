"""An OpenAI-compatible chat server on 127.0.0.1 that misbehaves on a schedule (judge fault
injection for tests).

Each request to `/v1/chat/completions` takes the next `Fault` from the schedule (`Fault.OK` once
the schedule is empty). A good reply is built from the JSON schema the client sent (either dialect),
so it fits whatever was asked: RULER scores or rubric verdicts, with the right ids and count. Replies
report token usage and the model `gpt-4o-mini`, so litellm prices them (spend-cap tests).

    with FaultServer() as server:
        server.schedule([Fault.RATE_LIMIT, Fault.MALFORMED])
        ... judge.base_url=server.base_url ...
        server.log  # what each request got
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

PRICED_MODEL = "gpt-4o-mini"  # litellm's bundled price map knows it
GOOD_SCORES = [0.9, 0.2, 0.6, 0.4, 0.75, 0.1, 0.3, 0.5]


class Fault(StrEnum):
    OK = "ok"
    RATE_LIMIT = "rate_limit"  # HTTP 429 (Retry-After: 0)
    SERVER_ERROR = "server_error"  # HTTP 500
    UNAVAILABLE = "unavailable"  # HTTP 503
    HANG = "hang"  # answers only after `hang_s` (longer than the client's timeout)
    MALFORMED = "malformed"  # reply content is cut-off JSON
    WRONG_COUNT = "wrong_count"  # one list entry too few
    OUT_OF_RANGE = "out_of_range"  # every score 7.5 (a 0-10 scale)
    SLIGHTLY_OUT = "slightly_out"  # every score 1.04: clamped, not retried
    WRONG_TYPE = "wrong_type"  # booleans as "maybe", numbers as "high"
    FENCED = "fenced"  # a good reply inside ```json fences: parsed, not retried
    UNAUTHORIZED = "unauthorized"  # HTTP 401 echoing the key it was sent: never retried


@dataclass
class Served:
    """One request as the server saw it."""

    fault: Fault
    arrived: float
    finished: float | None = None


def instance(schema: dict, position: int = 0, variant: int = 0) -> Any:
    """A value valid for `schema` (the subset judges use); `position` varies list entries (scores,
    ids) and `variant` (the request number) flips booleans between requests."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][position % len(schema["enum"])]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {}).items()
        return {key: instance(sub, position, variant) for key, sub in properties}
    if kind == "array" or "items" in schema or "prefixItems" in schema:
        if "prefixItems" in schema:
            return [instance(sub, i, variant) for i, sub in enumerate(schema["prefixItems"])]
        return [instance(schema["items"], i, variant) for i in range(schema.get("minItems", 1))]
    if kind == "number":
        return GOOD_SCORES[position % len(GOOD_SCORES)]
    if kind == "integer":
        return position + 1
    if kind == "boolean":
        return variant % 2 == 0  # every other request meets every criterion: groups differ
    return f"rationale {position + 1}"


def _map_leaves(value: Any, number: Any, boolean: Any) -> Any:
    if isinstance(value, bool):
        return boolean if boolean is not None else value
    if isinstance(value, float):
        return number if number is not None else value
    if isinstance(value, dict):
        return {k: _map_leaves(v, number, boolean) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_leaves(v, number, boolean) for v in value]
    return value


def _drop_one(value: Any) -> Any:
    """The same value with its first list one entry shorter."""
    if isinstance(value, list):
        return value[:-1]
    if isinstance(value, dict):
        for key, sub in value.items():
            if isinstance(sub, list | dict):
                return {**value, key: _drop_one(sub)}
    return value


def requested_schema(body: dict) -> dict:
    response_format = body.get("response_format") or {}
    if "json_schema" in response_format:
        return response_format["json_schema"]["schema"]
    return response_format.get("schema", {"type": "object", "properties": {}})


def reply_content(fault: Fault, body: dict, variant: int = 0) -> str:
    good = instance(requested_schema(body), variant=variant)
    if fault is Fault.MALFORMED:
        return json.dumps(good)[: max(5, len(json.dumps(good)) // 2)]
    if fault is Fault.WRONG_COUNT:
        return json.dumps(_drop_one(good))
    if fault is Fault.OUT_OF_RANGE:
        return json.dumps(_map_leaves(good, 7.5, None))
    if fault is Fault.SLIGHTLY_OUT:
        return json.dumps(_map_leaves(good, 1.04, None))
    if fault is Fault.WRONG_TYPE:
        return json.dumps(_map_leaves(good, "high", "maybe"))
    if fault is Fault.FENCED:
        return "Here is my grading:\n```json\n" + json.dumps(good, indent=1) + "\n```"
    return json.dumps(good)


def completion(content: str, body: dict) -> dict:
    prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
    prompt_tokens, completion_tokens = max(1, prompt_chars // 4), max(1, len(content) // 4)
    return {
        "id": f"chatcmpl-fault-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": PRICED_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _error(status: int, message: str, kind: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}},
        status_code=status,
        headers=headers,
    )


class FaultServer:
    def __init__(self, hang_s: float = 3.0, delay_s: float = 0.0) -> None:
        self.hang_s = hang_s
        self.delay_s = delay_s  # added to every good reply (makes concurrency observable)
        self._schedule: deque[Fault] = deque()
        self._lock = threading.Lock()
        self.log: list[Served] = []  # since the last `schedule`
        self.bodies: list[dict] = []  # every request body received, for prompt assertions
        self._stopping = False
        self.port = _free_port()
        self._server = uvicorn.Server(
            uvicorn.Config(
                self._app(),
                host="127.0.0.1",
                port=self.port,
                log_level="error",
                timeout_graceful_shutdown=1,
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def schedule(self, faults: list[Fault], delay_s: float | None = None) -> None:
        """Replace the schedule and clear the request log."""
        with self._lock:
            self._schedule = deque(faults)
            self.log = []
            if delay_s is not None:
                self.delay_s = delay_s

    def faults_served(self) -> list[Fault]:
        return [served.fault for served in self.log]

    def max_overlap(self) -> int:
        """Most requests of the current log that were in the server at the same time."""
        now = time.monotonic()
        spans = [(s.arrived, s.finished or now) for s in self.log]
        return max((sum(a <= t < b for a, b in spans) for t, _ in spans), default=0)

    def _next(self) -> tuple[Served, int]:
        with self._lock:
            fault = self._schedule.popleft() if self._schedule else Fault.OK
            served = Served(fault, time.monotonic())
            self.log.append(served)
            return served, len(self.log)

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": PRICED_MODEL, "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            self.bodies.append(body)
            served, number = self._next()
            fault = served.fault
            try:
                if fault is Fault.RATE_LIMIT:
                    return _error(
                        429, "Rate limit reached", "rate_limit_error", {"retry-after": "0"}
                    )
                if fault is Fault.SERVER_ERROR:
                    return _error(500, "The server had an error", "server_error")
                if fault is Fault.UNAVAILABLE:
                    return _error(503, "Overloaded", "server_error")
                if fault is Fault.UNAUTHORIZED:
                    key = request.headers.get("authorization", "").removeprefix("Bearer ")
                    return _error(
                        401, f"Incorrect API key provided: {key}", "invalid_request_error"
                    )
                if fault is Fault.HANG:
                    until = time.monotonic() + self.hang_s
                    while time.monotonic() < until and not self._stopping:
                        await asyncio.sleep(0.05)
                elif self.delay_s:
                    await asyncio.sleep(self.delay_s)
                return completion(reply_content(fault, body, number), body)
            finally:
                served.finished = time.monotonic()

        return app

    def start(self) -> FaultServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fault server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._stopping = True
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
