"""`make lab`: JupyterLab on the project's kernel, with notebooks/ as its root.

`python -m tools.lab [--port N] [--root DIR]` listens on 127.0.0.1 only, behind a token made fresh
for each start and printed once, as the URL to open. The token reaches Jupyter through
`JUPYTER_TOKEN` (not the command line, where `ps` would show it to every local user); Jupyter then
logs it masked. Notebooks run on the `python3` kernel of the environment this runs in (`.venv` under
make): its kernelspec says `python`, which Jupyter replaces by its own interpreter.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

HOST = "127.0.0.1"
DEFAULT_PORT = 8888
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


class LabCommand(BaseModel):
    """What to exec for one JupyterLab server, and the URL that opens it."""

    model_config = ConfigDict(frozen=True)

    argv: tuple[str, ...]
    env: dict[str, str]
    url: str


def lab_command(
    python: str, root: Path, port: int, token: str, env: dict[str, str], as_root: bool = False
) -> LabCommand:
    """The server's command line and environment (the caller's, plus the token) and its URL."""
    argv = (
        python,
        "-m",
        "jupyterlab",
        f"--ServerApp.ip={HOST}",
        f"--ServerApp.port={port}",
        # the printed URL names this port: fail rather than move to another
        "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}",
        # nothing to fetch from outside: no update check, no news feed
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
        # containers and CI run as root, where Jupyter refuses to start unless told
        *(["--ServerApp.allow_root=True"] if as_root else []),
    )
    # the environment's own kernelspec wins over one a user installed under ~/.local
    lab_env = {**env, "JUPYTER_TOKEN": token, "JUPYTER_PREFER_ENV_PATH": "1"}
    return LabCommand(argv=argv, env=lab_env, url=f"http://{HOST}:{port}/lab?token={token}")


def port_problem(port: int) -> str | None:
    """Why the port cannot be served on 127.0.0.1, in one line; None when it is free."""
    if not 1 <= port <= 65535:
        return f"--port {port}: expected a TCP port, 1 to 65535"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as error:
            return f"port {port} on {HOST} is taken ({error.strerror}): pick another, LAB_PORT=N"
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lab", description=__doc__)
    parser.add_argument("--port", default=str(DEFAULT_PORT), help="port on 127.0.0.1")
    parser.add_argument("--root", type=Path, default=NOTEBOOKS, help="the server's root folder")
    args = parser.parse_args(argv)
    if not args.port.isdigit():
        print(f"error: --port {args.port!r}: expected a TCP port, 1 to 65535", file=sys.stderr)
        return 2
    port = int(args.port)
    problem = port_problem(port)
    if problem is None and not args.root.is_dir():
        problem = f"--root {args.root}: not a folder (expected the notebooks to serve)"
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    token = secrets.token_urlsafe(24)
    root = args.root.resolve()
    command = lab_command(
        sys.executable, root, port, token, dict(os.environ), as_root=os.geteuid() == 0
    )
    print(f"JupyterLab ({args.root}, kernel {sys.executable}): open {command.url}", flush=True)
    os.execve(command.argv[0], list(command.argv), command.env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
