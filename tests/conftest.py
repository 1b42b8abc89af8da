"""Shared fixtures.

`tiny_run` (session scope, for slow tests): ONE real training run on the CPU policy, shared by
every test that only reads a run directory (rlvr.inspection, `rlvr inspect`, the notebooks):

    math / easy, 2 groups of 4 rollouts (no refills), 2 steps, validation after every step, 16 new tokens,
    40 items (32 train / 4 val / 4 test), scorer = the task's verifier, no judge.

It takes one to a few minutes on 2 shared cores and is started only when a selected test asks
for it. Treat its run directory as read-only: write nothing into it, resume nothing from it.

`agent_run` (session scope, for slow tests): ONE `rlvr train` of a user's tool agent from its own
file (tests/test_agent.py's USER_AGENT, text protocol), output piped to a file: a 3-step warm start
on 6 demonstrations, then 2 RL steps. tests/test_agent.py reads its metrics, tests/test_progress.py
its piped output. Read-only too.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

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
    "sampling.max_refill": 0,
}


class TinyRun(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    run_dir: Path
    result: object  # rlvr.training.RunResult


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    from rlvr.config import TrainConfig
    from rlvr.training import run_training

    run_dir = tmp_path_factory.mktemp("tiny") / "math-tiny"
    result = asyncio.run(run_training(TrainConfig(**TINY_RUN, run_dir=run_dir)))
    return TinyRun(run_dir=run_dir, result=result)


class AgentRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_dir: Path
    stdout: str  # what `rlvr train` printed, piped to a file
    stderr: str


@pytest.fixture(scope="session")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> AgentRun:
    from tests import warm
    from tests.test_agent import USER_AGENT
    from tests.test_custom_task import TINY

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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`), a module's tests stay on
    one worker (its module-scoped model, backend or server is built once), and every test that
    reads a shared run (`tiny_run`, `agent_run`) joins that run's group, so it is trained once."""
    for item in items:
        used = getattr(item, "fixturenames", ())
        shared = [name for name in SHARED_RUNS if name in used]
        group = shared[0] if shared else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))


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
