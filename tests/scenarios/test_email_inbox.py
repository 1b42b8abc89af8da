"""The generated inboxes: deterministic, answerable from their supporting emails, searchable."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from functools import cache

import pytest

from rlvr.config import ConfigError
from rlvr.types import Environment
from scenarios.email import Options
from scenarios.email.environment import LEVELS, Level, make_environment
from scenarios.email.inbox import (
    MONTHS,
    NOT_IN_INBOX,
    AnswerType,
    Inbox,
    QuestionKind,
    fmt_money,
    generate_inbox,
)
from scenarios.email.store import InboxStore
from tests.helpers.repo import ROOT

INBOX_PY = ROOT / "scenarios" / "email" / "inbox.py"
NUM_INBOXES = 12


@cache
def inboxes(seed: int = 0) -> tuple[Inbox, ...]:
    return tuple(generate_inbox(seed, i) for i in range(NUM_INBOXES))


def digest(seed: int, count: int) -> str:
    blob = "".join(generate_inbox(seed, i).model_dump_json() for i in range(count))
    return hashlib.sha256(blob.encode()).hexdigest()


def test_same_seed_same_inbox_and_questions() -> None:
    assert generate_inbox(7, 2) == generate_inbox(7, 2)
    assert digest(7, 3) == digest(7, 3)


@pytest.mark.parametrize(("a", "b"), [((0, 0), (1, 0)), ((0, 0), (0, 1)), ((3, 5), (4, 5))])
def test_different_seed_or_index_different_inbox(a: tuple[int, int], b: tuple[int, int]) -> None:
    first, second = generate_inbox(*a), generate_inbox(*b)
    assert first.emails != second.emails
    assert [q.text for q in first.questions] != [q.text for q in second.questions]


def test_deterministic_across_processes() -> None:
    """No dependence on hash randomisation or wall-clock time: two fresh interpreters with
    different PYTHONHASHSEED produce the same bytes as this one. The generator module is loaded
    alone (it imports only faker and pydantic), not through the packages that pull in ART."""
    code = (
        "import hashlib, importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('inbox', {str(INBOX_PY)!r}); "
        "inbox = importlib.util.module_from_spec(spec); sys.modules['inbox'] = inbox; "
        "spec.loader.exec_module(inbox); "
        "blob = ''.join(inbox.generate_inbox(11, i).model_dump_json() for i in range(2)); "
        "print(hashlib.sha256(blob.encode()).hexdigest())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for hash_seed in (1, 2)
    }
    assert outputs == {digest(11, 2)}


def test_inbox_shape() -> None:
    for inbox in inboxes():
        ids = [e.id for e in inbox.emails]
        assert len(ids) == len(set(ids)) >= 30
        assert [e.date for e in inbox.emails] == sorted(e.date for e in inbox.emails)
        assert {q.kind for q in inbox.questions} == set(QuestionKind)
        for email in inbox.emails:
            assert email.sender and email.to and email.subject and email.body and email.thread
        # several people, companies, threads and distractors
        assert len({e.sender for e in inbox.emails}) >= 8
        assert len({e.thread for e in inbox.emails}) >= 20
        assert any("Unsubscribe" in e.body for e in inbox.emails)
        assert any(e.cc for e in inbox.emails)


def _amounts(text: str) -> list[str]:
    return re.findall(r"Amount due: (\$[\d,]+\.\d\d)", text)


def _invoices_from(inbox: Inbox, company: str) -> list[str]:
    return [e.id for e in inbox.emails if e.subject.endswith(f" from {company}")]


def test_every_question_is_answerable_from_its_supporting_emails() -> None:
    checked: dict[QuestionKind, int] = dict.fromkeys(QuestionKind, 0)
    for inbox in inboxes():
        texts = {e.id: e.text() for e in inbox.emails}
        for q in inbox.questions:
            support = [inbox.email(i) for i in q.supporting_ids]
            checked[q.kind] += 1
            if q.kind is QuestionKind.ABSENT:
                assert q.answer == NOT_IN_INBOX and q.answer_type is AnswerType.ABSENT
                assert not support
                # nothing in the whole inbox mentions the asked entity
                assert not [i for i, t in texts.items() if q.entity.lower() in t.lower()], q
                continue
            assert support, q
            assert all(q.entity.lower() in e.text().lower() for e in support), q
            if q.kind is QuestionKind.SINGLE:
                assert len(support) == 1 and q.answer in support[0].body, q
            elif q.kind is QuestionKind.LATEST:
                latest = max(support, key=lambda e: e.date)
                assert q.answer in latest.body, q
                assert not any(q.answer in e.body for e in support if e is not latest), q
                assert len({e.thread for e in support}) == 1
                # no later email in the thread states another time
                later = [
                    e for e in inbox.emails if e.thread == latest.thread and e.date > latest.date
                ]
                assert not any(re.search(r"\d{1,2}:\d{2}", e.body) for e in later), q
            elif q.answer_type is AnswerType.MONEY:  # a total over invoices of one month
                month = next(m for m in MONTHS if m in q.text)
                amounts = [_amounts(e.body) for e in support]
                assert all(len(a) == 1 for a in amounts), q
                cents = sum(int(a[0].strip("$").replace(",", "").replace(".", "")) for a in amounts)
                assert fmt_money(cents) == q.answer, q
                assert all(MONTHS[e.date.month - 1] == month for e in support), q
                # complete: every invoice of that company in that month is supporting
                in_month = [
                    i
                    for i in _invoices_from(inbox, q.entity)
                    if MONTHS[inbox.email(i).date.month - 1] == month
                ]
                assert sorted(in_month) == list(q.supporting_ids), q
            else:  # a count of all invoices from one company
                assert q.answer_type is AnswerType.COUNT
                assert q.answer == str(len(support))
                assert sorted(_invoices_from(inbox, q.entity)) == list(q.supporting_ids), q
    assert all(count >= NUM_INBOXES for count in checked.values()), checked


def test_search_finds_supporting_email_in_top5_for_question_keywords() -> None:
    store = InboxStore(inboxes())
    answerable = [q for inbox in inboxes() for q in inbox.questions if q.supporting_ids]
    any_hit = all_hit = 0
    for q in answerable:
        top = {hit.id for hit in store.search(q.inbox, q.text, limit=5)}
        any_hit += bool(top & set(q.supporting_ids))
        all_hit += set(q.supporting_ids) <= top
    rate = any_hit / len(answerable)
    print(f"top-5 any supporting: {rate:.3f}, all supporting: {all_hit / len(answerable):.3f}")
    assert len(answerable) >= 150
    assert rate >= 0.9


def test_search_is_scoped_to_one_inbox() -> None:
    store = InboxStore(inboxes()[:2])
    first, second = inboxes()[:2]
    question = first.questions[0]
    assert store.search(first.id, question.text)
    assert all(
        store.read(second.id, hit.id) is None or hit.id in {e.id for e in second.emails}
        for hit in store.search(second.id, question.text)
    )
    assert store.read(first.id, first.emails[0].id) == first.emails[0]


@pytest.mark.parametrize("level", list(Level))
def test_make_environment_items(level: Level) -> None:
    environment = make_environment(Options(difficulty=level.value, num_items=60), seed=3)
    items = environment.load()
    assert len(items) == 60
    assert len({item.id for item in items}) == 60
    assert {item.data["kind"] for item in items} <= {k.value for k in LEVELS[level].kinds}
    for item in items:
        inbox = environment.inboxes[item.data["inbox"]]
        question = next(q for q in inbox.questions if q.id == item.data["question_id"])
        assert item.prompt == question.text and item.answer == question.answer
        assert item.data["supporting_ids"] == list(question.supporting_ids)
        assert item.data["difficulty"] == level.value
    assert environment.load() == items
    assert isinstance(environment, Environment) and environment.name == "email"
    assert environment.default_scorer == "verifier"


def test_the_default_is_the_agent_level_medium() -> None:
    assert make_environment(Options(num_items=10)).level is Level.MEDIUM
    assert make_environment(Options(difficulty="default", num_items=10)).level is Level.MEDIUM


def test_bad_difficulty_is_one_line_error() -> None:
    with pytest.raises(ConfigError, match=r"difficulty='extreme'.*easy.*hard") as error:
        make_environment(Options(difficulty="extreme", num_items=10))
    assert "\n" not in str(error.value)
