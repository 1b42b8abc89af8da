"""Scenario registry: task name -> "module:factory". A factory takes a TrainConfig and the run's
judge client (None where no judge is configured) and returns a Scenario. Modules are imported only when their task is asked for, so one task's heavy
dependencies never load for another.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import rlvr  # noqa: F401  (sets offline defaults before a scenario imports ART)

if TYPE_CHECKING:
    from rlvr.config import TrainConfig
    from rlvr.types import Scenario

REGISTRY: dict[str, str] = {
    "math": "scenarios.math:make_scenario",
    "email": "scenarios.email:make_scenario",
    "rubric_if": "scenarios.rubric_if:make_scenario",
}

# What `rlvr train TASK` / `make train TASK=...` start from, before the user's key=value overrides:
# settings at which the 135M CPU policy gets mixed groups on each task.
DEFAULTS: dict[str, dict[str, str]] = {
    # Measured: 0.39 -> 0.69 validation, plateau stop at step 22, 15 min on 2 cores.
    "math": {
        "difficulty": "easy",
        "temperature": "0.8",
        "max_tokens": "32",
        "learning_rate": "3e-4",
        "groups_per_batch": "8",
        "num_items": "800",
        "max_minutes": "18",
    },
    # A step (2 groups of 8 episodes, RULER on the local judge, train) takes about 2.5 min on
    # 2 cores, so the budget holds about 8 steps and 4 evaluations.
    "email": {
        "difficulty": "easy",
        "tool_protocol": "text",
        "groups_per_batch": "2",
        "max_val_items": "16",
        "max_minutes": "27",
    },
    # Every rollout costs one local-judge call over 8-17 criteria (~20-40 s on one core), so the
    # default run is small: 60 prompts (6 val / 6 test), 2 groups of 4 per step.
    "rubric_if": {
        "num_items": "60",
        "group_size": "4",
        "groups_per_batch": "2",
        "max_tokens": "64",
        "max_minutes": "25",
    },
}


def task_config(task: str, **overrides: object) -> TrainConfig:
    """The config `rlvr train TASK` starts from (the task's DEFAULTS), with `overrides` on top:
    the notebook and `run_training` equivalent of the CLI."""
    from rlvr.config import build_config

    if task not in REGISTRY:
        raise UnknownTask(task)
    return build_config({"task": task, **DEFAULTS.get(task, {}), **overrides})


class UnknownTask(KeyError):
    def __str__(self) -> str:
        return f"unknown task '{self.args[0]}'; known tasks: {', '.join(sorted(REGISTRY))}"


def make_scenario(cfg: TrainConfig, judge: object | None = None) -> Scenario:
    if cfg.task not in REGISTRY:
        raise UnknownTask(cfg.task)
    module_name, _, factory = REGISTRY[cfg.task].partition(":")
    return getattr(importlib.import_module(module_name), factory)(cfg, judge)
