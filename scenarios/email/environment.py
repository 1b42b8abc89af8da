"""The email agent environment (ART·E style): answer a question by searching a generated inbox.

One episode is `rlvr.tool_episode`: a system prompt with the answer format and the tools (`search`,
`read`: scenarios.email.tools), the same for every item; the inbox's owner and the question in
the user message; then up to `max_turns` assistant turns, each observation within the task's
`observation_tokens` budget; the first reply without a tool call is the answer. `demonstrate` plays the same
episode with the scripted oracle (scenarios.email.oracle) in place of the model: demonstrations for
the supervised warm start. The check and the reward read the answer back from the trajectory, so a
stored trajectory can be re-scored.

Difficulty levels (the task option `difficulty`):
- easy: single-email and latest-state questions, the supporting emails (plus two unrelated ones)
  shown in the question, two turns: answer at once or check once.
- medium (= default): every kind of question, nothing shown: search, read, answer in six turns.
- hard: only multi-email questions (latest state, aggregation, not in the inbox), five turns.
"""

from __future__ import annotations

import random
from enum import StrEnum
from typing import Any

import art

from rlvr.agent import Protocol, chat, final_reply, levels, tool_episode
from rlvr.agent.levels import Level
from rlvr.config import ConfigError
from rlvr.types import EnvironmentBase, Item, Sampling
from scenarios.email import REPEAT_COST, Options, SourceCredit, oracle
from scenarios.email.inbox import NOT_IN_INBOX, AnswerType, Inbox, QuestionKind, generate_inbox
from scenarios.email.scoring import CORRECT_THRESHOLD, answer_score, score_answer
from scenarios.email.store import InboxStore
from scenarios.email.tools import (
    SHOWN_ABOVE,
    Answer,
    answer_line,
    inbox_tools,
    parse_answer,
    read_ids,
    seen_ids,
    show_email,
)


class LevelSpec(levels.LevelSpec):
    kinds: tuple[QuestionKind, ...]


LEVELS: dict[Level, LevelSpec] = {
    Level.EASY: LevelSpec(
        kinds=(QuestionKind.SINGLE, QuestionKind.LATEST), evidence_in_prompt=True, max_turns=2
    ),
    Level.MEDIUM: LevelSpec(kinds=tuple(QuestionKind), evidence_in_prompt=False, max_turns=6),
    Level.HARD: LevelSpec(
        kinds=(QuestionKind.LATEST, QuestionKind.AGGREGATE, QuestionKind.ABSENT),
        evidence_in_prompt=False,
        max_turns=5,
    ),
}
LEVEL_ALIASES = {"default": Level.MEDIUM}
EVIDENCE_DISTRACTORS = 2


class Metric(StrEnum):
    """The task's metrics, beside the episode layer's turns, tool_calls, tool_errors, truncated."""

    SOURCE_FOUND = "source_found"  # a supporting email was shown, found by a search, or read
    SOURCE_READ = "source_read"  # a supporting email was read (or shown whole in the prompt)
    ANSWERED = "answered"
    IMPLICIT_ANSWER = "implicit_answer"  # the answer was a plain reply, not an ANSWER line
    CORRECT = "correct"  # answer_score >= CORRECT_THRESHOLD
    REPEATED_CALLS = "repeated_calls"  # calls answered "shown above" (tools module docstring)


RUBRIC = """\
The agent answers a question about an email inbox using search and read actions.
- A correct final answer that matches what the emails say is best; for rescheduled meetings and
  changed flights the latest time counts; totals must add up the right invoices.
- When the inbox does not contain the answer, saying so is correct; inventing an answer is worst.
- Citing the ids of the emails the answer comes from is better than not citing them.
- Fewer wasted turns and no malformed actions are better; an episode with no final answer is bad.
"""


def parse_level(value: str) -> Level:
    key = value.strip().lower()
    if key in LEVEL_ALIASES:
        return LEVEL_ALIASES[key]
    try:
        return Level(key)
    except ValueError:
        choices = ", ".join([*LEVEL_ALIASES, *(lvl.value for lvl in Level)])
        raise ConfigError(
            f"config: difficulty={value!r}: expected one of {choices} for task email"
        ) from None


# --- Prompts --------------------------------------------------------------------------------------


