"""W&B and Weave integrations: off by default (nothing imported), W&B offline logging for real,
Weave's unusable paths (no credentials, offline mode, no network, a hanging init)."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import art
import pytest

from rlvr import integrations as ig
from rlvr.config import RunConfig
from rlvr.runs import store
from tests.helpers import warm

CLOSED_PORT_URL = (
    "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused
)


@pytest.fixture
def no_wandb_env(monkeypatch, tmp_path):
    """No W&B key anywhere: an empty HOME (no ~/.netrc) and no W&B variables."""
    for name in (
        "WANDB_API_KEY",
        "WANDB_MODE",
        "WANDB_BASE_URL",
        "WANDB_DIR",
        "NETRC",
        "WF_TRACE_SERVER_URL",
        "WANDB_DISABLE_WEAVE",
    ):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def traj_rows(n_groups: int = 3, size: int = 8, step: int = 1) -> list[dict]:
    groups = [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": f"What is {g}+{i}?"},
                        {"role": "assistant", "content": str(g + i)},
                    ],
                    reward=float(i % 2),
                    metrics={"independent_reward": 1.0},
                )
                for i in range(size)
            ]
        )
        for g in range(n_groups)
    ]
    return store.trajectory_rows(
        groups, [f"item-{g}" for g in range(n_groups)], step=step, split="train"
    )


def test_off_by_default_imports_neither_library():
    code = """
import asyncio, sys
from rlvr.config import RunConfig
from rlvr.integrations import open_tracker
async def rollout(x):
    return x + 1
