"""MCP servers' tools in `tool_episode` (`rlvr.mcp_tools`): a small server written with the `mcp`
package's own server API (FastMCP) inside the test, over stdio and streamable HTTP. Schemas come
from the server, calls go through the official client, failures are one-line observations, one
server serves concurrent episodes and never outlives its run; a tool agent on it trains a step."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import rlvr
from rlvr.agent import chat
from rlvr.agent.mcp import McpError, McpTools
from rlvr.cli.main import app
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.types import Item, Sampling
from tests.helpers import warm
from tests.helpers.processes import alive, gone_within
from tests.helpers.tiny_runs import tiny_model_path

pytestmark = pytest.mark.slow  # every test starts a real MCP server process

SERVER = '''
import os
import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP

CAPITALS = {"france": "Paris", "peru": "Lima", "kenya": "Nairobi", "japan": "Tokyo",
            "chile": "Santiago", "egypt": "Cairo", "spain": "Madrid", "cuba": "Havana",
            "canada": "Ottawa", "norway": "Oslo", "ghana": "Accra", "india": "Delhi"}
server = FastMCP("capitals", host="127.0.0.1", port=int(os.environ.get("PORT", "0")))


@server.tool()
def lookup(country: str) -> str:
    """Look up the capital of a country."""
    return CAPITALS[country.strip().lower()]


@server.tool()
def whoami() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    if os.environ.get("PID_FILE"):
        Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    if os.environ.get("FAIL"):
        sys.exit("the server refuses to start: " + os.environ["FAIL"])
    server.run(transport=os.environ.get("TRANSPORT", "stdio"))
'''

TASK = """
import sys
from pathlib import Path

import rlvr
from rlvr.agent import chat

HERE = Path(__file__).parent
CAPITALS = {"france": "Paris", "peru": "Lima", "kenya": "Nairobi", "japan": "Tokyo",
            "chile": "Santiago", "egypt": "Cairo", "spain": "Madrid", "cuba": "Havana",
            "canada": "Ottawa", "norway": "Oslo", "ghana": "Accra", "india": "Delhi"}


def load():
    return [{"id": c, "prompt": f"What is the capital of {c.title()}?", "answer": city}
            for c, city in CAPITALS.items()]


def check(item, trajectory):
    return float(item.answer.lower() in (rlvr.final_reply(trajectory) or "").lower())


OPENED = []  # every McpTools made, held here so only the run can have stopped them


def make():
    tools = rlvr.mcp_tools(
        command=[sys.executable, str(HERE / "server.py")],
        env={"PID_FILE": str(HERE / "server.pid"), "FAIL": FAIL},
    )
    OPENED.append(tools)

    async def rollout(model, item, sampling):
        messages = chat("Answer with the city only.", item.prompt)
        return await rlvr.tool_episode(model, item, messages, tools, sampling, max_turns=2)

    return rlvr.environment(name="mcp-capitals", load=load, rollout=rollout, check=check)