def system_prompt(max_turns: int) -> str:
    """The task's part of the system prompt; the episode layer adds how to call the tools. It is
    the same for every item of a level, so every episode's prompt starts with the same tokens
    (the engine's prefix cache reuses them); what differs — the inbox, the question — comes in
    the user message."""
    return (
        f"You answer questions about an email inbox in {max_turns} turns. When you know the "
        f"answer, reply with one line: {answer_line('answer', ['email ids'])}. If the inbox "
        f"does not say, reply: {answer_line(NOT_IN_INBOX)}"
    )


def question_prompt(item: Item, inbox: Inbox, spec: LevelSpec) -> str:
    """Whose inbox it is, the evidence where the level shows it, then the question: small models
    attend to the end of the prompt, so the question and the answer format come last."""
    owner = f"Inbox of {inbox.owner.name}."
    question = f"Question: {item.prompt}"
    if not spec.evidence_in_prompt:
        return f"{owner}\n{question}"
    support = item.data["supporting_ids"]
    others = [e for e in inbox.emails if e.id not in support]
    shown = [inbox.email(i) for i in support]
    shown += random.Random(item.id).sample(others, min(EVIDENCE_DISTRACTORS, len(others)))
    emails = "\n\n".join(show_email(e) for e in sorted(shown, key=lambda e: e.id))
    reminder = f"\nReply with one line: {answer_line('answer', ['email ids'])}"
    return f"{owner} These emails may help:\n\n{emails}\n\n{question}{reminder}"


# --- The environment ------------------------------------------------------------------------------


