"""`max_minutes` is a ceiling: a capped run ends within it, its evaluations and final tests
included, says what the cap cut, and a cap too small for its held-out evaluations is refused
before any training, naming the smallest that fits (rlvr.training.work).

The task is slow on purpose (fault injection of a slow machine): its check sleeps on every
held-out item and its rollouts take their time without asking the model, so no policy is loaded
and the run's time is the task's."""

from __future__ import annotations

import asyncio
import json
import re
import time

import art
import pytest

from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import M
from rlvr.runs.records import StopReason
from rlvr.task_api.api import environment
from rlvr.training import run_training
from tests.helpers.tiny_runs import tiny_model_path

CHECK_S = 0.25  # each held-out item's check
ROLLOUT_S = 0.4  # each training rollout (a step makes its one group, no refills)


def slow_task() -> object:
    async def rollout(model, item, sampling) -> art.Trajectory:
        await asyncio.sleep(ROLLOUT_S)
        return art.Trajectory(
            messages_and_choices=[
                {"role": "user", "content": item.prompt},
                {"role": "assistant", "content": "ok"},
            ],
            reward=0.0,
        )

    def check(item, trajectory) -> float:
        time.sleep(CHECK_S)  # blocks the loop: the items are checked one after another
        return 0.0

    def load() -> list[dict]:
        return [{"id": f"q{n}", "prompt": f"question {n}"} for n in range(40)]

    # judged_check: the check runs on held-out items only; training reads the rollout's reward
    return environment(
        name="slow",
        load=load,
        rollout=rollout,
        check=check,
        reward=lambda i, t: t.reward,
        judged_check=True,
    )


def config(tmp_path, **overrides) -> RunConfig:
    return RunConfig(
        task="slow",
        model=str(tiny_model_path()),  # the clock is the claim: the tiny model's steps are quick
        judge="none",
        # the cap plans the first step at its rollouts times the measured item time: one group of
        # two and no refills let a small cap hold several steps
        group_size=2,
        groups_per_batch=1,
        draw={"max_refill": 0},
        max_steps=500,
        eval_every=8,
        preflight=False,  # its constant reward trains nothing: the steps only take time
        run_dir=tmp_path / "run",
        **overrides,
    )


def tolerance_s(cap_s: float) -> float:
    return max(0.02 * cap_s, 30.0)


def test_a_capped_run_ends_within_its_cap_and_says_what_it_cut(tmp_path, capsys):
    minutes = 0.25
    began = time.monotonic()
    result = asyncio.run(run_training(config(tmp_path, max_minutes=minutes), task=slow_task()))
    wall = time.monotonic() - began
    assert wall <= minutes * 60 + tolerance_s(minutes * 60)
    assert result.stop_reason == StopReason.TIME_BUDGET
    assert 0 < result.steps < 500
    out = capsys.readouterr().out
    cut = f"cut by max_minutes={minutes:g}: RL to {result.steps} of 500 steps"
    assert cut in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cut"].startswith(cut)
    # the last checkpoint is validated, and the test split was evaluated for the run's result
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    assert evals[-1][M.STEP] == result.steps
    assert summary["test"]["items"] == 4
    # the estimate after the first step, with what the cap gives
    assert re.search(
        r"estimate: ~\d+ min on this machine for 0 warm-start steps, 500 RL steps", out
    )
    assert f"max_minutes={minutes:g} gives ~" in out


def test_a_cap_too_small_for_the_evaluations_is_refused_before_training(tmp_path):
    # the first validation (4 items) measures the speed; the start's test (4 more) does not fit
    with pytest.raises(ConfigError) as refused:
        asyncio.run(run_training(config(tmp_path, max_minutes=0.05), task=slow_task()))
    message = str(refused.value)
    assert "\n" not in message
    need = float(re.search(r"smallest cap that fits is max_minutes=([\d.]+)", message).group(1))
    # what has run (the session's start, the first validation) plus the start's test at the
    # measured speed, rounded up to a tenth of a minute
    assert need > 0.05 and need * 60 >= 8 * CHECK_S and round(need * 10) == need * 10
    assert not list((tmp_path / "run").glob("trajectories/step-*"))  # not one step rolled out
