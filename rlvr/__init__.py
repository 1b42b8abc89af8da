"""rlvr: train LLM agents with reinforcement learning on OpenPipe ART.

The public names below resolve on first use (PEP 562), so that `import rlvr.config` or the
`rlvr` command's `--help` does not pay for importing ART, torch and transformers (~12 s on two
cores); `from rlvr import run_training` imports exactly what it always did.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

# litellm (imported by ART) fetches a price map from the network at import unless told not to;
# this machine class is offline, and the bundled map is what we want anyway.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# public name -> the module that defines it
_EXPORTS = {
    "BudgetExhausted": "rlvr.types",
    "Call": "rlvr.agent",
    "ConfigError": "rlvr.config",
    "Item": "rlvr.types",
    "PluginError": "rlvr.tasks",
    "RunResult": "rlvr.loop",
    "Sampling": "rlvr.types",
    "Scenario": "rlvr.types",
    "ScenarioBase": "rlvr.types",
    "Scorer": "rlvr.types",
    "StopReason": "rlvr.loop",
    "Task": "rlvr.tasks",
    "TrainConfig": "rlvr.config",
    "build_config": "rlvr.config",
    "chat_turn": "rlvr.rollouts",
    "completion_text": "rlvr.types",
    "final_reply": "rlvr.agent",
    "group_scorer": "rlvr.scorers",
    "parse_overrides": "rlvr.config",
    "resolve_task": "rlvr.plugins",
    "reward_scorer": "rlvr.scorers",
    "run_training": "rlvr.loop",
    "scenario": "rlvr.tasks",
    "single_turn": "rlvr.rollouts",
    "task_config": "rlvr.plugins",
    "tool_episode": "rlvr.agent",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # for type checkers and editors; tests/test_package.py holds it to _EXPORTS
    from rlvr.agent import Call, final_reply, tool_episode  # noqa: F401
    from rlvr.config import ConfigError, TrainConfig, build_config, parse_overrides  # noqa: F401
    from rlvr.loop import RunResult, StopReason, run_training  # noqa: F401
    from rlvr.plugins import resolve_task, task_config  # noqa: F401
    from rlvr.rollouts import chat_turn, single_turn  # noqa: F401
    from rlvr.scorers import group_scorer, reward_scorer  # noqa: F401
    from rlvr.tasks import PluginError, Task, scenario  # noqa: F401
    from rlvr.types import (  # noqa: F401
        BudgetExhausted,
        Item,
        Sampling,
        Scenario,
        ScenarioBase,
        Scorer,
        completion_text,
    )
