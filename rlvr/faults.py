"""Test-only crash injection: `RLVR_FAULT=<point>:<step>` makes this process SIGKILL itself at
that point of that step, as the OOM killer or a pulled plug would (no cleanup, no atexit, no
finally). Unset (always, outside tests/training/test_crash_safety.py) every check is one dict
lookup.

`step` is the training step being done (1, 2, ...). For the two policy points it is the policy
checkpoint step being written, which is the same number while every step trains.

`RLVR_FAULT=disk_full:<site>` instead makes the first write to a site of the run directory (its
first part: metrics, trajectories, checkpoints, .art, report, summary, config) fail as a full
disk would (ENOSPC), to test that each write site says so in one line.
"""

from __future__ import annotations

import errno
import os
import signal
from enum import StrEnum
from pathlib import Path
from typing import NoReturn

FAULT_ENV = "RLVR_FAULT"


class FaultPoint(StrEnum):
    ROLLOUTS = "rollouts"  # the step's rollouts are back; nothing of the step is stored yet
    OPTIMIZER = "optimizer"  # the optimizer updated the weights; their checkpoint is not written
    CHECKPOINT = "checkpoint"  # halfway through the checkpoint: adapter written, optimizer not
    METRICS = "metrics"  # halfway through the step's first metrics line: a torn last line
    # Replacing a directory (`rlvr.runs.atomic.writing_dir`; the "step" is the directory's name):
    ASIDE = "aside"  # the old directory is set aside, the new one not yet in its place
    SWAPPED = "swapped"  # the new directory is in place, the old one not yet removed
    DISK_FULL = "disk_full"  # a write whose path has this part fails with ENOSPC (not a kill)


def armed(point: FaultPoint, step: object) -> bool:
    return os.environ.get(FAULT_ENV) == f"{point}:{step}"


def crash() -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # not reached: SIGKILL cannot be caught


def maybe_crash(point: FaultPoint, step: object) -> None:
    if armed(point, step):
        crash()


def maybe_fill(site: str, path: Path) -> None:
    """Raise ENOSPC for a write to `path` when `RLVR_FAULT=disk_full:<site>` names its site."""
    if os.environ.get(FAULT_ENV) == f"{FaultPoint.DISK_FULL}:{site}":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
