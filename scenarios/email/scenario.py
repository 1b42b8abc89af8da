"""The email agent scenario (ART·E style): answer a question by searching a generated inbox.

One episode: a system prompt naming the inbox's owner and the actions, the question, then up to
`max_turns` assistant turns. Each turn is sampled through `model.openai_client()` with
`logprobs=True` and its `Choice` is kept as is, so ART trains on the exact sampled tokens. Tool
calls are answered with `tool` messages; text actions with a user-role observation. The episode
ends at the first final answer or at the turn limit; nothing the model writes can raise.
`demonstrate` plays the same episode with the scripted oracle's (scenarios.email.oracle) action
messages in place of sampled turns: demonstrations for a supervised warm-start.

Difficulty levels (the task option `difficulty`):
- easy: single-email and latest-state questions, the supporting emails (plus two unrelated ones)
  shown in the question, two turns: answer at once or check once.
- medium (= default): every kind of question, nothing shown, six turns.
- hard: only multi-email questions (latest state, aggregation, not in the inbox), five turns.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any

import art
import openai
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict

from rlvr.config import ConfigError
from rlvr.types import Item, Sampling, ScenarioBase
from scenarios.email import Options, oracle
from scenarios.email.actions import (
    TOOLS,
    Action,
    Answer,
    Invalid,
    Protocol,
    Read,
    Search,
    show_email,
    show_hits,
    turn_actions,
)
from scenarios.email.inbox import NOT_IN_INBOX, AnswerType, Inbox, QuestionKind, generate_inbox
from scenarios.email.scoring import CORRECT_THRESHOLD, answer_score, score_answer
from scenarios.email.store import InboxStore, ToolInputError


class Level(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class LevelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    kinds: tuple[QuestionKind, ...]
    evidence_in_prompt: bool
    max_turns: int


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


class EpisodeEnd(StrEnum):
    """Why an episode ended; mirrored one-hot into metrics under END_PREFIX."""

    ANSWERED = "answered"  # the model gave a final answer
    TURN_LIMIT = "turn_limit"  # max_turns assistant turns without a final answer
    POLICY_ERROR = "policy_error"  # the endpoint refused a later turn (e.g. context too long)


END_PREFIX = "end/"


class Metric(StrEnum):
    TURNS = "turns"
    TOOL_CALLS = "tool_calls"  # actions executed, tool calls and text actions alike
    INVALID_ACTIONS = "invalid_actions"  # malformed calls, unknown tools, empty replies
    TEXT_ACTIONS = "text_actions"  # actions parsed from text rather than tool calls
    SOURCE_FOUND = "source_found"  # a supporting email was shown, found by a search, or read
    ANSWERED = "answered"
    IMPLICIT_ANSWER = "implicit_answer"  # the answer was a plain reply, not an ANSWER line
    CORRECT = "correct"  # answer_score >= CORRECT_THRESHOLD


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

_TEXT_ACTIONS = """\
Reply with exactly one action on one line:
SEARCH: keywords            search the inbox (optional filters: from:NAME to:NAME after:YYYY-MM-DD before:YYYY-MM-DD)
READ: email-id              read one email, e.g. READ: e012
ANSWER: answer | ids        your final answer, then the ids of the emails it comes from
If the inbox does not contain the answer, reply: ANSWER: {absent} |"""

_TOOL_ACTIONS = """\
Use the tools: search_inbox to find emails, read_email to read one, and return_final_answer with
your answer and the ids of the emails it comes from. If the inbox does not contain the answer,
answer '{absent}'."""


def system_prompt(inbox: Inbox, protocol: Protocol, max_turns: int) -> str:
    head = (
        f"You answer questions about the email inbox of {inbox.owner.name} <{inbox.owner.address}>. "
        f"You have {max_turns} turns."
    )
    actions = _TOOL_ACTIONS if protocol == "tools" else _TEXT_ACTIONS
    return head + "\n\n" + actions.format(absent=NOT_IN_INBOX)


def question_prompt(item: Item, inbox: Inbox, spec: LevelSpec, protocol: Protocol) -> str:
    """The question, after the evidence where the level shows it: small models attend to the end
    of the prompt, so the question and the answer format come last."""
    question = f"Question: {item.prompt}"
    if not spec.evidence_in_prompt:
        return question
    support = item.data["supporting_ids"]
    others = [e for e in inbox.emails if e.id not in support]
    shown = [inbox.email(i) for i in support]
    shown += random.Random(item.id).sample(others, min(EVIDENCE_DISTRACTORS, len(others)))
    emails = "\n\n".join(show_email(e) for e in sorted(shown, key=lambda e: e.id))
    reminder = "" if protocol == "tools" else "\nReply with one line: ANSWER: answer | email ids"
    return f"These emails may help:\n\n{emails}\n\n{question}{reminder}"


# --- The scenario ---------------------------------------------------------------------------------


class EmailScenario(ScenarioBase):
    """Items, episodes and the check for the email task (see the module docstring)."""

    name = "email"
    default_scorer = "verifier"  # the local 135M judge cannot judge it (email/__init__.py)
    ruler_rubric = RUBRIC  # for the RULER judge (judges.ruler)

    def __init__(self, inboxes: list[Inbox], level: Level, protocol: Protocol, num_items: int):
        self.level, self.spec, self.protocol = level, LEVELS[level], protocol
        self.inboxes = {inbox.id: inbox for inbox in inboxes}
        self.store = InboxStore(inboxes)
        self.num_items = num_items

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
        client = model.openai_client()

        async def sample(messages: list[Any], turn: int) -> Choice:
            request: dict[str, Any] = {
                "model": model.get_inference_name(sampling.step),
                "messages": messages,
                "logprobs": True,
                "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
            }
            if self.protocol != "text":
                request["tools"] = TOOLS
            completion = await client.chat.completions.create(**request)
            return completion.choices[0]

        return await self._play(item, sample)

    async def demonstrate(self, item: Item) -> art.Trajectory:
        """The oracle's episode on `item` (scenarios.email.oracle): the rollout's episode with
        the oracle's action messages in place of sampled turns, for supervised warm-starts. Its
        reward is the check's score; metadata `policy` says it was not sampled."""
        inbox = self.inboxes[item.data["inbox"]]
        spec = self.spec
        actions = oracle.plan(item, inbox, self.store, spec.evidence_in_prompt, spec.max_turns)
        # auto shows the text actions in the prompt (system_prompt), so it gets text demonstrations
        protocol: Protocol = "tools" if self.protocol == "tools" else "text"

        async def recite(messages: list[Any], turn: int) -> dict[str, Any]:
            return oracle.message(actions[turn], protocol, turn)

        trajectory = await self._play(item, recite)
        trajectory.metadata["policy"] = "oracle"
        trajectory.reward = self.reward(item, trajectory)
        return trajectory

    async def _play(self, item: Item, policy: PolicyTurn) -> art.Trajectory:
        """One episode: the prompt, then `policy` turns, each acted on and observed, until a final
        answer or the turn limit. A refused later turn (openai.BadRequestError) ends it."""
        inbox = self.inboxes[item.data["inbox"]]
        trajectory = art.Trajectory(
            messages_and_choices=[
                {
                    "role": "system",
                    "content": system_prompt(inbox, self.protocol, self.spec.max_turns),
                },
                {"role": "user", "content": question_prompt(item, inbox, self.spec, self.protocol)},
            ],
            # ART renders `tools` into the training prompt; it must be what the policy saw.
            tools=TOOLS if self.protocol != "text" else None,
            metadata={
                "inbox": inbox.id,
                "question_id": item.data["question_id"],
                "kind": item.data["kind"],
                "difficulty": self.level.value,
                "protocol": self.protocol,
            },
        )
        episode = _Episode(supporting=frozenset(item.data["supporting_ids"]))
        if self.spec.evidence_in_prompt:
            episode.seen.update(episode.supporting)
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
            episode.turns += 1
            one_left = turn == self.spec.max_turns - 2
            # The turn as ART renders it, which is also what `final_answer` reads back.
            if self._act(inbox, trajectory.messages()[-1], episode, trajectory, one_left):
                end = EpisodeEnd.ANSWERED
                break
        return self._finish(item, trajectory, episode, end)

    def _act(
        self,
        inbox: Inbox,
        message: dict[str, Any],
        episode: _Episode,
        trajectory: art.Trajectory,
        one_left: bool,
    ) -> bool:
        """Execute the turn's actions and append their observations; True when it answered."""
        for action, call_id in message_actions(message, self.protocol):
            if call_id is None and not isinstance(action, Invalid):
                episode.text_actions += 1
            if isinstance(action, Answer):
                episode.answer = action
                episode.tool_calls += 1
                return True
            observation = _nudge(self._observe(inbox, action, episode), one_left)
            trajectory.messages_and_choices.append(
                {"role": "tool", "tool_call_id": call_id, "content": observation}
                if call_id is not None
                else {"role": "user", "content": observation}
            )
        return False

    def _observe(self, inbox: Inbox, action: Action, episode: _Episode) -> str:
        """Run a search or read (never raises); errors come back as text for the model."""
        if isinstance(action, Invalid):
            episode.invalid += 1
            return f"Error: {action.error}"
        episode.tool_calls += 1
        try:
            if isinstance(action, Search):
                hits = self.store.search(
                    inbox.id, action.keywords, action.sender, action.to, action.after, action.before
                )
                episode.seen.update(h.id for h in hits)
                return show_hits(hits)
            if isinstance(action, Read):
                email = self.store.read(inbox.id, action.id)
                if email is None:
                    return f"Error: no email with id {action.id[:40]!r} in this inbox."
                episode.seen.add(email.id)
                return show_email(email)
        except ToolInputError as error:
            episode.invalid += 1
            return f"Error: {error}"
        return "Error: unsupported action."

    def _finish(
        self, item: Item, trajectory: art.Trajectory, episode: _Episode, end: EpisodeEnd
    ) -> art.Trajectory:
        answer = episode.answer
        correctness = (
            answer_score(item.answer or "", AnswerType(item.data["answer_type"]), answer.answer)
            if answer
            else 0.0
        )
        trajectory.metrics.update(
            {
                Metric.TURNS: episode.turns,
                Metric.TOOL_CALLS: episode.tool_calls,
                Metric.INVALID_ACTIONS: episode.invalid,
                Metric.TEXT_ACTIONS: episode.text_actions,
                Metric.ANSWERED: float(answer is not None),
                Metric.IMPLICIT_ANSWER: float(answer is not None and answer.implicit),
                Metric.CORRECT: float(correctness >= CORRECT_THRESHOLD),
                **{f"{END_PREFIX}{reason}": float(reason is end) for reason in EpisodeEnd},
            }
        )
        if episode.supporting:  # nothing to find for ABSENT questions
            trajectory.metrics[Metric.SOURCE_FOUND] = float(bool(episode.seen & episode.supporting))
        trajectory.metadata["final_answer"] = answer.answer if answer else None
        trajectory.metadata["source_ids"] = ",".join(answer.source_ids) if answer else None
        return trajectory.finish()

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return self.reward(item, trajectory)

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        """The ground-truth score of the episode's final answer (scoring module docstring)."""
        answer = final_answer(trajectory)
        return score_answer(
            item.answer or "",
            AnswerType(item.data["answer_type"]),
            item.data["supporting_ids"],
            answer.answer if answer else None,
            answer.source_ids if answer else (),
        )


