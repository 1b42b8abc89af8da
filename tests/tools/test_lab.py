"""`make lab` (tools/lab.py): JupyterLab on 127.0.0.1 behind a fresh token printed once as the URL,
notebooks/ as its root, notebooks on the environment's own python; a real server in the slow test,
stopped with nothing left behind."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.helpers.repo import ROOT
from tools import lab

START_TIMEOUT_S = 180  # JupyterLab's first start imports a lot on 2 busy cores
STOP_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_command_listens_on_loopback_and_keeps_the_token_off_the_command_line() -> None:
    command = lab.lab_command("/env/bin/python", Path("/nb"), 9999, "s3cret", {"HOME": "/h"})
    assert command.argv[:3] == ("/env/bin/python", "-m", "jupyterlab")
    assert "--ServerApp.ip=127.0.0.1" in command.argv and "--ServerApp.port=9999" in command.argv
    assert "--ServerApp.root_dir=/nb" in command.argv
    assert not any("s3cret" in part for part in command.argv)  # `ps` shows argv to everyone
    assert command.env == {"HOME": "/h", "JUPYTER_TOKEN": "s3cret", "JUPYTER_PREFER_ENV_PATH": "1"}
    assert command.url == "http://127.0.0.1:9999/lab?token=s3cret"
    assert "--ServerApp.allow_root=True" not in command.argv
    as_root = lab.lab_command("/env/bin/python", Path("/nb"), 9999, "s3cret", {}, as_root=True)
    assert as_root.argv[-1] == "--ServerApp.allow_root=True"  # containers run as root


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--port", "http"], "--port 'http': expected a TCP port, 1 to 65535"),
        (["--port", "70000"], "--port 70000: expected a TCP port, 1 to 65535"),
        (["--port", "0"], "--port 0: expected a TCP port, 1 to 65535"),
        (["--port", "PORT", "--root", "/no/such/folder"], "--root /no/such/folder: not a folder"),
    ],
    ids=["word", "too-high", "zero", "no-root"],
)
def test_bad_input_is_one_line_and_exit_2(args, expected: str, capsys) -> None:
    args = [str(free_port()) if a == "PORT" else a for a in args]
    assert lab.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err


def test_a_taken_port_is_one_line_naming_lab_port(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert lab.main(["--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and f"port {port} on 127.0.0.1 is taken" in err and "LAB_PORT" in err
    )


def status_of(url: str, data: bytes | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except urllib.error.URLError:  # not listening yet
        return 0, b""


def children(pid: int) -> list[tuple[psutil.Process, list[str]]]:
    """The live descendants of a process with their command lines (one that ends while it is
    read is left out)."""
    found = []
    for process in psutil.Process(pid).children(recursive=True):
        try:
            found.append((process, process.cmdline()))
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_lab_serves_the_notebooks_behind_its_token_and_stops_clean(tmp_path) -> None:
    port = free_port()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        server = subprocess.Popen(  # what `make lab` runs: $(BIN)/python -m tools.lab --port N
            [sys.executable, "-m", "tools.lab", "--port", str(port)],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not re.search(r"open (\S+)", out.read_text()) and time.monotonic() < deadline:
            assert server.poll() is None, err.read_text()[-3000:]
            time.sleep(0.2)
        [url] = re.findall(r"open (\S+)", out.read_text())
        token = url.rpartition("token=")[2]
        assert url == f"http://127.0.0.1:{port}/lab?token={token}" and len(token) >= 32
        base = f"http://127.0.0.1:{port}/api"
        while status_of(f"{base}/status?token={token}")[0] != 200:
            assert server.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.5)

        notebook = "inspect_rollouts.ipynb"  # the root is notebooks/
        code, body = status_of(f"{base}/contents/{notebook}?token={token}")
        assert code == 200
        model = json.loads(body)
        assert model["type"] == "notebook" and model["name"] == notebook
        on_disk = json.loads((ROOT / "notebooks" / notebook).read_text())
        assert [c["source"] for c in model["content"]["cells"]] == [
            "".join(c["source"]) for c in on_disk["cells"]
        ]
        for wrong in ("", "?token=wrong"):
            assert status_of(f"{base}/contents/{notebook}{wrong}")[0] in (401, 403)

        # a kernel, as opening the notebook starts one: the project's interpreter
        code, body = status_of(f"{base}/kernels?token={token}", data=b"{}")
        assert code == 201 and json.loads(body)["name"] == "python3"
        while not (kernels := [p for p in children(server.pid) if "ipykernel_launcher" in p[1]]):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert [argv[:3] for _, argv in kernels] == [[sys.executable, "-m", "ipykernel_launcher"]]
        started = [process for process, _ in children(server.pid)]
    finally:
        server.send_signal(signal.SIGTERM)  # Ctrl-C's sibling: Jupyter shuts its kernels down
        try:
            server.wait(timeout=STOP_TIMEOUT_S)
        finally:
            for process in started:
                if process.is_running():
                    process.kill()
    assert server.returncode is not None
    assert not [p for p in started if p.is_running()], "a kernel outlived the server"
    said = out.read_text() + err.read_text()
    assert said.count(token) == 1, said[-3000:]  # printed once; Jupyter logs it masked
