"""rlvr: train LLM agents with reinforcement learning on OpenPipe ART."""

import os

# litellm (imported by ART) fetches a price map from the network at import unless told not to;
# this machine class is offline, and the bundled map is what we want anyway.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from rlvr.config import ConfigError, TrainConfig, build_config, parse_overrides
from rlvr.loop import RunResult, StopReason, run_training
from rlvr.types import BudgetExhausted, Item, Sampling, Scenario, Scorer

__all__ = [
    "BudgetExhausted",
    "ConfigError",
    "Item",
    "RunResult",
    "Sampling",
    "Scenario",
    "Scorer",
    "StopReason",
    "TrainConfig",
    "build_config",
    "parse_overrides",
    "run_training",
]
