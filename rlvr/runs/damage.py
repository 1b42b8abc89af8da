"""What stops a run that is not rlvr's fault, said in one line: a full disk while it writes, and a
damaged file of a run directory (named, with what is wrong with it).

A full disk: every write of a run goes through `rlvr.runs.atomic`, whose `space_guard` turns a
write that failed for lack of space into `DiskFull` — the path, "no space left on device", how
much the run directory holds and how to continue. Libraries say it in different ways (an OSError
with ENOSPC, safetensors' "No space left on device", torch's zip writer's bare "unexpected pos",
shutil's collected copy errors), so a write that failed while its filesystem has less than
`NEARLY_FULL` bytes free counts as one too. A write is never half-visible (atomic), so the run
directory stays resumable: `rlvr train --resume RUN` once there is room.

`fault_point(name)` marks where a kill or a full disk is tested (`rollouts:STEP`,
`optimizer:STEP`, `checkpoint:STEP`, `metrics:STEP`, `aside:DIR`, `swapped:DIR`,
`disk_full:SITE`): it calls `fault_hook`, which is None in every run and which only the tests'
injector (tests/helpers/faults.py) sets.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rlvr.runs import layout

NEARLY_FULL = 1 << 20  # bytes free below which a failed write is taken for a full disk
_FULL_WORDS = ("no space left on device", "os error 28", "errno 28", "storagefull")

# The seam for fault injection (module docstring): called with the point's name; it may kill the
# process or raise, as a crash or a full disk there would.
fault_hook: Callable[[str], None] | None = None


def fault_point(name: str) -> None:
    """A named point where the tests inject a fault; nothing happens unless `fault_hook` is set."""
    if fault_hook is not None:
        fault_hook(name)


class RunDamaged(ValueError):
    """A file of a run directory that cannot be read as what it should be; the message is one
    line naming the file and what is wrong with it."""


class DiskFull(OSError):
    """A write of a run failed for lack of space; the message is the one line a user sees."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_dir = run_dir_of(path)
        super().__init__(errno.ENOSPC, disk_full_line(path, self.run_dir))

    def __str__(self) -> str:
        return str(self.strerror)


def run_dir_of(path: Path) -> Path | None:
    """The run directory `path` lies in: its nearest folder holding config.json or the lock."""
    for folder in [path, *path.parents]:
        if (folder / layout.CONFIG).is_file() or (folder / layout.LOCK_FILE).exists():
            return folder
    return None


def write_site(path: Path) -> str:
    """The part of its run directory a write goes to: the first part of its path in the run
    (a file's stem at the top: metrics, summary), e.g. checkpoints, trajectories, .art."""
    run_dir = run_dir_of(path.parent)
    parts = path.relative_to(run_dir).parts if run_dir is not None else (path.name,)
    return Path(parts[0]).stem if len(parts) == 1 else parts[0]


def stored_bytes(root: Path) -> int:
    """Bytes of the files under `root`, a file with several names (hard links) counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def disk_full_line(path: Path, run_dir: Path | None) -> str:
    if run_dir is None:
        return f"{path}: no space left on device; free some space and run the command again"
    held = human_bytes(stored_bytes(run_dir))
    if (run_dir / layout.SUMMARY).is_file():  # a finished run: an eval's table, say
        then = "run the command again"
    elif (run_dir / layout.CONFIG).is_file():
        then = f"continue with `rlvr train --resume {run_dir}`"
    else:  # nothing of the run was written yet: nothing to resume
        then = "start the run again"
    return (
        f"{path}: no space left on device; the run directory {run_dir} holds {held}; free some "
        f"space, then {then}"
    )


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in seen:
        seen.append(link)
        yield link
        if isinstance(link, BaseExceptionGroup):
            for inner in link.exceptions:
                yield from _chain(inner)
        link = link.__cause__ or link.__context__


def says_disk_full(error: BaseException) -> bool:
    """Whether `error` (or what caused it) reports a full disk, in any library's words."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(word in str(link).lower() for word in _FULL_WORDS):
            return True
    return False


def nearly_full(path: Path) -> bool:
    """Whether the filesystem `path` is on has less than NEARLY_FULL bytes free."""
    for folder in [path, *path.parents]:
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free < NEARLY_FULL
            except OSError:
                return False
    return False


def disk_full_path(error: BaseException) -> Path | None:
    """The file a full-disk error names (an OSError's filename), if any."""
    for link in _chain(error):
        if isinstance(link, DiskFull):
            return link.path
        if isinstance(link, OSError) and link.filename:
            return Path(os.fsdecode(link.filename))
    return None


@contextmanager
def space_guard(path: Path) -> Iterator[None]:
    """A write to `path` that fails for lack of space raises DiskFull naming `path` (checked
    before the caller removes what it half wrote, while the filesystem is still full)."""
    try:
        site = write_site(path)
        fault_point(f"disk_full:{site}")
        yield
    except DiskFull:
        raise
    except Exception as error:
        if says_disk_full(error) or nearly_full(path):
            raise DiskFull(path) from error
        raise


def as_disk_full(error: BaseException) -> DiskFull | None:
    """`error` as DiskFull when it (or its cause) is one or reports a full disk, else None."""
    for link in _chain(error):
        if isinstance(link, DiskFull):
            return link
    if says_disk_full(error):
        return DiskFull(disk_full_path(error) or Path.cwd())
    return None
