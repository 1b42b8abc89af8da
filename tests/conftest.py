"""Shared fixtures.

`tiny_run` (session scope, for slow tests): ONE real training run on the CPU policy, shared by
every test that only reads a run directory (rlvr.inspection, `rlvr inspect`, the notebooks):

    math / easy, 2 groups of 4 rollouts (no refills), 2 steps, validation after every step, 16 new tokens,
    40 items (32 train / 4 val / 4 test), scorer = the task's verifier, no judge.

It takes one to a few minutes on 2 shared cores and is started only when a selected test asks
for it. Treat its run directory as read-only: write nothing into it, resume nothing from it.
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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`), a module's tests stay on
    one worker (its module-scoped model, backend or server is built once), and every test that
    reads the shared `tiny_run` joins one group, so that real run is trained once."""
    for item in items:
        group = (
            "tiny_run" if "tiny_run" in getattr(item, "fixturenames", ()) else item.module.__name__
        )
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
