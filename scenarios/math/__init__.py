"""TASK=math: arithmetic from reasoning-gym, checked by the verifier library.

Validation and test ask for the exact final number (`numeric_match`); training rewards partial
credit (`contains_answer`: 1 for a right final answer, 0.5 when the right number appears
elsewhere), so a 135M model gets mixed groups to learn from. `difficulty` picks the generator:

    easy     two 1-digit terms, + and -
    default  two terms of 1-2 digits, + and -
    hard     three terms of 1-2 digits, +, - and *
"""

from __future__ import annotations

from typing import Literal

import art
from pydantic import BaseModel, ConfigDict, Field

from rlvr.config import ConfigError, RunConfig
from rlvr.scoring.verifiers import contains_answer, numeric_match
from rlvr.task_api.api import Task
from rlvr.task_api.rollouts import single_turn
from rlvr.types import EnvironmentBase, Item, Sampling, completion_text

SYSTEM = "You are a calculator. Reply with only the final number."

LEVELS: dict[str, dict[str, int | tuple[str, ...]]] = {
    "easy": {
        "min_terms": 2,
        "max_terms": 2,
        "min_digits": 1,
        "max_digits": 1,
        "operators": ("+", "-"),
    },
    "default": {
        "min_terms": 2,
        "max_terms": 2,
        "min_digits": 1,
        "max_digits": 2,
        "operators": ("+", "-"),
    },
    "hard": {
        "min_terms": 3,
        "max_terms": 3,
        "min_digits": 1,
        "max_digits": 2,
        "operators": ("+", "-", "*"),
    },
}


class MathEnvironment(EnvironmentBase):
    name = "math"
    default_scorer = "verifier"

    def __init__(self, difficulty: str, num_items: int, seed: int) -> None:
        if difficulty not in LEVELS:
            raise ConfigError(
                f"config: difficulty='{difficulty}' is not a math level; expected one of {', '.join(LEVELS)}"
            )
        self.difficulty, self.num_items, self.seed = difficulty, num_items, seed

    def load(self) -> list[Item]:
        import reasoning_gym

        dataset = reasoning_gym.create_dataset(
            "basic_arithmetic",
            size=self.num_items,
            seed=self.seed,
            allow_parentheses=False,
            allow_negation=False,
            **LEVELS[self.difficulty],
        )
        return [
            Item(
                id=f"math-{self.difficulty}-{self.seed}-{i}",
                prompt=entry["question"],
                answer=str(entry["answer"]),
                data={"expression": entry["metadata"]["expression"]},
            )
            for i, entry in enumerate(dataset)
        ]

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item.prompt}]
        return await single_turn(model, item, messages, sampling)

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return numeric_match(completion_text(trajectory), item.answer or "")

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        return contains_answer(completion_text(trajectory), item.answer or "")


class Options(BaseModel):
    """`rlvr train math key=value` options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    difficulty: Literal["easy", "default", "hard"] = Field("easy", description="generator level")
    num_items: int = Field(800, ge=10, description="items generated before the 80/10/10 split")


# Defaults for a short answer checked in one turn (math, and the dataset and reasoning_gym tasks).
ONE_TURN_DEFAULTS: dict[str, float | int] = {
    "temperature": 0.8,  # below 1: fewer rambling samples, groups still mix right and wrong
    "max_tokens": 32,  # the answer is a number: room for a short working, not for rambling
    "groups_per_batch": 8,  # one-turn rollouts are cheap, and more items steady the update
    # No minutes: the plateau rule decides within max_steps, the same on every CPU.
}


def make(options: Options, cfg: RunConfig) -> MathEnvironment:
    return MathEnvironment(options.difficulty, options.num_items, cfg.data_seed)


task = Task(
    name="math",
    make=make,
    options=Options,
    # Results of these defaults: results/records/math-*.json (docs: Results).
    defaults=ONE_TURN_DEFAULTS,
    description="arithmetic (reasoning-gym), exact final number; partial credit in training",
)
