"""Shared fixtures.

`tiny_run` (session scope, for slow tests): ONE real training run on the CPU policy, shared by
every test that only reads a run directory (rlvr.inspection, `rlvr inspect`, the notebooks):

    math / easy, 2 groups of 4 rollouts (no refills), 2 steps, validation after every step, 16 new tokens,
    40 items (32 train / 4 val / 4 test), scorer = the task's verifier, no judge.

It takes one to a few minutes on 2 shared cores and is started only when a selected test asks
for it. Treat its run directory as read-only: write nothing into it, resume nothing from it.

`agent_run` (session scope, for slow tests): ONE `rlvr train` of a user's tool agent from its own
file (USER_AGENT of tests/helpers/agents.py, text protocol), output piped to a file: a 3-step warm
start on 6 demonstrations, then 1 RL step. tests/agent/test_agent.py reads its metrics,
tests/training/test_progress.py its piped output. Read-only too.

`tiny_model` (session scope): a model directory of the tiny random Llama with SmolLM2's tokenizer
(tests/helpers/tiny_llama.py), for `model=` in the whole runs that test plumbing (run directories,
resumes, damaged files) rather than what the policy learns.

Their settings are in tests/helpers/tiny_runs.py; how the suite is grouped and ordered, in
tests/helpers/suite.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from rlvr.engine.types import THREADS_ENV
from tests.helpers import suite
from tests.helpers.suite import DURATIONS, heaviest_first
from tests.helpers.tiny_runs import TINY, TINY_RUN, AgentRun, TinyRun

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing downloads from a model hub in tests


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    from rlvr.config import RunConfig
    from rlvr.training import run_training

    run_dir = tmp_path_factory.mktemp("tiny") / "math-tiny"
    result = asyncio.run(run_training(RunConfig(**TINY_RUN, run_dir=run_dir)))
    return TinyRun(run_dir=run_dir, result=result)


@pytest.fixture(scope="session")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> AgentRun:
    from tests.helpers import warm
    from tests.helpers.agents import USER_AGENT

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


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.tiny_llama import cached_tiny_model

    return cached_tiny_model()


def group_of(item: pytest.Item) -> str:
    return suite.group_of(item.module.__name__, getattr(item, "fixturenames", ()))


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
            nodeid, group = report.nodeid.rsplit("@", 1)
            self.seconds[group] = self.seconds.get(group, 0.0) + report.duration
            # a module whose every test joins a shared run's group is recorded too, as its own
            # group of no seconds: tests/test_suite_order.py holds every module to a record
            self.seconds.setdefault(suite.module_of(nodeid), 0.0)

    def pytest_sessionfinish(self) -> None:
        """This run's groups replace their records; a group it did not run keeps its own, unless
        it names a test module that is no longer there."""
        recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        seconds = recorded | {group: round(s, 1) for group, s in self.seconds.items()}
        for gone in suite.stale_records(seconds, suite.module_names()):
            del seconds[gone]
        DURATIONS.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("store_durations") and "PYTEST_XDIST_WORKER" not in os.environ:
        config.pluginmanager.register(GroupSeconds(), "rlvr-group-seconds")
    torch_threads_for_this_thread()


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures, tiny_run's among them
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The tiny model's directory, which TINY names, is on disk before any slow test runs."""
    if item.get_closest_marker("slow"):
        from tests.helpers.tiny_llama import cached_tiny_model

        cached_tiny_model()


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
