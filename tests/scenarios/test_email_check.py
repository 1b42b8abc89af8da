"""The ground-truth check: exact, normalised, partial, not-in-inbox, source credit, garbage."""

from __future__ import annotations

import art
import pytest
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage

from rlvr.agent.levels import Level
from rlvr.types import Item
from scenarios.email import REPEAT_COST
from scenarios.email.environment import EmailEnvironment, final_answer
from scenarios.email.inbox import NOT_IN_INBOX, AnswerType
from scenarios.email.scoring import (
    ANSWER_WEIGHT,
    SOURCE_WEIGHT,
    answer_score,
    says_not_in_inbox,
    score_answer,
    source_f1,
    token_f1,
)

S = SOURCE_WEIGHT
A = ANSWER_WEIGHT


@pytest.mark.parametrize(
    ("expected", "kind", "given", "score"),
    [
        # exact and normalised matches
        ("Room 4B", AnswerType.TEXT, "Room 4B", 1.0),
        ("Room 4B", AnswerType.TEXT, "room 4b.", 1.0),
        ("the Harbor Room", AnswerType.TEXT, "Harbor Room", 1.0),
        ("Room 4B", AnswerType.TEXT, "The meeting is in Room 4B.", 1.0),
        ("5AF7YW", AnswerType.TEXT, "Confirmation code: 5AF7YW", 1.0),
        # money and counts compare numbers
        ("$7,568.57", AnswerType.MONEY, "$7,568.57", 1.0),
        ("$7,568.57", AnswerType.MONEY, "7568.57", 1.0),
        ("$7,568.57", AnswerType.MONEY, "The total is $7568.570", 1.0),
        ("$7,568.57", AnswerType.MONEY, "$6,019.14 + $1,549.43 = $7,568.57", 1.0),
        ("$7,568.57", AnswerType.MONEY, "$7,568.00", 0.0),
        ("$1,200.00", AnswerType.MONEY, "1200", 1.0),
        ("3", AnswerType.COUNT, "three", 1.0),
        ("3", AnswerType.COUNT, "3 invoices", 1.0),
        ("3", AnswerType.COUNT, "4", 0.0),
        # partial: token F1
        ("Thursday, 25 April 2024 at 14:15", AnswerType.TEXT, "25 April 2024 at 14:15", 12 / 13),
        ("Thursday, 25 April 2024 at 14:15", AnswerType.TEXT, "25 April", 4 / 9),
        ("The Coleman Inn", AnswerType.TEXT, "Coleman Hotel", 0.5),
        # not-in-inbox phrasings
        (NOT_IN_INBOX, AnswerType.ABSENT, "not in the inbox", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "The inbox does not say.", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "I couldn't find that invoice", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "There is no such meeting in your emails.", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "Not mentioned.", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "Unknown", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "I don't know", 1.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "$4,000.00", 0.0),
        (NOT_IN_INBOX, AnswerType.ABSENT, "Room 4B", 0.0),
        # claiming absence when the answer exists is wrong
        ("Room 4B", AnswerType.TEXT, "not in the inbox", 0.0),
        ("$7,568.57", AnswerType.MONEY, "No invoice found", 0.0),
        # garbage
        ("Room 4B", AnswerType.TEXT, "", 0.0),
        ("Room 4B", AnswerType.TEXT, "   ", 0.0),
        ("Room 4B", AnswerType.TEXT, "%%%%", 0.0),
        ("Room 4B", AnswerType.TEXT, "lorem ipsum dolor", 0.0),
        ("$7,568.57", AnswerType.MONEY, "banana", 0.0),
        # dumping text that contains the answer does not pay in full
        (
            "Room 4B",
            AnswerType.TEXT,
            "Hi Joseph let us hold the meeting next week in Room 4B thanks",
            2 / 7,
        ),
    ],
)
def test_answer_score(expected: str, kind: AnswerType, given: str, score: float) -> None:
    assert answer_score(expected, kind, given) == pytest.approx(score)


@pytest.mark.parametrize(
    ("cited", "supporting", "score"),
    [
        (["e1"], ["e1"], 1.0),
        (["E1 "], ["e1"], 1.0),
        (["e1", "e2"], ["e1"], 2 / 3),
        (["e1"], ["e1", "e2"], 2 / 3),
        (["e9"], ["e1"], 0.0),
        ([], ["e1"], 0.0),
        (["e1", "e1", "e1"], ["e1"], 1.0),
        ([f"e{i}" for i in range(20)], ["e1"], 2 / 21),
    ],
)
def test_source_f1(cited: list[str], supporting: list[str], score: float) -> None:
    assert source_f1(cited, supporting) == pytest.approx(score)


