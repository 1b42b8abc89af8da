"""`python -m MODULE …` (or `python -c CODE …`) in a process of its own, forked from a warm one:
multiprocessing's forkserver with the CLI's modules preloaded. The child runs the module as
`python -m` would (for `rlvr …`, the same `rlvr.cli.app` the console script runs), with its own
pid, session, stdout, stderr and exit status, and it dies of SIGKILL like any process; it only
skips importing torch, transformers and ART again (~12 s of a busy core per run).

The forkserver is one process per test worker, started by the first run and gone with the
worker; it imports modules and never computes, so forking it is safe.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import runpy
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tests.helpers import faults
from tests.helpers.repo import ROOT

# What a run imports on first use too (the policy client's chat resources, PEFT where the engine
# loads, pyplot for report.png): each forked run would import them again.
PRELOAD = [
    "rlvr.cli.main",
    "rlvr.training.loop",
    "rlvr.engine.backend",
    "openai.resources.chat.completions",
    "peft",
    "matplotlib.pyplot",
]


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
    so a kill loses at most a partial line), the tests' fault injector (RLVR_FAULT:
    tests/helpers/faults.py), then the module as __main__. Its exit status is the module's
    (multiprocessing turns SystemExit into it)."""
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:0] = path
    importlib.invalidate_caches()
    faults.install()
    for fd, target in ((1, out), (2, err)):
        handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    if module == "-c":  # `python -c CODE ARGS`: the code is the first argument
        code, *rest = args
        sys.argv = ["-c", *rest]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
        return
    sys.argv = [module, *args]
    # The module is preloaded (that is the point): runpy's warning about it is not the program's.
    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning, "runpy")
    runpy.run_module(module, run_name="__main__", alter_sys=True)


class Started:
    """A running child, as subprocess.Popen has it (pid, poll, wait, send_signal, terminate,
    kill; returncode -9: SIGKILL), with its stdout and stderr in files (read_stdout, readline)."""

    def __init__(self, process: multiprocessing.process.BaseProcess, folder: str) -> None:
        self._process = process
        self._folder = folder
        self.stdout_path = Path(folder) / "stdout"
        self.stderr_path = Path(folder) / "stderr"
        self._read = 0  # how far readline has read stdout
        assert process.pid is not None
        self.pid: int = process.pid  # also its session id: the child called setsid()
        self.stdin = self.stdout = self.stderr = None  # no pipes (Popen's attributes)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise TimeoutError(f"pid {self.pid} still running after {timeout} s")
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def read_stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def read_stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def readline(self, timeout_s: float = 300) -> str:
        """The next whole line the child printed ('' once it has exited without one)."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.read_stdout()
            end = text.find("\n", self._read)
            if end >= 0:
                line, self._read = text[self._read : end + 1], end + 1
                return line
            if self.poll() is not None:
                return ""
            if time.monotonic() > deadline:
                raise TimeoutError(f"pid {self.pid} printed no line in {timeout_s:.0f} s")
            time.sleep(0.02)

    def close(self) -> None:
        """Kill the child's session if it still runs; remove its output files."""
        if self._process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self._process.join()
        shutil.rmtree(self._folder, ignore_errors=True)


def start(
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    path: Iterable[Path | str] = (),
    cwd: Path | str = ROOT,
) -> Started:
    """`python -m MODULE ARGS` (MODULE "-c": `python -c CODE ARGS`) started in a forked child, not
    waited for. Its environment is this process's with `env` on top and `unset` taken out, as
    subprocess would give it; `path` goes in front of sys.path (where PYTHONPATH would put it)."""
    dropped = set(unset)
    folder = tempfile.mkdtemp(prefix="rlvr-warm-")
    child = _context().Process(
        target=_child,
        args=(
            module,
            list(args),
            {k: v for k, v in os.environ.items() if k not in dropped} | dict(env or {}),
            [str(p) for p in path],
            str(cwd),
            str(Path(folder) / "stdout"),
            str(Path(folder) / "stderr"),
        ),
    )
    child.start()
    return Started(child, folder)


def run_module(
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    path: Iterable[Path | str] = (),
    cwd: Path = ROOT,
    timeout_s: float = 600,
) -> Finished:
    """`python -m MODULE ARGS` in a forked child, waited for (start's options)."""
    child = start(module, *args, env=env, unset=unset, path=path, cwd=cwd)
    try:
        try:
            child.wait(timeout_s)
        except TimeoutError:
            command = " ".join(["python", *(["-c"] if module == "-c" else ["-m", module]), *args])
            raise TimeoutError(f"{command} ran over {timeout_s:.0f} s") from None
        return Finished(
            pid=child.pid,
            returncode=child.wait(),
            stdout=child.read_stdout(),
            stderr=child.read_stderr(),
        )
    finally:
        child.close()


def run_code(code: str, *args: str, **options: Any) -> Finished:
    """`python -c CODE ARGS` (run_module's options)."""
    return run_module("-c", code, *args, **options)


def rlvr(*args: str, **options: Any) -> Finished:
    """`rlvr ARGS` (run_module's options)."""
    return run_module("rlvr.cli.main", *args, **options)