task = rlvr.Task(name="mcp-capitals", make=make)
"""


@pytest.fixture
def server(tmp_path: Path) -> Path:
    path = tmp_path / "mcp" / "server.py"
    path.parent.mkdir()
    path.write_text(SERVER)
    return path


def stdio(server: Path, **env: str) -> McpTools:
    pid_file = server.parent / "server.pid"
    return rlvr.mcp_tools(
        command=[sys.executable, str(server)], env={"PID_FILE": str(pid_file), **env}
    )


def test_the_servers_tools_schemas_and_calls(server: Path) -> None:
    with stdio(server) as tools:
        assert tools.names == ["lookup", "whoami", "add"]
        schema = tools[2].schema()["function"]
        assert schema["description"] == "Add two numbers."
        assert schema["parameters"]["required"] == ["a"]  # the server's own schema
        assert schema["parameters"]["properties"]["b"]["default"] == 1

        async def calls() -> list[str]:
            return await asyncio.gather(
                tools[0].run({"country": "Peru"}),
                tools[2].run({"a": 2}),
                tools[2].run({"a": 2, "b": 5}),
            )

        assert asyncio.run(calls()) == ["Lima", "3", "7"]


def test_concurrent_episodes_share_one_server_that_stops_with_close(server: Path) -> None:
    tools = stdio(server)
    pid = int((server.parent / "server.pid").read_text())
    whoami = tools[1]

    async def many() -> list[str]:
        return await asyncio.gather(*(whoami.run({}) for _ in range(16)))

    assert set(asyncio.run(many())) == {str(pid)}
    assert asyncio.run(many()) == [str(pid)] * 16  # a second event loop: the same session
    tools.close()
    assert gone_within(pid, 15)


def test_the_server_stops_when_its_tools_are_no_longer_referenced(server: Path) -> None:
    tools = stdio(server)
    pid = int((server.parent / "server.pid").read_text())
    assert alive(pid)
    del tools  # the run's environment, holding the tools, is gone
    gc.collect()
    assert gone_within(pid, 15)


async def test_failed_calls_are_one_line_observations(server: Path) -> None:
    with stdio(server) as tools:
        script = [
            rlvr.Call(name="lookup", arguments={"country": "Atlantis"}),
            rlvr.Call(name="teleport", arguments={"to": "Lima"}),
            rlvr.Call(name="add", arguments={"a": "many"}),
            "Lima",
        ]
        trajectory = await rlvr.tool_episode(
            None,
            Item(id="x", prompt="?"),
            chat("Answer.", "Capital of Atlantis?"),
            tools,
            Sampling(),
            max_turns=4,
            protocol="tools",
            script=lambda messages, turn: script[turn],
            last_turn_note=None,
        )
    observations = [m["content"] for m in trajectory.messages() if m["role"] == "tool"]
    assert observations[0] == "Error: lookup: Error executing tool lookup: 'atlantis'"
    assert observations[1].startswith("Error: unknown tool 'teleport'; the tools are lookup")
    assert observations[2].startswith("Error: add: a:")  # checked against the server's schema
    assert all("\n" not in o for o in observations)
    assert trajectory.metrics["tool_errors"] == 3 and rlvr.final_reply(trajectory) == "Lima"


def test_a_tool_the_server_does_not_have_is_one_line(server: Path) -> None:
    with pytest.raises(McpError, match=r"has no tool 'search'; its tools: lookup, whoami, add"):
        rlvr.mcp_tools(command=[sys.executable, str(server)], include=["lookup", "search"])
    with rlvr.mcp_tools(command=[sys.executable, str(server)], include=["add"]) as only:
        assert only.names == ["add"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["{python}", "{server}"], "failed to start: .*its stderr: .*refuses to start: on purpose"),
        (["no-such-mcp-server"], "failed to start: .*cannot run no-such-mcp-server"),
    ],
)
def test_a_server_that_fails_to_start_is_one_line(
    server: Path, command: list, message: str
) -> None:
    command = [c.format(python=sys.executable, server=server) for c in command]
    with pytest.raises(McpError, match=message) as error:
        rlvr.mcp_tools(command=command, env={"FAIL": "on purpose"}, startup_timeout_s=60)
    assert "\n" not in str(error.value)


def test_the_server_dies_with_a_run_killed_without_cleanup(server: Path, tmp_path: Path) -> None:
    pid_file = server.parent / "server.pid"
    script = (
        "import sys, time, rlvr\n"
        f"tools = rlvr.mcp_tools(command=[sys.executable, {str(server)!r}], env={{'PID_FILE': {str(pid_file)!r}}})\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    run = warm.start("-c", script)  # a process of its own, forked warm (tests/helpers/warm.py)
    try:
        assert run.readline().strip() == "ready", run.read_stderr()[-2000:]
        pid = int(pid_file.read_text())
        assert alive(pid)
        run.send_signal(signal.SIGKILL)
        run.wait(30)
        assert gone_within(pid, 15)  # PR_SET_PDEATHSIG: Linux killed it with its parent
    finally:
        run.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_streamable_http_server(server: Path) -> None:
    port = free_port()
    env = {**os.environ, "TRANSPORT": "streamable-http", "PORT": str(port)}
    process = subprocess.Popen([sys.executable, str(server)], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        with rlvr.mcp_tools(url=f"http://127.0.0.1:{port}/mcp") as tools:
            assert tools.names == ["lookup", "whoami", "add"]
            assert asyncio.run(tools[0].run({"country": "kenya"})) == "Nairobi"
            assert asyncio.run(tools[1].run({})) == str(process.pid)
    finally:
        process.kill()
        process.wait(10)


# --- a run ---------------------------------------------------------------------------------------


def write_task(tmp_path: Path, fail: str = "") -> Path:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "server.py").write_text(SERVER)
    (folder / "task.py").write_text(f"FAIL = {fail!r}\n{TASK}")
    return folder


def test_a_tool_agent_on_an_mcp_server_trains_a_step(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    runs = tmp_path / "runs"
    out = warm.rlvr(
        "train",
        f"{folder}/task.py:task",
        f"model={tiny_model_path()}",  # the route and the server's life, not what the policy says
        "group_size=2",
        "groups_per_batch=2",
        "max_steps=1",
        "eval_every=1",
        "max_tokens=16",
        "judge=none",
        "stopping.on_divergence=warn",
        f"runs_root={runs}",
        timeout_s=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = [p.parent for p in runs.glob("*/summary.json")]
    rows = [r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r]
    assert [r[M.STEP] for r in rows] == [1]
    assert all("rollout/turns" in r and "rollout/tool_calls" in r for r in rows)
    tools = json.loads(pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")["tools"][0])
    assert [t["function"]["name"] for t in tools] == ["lookup", "whoami", "add"]
    assert gone_within(int((folder / "server.pid").read_text()), 15)  # stopped with the run


def test_a_task_whose_server_fails_to_start_exits_2(tmp_path: Path) -> None:
    folder = write_task(tmp_path, fail="no database")
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["train", f"{folder}/task.py:task", f"runs_root={runs}", "judge=none"]
    )
    assert result.exit_code == 2, result.output
    assert "failed to start" in result.output and "no database" in result.output
    assert "Traceback" not in result.output and not runs.exists()


def test_a_run_stops_the_server_its_task_started_even_while_referenced(tmp_path: Path) -> None:
    """In a long-lived process (a notebook) the run, not the garbage collector, ends the server:
    the task's module still holds the tools when the run closes."""
    from rlvr.config import RunConfig
    from rlvr.task_api.imports import import_target
    from rlvr.training.session import open_scratch

    folder = write_task(tmp_path)
    reference = f"{folder}/task.py:task"
    module = import_target(str(folder / "task.py"), reference)  # the one the run imports

    async def build() -> int:
        async with open_scratch(RunConfig(task=reference, judge="none")) as run:
            assert run.environment.name == "mcp-capitals"
            return int((folder / "server.pid").read_text())

    pid = asyncio.run(build())
    assert module.OPENED, "the task's tools are still referenced"
    assert gone_within(pid, 15)
