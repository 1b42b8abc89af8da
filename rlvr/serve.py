"""`rlvr serve`: a run's trained agent behind rlvr's OpenAI-compatible endpoint
(rlvr.engine.server: `/v1/chat/completions`, `/v1/models`, tool calls, structured output).

The checkpoint's LoRA is merged into the base weights once at start (PEFT's `merge_and_unload`)
and served by the engine's batched decoder, as the local judge serves its model
(rlvr.engine.frozen). The endpoint binds 127.0.0.1 unless `--host` says otherwise, and every
request needs `Authorization: Bearer KEY`: the key is RLVR_SERVE_KEY where it is set, else a new
one printed once at start.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.engine import Precision
from rlvr.runs.checkpoints import BEST, checkpoint_for

KEY_ENV = "RLVR_SERVE_KEY"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ServeError(ValueError):
    """A server that cannot start as asked; the message is one line."""


class Endpoint(BaseModel):
    """What a client needs: the base URL, the model name, and where the key comes from."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    model: str
    key_from_env: bool

    def lines(self, key: str) -> list[str]:
        """What `rlvr serve` prints at start (the key itself only when it generated it)."""
        said = (
            f"key:   ${KEY_ENV} (Authorization: Bearer <its value>)"
            if self.key_from_env
            else f"key:   {key}  (generated; set {KEY_ENV} to choose your own)"
        )
        return [
            f"url:   {self.base_url}",
            f"model: {self.model}",
            said,
            f'try:   OpenAI(base_url="{self.base_url}", api_key=KEY).chat.completions.create('
            f'model="{self.model}", messages=[...])',
        ]


def serve_key() -> tuple[str, bool]:
    """(the bearer key, whether it came from RLVR_SERVE_KEY)."""
    given = os.environ.get(KEY_ENV, "").strip()
    return (given, True) if given else (secrets.token_urlsafe(32), False)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one), or ServeError in one line. It
    listens from here on, so a client that connects once the URL is printed waits in the
    backlog until the server accepts, rather than being refused."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        raise ServeError(f"--host {host}: cannot resolve ({error.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)  # uvicorn's own backlog
    except OSError as error:
        sock.close()
        raise ServeError(
            f"--host {host} --port {port}: cannot bind ({error.strerror}); "
            "another server may hold the port (--port 0 picks a free one)"
        ) from None
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def merged_decoder(
    base_dir: Path,
    adapter_dir: Path,
    *,
    device: str | None = None,
    precision: Precision | None = None,
) -> Any:
    """The engine's decoder over the base model with the adapter merged into its weights (on a
    CPU its projections packed for the kernel once, since nothing trains them)."""

    from rlvr.engine import BaseWeights, Decoder, load_model, pack_frozen
    from rlvr.export import ExportError, attach_adapter

    loaded = load_model(base_dir, device, precision)
    try:
        merged = attach_adapter(loaded.model, adapter_dir).merge_and_unload()
    except ExportError as error:
        raise ServeError(str(error)) from None
    loaded = loaded.wrapped(merged.eval())
    if loaded.packed:
        pack_frozen(loaded.model, loaded.products_dtype)
    return Decoder(loaded, BaseWeights())


def serve_run(
    run_dir: Path,
    which: str = BEST,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    announce: Any = print,
) -> None:
    """Serve `run_dir`'s checkpoint `which` until interrupted; `announce` gets each start line
    once the port is bound and the model loaded."""
    import uvicorn

    from rlvr.engine import ApiError, Route, create_app, serve
    from rlvr.export import ExportError, base_of

    checkpoint = checkpoint_for(run_dir, which)
    try:
        base_dir = base_of(run_dir)
    except ExportError as error:
        raise ServeError(str(error)) from None
    key, from_env = serve_key()
    sock = bind(host, port)
    try:
        decoder = merged_decoder(base_dir, checkpoint)
        name = run_dir.resolve().name

        def route(requested: str) -> Route:
            if requested != name:
                raise ApiError(
                    404, f"model: '{requested}': this server serves '{name}'", "not_found_error"
                )
            return Route(engine=decoder, step=None)

        app = create_app(route, lambda: [name], api_key=key)
        endpoint = Endpoint(base_url=url_of(sock, host), model=name, key_from_env=from_env)
        for line in endpoint.lines(key):
            announce(line)
        if host not in LOOPBACK:
            announce(
                f"note:  listening on {host}: reachable from other machines (bearer key required)"
            )
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=600)
        serve(uvicorn.Server(config), [sock])
    finally:
        sock.close()
