"""The hybrid loop end to end on the real CPU policy (slow tier)."""

import json

import polars as pl
import pytest

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.training import StopReason, run_training
from tests.helpers.tiny_runs import TINY_RUN

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tiny_run):
    """The session's shared tiny run (tests/conftest.py): read only."""
    return tiny_run.result, tiny_run.run_dir


def test_run_directory_contract(finished_run):
    result, run_dir = finished_run
    assert result.stop_reason in (StopReason.MAX_STEPS, StopReason.PLATEAU)
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.png"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in (
        "stop_reason",
        "best_step",
        "baseline_val",
        "best_val",
        "test_accuracy",
        "alarms",
        "steps",
        "wall_s",
    ):
        assert key in summary, key
    assert summary["steps"] == result.steps == 2
    assert 0.0 <= summary["test_accuracy"] <= 1.0
    rows = [row.on_disk() for row in store.read_metrics(run_dir)]
    steps = [r for r in rows if M.REWARD_MEAN in r]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    assert [r[M.STEP] for r in steps] == [1, 2]
    assert [r[M.STEP] for r in evals] == [0, 1, 2]  # baseline, then every step
    # Each validation carries the ground truth of the training rollouts since the previous one:
    # what tells the divergence alarm a reward that follows its truth from a gamed one.
    assert evals[0].get(M.VAL_TRAIN_TRUTH) is None  # the baseline: no training yet
    truths = [r[M.VAL_TRAIN_TRUTH] for r in evals[1:]]
    assert truths == pytest.approx([r[M.INDEPENDENT] for r in steps])
    for key in (
        M.REWARD_STD,
        M.NO_SIGNAL_RATE,
        M.ALL_ZERO,
        M.ALL_ONE,
        M.TRUNCATED_RATE,
        M.LOOPING_RATE,
        M.SKIPPED,
        M.SAMPLER_KL,
        M.UPDATE_KL,
    ):
        assert key in steps[0], key
    # lr_warmup_steps=2: half the rate at step 1, the whole rate from step 2
    rate = RunConfig(**TINY_RUN).learning_rate
    assert [r[M.LEARNING_RATE] for r in steps] == pytest.approx([rate / 2, rate])
    frame = pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")
    assert frame.height == 8 and set(frame["split"]) == {"train"}
    assert frame["independent_reward"].null_count() == 0
    assert (run_dir / "trajectories" / "test.parquet").is_file()
    # The start was tested right after the baseline validation, on the same weights, and that
    # result is the summary's start: the end tested only the best (and the last) checkpoint.
    assert evals[0][M.TEST_CHECKPOINT] == "start"
    start = pl.read_parquet(run_dir / "trajectories" / "test-start.parquet")
    final = pl.read_parquet(run_dir / "trajectories" / "test.parquet")
    assert set(start["step"]) == {0} and set(start["split"]) == {"test"}
    assert sorted(start["item_id"]) == sorted(final["item_id"])
    assert summary["test"]["items"] == final.height
    assert summary["test"]["start"] == pytest.approx(start["reward"].mean())
    assert (run_dir / "checkpoints" / "best" / "adapter_config.json").is_file()
    assert any(p.name.startswith("step-") for p in (run_dir / "checkpoints").iterdir())


def test_each_row_says_its_phases_peak_memory(finished_run):
    """A step row holds the peak resident memory of its rollouts and of its update, a validation
    row that of its evaluation; each at most the process's high-water mark written beside it."""
    _, run_dir = finished_run
    rows = [row.on_disk() for row in store.read_metrics(run_dir)]
    steps = [r for r in rows if M.REWARD_MEAN in r]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    phases = [(r, M.RSS_ROLLOUTS) for r in steps] + [(r, M.RSS_UPDATE) for r in steps]
    phases += [(r, M.RSS_EVAL) for r in evals]
    for row, key in phases:
        # The model alone is ~0.5 GB resident.
        assert 0.5 < row[key] <= row[M.PEAK_RSS] + 0.01, (key, row[M.STEP])


def test_trained_steps_advance_the_policy(finished_run):
    _, run_dir = finished_run
    rows = [r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r]
    trained = sum(r[M.TRAINED_GROUPS] > 0 for r in rows)
    assert rows[-1][M.POLICY_STEP] == trained


def test_finished_run_cannot_be_resumed(finished_run):
    _, run_dir = finished_run
    import asyncio

    with pytest.raises(ValueError, match="already finished"):
        asyncio.run(run_training(RunConfig(), resume=run_dir))


def test_cli_rejects_bad_config_without_writing(tmp_path):
    from typer.testing import CliRunner

    from rlvr.cli.main import app

    out = CliRunner().invoke(app, ["train", "math", "group_size=abc", f"runs_root={tmp_path}"])
    assert out.exit_code == 2
    assert "group_size" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_eval_of_a_finished_run_repeats_its_test_accuracy(finished_run, tmp_path):
    """`rlvr eval` opens the finished run read only (rlvr.training.session.open_finished) and
    scores the best checkpoint again: greedy, the same items, the same accuracy."""
    import asyncio
    import shutil

    from rlvr.training import evaluate_run

    result, run_dir = finished_run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)  # the shared run stays untouched
    metrics_before = (copy / "metrics.jsonl").read_text()
    accuracy = asyncio.run(evaluate_run(copy, "test"))
    assert accuracy == pytest.approx(result.test_accuracy)
    assert (copy / "trajectories" / "eval-test.parquet").is_file()
    assert (copy / "metrics.jsonl").read_text() == metrics_before  # nothing recovered or added


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sampled_eval_of_a_finished_run(finished_run, tmp_path, temperature):
    """`rlvr eval --samples K`: at temperature 0 every sample is the greedy answer, so pass@1 is
    the greedy test accuracy; at any temperature pass@k does not fall with k, nor pass^k rise."""
    import asyncio
    import shutil

    from rlvr.training import evaluate_samples

    result, run_dir = finished_run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    sampled = asyncio.run(evaluate_samples(copy, 3, temperature, "test"))
    assert [row.k for row in sampled.by_k] == [1, 2, 3]
    assert sampled.samples == 3 and sampled.items == len(sampled.scores)
    if temperature == 0:
        assert sampled.by_k[0].pass_at_k.value == pytest.approx(result.test_accuracy)
        assert {len(set(s)) for s in sampled.scores.values()} == {1}  # greedy: one answer
    passes = [row.pass_at_k.value for row in sampled.by_k]
    hats = [row.pass_hat_k.value for row in sampled.by_k]
    assert passes == sorted(passes) and hats == sorted(hats, reverse=True)
    assert (copy / "trajectories" / "eval-test-samples.parquet").is_file()
