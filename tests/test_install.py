"""Installing rlvr, both routes (docs/guide/install.md), for real:

- the lock (`make setup`) with an EMPTY wheel folder takes torch's CPU build from TORCH_INDEX, here
  a PEP 503 index served on 127.0.0.1 holding the very wheel (hard-linked, not copied), and gives a
  venv where torch, ART and rlvr import; with no source at all it stops in one line;
- `uv pip install -e .` into an environment that already holds the user's torch keeps that torch
  and gives a working `rlvr`.

Each builds a throwaway venv under tmp_path from uv's cache (hard links: seconds, not gigabytes)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tools import lockfile

ROOT = lockfile.ROOT
PIN = lockfile.torch_pin(lockfile.LOCK.read_text())
LOCAL_WHEELS = Path("/opt/wheels")  # where this kind of machine keeps torch's CPU build
UV_VERSION = re.findall(r"UV_VERSION := (\S+)", (ROOT / "Makefile").read_text())[0]
UV = Path.home() / ".cache" / "rlvr" / f"uv-{UV_VERSION}" / "bin" / "uv"  # the Makefile's uv
INDEX_PORT = 48731
SETUP_TIMEOUT_S = 900  # a cold torch unpack on 2 busy cores


def local_wheel() -> Path:
    found = sorted(LOCAL_WHEELS.glob(f"torch-{PIN.version}-*.whl"))
    if not found:
        pytest.skip(f"no torch-{PIN.version} wheel in {LOCAL_WHEELS} to serve")
    return found[0]


class Served(ThreadingHTTPServer):
    """A static file server that remembers the paths it was asked for."""

    requested: list[str]


@pytest.fixture
def torch_index(tmp_path: Path) -> Iterator[tuple[str, Served]]:
    """A PEP 503 index on 127.0.0.1: simple/torch/ holds the lock's torch wheel."""
    wheel = local_wheel()
    project = tmp_path / "index" / "simple" / "torch"
    project.mkdir(parents=True)
    try:
        os.link(wheel, project / wheel.name)
    except OSError:  # another filesystem: a link still serves the same bytes
        (project / wheel.name).symlink_to(wheel)

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            server.requested.append(self.path)

    handler = partial(Handler, directory=str(tmp_path / "index"))
    try:  # the same URL each run: uv's cache keeps the unpacked wheel by its URL
        server = Served(("127.0.0.1", INDEX_PORT), handler)
    except OSError:  # taken: any free port (torch is unpacked again)
        server = Served(("127.0.0.1", 0), handler)
    server.requested = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def make_setup(venv: Path, wheels: Path, index: str) -> subprocess.CompletedProcess[str]:
    """The Makefile's own setup, into a venv of the test's (not `make test`'s own settings)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "setup", f"VENV={venv}", f"WHEELS={wheels}", f"TORCH_INDEX={index}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
    )


def imports(python: Path, code: str) -> str:
    done = subprocess.run(
        [str(python), "-c", code], cwd=python.parent, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.full
def test_setup_takes_torch_from_the_index_when_the_wheel_folder_is_empty(tmp_path, torch_index):
    index, server = torch_index
    (tmp_path / "empty").mkdir()
    done = make_setup(tmp_path / "venv", tmp_path / "empty", index)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "/simple/torch/" in server.requested  # the index was asked, not the wheel folder
    found = imports(
        tmp_path / "venv" / "bin" / "python",
        "import torch, art, rlvr; print(torch.__version__, rlvr.__file__)",
    )
    assert found == f"{PIN.version} {ROOT / 'rlvr' / '__init__.py'}"


@pytest.mark.slow
def test_setup_with_no_torch_source_stops_in_one_line(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/simple"
    (tmp_path / "empty").mkdir()
    done = make_setup(tmp_path / "venv", tmp_path / "empty", dead)
    assert done.returncode == 2
    said = [line for line in done.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(said) == 1 and said[0].startswith("error: "), done.stderr
    assert f"TORCH_INDEX={dead}" in said[0] and f"WHEELS={tmp_path / 'empty'}" in said[0]
    assert not (tmp_path / "venv").exists()  # nothing half made


@pytest.mark.slow
@pytest.mark.full
def test_pip_route_keeps_the_users_torch(tmp_path):
    """Where the lock does not fit (CUDA, macOS, another Python): the user's torch first, then
    rlvr's ranges around it; llama-cpp-python (never imported) is not built."""
    wheel = local_wheel()
    uv = str(UV) if UV.is_file() else shutil.which("uv")
    assert uv, "uv: run `make setup` once (it bootstraps uv)"
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    for step in (
        [uv, "venv", "-q", "--python", "python3.11", str(venv)],
        [uv, "pip", "install", "-q", "--python", str(python), str(wheel)],  # "the user's torch"
        [uv, "pip", "install", "-q", "--python", str(python), "-e", "."],
    ):
        done = subprocess.run(
            step, cwd=ROOT, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S
        )
        assert done.returncode == 0, (step, done.stderr[-3000:])
    tasks = subprocess.run(
        [str(venv / "bin" / "rlvr"), "tasks"], capture_output=True, text=True, timeout=300
    )
    assert tasks.returncode == 0, tasks.stderr[-3000:]
    assert "math" in tasks.stdout and "email" in tasks.stdout
    kept = imports(
        python,
        "from importlib import metadata, util; "
        "print(metadata.version('torch'), util.find_spec('llama_cpp'))",
    )
    assert kept == f"{PIN.version} None"
