"""One reasoning-gym dataset as an Environment: its entries are the items, one chat turn answers
each, and the generator's own `score_answer` is both the training reward and the check (partial
credit where the generator gives it).

The answer handed to `score_answer` is the text between `<answer>` tags when the reply has them
(reasoning-gym's own convention) and otherwise the whole reply, stripped (`answer_format=auto`);
`tags` and `plain` pick one of the two.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import art

from rlvr.task_api.rollouts import single_turn
from rlvr.types import EnvironmentBase, Item, Sampling, completion_text

AnswerFormat = Literal["auto", "tags", "plain"]
log = logging.getLogger("rlvr.task_api.reasoning_gym")


def extract(reply: str, answer_format: AnswerFormat) -> str | None:
    """The answer in a reply (module docstring); None when `tags` finds no tags."""
    from reasoning_gym.utils import extract_answer

    tagged = extract_answer(reply) if answer_format != "plain" else None
    if tagged is not None or answer_format == "tags":
        return tagged
    return reply.strip()


class ReasoningGymEnvironment(EnvironmentBase):
    """Items from a reasoning-gym dataset (one generator, or its composite mixing several)."""

    name = "reasoning_gym"
    default_scorer = "verifier"

    def __init__(self, dataset: Any, system: str, answer_format: AnswerFormat) -> None:
        self.dataset, self.system, self.answer_format = dataset, system, answer_format
        self._reported: set[str] = set()

    def load(self) -> list[Item]:
        items = []
        for index, entry in enumerate(self.dataset):
            generator = str(entry["metadata"].get("source_dataset", "reasoning_gym"))
            items.append(
                Item(
                    id=f"{generator}-{index}",
                    prompt=entry["question"],
                    answer=str(entry["answer"]),
                    data={"generator": generator},
                    source=entry,
                )
            )
        return items

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": item.prompt},
        ]
        trajectory = await single_turn(model, item, messages, sampling)
        trajectory.metadata["generator"] = str(item.data["generator"])
        return trajectory

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        """The generator's `score_answer` on the reply's answer; it may raise (the verifier
        scorer counts that as a reward error)."""
        answer = extract(completion_text(trajectory), self.answer_format)
        return float(self.dataset.score_answer(answer, item.source))

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        try:
            return self.reward(item, trajectory)
        except Exception as error:  # a generator's scorer failing on odd text: not a right answer
            reason = (
                f"{item.data['generator']}: score_answer raised {type(error).__name__}: {error}"
            )
            if reason not in self._reported:
                self._reported.add(reason)
                log.warning("%s; such answers count 0.0", reason)
            return 0.0
