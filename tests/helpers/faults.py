"""Fault injection for the tests: `RLVR_FAULT=<point>:<step>` makes a process that installed the
injector SIGKILL itself at that point of that step, as the OOM killer or a pulled plug would (no
cleanup, no atexit, no finally); `RLVR_FAULT=disk_full:<site>` instead makes the first write to
a site of the run directory (its first part: metrics, trajectories, checkpoints, .art, report,
summary, config) fail as a full disk would (ENOSPC).

rlvr calls `rlvr.runs.damage.fault_point(name)` at each point and knows nothing of this module:
`install()` sets it as `rlvr.runs.damage.fault_hook`. Every process a test starts through
tests/helpers/warm.py installs it; a test in its own process installs it with the `injector`
fixture of its module.

`step` is the training step being done (1, 2, ...). For the two policy points it is the policy
checkpoint step being written, which is the same number while every step trains.
"""

from __future__ import annotations

import errno
import os
import signal
from enum import StrEnum
from typing import NoReturn

from rlvr.runs import damage

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


def inject(name: str) -> None:
    """The hook: at the point `RLVR_FAULT` names (read at each call, as a forked child's
    environment is its own), a full disk for `disk_full:<site>`, else a SIGKILL."""
    if os.environ.get(FAULT_ENV) != name:
        return
    if name.startswith(f"{FaultPoint.DISK_FULL}:"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    crash()


def install() -> None:
    damage.fault_hook = inject
