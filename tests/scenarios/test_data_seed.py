"""Every task that generates its items draws them from `data_seed`, never from `seed`: runs of
several seeds train, validate and test on the same items (rlvr.config.RunConfig.data_seed)."""

from __future__ import annotations

import pytest

from rlvr.task_api.plugins import resolve_task, task_config


def items_of(task: str, **values: object) -> list[str]:
    cfg = task_config(task, num_items="12", **{k: str(v) for k, v in values.items()})
    return [item.model_dump_json() for item in resolve_task(task).build(cfg).load()]


@pytest.mark.parametrize("task", ["email", "math", "multihop", "2048", "reasoning_gym"])
def test_a_tasks_generated_items_follow_the_data_seed_not_the_seed(task: str) -> None:
    items = items_of(task)
    assert items_of(task, seed=1) == items
    assert items_of(task, data_seed=1) != items