with open_tracker(RunConfig()) as tracker:
    tracker.log_step({"step": 1, "train/reward_mean": 0.5})
    tracker.log_trajectories(1, [{"split": "train", "messages": "[]"}])
    assert tracker.traced(rollout) is rollout
    assert asyncio.run(tracker.traced(rollout)(1)) == 2
    assert not tracker.wandb_on and not tracker.weave_on
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("wandb", "weave"))
assert not loaded, loaded
print("clean")
"""
    # A process of its own, forked warm (tests/helpers/warm.py): its modules are a superset of a
    # cold interpreter's (the training stack preloaded), so neither library in them means neither
    # in one.
    result = warm.run_code(code, timeout_s=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "clean"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"step": 2, "train/kl": None, "hints": ["x"], "alarm/converged": "flat"}, {"step": 2.0}),
        (
            {"step": 1, "val/accuracy": 0.5, "train/loss": float("nan"), "flag": True},
            {"step": 1.0, "val/accuracy": 0.5},
        ),
    ],
)
def test_numeric_keeps_finite_numbers_only(row, expected):
    assert ig.numeric(row) == expected


@pytest.mark.parametrize(("n", "size", "expected"), [(4, 10, [0, 2, 5, 7]), (16, 3, [0, 1, 2])])
def test_sample_spreads_over_the_rows(n, size, expected):
    assert ig.sample(list(range(size)), n) == expected


def test_table_row_has_prompt_and_completion():
    row = traj_rows(1, 2)[1]
    assert ig.table_row(row) == [1, "train", "item-0", 0, 1, 1.0, 1.0, "What is 0+1?", "1"]


def test_credentials_come_from_env_or_netrc(no_wandb_env, monkeypatch):
    assert not ig.wandb_credentials()
    netrc = no_wandb_env / ".netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password placeholder-not-a-key\n")
    netrc.chmod(0o600)
    assert ig.wandb_credentials()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.internal")
    assert not ig.wandb_credentials()  # the key is for another host
    monkeypatch.setenv("WANDB_API_KEY", "placeholder")
    assert ig.wandb_credentials()


# --- Weave: every unusable path is one warning and tracing off ----------------------------------


def _one_warning(call) -> tuple[object, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    ours = [w for w in caught if issubclass(w.category, ig.IntegrationWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    return value, str(ours[0].message)


async def _double(x: int) -> int:
    return 2 * x


def test_weave_without_credentials_warns_once_and_runs_untraced(no_wandb_env):
    tracker, message = _one_warning(lambda: ig.open_tracker(RunConfig(weave=True)))
    assert "no W&B API key" in message and "Weave tracing is off" in message
    assert not tracker.weave_on and tracker.traced(_double) is _double


def test_weave_in_offline_mode_warns_once(no_wandb_env, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "placeholder")
    tracker, message = _one_warning(lambda: ig.open_tracker(RunConfig(weave=True)))
    assert "WANDB_MODE=offline" in message and not tracker.weave_on


@pytest.mark.slow
def test_weave_without_network_fails_fast_and_warns_once(no_wandb_env, monkeypatch):
    # A key is configured but the servers cannot be reached: the real weave.init fails.
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", CLOSED_PORT_URL)
    monkeypatch.setenv("WF_TRACE_SERVER_URL", CLOSED_PORT_URL)
    started = time.monotonic()
    tracker, message = _one_warning(lambda: ig.open_tracker(RunConfig(weave=True)))
    assert time.monotonic() - started < ig.WEAVE_INIT_TIMEOUT_S + 30  # imports included
    assert "Weave could not start" in message and "Weave tracing is off" in message
    assert not tracker.weave_on


def test_a_hanging_weave_init_is_cut_off(no_wandb_env, monkeypatch):
    weave = pytest.importorskip("weave")
    monkeypatch.setenv("WANDB_API_KEY", "placeholder")
    monkeypatch.setattr(ig, "WEAVE_INIT_TIMEOUT_S", 0.2)
    monkeypatch.setattr(weave, "init", lambda project: time.sleep(5))  # fault injection
    started = time.monotonic()
    tracker, message = _one_warning(lambda: ig.open_tracker(RunConfig(weave=True)))
    assert time.monotonic() - started < 3
    assert "weave.init did not answer within 0s" in message and not tracker.weave_on


def test_call_with_timeout_passes_values_and_errors():
    assert ig.call_with_timeout(lambda: 7, 5, "seven") == 7
    with pytest.raises(ZeroDivisionError):
        ig.call_with_timeout(lambda: 1 / 0, 5, "division")
    with pytest.raises(TimeoutError, match="sleeper did not answer"):
        ig.call_with_timeout(lambda: time.sleep(2), 0.1, "sleeper")


async def test_traced_wraps_with_weave_op_when_on():
    weave = pytest.importorskip("weave")
    tracker = ig.Tracker(weave=weave)  # weave.op without weave.init runs the function untraced

    class Judge:
        async def complete(self, messages: list, *, name: str) -> str:
            return f"{name}:{len(messages)}"

    judge = Judge()
    op = tracker.traced(judge.complete, name="judge")
    assert op is not judge.complete and isinstance(op, weave.trace.op.Op)
    assert await op([1, 2], name="ruler") == "ruler:2"
    assert await tracker.traced(_double, name="rollout")(4) == 8


# --- W&B ----------------------------------------------------------------------------------------


def test_wandb_not_installed_warns_once(no_wandb_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    tracker, message = _one_warning(lambda: ig.open_tracker(RunConfig(wandb_project="p")))
    assert "wandb is not installed" in message and not tracker.wandb_on


def test_wandb_init_failure_warns_once(no_wandb_env, monkeypatch, tmp_path):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")

    def broken(**kwargs):  # fault injection
        raise RuntimeError("service did not start\nsecond line")

    monkeypatch.setattr(wandb, "init", broken)
    tracker, message = _one_warning(lambda: ig.open_tracker(RunConfig(wandb_project="p"), tmp_path))
    assert (
        message
        == "W&B could not start (RuntimeError: service did not start); the run continues without W&B"
    )
    assert not tracker.wandb_on
    tracker.log_step({"step": 1, "train/reward_mean": 1.0})  # still a harmless no-op


def test_a_failing_wandb_log_turns_wandb_off(recwarn):
    class Run:
        finished = False

        def log(self, data, step):
            raise ConnectionError("gone")

        def finish(self):
            self.finished = True

    run = Run()
    tracker = ig.Tracker(wandb_run=run)
    tracker.log_step({"step": 1, "train/reward_mean": 1.0, "alarm/converged": "flat"})
    assert not tracker.wandb_on and run.finished
    tracker.log_step({"step": 2, "train/reward_mean": 1.0})  # off now: nothing happens
    tracker.log_trajectories(2, traj_rows(1, 2, step=2))
    assert [str(w.message) for w in recwarn.list if w.category is ig.IntegrationWarning] == [
        "W&B could not log (ConnectionError: gone); W&B logging is off for this run"
    ]


@pytest.mark.slow
def test_wandb_offline_logs_metrics_and_a_trajectory_table(no_wandb_env, monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    weave = pytest.importorskip("weave")  # imported: wandb.init would start Weave by itself
    started_weave = []
    monkeypatch.setattr(weave, "init", lambda *a, **k: started_weave.append(a))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    run_dir = tmp_path / "math-run"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ig.IntegrationWarning)  # offline by request: no warning
        tracker = ig.open_tracker(RunConfig(wandb_project="rlvr-test"), run_dir)
    assert tracker.wandb_on
    assert not started_weave and "WANDB_DISABLE_WEAVE" not in os.environ  # weave=false holds
    tracker.log_step({"step": 0, "val/accuracy": 0.25, "train/kl": None})
    tracker.log_trajectories(1, traj_rows(3, 8, step=1))
    tracker.log_step({"step": 1, "train/reward_mean": 0.5, "hints": ["raise max_tokens"]})
    tracker.log_step({"step": 1, "val/accuracy": 0.5, "alarm/converged": "reward up, val flat"})
    tracker.log_trajectories(0, traj_rows(1, 2, step=0))  # an earlier step (test split) still lands
    tracker.log_step({"step": 2, "train/reward_mean": 0.75})  # commits step 1
    summary = dict(tracker._run.summary)
    tracker.close()
    assert not tracker.wandb_on

    # train and validation rows of one step merge into one W&B step
    assert summary["_step"] == 1
    assert summary["train/reward_mean"] == 0.5 and summary["val/accuracy"] == 0.5
    assert summary["alarm/converged"] == "step 1: reward up, val flat"
    [offline] = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    assert next(offline.glob("run-*.wandb")).stat().st_size > 0
    tables = sorted(
        (offline / "files" / "media" / "table" / "trajectories").glob("train_*.table.json")
    )
    small, first = sorted((json.loads(t.read_text()) for t in tables), key=lambda t: len(t["data"]))
    assert [row[0] for row in small["data"]] == [0, 0]  # the step column keeps the real step
    assert first["columns"] == ig.TABLE_COLUMNS
    assert len(first["data"]) == ig.SAMPLE_TRAJECTORIES
    assert {row[3] for row in first["data"]} == {0, 1, 2}  # every group is sampled
    assert first["data"][0][7:] == ["What is 0+0?", "0"]
    assert not (run_dir / "wandb").exists()  # WANDB_DIR wins over the run directory


@pytest.mark.slow
def test_wandb_without_credentials_logs_offline_into_the_run_dir(no_wandb_env, tmp_path):
    pytest.importorskip("wandb")
    run_dir = tmp_path / "math-run"
    tracker, message = _one_warning(
        lambda: ig.open_tracker(RunConfig(wandb_project="rlvr-test"), run_dir)
    )
    assert "logging offline under" in message and "wandb sync" in message
    tracker.log_step({"step": 1, "train/reward_mean": 0.5})
    tracker.close()
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
