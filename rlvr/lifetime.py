"""What a run owns beyond its own objects: resources a task opens while the run builds it (an MCP
server's process, say) are closed when the run ends, so none outlives it — also in a notebook or
any long-lived process where the run is not the whole program."""

from __future__ import annotations

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
