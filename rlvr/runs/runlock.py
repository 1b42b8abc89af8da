"""One writer per run directory.

`train`, `train --resume` and `eval` hold an exclusive `flock` on `RUN/.lock` for as long as they
write the run; a second process asking for it gets `RunLocked`, naming the holder's pid, before it
has written anything. The lock is the kernel's: it goes away with its process, however that process
ends (a SIGKILL leaves a `.lock` file that the next writer simply locks again).

Fresh runs also never share a directory by accident: `claim_new` creates a timestamped directory
exclusively (a second run in the same second gets the next free suffix), and a fresh run refuses
a directory that already holds a run (`refuse_existing_run`) unless it is resumed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from rlvr.runs import layout

LOCK_FILE = layout.LOCK_FILE


class RunLocked(RuntimeError):
    """Another process is writing this run directory; the message names its pid."""


@contextlib.contextmanager
def hold(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s writer lock for the block (the directory is created if missing)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunLocked(
                f"{run_dir}: another rlvr process (pid {holder}) is writing this run; wait "
                "for it to finish or choose another run directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def claim_new(root: Path, stem: str) -> Path:
    """Create and return a new run directory `root/stem`, or `root/stem-2`, `-3`, ... if taken:
    `mkdir` without exist_ok is atomic, so two runs started in the same second never share one."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = root / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RunLocked(f"{root}: no free run directory name for {stem}")


def refuse_existing_run(run_dir: Path, markers: tuple[str, ...]) -> None:
    """A fresh run must not start in a directory that holds one (its metrics, checkpoints or
    policy weights, which the backend would silently resume from)."""
    found = [name for name in markers if (run_dir / name).exists()]
    if found:
        raise RunLocked(
            f"{run_dir}: run directory already holds a run ({', '.join(found)}); continue it "
            "with `rlvr train --resume` or choose another run_dir"
        )
