"""What a run owns beyond its own objects: resources a task opens while the run builds it (an MCP
server's process, say) are closed when the run ends, so none outlives it — also in a notebook or
any long-lived process where the run is not the whole program. And how a process that imported
the ML stack ends: quickly."""

from __future__ import annotations

import atexit
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_CLOSERS: ContextVar[list[Callable[[], None]] | None] = ContextVar("rlvr_run_closers", default=None)


@contextmanager
def run_lifetime() -> Iterator[None]:
    """The span of one run: whatever registers with `close_with_the_run` inside it is closed at
    its end, last opened first, errors and Ctrl-C included."""
    closers: list[Callable[[], None]] = []
    token = _CLOSERS.set(closers)
    try:
        yield
    finally:
        _CLOSERS.reset(token)
        for close in reversed(closers):
            close()


def close_with_the_run(close: Callable[[], None]) -> bool:
    """Have `close` called when the run being built ends; False outside a run (the caller keeps
    its own lifetime then)."""
    closers = _CLOSERS.get()
    if closers is None:
        return False
    closers.append(close)
    return True


def quick_teardown() -> None:
    """For a program's entry point (the CLI, the judge server), never a library import: at exit,
    collect the garbage once and freeze what is still alive, so the interpreter's teardown does
    not sweep the hundreds of thousands of objects torch, transformers and litellm hold in each of
    its collections (seconds per exit). Nothing alive at exit is promised a finaliser either way;
    garbage is still finalised, here."""
    atexit.register(_collect_then_freeze)


def _collect_then_freeze() -> None:
    gc.collect()
    gc.freeze()
