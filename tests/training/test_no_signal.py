"""No signal, said early: a run whose first steps find no group with reward spread, even after
refills, stops with stop_reason=no_signal, the rewards it saw and the template's remedies
(rlvr.training.state). The tasks' rollouts set their reward without asking the model, so no
policy is ever loaded."""

from __future__ import annotations

import asyncio
import json

import art
import pytest

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs.records import parse_row
from rlvr.task_api.api import environment
from rlvr.training import run_training
from rlvr.training.stop_rules import NO_SIGNAL_STEPS, no_signal_stop, no_signal_verdict


def constant_task(reward: float) -> object:
    async def rollout(model, item, sampling) -> art.Trajectory:
        return art.Trajectory(
            messages_and_choices=[
                {"role": "user", "content": item.prompt},
                {"role": "assistant", "content": "ok"},
            ],
            reward=reward,
        )

    def load() -> list[dict]:
        return [{"id": f"q{n}", "prompt": f"question {n}"} for n in range(40)]

    return environment(name="constant", load=load, rollout=rollout)


def config(tmp_path, **overrides) -> RunConfig:
    return RunConfig(
        task="constant",
        judge="none",
        group_size=4,
        groups_per_batch=2,
        max_steps=4,
        eval_every=4,
        run_dir=tmp_path / "run",
        **overrides,
    )


@pytest.mark.parametrize(
    ("reward", "remedy", "kind"),
    [(0.0, "partial credit", M.ALL_ZERO), (1.0, "harder items", M.ALL_ONE)],
)
def test_a_run_without_signal_stops_and_says_what_to_do(tmp_path, capsys, reward, remedy, kind):
    result = asyncio.run(run_training(config(tmp_path), task=constant_task(reward)))
    assert result.stop_reason == "no_signal" and result.steps == NO_SIGNAL_STEPS
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # Nothing was trained: the test block is the start's result, kept from the first validation,
    # and no test split was evaluated again for it.
    block = summary["test"]
    assert block["start"] == block["final"] == result.test_accuracy
    assert block["gain"] == 0.0 and block["items"] == 4
    tables = sorted(p.name for p in (tmp_path / "run" / "trajectories").glob("test*.parquet"))
    assert tables == ["test-start.parquet", "test.parquet"]
    verdict = summary["no_signal"]
    assert any(remedy in r for r in verdict["remedies"])
    assert verdict["reward_counts"] == {f"{reward:g}": 2 * NO_SIGNAL_STEPS * 4 * 2}
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    steps = [r for r in rows if M.REWARD_MEAN in r]
    # Every group was replaced once (the cap is groups_per_batch), and none had signal.
    assert [r[M.REFILLED] for r in steps] == [2, 2]
    assert [r[M.TRAINED_GROUPS] for r in steps] == [0, 0]
    assert all(r[kind] == 4 for r in steps)
    assert "no signal" in capsys.readouterr().out


def test_preflight_false_trains_on_anyway(tmp_path):
    result = asyncio.run(run_training(config(tmp_path, preflight=False), task=constant_task(0.0)))
    assert result.stop_reason == "max_steps" and result.steps == 4


@pytest.mark.parametrize(
    ("trained", "scored", "preflight", "stops"),
    [
        ([0, 0], [2, 2], True, True),
        ([0, 1], [2, 2], True, False),  # one group with signal: there is something to learn
        ([0, 0], [2, 2], False, False),
        ([0], [2], True, False),  # too early to say
        ([0, 0, 0], [2, 2, 2], True, False),  # only the first steps decide (a resumed run too)
        ([0, 0], [0, 2], True, False),  # step 1's groups all skipped (the judge failed)
        ([0, 0], [0, 0], True, False),  # nothing scored: a judge fault, not the data's
    ],
)
def test_no_signal_stop_decides_on_the_first_steps(trained, scored, preflight, stops):
    rows = [
        parse_row({M.STEP: i + 1, M.REWARD_MEAN: 0.0, M.GROUPS: g, M.TRAINED_GROUPS: n})
        for i, (n, g) in enumerate(zip(trained, scored, strict=True))
    ]
    cfg = RunConfig(preflight=preflight)
    assert no_signal_stop(cfg, rows) is stops


def test_the_verdict_names_truncation_when_replies_were_cut():
    rows = [
        parse_row(
            {
                M.STEP: 1,
                M.REWARD_MEAN: 0.0,
                M.GROUPS: 4,
                M.ALL_ZERO: 4,
                M.TRUNCATED_RATE: 0.8,
                M.REWARD_COUNTS: {"0": 32},
            }
        ),
    ]
    verdict = no_signal_verdict(rows, RunConfig(max_tokens=48))
    assert "80% of replies were cut at max_tokens=48" in verdict.message()
    assert verdict.all_zero == 4 and verdict.reward_counts == {"0": 32}
