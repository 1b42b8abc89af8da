"""The rubric_if environment: single-turn chat, scored against per-item rubric criteria."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import art
from art.rewards.ruler import DEFAULT_RUBRIC

from judges.client import JudgeClient, JudgeFailure
from judges.rubric import CRITERIA_KEY, criteria_of, grade, pass_rate
from judges.rubric_data import RubricData, load_healthbench, load_recipe_file
from rlvr.config import ConfigError
from rlvr.types import EnvironmentBase, Item, Sampling

if TYPE_CHECKING:
    from pathlib import Path

    from scenarios.rubric_if import Options

log = logging.getLogger("rlvr.task_api.rubric_if")


class RubricIfEnvironment(EnvironmentBase):
    """Prompts with rubric criteria; truth = rubric pass rate from the run's judge."""

    name = "rubric_if"
    default_scorer = "rubric"
    # The check is itself a judge call: the loop does not spend it on every training rollout.
    judged_check = True

    def __init__(self, data: RubricData, judge: JudgeClient, num_items: int) -> None:
        self.data = data
        self.judge = judge
        self.num_items = num_items

    def load(self) -> list[Item]:
        return [
            Item(
                id=row.task_id,
                prompt=row.prompt,
                data={CRITERIA_KEY: [c.model_dump() for c in row.criteria]},
            )
            for row in self.data.rows[: self.num_items]
        ]

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        messages = [{"role": "user", "content": item.prompt}]
        completion = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(sampling.step),
            messages=messages,  # type: ignore[arg-type]
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            logprobs=True,
        )
        choice = completion.choices[0]
        return art.Trajectory(
            messages_and_choices=[*messages, choice],
            reward=0.0,
            metadata={
                "task_id": item.id,
                "criteria": len(item.data[CRITERIA_KEY]),
                "finish_reason": choice.finish_reason,
            },
        )

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        """Rubric pass rate from the judge (one call). A judge that fails after its retries gives
        NaN — unknown, not wrong: callers average with NaN left out. BudgetExhausted propagates."""
        try:
            return pass_rate(await grade(self.judge, trajectory, criteria_of(item)))
        except JudgeFailure as failure:
            log.warning("rubric_if: check of %s has no verdict: %s", item.id, failure)
            return math.nan

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        raise TypeError(
            "task rubric_if has no deterministic reward: its reward is a judge "
            "(scorer=rubric, the default, or scorer=ruler), not scorer=verifier"
        )

    def ruler_rubric(self, item: Item) -> str:
        """For scorer=ruler: ART's default standards plus this item's criteria."""
        criteria = "\n".join(
            f"- {'Avoid: ' if c.points < 0 else ''}{c.text}" for c in criteria_of(item)
        )
        return f"{DEFAULT_RUBRIC}\nTask-specific criteria for a good response:\n{criteria}\n"


def load_data(data_path: Path | None, skip_bad_rows: bool = False) -> RubricData:
    if data_path is None:
        return load_healthbench()
    data = load_recipe_file(data_path, skip_bad_rows=skip_bad_rows)
    if data.skipped:
        log.warning(
            "%s: skipped %d bad row(s) (skip_bad_rows=true); first: %s",
            data.source,
            len(data.skipped),
            data.skipped[0],
        )
    return data


def make_environment(options: Options, judge: JudgeClient | None = None) -> RubricIfEnvironment:
    if judge is None:
        raise ConfigError("config: task rubric_if needs a judge; set judge=local or a model id")
    return RubricIfEnvironment(
        load_data(options.data_path, options.skip_bad_rows), judge, options.num_items
    )
