"""Run a command as a child that dies with the process that started it.

    python mcp_launch.py PARENT_PID COMMAND [ARGS ...]

Executed by path in front of an MCP stdio server's command (standard library only: no package is
imported). It asks Linux to SIGKILL it when the thread that started it exits (PR_SET_PDEATHSIG,
kept across exec), then becomes the command. So a run killed without cleanup (SIGKILL, the OOM
killer) never leaves its MCP server behind, as the local judge never outlives its run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: mcp_launch.py PARENT_PID COMMAND [ARGS ...]", file=sys.stderr)
        return 2
    parent, command = int(argv[1]), argv[2:]
    # Not Linux: no prctl; the parent's own cleanup stops the server.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        return 127
    return 0  # unreachable: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
