"""The multi-hop QA scenario: answer a composed question by searching and reading passages.

One episode: a system prompt naming the actions, the question (after the evidence at the easy
level), then up to `max_turns` assistant turns, each sampled with `rlvr.chat_turn` and kept as its
`Choice` so ART trains on the sampled tokens. Actions are answered with a `tool` message (tool
calls) or a user-role observation (text actions). The episode ends at the first final answer or at
the turn limit; nothing the model writes can raise.

Difficulty levels (the task option `difficulty`):
- easy: 2-hop questions; the supporting passages and `distractors` hard negatives are shown in the
  prompt, shuffled; two turns (answer at once, or search once and answer).
- medium: 2-hop questions, nothing shown: search, read, answer in five turns.
- hard: 2- and 3-hop questions, nothing shown, seven turns.

`demonstrate(item)` plays the same episode with the oracle's action messages in place of sampled
turns (scenarios.multihop.oracle), for supervised warm starts (`sft_steps=`).

The reward and the check are re-derived from the trajectory's messages (the final answer by the
rollout's own parsing rules, the retrieved passages from the `[pNNN]` tags of observations), so a
stored trajectory can be re-scored; the rollout puts the same numbers in `trajectory.metrics`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Any

import art
import openai
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict

from rlvr.rollouts import chat_turn
from rlvr.types import Item, Sampling, ScenarioBase
from scenarios.email.scenario import END_PREFIX, EpisodeEnd
from scenarios.email.store import ToolInputError
from scenarios.multihop import Options, oracle
from scenarios.multihop.actions import (
    Answer,
    Invalid,
    Protocol,
    Read,
    Search,
    message_actions,
    show_hits,
    show_passage,
    shown_ids,
    tool_schemas,
)
from scenarios.multihop.corpus import Corpus, Question, generate_corpus
from scenarios.multihop.index import PassageIndex
from scenarios.multihop.scoring import (
    Retrieval,
    RewardKind,
    check_score,
    retrieval_scores,
    reward_score,
)


class Level(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class LevelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    hops: tuple[int, ...]
    evidence_in_prompt: bool
    max_turns: int


LEVELS: dict[Level, LevelSpec] = {
    Level.EASY: LevelSpec(hops=(2,), evidence_in_prompt=True, max_turns=2),
    Level.MEDIUM: LevelSpec(hops=(2,), evidence_in_prompt=False, max_turns=5),
    Level.HARD: LevelSpec(hops=(2, 3), evidence_in_prompt=False, max_turns=7),
}
RETRIEVAL_PREFIX = "retrieval/"

# One assistant turn given the messages so far and the turn number: a sampled Choice (rollout)
# or a plain assistant message (the oracle's demonstrations).
PolicyTurn = Callable[[list[dict[str, Any]], int], Awaitable[Choice | dict[str, Any]]]


class Metric(StrEnum):
    TURNS = "turns"
    TOOL_CALLS = "tool_calls"  # actions executed, tool calls and text actions alike
    SEARCHES = "searches"
    READS = "reads"
    INVALID_ACTIONS = "invalid_actions"  # malformed calls, unknown tools or ids, empty replies
    TEXT_ACTIONS = "text_actions"  # actions parsed from text rather than tool calls
    ANSWERED = "answered"
    IMPLICIT_ANSWER = "implicit_answer"  # the answer was a plain reply, not an ANSWER line
    EXACT_MATCH = "exact_match"  # the check
    F1 = "f1"
    RECALL = RETRIEVAL_PREFIX + "recall"  # supporting passages retrieved / supporting passages
    PRECISION = RETRIEVAL_PREFIX + "precision"  # supporting retrieved / retrieved


# Counted during the episode (the rest are computed at its end).
COUNTED = (
    Metric.TURNS,
    Metric.TOOL_CALLS,
    Metric.SEARCHES,
    Metric.READS,
    Metric.INVALID_ACTIONS,
    Metric.TEXT_ACTIONS,
)


# --- Prompts --------------------------------------------------------------------------------------

_HEAD = """\
You answer questions from a collection of short encyclopedia passages. A question needs two or \
more facts: find the first, then use it to find the next. You have {max_turns} turns."""

_TEXT_ACTIONS = """\
Reply with exactly one action on one line:
SEARCH: keywords     search the passages (shows the best {top_k})
READ: passage-id     read one passage, e.g. READ: p012
ANSWER: answer       your final answer: only the name or place"""

_TOOL_ACTIONS = """\
Use the tools: search to find passages, read to read one in full, and answer with your final \
answer (only the name or place)."""


def system_prompt(protocol: Protocol, max_turns: int, top_k: int) -> str:
    actions = _TOOL_ACTIONS if protocol == "tools" else _TEXT_ACTIONS.format(top_k=top_k)
    return _HEAD.format(max_turns=max_turns) + "\n\n" + actions


def question_prompt(
    question: Question, corpus: Corpus, shown: tuple[str, ...], protocol: Protocol
) -> str:
    """The question, after the passages where the level shows them: small models attend to the
    end of the prompt, so the question and the answer format come last."""
    text = f"Question: {question.text}"
    if not shown:
        return text
    passages = "\n\n".join(show_passage(corpus.passage(i)) for i in shown)
    reminder = "" if protocol == "tools" else "\nReply with one line: ANSWER: your answer"
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
    """The episode's first final answer, by the rollout's own rules (`turn_actions`)."""
    protocol = trajectory.metadata.get("protocol", "auto")
    for message in trajectory.messages():
        if message.get("role") != "assistant":
            continue
        for action, _ in message_actions(message, protocol):
            if isinstance(action, Answer):
                return action
    return None


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


# --- The scenario ---------------------------------------------------------------------------------


class MultihopScenario(ScenarioBase):
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
    ) -> None:
        self.corpus, self.level, self.spec = corpus, level, LEVELS[level]
        self.protocol, self.reward_kind = protocol, reward_kind
        self.top_k, self.distractors, self.num_items = top_k, distractors, num_items
        self.index = PassageIndex(corpus.passages)
        self.questions = {q.id: q for q in corpus.questions}
        self.tools = tool_schemas(top_k) if protocol != "text" else None

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
        extra = {"tools": self.tools} if self.tools else {}

        async def sample(messages: list[dict[str, Any]], turn: int) -> Choice:
            return await chat_turn(model, messages, sampling, **extra)

        return await self._play(self.questions[item.data["question_id"]], sample)

    async def demonstrate(self, item: Item) -> art.Trajectory:
        """The oracle's episode on `item` (scenarios.multihop.oracle): the rollout's episode with
        the oracle's action messages in place of sampled turns, for supervised warm starts. Its
        reward is the check's score; metadata `policy` says it was not sampled."""
        question = self.questions[item.data["question_id"]]
        actions = oracle.plan(question, self.corpus, self.spec.evidence_in_prompt)
        # auto shows the text actions in the prompt (system_prompt), so it gets text demonstrations
        protocol: Protocol = "tools" if self.protocol == "tools" else "text"

        async def recite(messages: list[dict[str, Any]], turn: int) -> dict[str, Any]:
            return oracle.message(actions[min(turn, len(actions) - 1)], protocol, turn)

        trajectory = await self._play(question, recite)
        trajectory.metadata["policy"] = "oracle"
        trajectory.reward = await self.check(item, trajectory)
        return trajectory

    async def _play(self, question: Question, policy: PolicyTurn) -> art.Trajectory:
        """One episode: the prompt, then `policy` turns, each acted on and observed, until a final
        answer or the turn limit. A refused later turn (openai.BadRequestError) ends it."""
        shown = shown_passages(question, self.spec, self.distractors)
        trajectory = art.Trajectory(
            messages_and_choices=[
                {
                    "role": "system",
                    "content": system_prompt(self.protocol, self.spec.max_turns, self.top_k),
                },
                {
                    "role": "user",
                    "content": question_prompt(question, self.corpus, shown, self.protocol),
                },
            ],
            tools=self.tools,  # ART renders `tools` into the training prompt: what the policy saw
            metadata={
                "question_id": question.id,
                "kind": question.kind.value,
                "hops": len(question.hops),
                "difficulty": self.level.value,
                "protocol": self.protocol,
            },
        )
        counts: Counter[Metric] = Counter()
        end = EpisodeEnd.TURN_LIMIT
        for turn in range(self.spec.max_turns):
            try:
                reply = await policy(trajectory.messages(), turn)
            except openai.BadRequestError:
                if turn == 0:  # the first request failing is a setup problem, not the model's
                    raise
                end = EpisodeEnd.POLICY_ERROR
                break
            trajectory.messages_and_choices.append(reply)
            counts[Metric.TURNS] += 1
            # The turn as ART renders it, which is also what `final_answer` reads back.
            last = trajectory.messages()[-1]
            if self._act(last, trajectory, counts, one_left=turn == self.spec.max_turns - 2):
                end = EpisodeEnd.ANSWERED
                break
        return self._finish(question, trajectory, counts, end)

    def _act(
        self,
        message: dict[str, Any],
        trajectory: art.Trajectory,
        counts: Counter[Metric],
        one_left: bool,
    ) -> bool:
        """Execute the turn's actions and append their observations; True when it answered."""
        for action, call_id in message_actions(message, self.protocol):
            if call_id is None and not isinstance(action, Invalid):
                counts[Metric.TEXT_ACTIONS] += 1
            if isinstance(action, Answer):
                counts[Metric.TOOL_CALLS] += 1
                return True
            observation = self._observe(action, counts)
            if one_left:  # small models rarely count turns
                observation += "\n\nOne turn left: give your final answer now."
            trajectory.messages_and_choices.append(
                {"role": "tool", "tool_call_id": call_id, "content": observation}
                if call_id is not None
                else {"role": "user", "content": observation}
            )
        return False

    def _observe(self, action: Search | Read | Invalid, counts: Counter[Metric]) -> str:
        """Run a search or read (never raises); errors come back as text and count as invalid."""
        if isinstance(action, Invalid):
            counts[Metric.INVALID_ACTIONS] += 1
            return f"Error: {action.error}"
        if isinstance(action, Search):
            try:
                hits = self.index.search(action.query, self.top_k)
            except ToolInputError as error:
                counts[Metric.INVALID_ACTIONS] += 1
                return f"Error: {error}"
            counts[Metric.SEARCHES] += 1
            counts[Metric.TOOL_CALLS] += 1
            return show_hits(hits)
        passage = self.index.read(action.ref)
        if passage is None:
            counts[Metric.INVALID_ACTIONS] += 1
            return (
                f"Error: no passage {action.ref[:40]!r}; "
                "read an id from the search results, e.g. p012."
            )
        counts[Metric.READS] += 1
        counts[Metric.TOOL_CALLS] += 1
        return show_passage(passage)

    def _finish(
        self,
        question: Question,
        trajectory: art.Trajectory,
        counts: Counter[Metric],
        end: EpisodeEnd,
    ) -> art.Trajectory:
        answer, retrieval = episode_scores(trajectory, question.supporting_ids)
        text = answer.text if answer else None
        trajectory.metrics.update(
            {
                **{m: float(counts[m]) for m in COUNTED},
                Metric.ANSWERED: float(answer is not None),
                Metric.IMPLICIT_ANSWER: float(answer is not None and answer.implicit),
                Metric.EXACT_MATCH: check_score(text, question.answer),
                Metric.F1: reward_score(RewardKind.F1, text, question.answer, retrieval),
                Metric.RECALL: retrieval.recall,
                Metric.PRECISION: retrieval.precision,
                **{f"{END_PREFIX}{reason}": float(reason is end) for reason in EpisodeEnd},
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


def make_scenario(options: Options, seed: int = 0) -> MultihopScenario:
    corpus = generate_corpus(seed, people_for(options.num_items))
    return MultihopScenario(
        corpus,
        Level(options.difficulty),
        options.tool_protocol,
        RewardKind(options.reward),
        options.top_k,
        options.distractors,
        options.num_items,
    )
