"""`python -m MODULE …` in a process of its own, forked from a warm one: multiprocessing's
forkserver with the CLI's modules preloaded. The child runs the module as `python -m` would (for
`rlvr …`, the same `rlvr.cli.app` the console script runs), with its own pid, session, stdout,
stderr and exit status, and it dies of SIGKILL like any process; it only skips importing torch,
transformers and ART again (~12 s of a busy core per run).

The forkserver is one process per test worker, started by the first run and gone with the
worker; it imports modules and never computes, so forking it is safe.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import runpy
import signal
import sys
import tempfile
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ["rlvr.cli", "rlvr.training.loop", "rlvr.policy.backend", "tests.warm"]


class Finished(BaseModel):
    """A finished child, as subprocess.CompletedProcess has it (returncode -9: SIGKILL)."""

    model_config = ConfigDict(frozen=True)

    pid: int  # also its session id: the child called setsid()
    returncode: int
    stdout: str
    stderr: str


@cache
def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _child(
    module: str,
    args: list[str],
    environ: dict[str, str],
    path: list[str],
    cwd: str,
    out: str,
    err: str,
) -> None:
    """In the forked child: its own session, the caller's environment (as it is now, not as it
    was when the forkserver started) and import path, stdout and stderr to files (line-buffered,
    so a kill loses at most a partial line), then the module as __main__. Its exit status is
    the module's (multiprocessing turns SystemExit into it)."""
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:0] = path
    importlib.invalidate_caches()
    for fd, target in ((1, out), (2, err)):
        handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def run_module(
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    path: Iterable[Path | str] = (),
    cwd: Path = ROOT,
    timeout_s: float = 600,
) -> Finished:
    """`python -m MODULE ARGS` in a forked child, waited for. Its environment is this process's
    with `env` on top and `unset` taken out, as subprocess would give it; `path` goes in front of
    sys.path (where PYTHONPATH would put it)."""
    dropped = set(unset)
    with tempfile.TemporaryDirectory(prefix="rlvr-warm-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        child = _context().Process(
            target=_child,
            args=(
                module,
                list(args),
                {k: v for k, v in os.environ.items() if k not in dropped} | dict(env or {}),
                [str(p) for p in path],
                str(cwd),
                str(out),
                str(err),
            ),
        )
        child.start()
        child.join(timeout_s)
        if child.exitcode is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.join()
            raise TimeoutError(f"python -m {module} {' '.join(args)} ran over {timeout_s:.0f} s")
        assert child.pid is not None
        return Finished(
            pid=child.pid,
            returncode=child.exitcode,
            stdout=out.read_text(errors="replace") if out.exists() else "",
            stderr=err.read_text(errors="replace") if err.exists() else "",
        )


def rlvr(*args: str, **options: Any) -> Finished:
    """`rlvr ARGS` (run_module's options)."""
    return run_module("rlvr.cli", *args, **options)
