"""A user's own reward function is held against the ground truth like any judge: a real run whose
reward pays for wrong answers raises alarm/judge_disagrees (the documented promise; only the task's
own reward is exempt, rlvr.task_api.plugins.compared_with_truth)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlvr.config import RunConfig
from rlvr.training import run_training

pytestmark = pytest.mark.slow

PAYS_FOR_WRONG = '''
def pays_for_wrong(completion: str, ground_truth: str) -> float:
    """Full reward for any answer but the right one."""
    return 0.0 if completion.strip() == ground_truth.strip() else 1.0
'''


def test_a_users_reward_that_pays_for_wrong_answers_raises_the_alarm(tmp_path: Path) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text(PAYS_FOR_WRONG)
    cfg = RunConfig(
        task="math",
        task_options={"difficulty": "easy", "num_items": 40},
        scorer=f"{reward}:pays_for_wrong",
        judge="none",
        group_size=4,
        groups_per_batch=2,
        max_steps=3,
        eval_every=3,
        max_tokens=2,  # cut replies: the truth fails nearly all of them, the reward pays them
        preflight=False,  # all-1 groups are expected here
        run_dir=tmp_path / "run",
        **{"draw.max_refill": 0},
    )
    result = asyncio.run(run_training(cfg))
    assert [a.name for a in result.alarms] == ["judge_disagrees"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    fired = [r for r in rows if "alarm/judge_disagrees" in r]
    assert [r["step"] for r in fired] == [3]
    assert "rewards answers the ground truth fails" in fired[0]["alarm/judge_disagrees"]
