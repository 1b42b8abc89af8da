"""Shared fixtures.

`tiny_run` (session scope, for slow tests): ONE real training run on the CPU policy, shared by
every test that only reads a run directory (rlvr.inspection, `rlvr inspect`, the notebooks):

    math / easy, 2 groups of 4 rollouts (no refills), 2 steps, validation after every step, 16 new tokens,
    40 items (32 train / 4 val / 4 test), scorer = the task's verifier, no judge.

It takes one to a few minutes on 2 shared cores and is started only when a selected test asks
for it. Treat its run directory as read-only: write nothing into it, resume nothing from it.

`agent_run` (session scope, for slow tests): ONE `rlvr train` of a user's tool agent from its own
file (tests/test_agent.py's USER_AGENT, text protocol), output piped to a file: a 3-step warm start
on 6 demonstrations, then 1 RL step. tests/test_agent.py reads its metrics, tests/test_progress.py
its piped output. Read-only too.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from rlvr.engine.types import THREADS_ENV

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing downloads from a model hub in tests

TINY_RUN = {
    "task": "math",
    "task_options": {"difficulty": "easy", "num_items": 40},
    "group_size": 4,
    "groups_per_batch": 2,
    "max_steps": 2,
    "eval_every": 1,
    "max_tokens": 16,
    "judge": "none",
    # 4 validation items swing by 0.25: a noisy fall must not stop this fixture early
    "stopping.on_divergence": "warn",
    # the tests that read it count groups: no refills (tests/test_pool.py covers them)
    "draw.max_refill": 0,
    # its 4 groups of 4 at 16 tokens are sometimes all constant: the run's story, not its preflight,
    # is what the readers test (tests/test_no_signal.py covers the no-signal stop)
    "preflight": False,
    # the rows' learning rate rises over the first step (tests/test_loop.py reads it)
    "lr_warmup_steps": 2,
}


class TinyRun(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    run_dir: Path
    result: object  # rlvr.training.RunResult


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    from rlvr.config import RunConfig
    from rlvr.training import run_training

    run_dir = tmp_path_factory.mktemp("tiny") / "math-tiny"
    result = asyncio.run(run_training(RunConfig(**TINY_RUN, run_dir=run_dir)))
    return TinyRun(run_dir=run_dir, result=result)


class AgentRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_dir: Path
    stdout: str  # what `rlvr train` printed, piped to a file
    stderr: str


@pytest.fixture(scope="session")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> AgentRun:
    from tests.helpers import warm
    from tests.agent.test_agent import USER_AGENT
    from tests.task_api.test_custom_task import TINY

    folder = tmp_path_factory.mktemp("agent")
    agent = folder / "elsewhere" / "capitals_agent.py"
    agent.parent.mkdir()
    agent.write_text(USER_AGENT.replace("PROTOCOL", "text"))
    settings = {**TINY, "max_tokens": 16, "sft_steps": 3, "sft_batch_size": 2}
    done = warm.rlvr(
        "train",
        f"{agent}:make",
        *(f"{k}={v}" for k, v in settings.items()),
        f"runs_root={folder / 'runs'}",
        timeout_s=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = [p.parent for p in (folder / "runs").glob("*/summary.json")]
    return AgentRun(run_dir=run_dir, stdout=done.stdout, stderr=done.stderr)


# Session-scoped real runs: every test that reads one joins its group (one worker trains it once).
SHARED_RUNS = ("tiny_run", "agent_run")


# Seconds each group took on a whole run (`make durations` writes it). xdist hands groups out in
# collection order: the heaviest first, so no long group starts last while the other worker idles.
DURATIONS = Path(__file__).with_name("durations.json")


def group_of(item: pytest.Item) -> str:
    used = getattr(item, "fixturenames", ())
    shared = [name for name in SHARED_RUNS if name in used]
    return shared[0] if shared else item.module.__name__


def heaviest_first(groups: list[str], seconds: dict[str, float]) -> list[str]:
    """`groups` (in collection order) by their recorded seconds, longest first; a group without
    a record (a new module) goes first too, as if it were the longest, until it has one."""
    longest = max(seconds.values(), default=0.0)
    return sorted(groups, key=lambda group: -seconds.get(group, longest))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each xdist group's seconds to {DURATIONS.name} (see `make durations`)",
    )


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`), a module's tests stay on
    one worker (its module-scoped model, backend or server is built once), and every test that
    reads a shared run (`tiny_run`, `agent_run`) joins that run's group, so it is trained once.
    Groups are collected heaviest first (`make test` keeps that order: --no-loadscope-reorder)."""
    groups = {id(item): group_of(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    rank = {
        g: r for r, g in enumerate(heaviest_first(list(dict.fromkeys(groups.values())), recorded))
    }
    items.sort(key=lambda item: rank[groups[id(item)]])  # stable: a group's own order is kept


class GroupSeconds:
    """Sums each group's test seconds where the workers report (the controller), and writes them
    at the end of the session."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "@" in report.nodeid:  # xdist's `nodeid@group`; the workers' own reports have none
            group = report.nodeid.rsplit("@", 1)[1]
            self.seconds[group] = self.seconds.get(group, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        """This run's groups replace their records; a group it did not run keeps its own."""
        recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        seconds = recorded | {group: round(s, 1) for group, s in self.seconds.items()}
        DURATIONS.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("store_durations") and "PYTEST_XDIST_WORKER" not in os.environ:
        config.pluginmanager.register(GroupSeconds(), "rlvr-group-seconds")
    torch_threads_for_this_thread()


def torch_threads_for_this_thread() -> None:
    """RLVR_TORCH_THREADS for pytest's own thread, before it computes anything. torch keeps a
    thread count per thread once a thread has computed: the engine sets it where it loads (a
    worker thread), and the tests that run the model on pytest's thread would otherwise compute
    with one thread a core, which on cores shared with the other test worker waits for a
    descheduled thread at every operation."""
    threads = os.environ.get(THREADS_ENV)
    if threads:
        import torch

        torch.set_num_threads(int(threads))


@pytest.hookimpl(optionalhook=True)  # an xdist hook, run where the workers report
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """xdist applies a group by suffixing the node id with `@group`. A pytest it does not match
    ignores that silently (9.2 did): every group splits, and every module-scoped model and chain
    is built once per worker. Stop the run with a clear error instead of doubling it."""
    if node.config.getvalue("dist") == "loadgroup":  # type: ignore[attr-defined]
        ungrouped = [nodeid for nodeid in ids if "@" not in nodeid]
        if ungrouped:
            raise pytest.UsageError(
                f"pytest-xdist did not apply --dist loadgroup to {ungrouped[0]} "
                f"(and {len(ungrouped) - 1} more): pin a pytest that xdist supports"
            )
