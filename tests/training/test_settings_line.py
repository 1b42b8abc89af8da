"""The line a fresh run starts with: where each setting that decides how it learns came from."""

from __future__ import annotations

from typing import Any

import pytest

from rlvr.config import RunConfig
from rlvr.task_api.plugins import resolve_task, task_config
from rlvr.training.output import settings_line


@pytest.mark.parametrize(
    ("cfg", "defaults", "says", "absent"),
    [
        (
            # the email task's defaults are work: its plateau stop waits for half its steps
            lambda: task_config("email"),
            lambda: resolve_task("email").defaults,
            [
                "the task's defaults sft_steps=12, groups_per_batch=2, learning_rate=0.00015, "
                "temperature=0.7",
                "eval_every=3, max_steps=36;",
                "rlvr's defaults group_size=8, max_minutes=None",
                "waits until 50% of max_steps=36 is spent",
            ],
            ["yours", "max_minutes=27"],
        ),
        (
            lambda: RunConfig(task="mine.py:make", max_minutes=12),
            lambda: {},
            [
                "settings: the task sets no defaults; yours max_minutes=12;",
                "rlvr's defaults sft_steps=0, group_size=8, groups_per_batch=4",
                "waits until 50% of max_minutes=12 is spent",
            ],
            ["the task's defaults"],
        ),
        (
            lambda: RunConfig(task="mine.py:make", **{"stopping.min_budget_share": 0}),
            lambda: {},
            ["max_steps=40", "the plateau stop may end the run at any evaluation"],
            ["waits until"],
        ),
        (
            # a key the person set to the task's own default value is the task's
            lambda: task_config("email", temperature=0.7, group_size=4),
            lambda: resolve_task("email").defaults,
            ["temperature=0.7", "yours group_size=4;"],
            ["yours temperature", "rlvr's defaults group_size"],
        ),
    ],
    ids=["built-in", "user-task", "share-0", "same-as-default"],
)
def test_the_settings_line_names_where_each_setting_came_from(
    cfg: Any, defaults: Any, says: list[str], absent: list[str]
) -> None:
    line = settings_line(cfg(), defaults())
    assert "\n" not in line
    for words in says:
        assert words in line, (words, line)
    for words in absent:
        assert words not in line, (words, line)
