"""The vLLM servers a run samples from, behind one OpenAI-compatible endpoint on 127.0.0.1.

ART's model client talks to one base URL; rollouts and evaluations name a checkpoint as
`run@step`. The router here answers at that URL (with the run's own bearer key) and, per request:

- maps the name to what vLLM serves: step 0's adapter, freshly initialised (lora_B = 0), is the
  base weights, served as the base model (no LoRA cost); any other step is a LoRA adapter named
  `run@step`, loaded at runtime (`/v1/load_lora_adapter`) from the checkpoint directory the
  trainer wrote — by the backend after each step, or here on first use (a validation of an older
  step). Servers rlvr did not start must read that directory at the same path (the same machine,
  or a shared mount);
- sends it to the live server with the fewest requests outstanding;
- when that server dies under it (connection refused, reset, or closed mid-answer) marks it dead,
  says so once, and sends the request to another; only when none is left does the request fail,
  with a 503 naming every dead server.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from rlvr.inference.errors import InferenceError
from rlvr.inference.server import VllmServer
from rlvr.json_types import JsonObject

logger = logging.getLogger(__name__)

# Transport failures that mean the server is gone (not a slow answer: a read timeout is not one).
GONE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
LOAD_TIMEOUT_S = 120.0
ROUTED_PATHS = ("chat/completions", "completions")


def root_url(url: str) -> str:
    """`http://h:p/v1/` -> `http://h:p` (vLLM's routes are under /v1, its /health is not)."""
    url = url.rstrip("/")
    return url.removesuffix("/v1")


def is_identity_adapter(checkpoint: Path) -> bool:
    """Whether a PEFT checkpoint changes nothing: every lora_B is zero (a fresh adapter)."""
    from safetensors import safe_open

    weights = checkpoint / "adapter_model.safetensors"
    if not weights.is_file():
        return False
    with safe_open(str(weights), framework="pt") as tensors:
        return all(
            not bool(tensors.get_tensor(name).any())
            for name in tensors.keys()  # noqa: SIM118 (safe_open is not a mapping)
            if "lora_B" in name
        )


class Endpoint:
    """One vLLM server as VllmServers sees it (mutable: VllmServers' lock guards it)."""

    def __init__(self, url: str, key: str, base_name: str, server: VllmServer | None) -> None:
        self.url = root_url(url)
        self.key = key
        self.base_name = base_name
        self.server = server  # None: a server rlvr did not start
        self.outstanding = 0
        self.alive = True
        self.loaded: set[str] = set()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def served_base_name(url: str, key: str) -> str:
    """The base model a running vLLM server serves (its /v1/models entry without a parent);
    InferenceError naming the server when it does not answer or refuses the key."""
    try:
        response = httpx.get(
            f"{root_url(url)}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
    except httpx.HTTPError as error:
        raise InferenceError(
            f"inference.urls: {url} does not answer ({type(error).__name__}): is a vLLM server "
            "running there?"
        ) from None
    if response.status_code == 401:
        raise InferenceError(
            f"inference.urls: {url} refused the key (401): put its API key in the variable "
            "inference.api_key_env names"
        )
    if response.status_code != 200:
        raise InferenceError(f"inference.urls: {url}/v1/models answered {response.status_code}")
    models = response.json().get("data") or []
    bases = [m["id"] for m in models if not m.get("parent")]
    if not bases:
        raise InferenceError(f"inference.urls: {url} serves no base model")
    return str(bases[0])


class VllmServers:
    """Routes requests over endpoints and keeps each step's adapter on every one (module
    docstring). `checkpoint_dir(step)` is where the trainer saved `step`; `live_step()` the step
    a name without `@step` means."""

    def __init__(
        self,
        model_name: str,
        endpoints: list[Endpoint],
        checkpoint_dir: Callable[[int], Path],
        live_step: Callable[[], int],
    ) -> None:
        self.model_name = model_name
        self.endpoints = endpoints
        self.checkpoint_dir = checkpoint_dir
        self.live_step = live_step
        self.retried = 0  # requests sent again after their server died
        self.lost: list[str] = []  # servers found dead, in order
        self._lock = threading.Lock()
        self._identity: dict[int, bool] = {}

    # ---------------------------------------------------------------- names and adapters

    def adapter_name(self, step: int) -> str:
        return f"{self.model_name}@{step}"

    def is_base(self, step: int) -> bool:
        if step not in self._identity:
            self._identity[step] = step == 0 and (
                not self.checkpoint_dir(0).is_dir() or is_identity_adapter(self.checkpoint_dir(0))
            )
        return self._identity[step]

    def _load_body(self, step: int) -> dict[str, str]:
        path = self.checkpoint_dir(step)
        if not path.is_dir():
            raise InferenceError(f"model {self.adapter_name(step)}: no checkpoint at {path}")
        return {"lora_name": self.adapter_name(step), "lora_path": str(path.resolve())}

    def _loaded(self, endpoint: Endpoint, name: str, response: httpx.Response) -> None:
        """Record a load's answer; an adapter vLLM already has counts as loaded."""
        if response.status_code == 200 or "already been loaded" in response.text:
            with self._lock:
                endpoint.loaded.add(name)
            return
        raise InferenceError(
            f"vLLM server {endpoint.url} cannot load adapter {name}: {_message(response)} "
            "(servers in inference.urls must read the run directory at the same path)"
        )

    def load_everywhere(self, step: int) -> float:
        """Load `step`'s adapter into every live server (blocking); returns the seconds taken."""
        if self.is_base(step):
            return 0.0
        started = time.monotonic()
        body = self._load_body(step)
        for endpoint in self.alive():
            if body["lora_name"] in endpoint.loaded:
                continue
            try:
                response = httpx.post(
                    f"{endpoint.url}/v1/load_lora_adapter",
                    json=body,
                    headers=endpoint.headers,
                    timeout=LOAD_TIMEOUT_S,
                )
            except GONE as error:
                self.mark_dead(endpoint, error)
                continue
            self._loaded(endpoint, body["lora_name"], response)
        self.require_one()
        return time.monotonic() - started

    def unload_everywhere(self, steps: list[int]) -> None:
        """Unload the adapters of `steps` (their checkpoints were deleted) wherever loaded."""
        for step in steps:
            name = self.adapter_name(step)
            for endpoint in self.alive():
                if name not in endpoint.loaded:
                    continue
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(
                        f"{endpoint.url}/v1/unload_lora_adapter",
                        json={"lora_name": name},
                        headers=endpoint.headers,
                        timeout=LOAD_TIMEOUT_S,
                    )
                with self._lock:
                    endpoint.loaded.discard(name)

    async def _ensure(self, client: httpx.AsyncClient, endpoint: Endpoint, step: int) -> str:
        """The name `endpoint` serves `step` under, its adapter loaded there first if need be."""
        if self.is_base(step):
            return endpoint.base_name
        name = self.adapter_name(step)
        if name not in endpoint.loaded:
            response = await client.post(
                f"{endpoint.url}/v1/load_lora_adapter",
                json=self._load_body(step),
                headers=endpoint.headers,
                timeout=LOAD_TIMEOUT_S,
            )
            self._loaded(endpoint, name, response)
        return name

    # ---------------------------------------------------------------- servers' health

    def alive(self) -> list[Endpoint]:
        with self._lock:
            return [e for e in self.endpoints if e.alive]

    def mark_dead(self, endpoint: Endpoint, error: BaseException) -> None:
        """Take a server out of the routing, saying so once."""
        with self._lock:
            if not endpoint.alive:
                return
            endpoint.alive = False
            self.lost.append(endpoint.url)
            left = sum(e.alive for e in self.endpoints)
        logger.warning(
            "vLLM server %s stopped answering (%s): its requests go to the %d other server(s)",
            endpoint.url,
            type(error).__name__,
            left,
        )

    def none_left(self) -> str:
        return f"no vLLM server is left (lost: {', '.join(self.lost) or 'none'})"

    def require_one(self) -> None:
        if not self.alive():
            raise InferenceError(f"inference=vllm: {self.none_left()}")

    def _take(self, tried: set[int]) -> Endpoint | None:
        with self._lock:
            ready = [e for e in self.endpoints if e.alive and id(e) not in tried]
            if not ready:
                return None
            chosen = min(ready, key=lambda e: e.outstanding)
            chosen.outstanding += 1
            return chosen

    def _release(self, endpoint: Endpoint) -> None:
        with self._lock:
            endpoint.outstanding -= 1

    # ---------------------------------------------------------------- requests

    def resolve_step(self, name: str) -> int:
        """The step a requested model name means; LookupError when it is not this run's."""
        base, sep, step = name.rpartition("@")
        if not sep:
            base, step = name, ""
        if base != self.model_name or (step and not step.isdigit()):
            raise LookupError(f"model: '{name}' is not served here (model: {self.model_name})")
        return int(step) if step else self.live_step()

    async def forward(
        self, client: httpx.AsyncClient, path: str, body: JsonObject
    ) -> tuple[int, Any]:
        """Send a request to the least busy live server (another when it dies); (status, JSON)."""
        name = str(body.get("model", ""))
        step = self.resolve_step(name)
        tried: set[int] = set()
        while (endpoint := self._take(tried)) is not None:
            tried.add(id(endpoint))
            try:
                target = await self._ensure(client, endpoint, step)
                response = await client.post(
                    f"{endpoint.url}/v1/{path}",
                    json={**body, "model": target, "return_tokens_as_token_ids": True},
                    headers=endpoint.headers,
                )
            except GONE as error:
                self.mark_dead(endpoint, error)
                with self._lock:
                    self.retried += 1
                continue
            finally:
                self._release(endpoint)
            try:
                answer = response.json()
            except ValueError:  # an error page, not OpenAI's shape
                return response.status_code, _error(_message(response), "server_error")
            if isinstance(answer, dict) and answer.get("model") == target:
                answer["model"] = name
            return response.status_code, answer
        return 503, _error(self.none_left(), "service_unavailable")

    def close(self) -> None:
        """Stop the servers started here (servers it was given keep running)."""
        for endpoint in self.endpoints:
            if endpoint.server is not None:
                endpoint.server.stop()


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code} {response.text.strip()[:200]}"
    error = body.get("error") if isinstance(body, dict) else None
    text = error.get("message") if isinstance(error, dict) else body.get("message", body)
    return f"{response.status_code} {str(text).strip().splitlines()[0][:300]}"


def _error(message: str, kind: str) -> JsonObject:
    return {"error": {"message": message, "type": kind}}


def create_router(servers: VllmServers, key: str) -> FastAPI:
    """The run's endpoint: OpenAI's chat and completions routes and /v1/models, bearer `key`."""
    app = FastAPI()
    clients: dict[int, httpx.AsyncClient] = {}

    def client() -> httpx.AsyncClient:
        # One client per event loop (the server's thread runs one); no read timeout: a rollout's
        # own client sets how long it waits.
        loop_id = id(threading.current_thread())
        if loop_id not in clients:
            clients[loop_id] = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=10.0),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
            )
        return clients[loop_id]

    def authorised(request: Request) -> bool:
        return request.headers.get("authorization", "") == f"Bearer {key}"

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        if not authorised(request):
            return JSONResponse(_error("bad API key", "authentication_error"), 401)
        names = [
            servers.model_name,
            *(servers.adapter_name(s) for s in range(servers.live_step() + 1)),
        ]
        return JSONResponse(
            {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
        )

    @app.post("/v1/{path:path}")
    async def route(path: str, request: Request) -> JSONResponse:
        if not authorised(request):
            return JSONResponse(_error("bad API key", "authentication_error"), 401)
        if path not in ROUTED_PATHS:
            return JSONResponse(_error(f"/v1/{path} is not routed", "not_found_error"), 404)
        body = await request.json()
        try:
            status, answer = await servers.forward(client(), path, body)
        except LookupError as error:
            return JSONResponse(_error(str(error), "not_found_error"), 404)
        except InferenceError as error:
            return JSONResponse(_error(str(error), "invalid_request_error"), 400)
        return JSONResponse(answer, status)

    return app