PolicyTurn = Callable[[list[Any], int], Awaitable[Choice | dict[str, Any]]]
"""One assistant turn, given the messages so far and the turn's number: a sampled `Choice`
(rollout; ART trains on its tokens) or a plain assistant message (demonstrate)."""


class _Episode:
    """Mutable bookkeeping of one episode (never leaves the rollout)."""

    def __init__(self, supporting: frozenset[str]) -> None:
        self.supporting = supporting
        self.seen: set[str] = set()
        self.answer: Answer | None = None
        self.turns = self.tool_calls = self.invalid = self.text_actions = 0


def _nudge(observation: str, one_left: bool) -> str:
    """Small models rarely count turns: say so when the next turn is the last."""
    return observation + ("\n\nOne turn left: give your final answer now." if one_left else "")


def message_actions(
    message: Mapping[str, Any], protocol: Protocol
) -> list[tuple[Action, str | None]]:
    """The actions of one assistant message (as `art.Trajectory.messages()` renders a turn), each
    with its tool call's id (None for a text action), by `turn_actions`' rules."""
    calls = [
        (
            (call.get("function") or {}).get("name"),
            (call.get("function") or {}).get("arguments"),
            str(call.get("id") or ""),
        )
        for call in message.get("tool_calls") or []
    ]
    content = message.get("content")
    return turn_actions(content if isinstance(content, str) else None, calls, protocol)


def final_answer(trajectory: art.Trajectory) -> Answer | None:
    """The episode's final answer, read back from its messages by the rollout's own rules
    (`message_actions`), so stored trajectories can be re-checked."""
    protocol = trajectory.metadata.get("protocol", "auto")
    answers = (
        action
        for message in trajectory.messages()
        if message.get("role") == "assistant"
        for action, _ in message_actions(message, protocol)
        if isinstance(action, Answer)
    )
    return next(answers, None)


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


def make_scenario(options: Options, seed: int = 0) -> EmailScenario:
    level = parse_level(options.difficulty)
    inboxes = build_inboxes(seed, level, options.num_items)
    return EmailScenario(inboxes, level, options.tool_protocol, options.num_items)