class EmailEnvironment(EnvironmentBase):
    """Items, episodes and the check for the email task (see the module docstring)."""

    name = "email"
    default_scorer = "verifier"  # the local 135M judge cannot judge it (email/__init__.py)
    ruler_rubric = RUBRIC  # for the RULER judge (judges.ruler)

    def __init__(
        self,
        inboxes: list[Inbox],
        level: Level,
        protocol: Protocol,
        num_items: int,
        observation_tokens: int | None = None,
        repeat_cost: float = REPEAT_COST,
        source_credit: SourceCredit = "read",
    ) -> None:
        self.level, self.spec, self.protocol = level, LEVELS[level], protocol
        self.inboxes = {inbox.id: inbox for inbox in inboxes}
        self.store = InboxStore(inboxes)
        self.num_items, self.observation_tokens = num_items, observation_tokens
        self.repeat_cost, self.source_credit = repeat_cost, source_credit

    def load(self) -> list[Item]:
        items = [
            Item(
                id=f"{q.inbox}/{q.id}",
                prompt=q.text,
                answer=q.answer,
                data={
                    "inbox": q.inbox,
                    "question_id": q.id,
                    "kind": q.kind.value,
                    "answer_type": q.answer_type.value,
                    "supporting_ids": list(q.supporting_ids),
                    "entity": q.entity,
                    "difficulty": self.level.value,
                },
            )
            for inbox in self.inboxes.values()
            for q in inbox.questions
            if q.kind in self.spec.kinds
        ]
        return items[: self.num_items]

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        return await self._play(model, item, sampling)

    async def demonstrate(self, item: Item) -> art.Trajectory:
        """The oracle's episode on `item` (scenarios.email.oracle), for supervised warm starts;
        its reward is the check's score, its metadata `policy` is "scripted"."""
        inbox = self.inboxes[item.data["inbox"]]
        turns = oracle.plan(
            item, inbox, self.store, self.spec.evidence_in_prompt, self.spec.max_turns
        )
        trajectory = await self._play(None, item, Sampling(), lambda _, turn: turns[turn])
        trajectory.reward = self.reward(item, trajectory)
        return trajectory

    async def _play(
        self, model: art.Model | None, item: Item, sampling: Sampling, script: Any = None
    ) -> art.Trajectory:
        inbox = self.inboxes[item.data["inbox"]]
        about = {"inbox": inbox.id, "question_id": item.data["question_id"]}
        prompt = chat(system_prompt(self.spec.max_turns), question_prompt(item, inbox, self.spec))
        tools = inbox_tools(self.store, inbox.id)
        trajectory = await tool_episode(
            model, item, prompt, tools, sampling, self.spec.max_turns, self.protocol, script=script,
            metadata={**about, "kind": item.data["kind"], "difficulty": self.level.value},
            observation_tokens=self.observation_tokens,
        )  # fmt: skip
        return self._measure(item, trajectory)

    def _measure(self, item: Item, trajectory: art.Trajectory) -> art.Trajectory:
        answer = final_answer(trajectory)
        correctness = (
            answer_score(item.answer or "", AnswerType(item.data["answer_type"]), answer.answer)
            if answer
            else 0.0
        )
        trajectory.metrics.update(
            {
                Metric.ANSWERED: float(answer is not None),
                Metric.IMPLICIT_ANSWER: float(answer is not None and answer.implicit),
                Metric.CORRECT: float(correctness >= CORRECT_THRESHOLD),
                Metric.REPEATED_CALLS: float(repeated_calls(trajectory)),
            }
        )
        supporting = set(item.data["supporting_ids"])
        if supporting:  # nothing to find for ABSENT questions
            shown = observations(trajectory)
            trajectory.metrics[Metric.SOURCE_FOUND] = float(bool(seen_ids(shown) & supporting))
            trajectory.metrics[Metric.SOURCE_READ] = float(bool(read_ids(shown) & supporting))
        trajectory.metadata["final_answer"] = answer.answer if answer else None
        trajectory.metadata["source_ids"] = ",".join(answer.source_ids) if answer else None
        return trajectory.finish()

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        """1.0 when the final answer is correct (answer_score >= CORRECT_THRESHOLD), else 0.0:
        validation and test measure the share of questions answered correctly, never partial
        credit (which is the training reward's job)."""
        answer = final_answer(trajectory)
        if answer is None:
            return 0.0
        score = answer_score(item.answer or "", AnswerType(item.data["answer_type"]), answer.answer)
        return float(score >= CORRECT_THRESHOLD)

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        """The training reward: the episode's final answer scored with credit for citing the
        supporting emails (scoring module docstring; with `source_credit="read"`, the default, only
        those the episode read), less `repeat_cost` for each repeated call.
        A repeat shows nothing new, and without its cost a group whose answers were all wrong
        gives no signal against repeating, so repeats a lucky batch rewarded spread and
        validation fell (docs/guide/tool-agents.md, "Calls that repeat")."""
        answer = final_answer(trajectory)
        return score_answer(
            item.answer or "",
            AnswerType(item.data["answer_type"]),
            item.data["supporting_ids"],
            answer.answer if answer else None,
            answer.source_ids if answer else (),
            read_ids(observations(trajectory)) if self.source_credit == "read" else None,
        ) - self.repeat_cost * repeated_calls(trajectory)


def observations(trajectory: art.Trajectory) -> list[str]:
    """What the model was shown besides the system prompt: the question and every observation."""
    return [
        m["content"]
        for m in trajectory.messages()
        if m.get("role") in ("user", "tool") and isinstance(m.get("content"), str)
    ]


def repeated_calls(trajectory: art.Trajectory) -> int:
    """Calls the tools answered "shown above": a repeat of an earlier call of the episode."""
    return sum(SHOWN_ABOVE in text for text in observations(trajectory)[1:])


def final_answer(trajectory: art.Trajectory) -> Answer | None:
    """The episode's final answer, read back from its final reply (None without one)."""
    return parse_answer(final_reply(trajectory))


def build_inboxes(seed: int, level: Level, num_items: int) -> list[Inbox]:
    """Just enough inboxes for `num_items` questions of the level's kinds."""
    kinds = LEVELS[level].kinds
    inboxes: list[Inbox] = []
    count = 0
    while count < num_items:
        inbox = generate_inbox(seed, len(inboxes))
        inboxes.append(inbox)
        count += sum(q.kind in kinds for q in inbox.questions)
    return inboxes


def make_environment(options: Options, seed: int = 0) -> EmailEnvironment:
    level = parse_level(options.difficulty)
    inboxes = build_inboxes(seed, level, options.num_items)
    return EmailEnvironment(
        inboxes,
        level,
        options.tool_protocol,
        options.num_items,
        options.observation_tokens,
        options.repeat_cost,
        options.source_credit,
    )