@pytest.mark.parametrize(
    ("cited", "supporting", "read", "score"),
    [
        (["e1"], ["e1"], ["e1"], 1.0),
        (["e1"], ["e1"], [], 0.0),  # cited from a search's list, never read
        (["e1", "e2"], ["e1", "e2"], ["e1"], 0.5),  # the unread citation counts as wrong
        (["e1", "e9"], ["e1"], ["e1", "e9"], 2 / 3),
        (["E1"], ["e1"], ["e1"], 1.0),
    ],
)
def test_source_f1_counts_only_read_citations(
    cited: list[str], supporting: list[str], read: list[str], score: float
) -> None:
    assert source_f1(cited, supporting, read) == pytest.approx(score)


@pytest.mark.parametrize(
    ("kind", "given", "cited", "score"),
    [
        (AnswerType.TEXT, "Room 4B", ["e3"], 1.0),
        (AnswerType.TEXT, "Room 4B", [], A),
        (AnswerType.TEXT, "Room 9", ["e3"], S),  # a near miss earns no answer credit
        (AnswerType.TEXT, "zzz", ["e3"], S),  # wrong answer, right email: source credit
        (AnswerType.TEXT, None, ["e3"], 0.0),  # no final answer: nothing
        (AnswerType.ABSENT, "not in the inbox", [], 1.0),
        (AnswerType.ABSENT, "not in the inbox", ["e3"], 1.0),
        (AnswerType.ABSENT, "zzz", [], 0.0),  # empty citations earn nothing on their own
    ],
)
def test_score_weights(kind: AnswerType, given: str | None, cited: list[str], score: float) -> None:
    expected, supporting = ("Room 4B", ["e3"]) if kind is AnswerType.TEXT else (NOT_IN_INBOX, [])
    assert score_answer(expected, kind, supporting, given, cited) == pytest.approx(score)


def test_f1_and_phrasings_are_total() -> None:
    assert token_f1("", "") == 0.0
    assert not says_not_in_inbox("Room 4B")
    assert pytest.approx(1.0) == A + S


def _choice(content: str | None) -> Choice:
    return Choice(
        index=0,
        finish_reason="stop",
        message=ChatCompletionMessage(role="assistant", content=content),
    )


ITEM = Item(
    id="inbox-000/q01",
    prompt="Where will the budget review meeting take place?",
    answer="Room 4B",
    data={"answer_type": "text", "supporting_ids": ["e3"], "kind": "single"},
)


@pytest.mark.parametrize(
    ("reply", "end", "score", "correct"),
    [
        ("ANSWER: Room 4B | e3", "replied", 1.0, 1.0),
        ("**Answer:** Room 4B | [e3]", "replied", 1.0, 1.0),
        ("I think it is Room 4B.", "replied", A, 1.0),  # a plain reply is the answer
        ("It is in Room 4B, see [e3].", "replied", 1.0, 1.0),  # ...and cites what it names
        ("ANSWER: zzz | e3", "replied", S, 0.0),  # the sources earn reward, not correctness
        ("   ", "replied", 0.0, 0.0),  # empty: no answer
        ("SEARCH: budget", "turn_limit", 0.0, 0.0),  # the episode ended without a final reply
        ("ANSWER: Room 4B | e3", "policy_error", 0.0, 0.0),
    ],
)
async def test_check_and_reward_read_the_final_answer(
    reply: str, end: str, score: float, correct: float
) -> None:
    trajectory = art.Trajectory(
        messages_and_choices=[{"role": "user", "content": ITEM.prompt}, _choice(reply)],
        metadata={"end": end},
    )
    # No email was read here: with source_credit="cited" the citations alone earn the credit (the
    # credit for reading is tested in test_email_rollout).
    environment = EmailEnvironment(
        [], Level.MEDIUM, "text", 0, repeat_cost=REPEAT_COST, source_credit="cited"
    )
    assert await environment.check(ITEM, trajectory) == correct
    assert environment.reward(ITEM, trajectory) == pytest.approx(score)
    answer = final_answer(trajectory)
    assert (answer is not None) == (score > 0)
