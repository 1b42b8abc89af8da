"""Crash-safe writes: a file or directory appears complete under its final name, or not at all.

Each write goes to a temporary name next to its target (`.NAME.tmp`), is flushed and fsynced,
renamed over the target with `os.replace` (atomic on POSIX), and then the parent directory is
fsynced so the rename itself survives a power cut. A SIGKILL at any instant leaves the old
content or the new one, plus at worst a temporary that `remove_leftovers` clears on resume.

A directory cannot be renamed over a non-empty one, so replacing one takes three renames: the old
one aside (`.NAME.old.tmp`), the new one in, the old one removed. A kill between the first two
leaves no `NAME`: `remove_leftovers` first puts the old one back, so old or new is always there.

A write that fails for lack of space raises `rlvr.runs.damage.DiskFull` naming its target (what
it half wrote is removed, as after any failed write).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlvr.runs.damage import fault_point, space_guard

TMP_SUFFIX = ".tmp"
ASIDE_SUFFIX = f".old{TMP_SUFFIX}"


def temp_path(path: Path) -> Path:
    """Where `path`'s next version is written (hidden, and never a checkpoint step's name)."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def aside_path(path: Path) -> Path:
    """Where a directory's old version waits while its new one is renamed in."""
    return path.with_name(f".{path.name}{ASIDE_SUFFIX}")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def fsync_tree(root: Path) -> None:
    """fsync every file, then every directory bottom-up (entries before the folders that hold them)."""
    for folder, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(Path(folder) / name)
        fsync_dir(Path(folder))


def write_bytes(path: Path, data: bytes) -> None:
    tmp = temp_path(path)
    try:
        with space_guard(path), tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


@contextmanager
def writing(path: Path) -> Iterator[Path]:
    """A temporary path for a library to write `path`'s new content to (parquet, png); on
    success it is fsynced and renamed over `path`, on error removed."""
    tmp = temp_path(path)
    try:
        with space_guard(path):
            yield tmp
            fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


@contextmanager
def writing_dir(path: Path) -> Iterator[Path]:
    """An empty temporary directory to fill; on success its contents are fsynced and it takes
    `path`'s place (an older `path` set aside first, removed last), on error it is removed."""
    tmp = temp_path(path)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with space_guard(path):
            tmp.mkdir(parents=True)
            yield tmp
            fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    aside = aside_path(path)
    if path.exists():
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(path, aside)
        fault_point(f"aside:{path.name}")
    os.replace(tmp, path)
    fsync_dir(path.parent)
    fault_point(f"swapped:{path.name}")
    shutil.rmtree(aside, ignore_errors=True)


def remove_dir(path: Path) -> None:
    """Remove the directory `path` whole: renamed to its temporary name first, so a kill midway
    leaves a temporary that `remove_leftovers` clears, never a directory cut short."""
    tmp = temp_path(path)
    shutil.rmtree(tmp, ignore_errors=True)
    os.replace(path, tmp)
    fsync_dir(path.parent)
    shutil.rmtree(tmp, ignore_errors=True)


def remove_leftovers(folder: Path) -> list[Path]:
    """Remove the temporaries a killed writer left directly in `folder`; returns them. An old
    directory set aside whose replacement never arrived is put back first."""
    if not folder.is_dir():
        return []
    for aside in folder.glob(f".*{ASIDE_SUFFIX}"):
        original = folder / aside.name.removeprefix(".").removesuffix(ASIDE_SUFFIX)
        if not original.exists():
            os.replace(aside, original)
            fsync_dir(folder)
    found = sorted(folder.glob(f".*{TMP_SUFFIX}"))
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return found
