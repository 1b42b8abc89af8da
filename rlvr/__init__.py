"""rlvr: train LLM agents with reinforcement learning on OpenPipe ART."""

from rlvr.config import ConfigError, TrainConfig, build_config, parse_overrides
from rlvr.types import BudgetExhausted, Item, Sampling, Scenario, Scorer

__all__ = [
    "BudgetExhausted",
    "ConfigError",
    "Item",
    "Sampling",
    "Scenario",
    "Scorer",
    "TrainConfig",
    "build_config",
    "parse_overrides",
]
