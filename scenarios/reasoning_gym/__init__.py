"""TASK=reasoning_gym: reasoning-gym's procedural generators, unchanged.

    rlvr train reasoning_gym dataset=chain_sum max_terms=2 max_digits=1 num_items=400
    rlvr train reasoning_gym dataset=chain_sum*2,basic_arithmetic chain_sum.max_terms=3

Items come from `reasoning_gym.create_dataset(NAME, size=num_items, seed=seed, **options)` (a mix
from reasoning-gym's own composite, sampled by weight); each is one chat turn, and the
generator's own `score_answer` is the training reward and the check (partial credit where it
gives it). Any option of the chosen generators is a `key=value` setting (`NAME.key` for one
generator of a mix); `rlvr tasks` lists every generator with its options and defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.config import RunConfig
from rlvr.task_api.api import Task
from scenarios.math import ONE_TURN_DEFAULTS
from scenarios.reasoning_gym.generators import catalog

if TYPE_CHECKING:
    from scenarios.reasoning_gym.environment import ReasoningGymEnvironment

SYSTEM = "Reply with only the final answer."


class Options(BaseModel):
    """`rlvr train reasoning_gym key=value` options; any other key is a generator option."""

    model_config = ConfigDict(frozen=True, extra="allow")

    dataset: str = Field(
        "chain_sum", description="a generator, or a mix NAME*WEIGHT,NAME (see the list below)"
    )
    num_items: int = Field(
        800, ge=10, le=100_000, description="items generated before the 80/10/10 split"
    )
    system: str = Field(
        SYSTEM,
        description="system prompt, or one of reasoning-gym's by name (default, direct, simple, "
        "chain_of_draft, DeepSeekZero)",
    )
    answer_format: Literal["auto", "tags", "plain"] = Field(
        "auto", description="the answer scored: <answer> tags if present, else the whole reply"
    )


def make(options: Options, cfg: RunConfig) -> ReasoningGymEnvironment:
    from reasoning_gym.utils import SYSTEM_PROMPTS

    from scenarios.reasoning_gym.environment import ReasoningGymEnvironment
    from scenarios.reasoning_gym.generators import create, generator_options, parse_choices

    choices = parse_choices(options.dataset)
    chosen = generator_options(choices, options.model_extra or {})
    dataset = create(choices, chosen, size=options.num_items, seed=cfg.data_seed)
    system = SYSTEM_PROMPTS.get(options.system, options.system)
    return ReasoningGymEnvironment(dataset, system, options.answer_format)


task = Task(
    name="reasoning_gym",
    make=make,
    options=Options,
    # The math task's defaults, for the same kind of episode: a generated item answered in one short
    # checked turn (the reason for each value: scenarios/math).
    defaults=ONE_TURN_DEFAULTS,
    description="reasoning-gym generators (dataset=NAME or a weighted mix), scored by their own "
    "score_answer",
    catalog=catalog,
)

__all__ = ["Options", "task"]
