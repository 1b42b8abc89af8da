"""rlvr: train LLM agents with reinforcement learning on OpenPipe ART."""

import os

# litellm (imported by ART) fetches a price map from the network at import unless told not to;
# this machine class is offline, and the bundled map is what we want anyway.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from rlvr.config import ConfigError, TrainConfig, build_config, parse_overrides
from rlvr.loop import RunResult, StopReason, run_training
from rlvr.plugins import resolve_task, task_config
from rlvr.rollouts import chat_turn, single_turn
from rlvr.scorers import group_scorer, reward_scorer
from rlvr.tasks import PluginError, Task, scenario
from rlvr.types import BudgetExhausted, Item, Sampling, Scenario, Scorer, completion_text

__all__ = [
    "BudgetExhausted",
    "ConfigError",
    "Item",
    "PluginError",
    "RunResult",
    "Sampling",
    "Scenario",
    "Scorer",
    "StopReason",
    "Task",
    "TrainConfig",
    "build_config",
    "chat_turn",
    "completion_text",
    "group_scorer",
    "parse_overrides",
    "resolve_task",
    "reward_scorer",
    "run_training",
    "scenario",
    "single_turn",
    "task_config",
]
