"""Runs a server command and ends its whole process group when the owner goes. Standard library
only: it runs under any Python (`python supervise.py COMMAND...`), started in a session of its own.

The owner holds the write end of this process's stdin. When the owner exits in any way (a clean
stop, an exception, SIGKILL, the OOM killer) the kernel closes that end, the read here returns
EOF, and the group (the server and every process it started: vLLM's engine core among them) gets
SIGTERM, then SIGKILL after a grace period. PR_SET_PDEATHSIG alone would reach only the direct
child, not the engine core it spawned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 5.0
GROUP_LINE = "supervise: process group "


def end_group(grace_s: float = GRACE_S) -> None:
    """SIGTERM the other processes of this process group, then SIGKILL those still running."""
    group = os.getpgrp()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        members = _others(group)
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _others(group):
            time.sleep(0.1)


def _others(group: int) -> list[int]:
    """Running (not zombie) processes of `group` other than this one."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(entry))
    return found


def watch_owner() -> None:
    """Block until the owner's end of stdin closes, then end the group."""
    while os.read(0, 4096):
        pass
    end_group()
    os._exit(1)


def main(command: list[str]) -> int:
    if not command:
        print("usage: supervise.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    # The group's id in the log: whoever reads it can check that nothing of the server is left.
    print(f"{GROUP_LINE}{os.getpgrp()}", flush=True)
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    threading.Thread(target=watch_owner, daemon=True).start()
    # A stop from the owner (SIGTERM to the group) reaches the child directly; here it only ends
    # this process once the child has gone.
    signal.signal(signal.SIGTERM, lambda *_: None)
    code = child.wait()
    end_group(grace_s=1.0)  # the child's own children (an orphaned engine core) go with it
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
