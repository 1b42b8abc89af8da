"""A tool that never answers: the call is cut at its timeout, the timeout is the model's
observation and the episode's `tool_timeouts`, the other episodes of the group are not held, and
nothing outlives the run (a sync tool's thread ends when its function returns; an MCP server stops
with its tools). Function tools (sync and async) and a real MCP server over stdio."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import art
import pytest

import rlvr
from rlvr.agent import EpisodeMetric, ToolTimeout, chat, running_tool_threads
from rlvr.agent.tools import as_tool
from rlvr.metrics import M, trajectory_metric_means
from rlvr.runs.records import parse_row
from rlvr.training.output import TOOL_TIMEOUTS, tool_timeouts
from rlvr.types import Item, Sampling
from tests.helpers.processes import gone_within

LIMIT_S = 1.0
ITEM = Item(id="q", prompt="Capital of Peru?", answer="Lima")
RELEASE = threading.Event()  # lets the blocked sync tools return at the end of a test


def lookup(country: str) -> str:
    """Look up the capital of a country."""
    return {"peru": "Lima"}.get(country.lower(), "unknown")


def hang_sync(country: str) -> str:
    """A lookup that blocks its thread (a stuck socket, a lock never released)."""
    RELEASE.wait()
    return "late"


async def hang_async(country: str) -> str:
    """A lookup that awaits an answer that never comes."""
    await asyncio.Event().wait()
    return "never"


def script_calling(tool: str) -> Any:
    """One call of `tool`, then the final reply."""

    def play(_messages: Any, turn: int) -> rlvr.Call | str:
        return rlvr.Call(name=tool, arguments={"country": "Peru"}) if turn == 0 else "Lima"

    return play


async def timed_episode(
    tools: list[Any], tool: str, **settings: Any
) -> tuple[art.Trajectory, float]:
    """An episode whose script calls `tool`, and the seconds it took."""
    started = time.monotonic()
    trajectory = await rlvr.tool_episode(
        None,
        ITEM,
        chat("Answer.", ITEM.prompt),
        tools,
        Sampling(),
        max_turns=2,
        protocol="tools",
        script=script_calling(tool),
        last_turn_note=None,
        **settings,
    )
    return trajectory, time.monotonic() - started


async def group_of_four(tools: list[Any], hanging: str, **settings: Any) -> list[Any]:
    """A group of four episodes played together, the odd ones calling the hanging tool."""
    return await asyncio.gather(
        *(timed_episode(tools, hanging if n % 2 else "lookup", **settings) for n in range(4))
    )


def observation(trajectory: art.Trajectory) -> str:
    return next(m["content"] for m in trajectory.messages() if m["role"] == "tool")


def check_group(played: list[Any], hanging: str, limit: float) -> None:
    """The hanging calls end at the limit as an observation, counted; the others are not held."""
    for n, (trajectory, seconds) in enumerate(played):
        if n % 2:
            assert observation(trajectory) == (
                f"Error: {hanging}: no answer within {limit:g} s; the call was abandoned"
            )
            assert trajectory.metrics[EpisodeMetric.TOOL_TIMEOUTS] == 1.0
            assert trajectory.metrics[EpisodeMetric.TOOL_ERRORS] == 1.0
            assert limit <= seconds < limit + 5
        else:
            assert observation(trajectory) == "Lima"
            assert trajectory.metrics[EpisodeMetric.TOOL_TIMEOUTS] == 0.0
            assert seconds < limit  # finished while its neighbours' calls were still hanging
        assert rlvr.final_reply(trajectory) == "Lima"  # the episode went on after the timeout
    groups = [art.TrajectoryGroup([t for t, _ in played])]
    assert trajectory_metric_means(groups)[TOOL_TIMEOUTS] == 0.5


@pytest.mark.parametrize("hanging", [hang_sync, hang_async], ids=["sync", "async"])
async def test_a_function_tool_that_never_answers_is_cut_at_its_timeout(hanging: Any) -> None:
    RELEASE.clear()
    try:
        played = await group_of_four([lookup, hanging], hanging.__name__, tool_timeout_s=LIMIT_S)
        check_group(played, hanging.__name__, LIMIT_S)
        # A blocked sync call keeps its daemon thread until its function returns; async ones none.
        assert running_tool_threads() == (2 if hanging is hang_sync else 0)
    finally:
        RELEASE.set()
    deadline = time.monotonic() + 5
    while running_tool_threads() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert running_tool_threads() == 0


@pytest.mark.parametrize(
    ("episode_limit", "own_limit", "expected"),
    [(0.3, None, 0.3), (None, 0.3, 0.3), (30.0, 0.3, 0.3)],
    ids=["episode", "tool-without-episode-limit", "tool-over-episode"],
)
async def test_which_limit_applies(
    episode_limit: float | None, own_limit: float | None, expected: float
) -> None:
    tool = as_tool(hang_async).model_copy(update={"timeout_s": own_limit})
    with pytest.raises(ToolTimeout, match=rf"no answer within {expected:g} s"):
        await tool.run({"country": "Peru"}, episode_limit)


async def test_a_tool_raising_its_own_timeout_error_is_a_failure_not_a_timeout() -> None:
    def remote(country: str) -> str:
        """A client that gives up on its own."""
        raise TimeoutError("the upstream took too long")

    trajectory, _ = await timed_episode([remote], "remote", tool_timeout_s=LIMIT_S)
    assert observation(trajectory) == (
        "Error: remote failed: TimeoutError: the upstream took too long"
    )
    assert trajectory.metrics[EpisodeMetric.TOOL_TIMEOUTS] == 0.0


@pytest.mark.parametrize(("rate", "said"), [(0.5, "  tool timeouts 0.50/rollout"), (0.0, "")])
def test_the_step_line_says_the_timeouts(rate: float, said: str) -> None:
    row = parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5, TOOL_TIMEOUTS: rate})
    assert tool_timeouts(row) == said


HANGING_SERVER = '''
import asyncio
import os
from pathlib import Path

from mcp.server.fastmcp import FastMCP

server = FastMCP("capitals")


@server.tool()
def lookup(country: str) -> str:
    """Look up the capital of a country."""
    return {"peru": "Lima"}.get(country.lower(), "unknown")


@server.tool()
async def hang(country: str) -> str:
    """A lookup whose backend never answers."""
    await asyncio.sleep(3600)
    return "late"


if __name__ == "__main__":
    Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    server.run(transport="stdio")
'''


@pytest.mark.slow  # starts a real MCP server process
def test_an_mcp_tool_that_never_answers_is_cut_and_the_server_stops(tmp_path: Path) -> None:
    server = tmp_path / "server.py"
    server.write_text(HANGING_SERVER)
    pid_file = tmp_path / "server.pid"
    tools = rlvr.mcp_tools(
        command=[sys.executable, str(server)],
        env={"PID_FILE": str(pid_file)},
        call_timeout_s=LIMIT_S,
    )
    pid = int(pid_file.read_text())
    with tools:
        # The episode's longer default yields to the server's own call_timeout_s.
        played = asyncio.run(group_of_four(list(tools), "hang"))
        check_group(played, "hang", LIMIT_S)
        # The session outlives the abandoned calls: the next one is answered.
        assert asyncio.run(tools[0].run({"country": "Peru"})) == "Lima"
    assert gone_within(pid, 15)
