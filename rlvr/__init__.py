"""rlvr: train LLM agents with reinforcement learning on OpenPipe ART.

The public names below resolve on first use (PEP 562), so that `import rlvr.config` or the
`rlvr` command's `--help` does not pay for importing ART, torch and transformers; `from rlvr import
run_training` imports exactly what it always did.
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
    "Compared": "rlvr.evaluation.paired_gains",
    "ConfigError": "rlvr.config",
    "Environment": "rlvr.types",
    "EnvironmentBase": "rlvr.types",
    "Item": "rlvr.types",
    "PluginError": "rlvr.task_api.api",
    "RunResult": "rlvr.training",
    "Sampling": "rlvr.types",
    "Scorer": "rlvr.types",
    "StopReason": "rlvr.training",
    "Task": "rlvr.task_api.api",
    "TestBlock": "rlvr.evaluation.paired_gains",
    "RunConfig": "rlvr.config",
    "build_config": "rlvr.config",
    "chat_turn": "rlvr.task_api.rollouts",
    "completion_text": "rlvr.types",
    "environment": "rlvr.task_api.api",
    "final_reply": "rlvr.agent",
    "group_scorer": "rlvr.scoring.scorers",
    "mcp_tools": "rlvr.agent.mcp",
    "parse_overrides": "rlvr.config",
    "resolve_task": "rlvr.task_api.plugins",
    "reward_scorer": "rlvr.scoring.scorers",
    "run_training": "rlvr.training",
    "single_turn": "rlvr.task_api.rollouts",
    "task_config": "rlvr.task_api.plugins",
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
    from rlvr.agent.mcp import mcp_tools  # noqa: F401
    from rlvr.config import ConfigError, RunConfig, build_config, parse_overrides  # noqa: F401
    from rlvr.evaluation.paired_gains import Compared, TestBlock  # noqa: F401
    from rlvr.scoring.scorers import group_scorer, reward_scorer  # noqa: F401
    from rlvr.task_api.api import PluginError, Task, environment  # noqa: F401
    from rlvr.task_api.plugins import resolve_task, task_config  # noqa: F401
    from rlvr.task_api.rollouts import chat_turn, single_turn  # noqa: F401
    from rlvr.training import RunResult, StopReason, run_training  # noqa: F401
    from rlvr.types import (  # noqa: F401
        BudgetExhausted,
        Environment,
        EnvironmentBase,
        Item,
        Sampling,
        Scorer,
        completion_text,
    )
