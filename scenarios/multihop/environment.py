"""The multi-hop QA environment: answer a composed question by searching and reading passages.

One episode is `rlvr.tool_episode`: a system prompt, the question (after the evidence at the easy
level), then up to `max_turns` assistant turns with the corpus tools (`search`, `read`:
scenarios.multihop.tools), each observation within the task's `observation_tokens` budget; the
first reply without a tool call is the answer.

Difficulty levels (the task option `difficulty`):
- easy: 2-hop questions; the supporting passages and `distractors` hard negatives are shown in the
  prompt, shuffled; two turns (answer at once, or search once and answer).
- medium: 2-hop questions, nothing shown: search, read, answer in five turns.
- hard: 2- and 3-hop questions, nothing shown, seven turns.

`demonstrate(item)` plays the same episode with the oracle (scenarios.multihop.oracle) in place of
the model, for supervised warm starts (`sft_steps=`).

The reward and the check are re-derived from the trajectory's messages (the final answer from the
final reply, the retrieved passages from the `[pNNN]` tags of observations), so a stored
trajectory can be re-scored; the rollout puts the same numbers in `trajectory.metrics`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import art

from rlvr.agent import Protocol, chat, final_reply, levels, tool_episode
from rlvr.agent.levels import Level
from rlvr.types import EnvironmentBase, Item, Sampling
from scenarios.multihop import Options, oracle
from scenarios.multihop.corpus import Corpus, Question, generate_corpus
from scenarios.multihop.index import PassageIndex
from scenarios.multihop.scoring import (
    Retrieval,
    RewardKind,
    check_score,
    retrieval_scores,
    reward_score,
)
from scenarios.multihop.tools import (
    Answer,
    answer_line,
    corpus_tools,
    parse_answer,
    show_passage,
    shown_ids,
)


class LevelSpec(levels.LevelSpec):
    hops: tuple[int, ...]


LEVELS: dict[Level, LevelSpec] = {
    Level.EASY: LevelSpec(hops=(2,), evidence_in_prompt=True, max_turns=2),
    Level.MEDIUM: LevelSpec(hops=(2,), evidence_in_prompt=False, max_turns=5),
    Level.HARD: LevelSpec(hops=(2, 3), evidence_in_prompt=False, max_turns=7),
}
RETRIEVAL_PREFIX = "retrieval/"


class Metric(StrEnum):
    """The task's metrics, beside the episode layer's (turns, tool_calls, tool_errors, truncated,
    calls/search, calls/read)."""

    ANSWERED = "answered"
    IMPLICIT_ANSWER = "implicit_answer"  # the answer was a plain reply, not an ANSWER line
    EXACT_MATCH = "exact_match"  # the check
    F1 = "f1"
    RECALL = RETRIEVAL_PREFIX + "recall"  # supporting passages retrieved / supporting passages
    PRECISION = RETRIEVAL_PREFIX + "precision"  # supporting retrieved / retrieved


# --- Prompts --------------------------------------------------------------------------------------

_HEAD = """\
You answer questions from short encyclopedia passages in {max_turns} turns. A question needs two \
or more facts: find the first, then use it to find the next."""


def system_prompt(max_turns: int) -> str:
    """The task's part of the system prompt; the episode layer adds how to call the tools. It is
    the same for every item of a level (the question comes in the user message), so every
    episode's prompt starts with the same tokens and the engine's prefix cache reuses them."""
    return (
        _HEAD.format(max_turns=max_turns)
        + f" When you know the answer, reply with one line: {answer_line('only the name or place')}"
    )


def question_prompt(question: Question, corpus: Corpus, shown: tuple[str, ...]) -> str:
    """The question, after the passages where the level shows them: small models attend to the
    end of the prompt, so the question and the answer format come last."""
    text = f"Question: {question.text}"
    if not shown:
        return text
    passages = "\n\n".join(show_passage(corpus.passage(i)) for i in shown)
    reminder = f"\nReply with one line: {answer_line('your answer')}"
    return f"Passages:\n\n{passages}\n\n{text}{reminder}"


def shown_passages(question: Question, spec: LevelSpec, distractors: int) -> tuple[str, ...]:
    """The passages in the prompt: the supporting ones and the first `distractors` hard
    negatives, in an order fixed by the question (so the first passage is no hint)."""
    if not spec.evidence_in_prompt:
        return ()
    ids = [*question.supporting_ids, *question.distractor_ids[:distractors]]
    random.Random(question.id).shuffle(ids)
    return tuple(ids)


# --- Reading a trajectory back --------------------------------------------------------------------


def final_answer(trajectory: art.Trajectory) -> Answer | None:
    """The episode's final answer, from its final reply (None without one)."""
    return parse_answer(final_reply(trajectory))


def retrieved_ids(trajectory: art.Trajectory) -> set[str]:
    """Passages the model was shown: tags in the user prompt and in observations (the system
    prompt and the model's own words do not count)."""
    return shown_ids(
        m["content"]
        for m in trajectory.messages()
        if m.get("role") in ("user", "tool") and isinstance(m.get("content"), str)
    )


