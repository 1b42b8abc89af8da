"""A user's own task, written outside the repository (its own items, rollout and check, nothing
from `scenarios/`), trained on the CPU policy two ways: a file reference on the CLI (2 real
steps: the second asks, by `get_inference_name(sampling.step)`, for the first update's weights)
and an installed entry point (1 step). `run_training(cfg, task=..., scorer=...)` with objects
is the custom-task notebook's run (tests/test_notebooks.py). Its own scorer is used alone and
inside a composite. Also the `rlvr new` scaffold and the no-code dataset task (1 step each).
The two routes train the tiny random model (`tiny_model`): the user's scorer gives every group
spread whatever the replies say, and the route is what is checked; the scaffold and the dataset
task score with their own checks, which want replies that are sometimes right (SmolLM2's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from rlvr.metrics import M
from rlvr.runs import store
from scenarios.dataset import EXAMPLE
from tests.helpers import warm
from tests.helpers.tiny_runs import TINY, TWO_STEPS, cli, only_run

pytestmark = pytest.mark.slow

USER_TASK = '''
"""A user's own task: sums, a hand-written rollout through ART's OpenAI client, a check."""
import json
from pathlib import Path

import art
import rlvr

HERE = Path(__file__).parent


def load():
    return [json.loads(line) for line in (HERE / "items.jsonl").read_text().splitlines()]


async def rollout(model, item, sampling):
    messages = [
        {"role": "system", "content": "Reply with only the number."},
        {"role": "user", "content": item.prompt},
    ]
    response = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(sampling.step),
        messages=messages,
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        logprobs=True,
    )
    return art.Trajectory(messages_and_choices=[*messages, response.choices[0]], reward=0.0)


def check(item, trajectory):
    return float(item.answer in rlvr.completion_text(trajectory))


def make():
    return rlvr.environment(name="user-sums", load=load, rollout=rollout, check=check)


def brevity(group, item):
    """The user's scorer: shorter replies score higher."""
    return [1.0 / (1 + len(rlvr.completion_text(t))) for t in group.trajectories]
'''


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """The user's package, in a folder of its own outside the repository."""
    folder = tmp_path / "site" / "user_sums"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(USER_TASK)
    (folder / "items.jsonl").write_text(
        "".join(
            json.dumps({"id": f"s{a}{b}", "prompt": f"What is {a} + {b}?", "answer": str(a + b)})
            + "\n"
            for a in range(1, 7)
            for b in range(1, 8)
        )
    )
    return folder


def assert_complete(run_dir: Path, steps: int = 1) -> dict:
    """Every file of the run-directory contract is there; returns the summary."""
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.png"):
        assert (run_dir / name).is_file(), name
    every_step = [f"step-{n:04d}" for n in range(1, steps + 1)]
    for name in [*every_step, "val-0000", f"val-{steps:04d}", "test"]:
        assert (run_dir / "trajectories" / f"{name}.parquet").is_file(), name
    assert (run_dir / "checkpoints" / "best" / "adapter_config.json").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == steps and 0.0 <= summary["test_accuracy"] <= 1.0
    rows = [r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r]
    assert [r[M.STEP] for r in rows] == list(range(1, steps + 1))
    return summary


def fresh_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m rlvr.cli.main ARGS` in a fresh interpreter, as a user's shell runs it."""
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli.main", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def tiny_args(runs: Path, **more: object) -> list[str]:
    return [f"{k}={v}" for k, v in (TINY | more).items()] + [f"runs_root={runs}"]


def test_a_file_reference_trains_with_the_users_scorer_alone(
    user_dir: Path, tmp_path: Path, tiny_model: Path
) -> None:
    ref = f"{user_dir}/__init__.py"
    runs = tmp_path / "runs"
    args = tiny_args(runs, model=tiny_model, **TWO_STEPS)
    fresh_cli("train", f"{ref}:make", f"scorer={ref}:brevity", *args)
    run_dir = only_run(runs)
    assert run_dir.name.startswith("user-sums-")
    assert_complete(run_dir, steps=2)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["task"] == f"{ref}:make" and config["scorer"] == f"{ref}:brevity"
    frame = pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")
    replies = [json.loads(m)[-1].get("content") or "" for m in frame["messages"].to_list()]
    lengths = [1.0 / (1 + len(reply)) for reply in replies]
    assert frame["reward"].to_list() == pytest.approx(lengths)  # the user's scorer gave them


def test_an_installed_entry_point_trains_with_a_composite(
    user_dir: Path, tmp_path: Path, tiny_model: Path
) -> None:
    site = user_dir.parent
    info = site / "user_sums-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-sums\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[rlvr.tasks]\nuser_sums = user_sums:make\n\n[rlvr.scorers]\nbrevity = user_sums:brevity\n"
    )
    assert "\nuser_sums\t" in cli("tasks", path=[site]).stdout
    runs = tmp_path / "runs"
    scorer = "scorer=verifier*0.5+brevity*0.5"
    cli("train", "user_sums", scorer, *tiny_args(runs, model=tiny_model), path=[site])
    run_dir = only_run(runs)
    assert_complete(run_dir)
    rows = [r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r]
    assert "reward/brevity" in rows[0] and "reward/verifier" in rows[0]


def test_the_scaffold_trains_and_its_own_test_passes(tmp_path: Path) -> None:
    cli("new", "adder", "--dir", str(tmp_path))
    tests = warm.run_module(
        "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "adder"), cwd=tmp_path
    )
    assert tests.returncode == 0, tests.stdout[-2000:]
    runs = tmp_path / "runs"
    cli("train", f"{tmp_path}/adder/task.py:task", *tiny_args(runs))
    assert_complete(only_run(runs))


def test_the_dataset_task_trains_from_a_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cli(
        "train",
        "dataset",
        f"data_path={EXAMPLE}",
        "verifier=numeric",
        "num_items=40",
        *tiny_args(runs),
    )
    run_dir = only_run(runs)
    assert run_dir.name.startswith("dataset-")
    assert_complete(run_dir)
    options = json.loads((run_dir / "config.json").read_text())["task_options"]
    assert options["verifier"] == "numeric" and options["num_items"] == 40
