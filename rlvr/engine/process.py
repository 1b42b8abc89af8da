"""A model server in a child process: its lifecycle, shared by every server run beside a run (the
local judge's, judges.local).

Ports: the parent binds the listening socket (a free port, or the one asked for: taken is a clear
`ServerProcessError`) and the child inherits it, so no other process can take the port between choosing
and serving it. Auth: each process has its own random bearer key, handed to the child in its
environment (never on the command line, which other users can read). Environment: the child gets
`rlvr.redact.child_env()` (no *_API_KEY / *_TOKEN / *_SECRET).

The child is stopped however the parent ends: `stop()` on normal exits and exceptions, an `atexit`
guard for a forgotten one, and PR_SET_PDEATHSIG (SIGKILL) when the parent dies without running
Python cleanup, so it never outlives the parent nor holds its port for the next run.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import httpx

from rlvr.redact import child_env

HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class ServerProcessError(RuntimeError):
    """A server process could not be started; the message says why."""


def listen(port: int | None, what: str = "a server") -> socket.socket:
    """A listening socket on 127.0.0.1 (`port`, or a free one), for the child to serve on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port or 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise ServerProcessError(
            f"port {port} on {HOST} is already taken ({what} left from an earlier run? "
            f"`ss -ltnp 'sport = :{port}'` names it); stop it or choose another port"
        ) from None
    return sock


def _load_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return prctl


# Looked up in the parent: between fork and exec the child should only make the call (loading a
# library there can deadlock on a lock another thread of the parent held at fork time).
_PRCTL = _load_prctl()


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: ask for SIGKILL when the parent dies. Linux
    sends it when the *thread* that forked exits: servers are started from the event loop's
    thread, which lives as long as the run."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


class ServerProcess:
    """One model server child process, started by `command(fd)` on an inherited listening
    socket with its bearer key in `key_env`. `ensure_started()` is idempotent and safe to await
    from concurrent tasks; `stop()` is idempotent and synchronous (usable from atexit)."""

    def __init__(
        self,
        command: Callable[[int], list[str]],
        *,
        key_env: str,
        name: str,
        port: int | None = None,
        startup_timeout_s: float = 180.0,
    ) -> None:
        self.command = command
        self.key_env = key_env
        self.name = name  # in messages: "local judge exited at start: ..."
        self.asked_port = port
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._lock: asyncio.Lock | None = None
        self.key = secrets.token_urlsafe(32)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise ServerProcessError(f"the {self.name} is not started")
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    async def ensure_started(self, verify: bool = False) -> str:
        """The base URL, starting the server if it is not running. `verify` (after a refused
        connection) also asks the server: one that does not answer is replaced. A killed server can
        look alive for a moment: its main thread is already a zombie while the others unwind."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.running and verify and not await self._answers():
                self.stop()
            if not self.running:
                await self._start()
        return self.base_url

    async def _answers(self) -> bool:
        async with httpx.AsyncClient(timeout=5.0, headers=self.headers) as http:
            try:
                return (await http.get(f"{self.base_url}/models")).status_code == 200
            except httpx.HTTPError:
                return False

    async def _start(self) -> None:
        listener = listen(self.asked_port, f"a {self.name}")
        try:
            self._spawn(listener)
        finally:
            listener.close()  # the child holds it now; if the child dies, the port is free again
        try:
            await self._wait_ready()
        except ServerProcessError:
            self.stop()
            raise

    def _spawn(self, listener: socket.socket) -> None:
        self.stop()
        fd, log_name = tempfile.mkstemp(
            prefix=f"rlvr-{self.name.replace(' ', '-')}-", suffix=".log"
        )
        self._log_path = Path(log_name)
        env = {**child_env(), "HF_HUB_OFFLINE": "1", self.key_env: self.key}
        parent = os.getpid()
        with os.fdopen(fd, "wb") as log_file:
            self._process = subprocess.Popen(
                self.command(listener.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(listener.fileno(),),
                # Own session: a terminal's Ctrl-C reaches us, and we stop the server in order.
                start_new_session=True,
                preexec_fn=(lambda: _die_with_parent(parent))
                if sys.platform.startswith("linux") and _PRCTL is not None
                else None,
            )
        self.port = listener.getsockname()[1]
        _LIVE.add(self)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        async with httpx.AsyncClient(timeout=2.0, headers=self.headers) as http:
            while time.monotonic() < deadline:
                if not self.running:
                    raise ServerProcessError(f"{self.name} exited at start: {self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.base_url}/models")).status_code == 200:
                        return
                await asyncio.sleep(0.25)
        raise ServerProcessError(
            f"{self.name} did not answer within {self.startup_timeout_s:g}s: {self.log_tail()}"
        )

    def log_tail(self, chars: int = 600) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(errors="replace").strip()
        return " | ".join(text[-chars:].splitlines()[-6:]) or "(empty log)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        _LIVE.discard(self)
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