def episode_scores(
    trajectory: art.Trajectory, supporting: Sequence[str]
) -> tuple[Answer | None, Retrieval]:
    """What the reward, the check and the metrics are computed from."""
    return final_answer(trajectory), retrieval_scores(retrieved_ids(trajectory), supporting)


# --- The environment ------------------------------------------------------------------------------


class MultihopEnvironment(EnvironmentBase):
    """Items, episodes, reward and check for the multihop task (see the module docstring)."""

    name = "multihop"
    default_scorer = "verifier"

    def __init__(
        self,
        corpus: Corpus,
        level: Level,
        protocol: Protocol,
        reward_kind: RewardKind,
        top_k: int,
        distractors: int,
        num_items: int,
        observation_tokens: int | None = None,
    ) -> None:
        self.corpus, self.level, self.spec = corpus, level, LEVELS[level]
        self.protocol, self.reward_kind = protocol, reward_kind
        self.top_k, self.distractors, self.num_items = top_k, distractors, num_items
        self.observation_tokens = observation_tokens
        self.index = PassageIndex(corpus.passages)
        self.questions = {q.id: q for q in corpus.questions}

    def load(self) -> list[Item]:
        questions = [q for q in self.corpus.questions if len(q.hops) in self.spec.hops]
        return [
            Item(
                id=q.id,
                prompt=q.text,
                answer=q.answer,
                data={
                    "question_id": q.id,
                    "kind": q.kind.value,
                    "hops": len(q.hops),
                    "supporting_ids": list(q.supporting_ids),
                    "sub_questions": [h.question for h in q.hops],
                    "difficulty": self.level.value,
                },
            )
            for q in questions[: self.num_items]
        ]

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        return await self._play(model, self.questions[item.data["question_id"]], item, sampling)

    async def demonstrate(self, item: Item) -> art.Trajectory:
        """The oracle's episode on `item` (scenarios.multihop.oracle), for supervised warm
        starts; its reward is the check's score, its metadata `policy` is "scripted"."""
        question = self.questions[item.data["question_id"]]
        turns = oracle.plan(question, self.corpus, self.spec.evidence_in_prompt)
        trajectory = await self._play(
            None, question, item, Sampling(), lambda _, turn: turns[min(turn, len(turns) - 1)]
        )
        trajectory.reward = await self.check(item, trajectory)
        return trajectory

    async def _play(
        self,
        model: art.Model | None,
        question: Question,
        item: Item,
        sampling: Sampling,
        script: Any = None,
    ) -> art.Trajectory:
        shown = shown_passages(question, self.spec, self.distractors)
        prompt = chat(
            system_prompt(self.spec.max_turns), question_prompt(question, self.corpus, shown)
        )
        about = {
            "question_id": question.id,
            "kind": question.kind.value,
            "hops": len(question.hops),
        }
        trajectory = await tool_episode(
            model, item, prompt, corpus_tools(self.index, self.top_k), sampling,
            self.spec.max_turns, self.protocol, script=script,
            metadata={**about, "difficulty": self.level.value},
            observation_tokens=self.observation_tokens,
        )  # fmt: skip
        return self._measure(question, trajectory)

    def _measure(self, question: Question, trajectory: art.Trajectory) -> art.Trajectory:
        answer, retrieval = episode_scores(trajectory, question.supporting_ids)
        text = answer.text if answer else None
        trajectory.metrics.update(
            {
                Metric.ANSWERED: float(answer is not None),
                Metric.IMPLICIT_ANSWER: float(answer is not None and answer.implicit),
                Metric.EXACT_MATCH: check_score(text, question.answer),
                Metric.F1: reward_score(RewardKind.F1, text, question.answer, retrieval),
                Metric.RECALL: retrieval.recall,
                Metric.PRECISION: retrieval.precision,
            }
        )
        trajectory.metadata["final_answer"] = text
        return trajectory.finish()

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        answer, _ = episode_scores(trajectory, item.data["supporting_ids"])
        return check_score(answer.text if answer else None, item.answer or "")

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        answer, retrieval = episode_scores(trajectory, item.data["supporting_ids"])
        text = answer.text if answer else None
        return reward_score(self.reward_kind, text, item.answer or "", retrieval)


def people_for(num_items: int) -> int:
    """A world with at least `num_items` questions at every level: most persons start three 2-hop
    questions and one 3-hop one, so as many persons as items is plenty."""
    return max(40, num_items)


def make_environment(options: Options, seed: int = 0) -> MultihopEnvironment:
    corpus = generate_corpus(seed, people_for(options.num_items))
    return MultihopEnvironment(
        corpus,
        Level(options.difficulty),
        options.tool_protocol,
        RewardKind(options.reward),
        options.top_k,
        options.distractors,
        options.num_items,
        options.observation_tokens,
    )
