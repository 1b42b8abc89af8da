"""The oracle: a scripted agent that answers each email question correctly through the policy's
own actions, for supervised warm-start demonstrations (`EmailEnvironment.demonstrate`).

It knows one thing the policy does not: which emails support the answer (and so whether there is
one at all). Everything else it does as the policy must. It reads the question's form from the
question text (`FORMS`), searches the real store with keywords taken from the question, reads the
emails that state the fact, and takes the answer out of their text as the READ observation shows
it, never from the item's label. The check then compares that answer with the label, so the
oracle's solve rate also tests that every question can be answered from the inbox.

    easy:          ANSWER at once from the emails shown in the prompt
    medium, hard:  SEARCH, READ the email(s) stating the fact, ANSWER citing every supporting email
    absent:        SEARCH, ANSWER: not in the inbox

Plans are pure functions of (item, inbox, store, level): same item, same plan.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from rlvr.agent import Call
from rlvr.types import Item
from scenarios.email.inbox import MONTHS, NOT_IN_INBOX, Email, Inbox, fmt_money
from scenarios.email.store import InboxStore
from scenarios.email.tools import answer_line, show_email

OracleTurn = Call | str  # a tool call, or the final reply


class Rule(StrEnum):
    """How the answer follows from the supporting emails."""

    ONE = "one"  # the fact stated in the one supporting email
    LATEST = "latest"  # the fact in the latest supporting email (reschedules, schedule changes)
    SUM = "sum"  # the total of the amounts stated in the supporting emails
    COUNT = "count"  # how many supporting emails the search shows


class Form(BaseModel):
    """A question template: how to recognise it, search for it and answer it."""

    model_config = ConfigDict(frozen=True)

    question: str  # fullmatch regex over the question text; its named groups fill `searches`
    searches: tuple[str, ...]  # keyword templates, tried in order (then the question itself)
    rule: Rule
    fact: str = ""  # regex whose group 1 is the answer in an email as READ shows it
    month_filter: bool = False  # the `month` group bounds the search with after:/before:


_WHEN = r"(\w+day, \d{1,2} \w+ \d{4} at \d\d:\d\d)"
_MONEY = r"Amount due: (\$[\d,]+\.\d\d)"

# One form per question template in `inbox` (absent questions reuse the templates of answerable
# ones, except the meeting one, which only ever asks about a meeting that does not exist).
FORMS: tuple[Form, ...] = (
    Form(
        question=r"Where will the (?P<topic>.+) meeting with (?P<who>.+) take place\?",
        searches=("{topic} meeting",),
        rule=Rule.ONE,
        fact=r"at \d\d:\d\d in (.+?)\. ",
    ),
    Form(
        question=r"When is the (?P<topic>.+) meeting with (?P<who>.+) scheduled now\?",
        searches=("{topic} meeting",),
        rule=Rule.LATEST,
        fact=rf"New time: {_WHEN}",
    ),
    Form(
        question=r"When is the (?P<topic>.+) meeting scheduled\?",
        searches=("{topic} meeting",),
        rule=Rule.LATEST,
        fact=rf"(?:meeting on|New time:) {_WHEN}",
    ),
    Form(
        question=r"What is the amount due on invoice (?P<number>INV-\d+)\?",
        searches=("invoice {number}",),
        rule=Rule.ONE,
        fact=_MONEY,
    ),
    Form(
        question=r"When is payment for invoice (?P<number>INV-\d+) from (?P<company>.+) due\?",
        searches=("invoice {number}",),
        rule=Rule.ONE,
        fact=r"Due date: (.+)",
    ),
    Form(
        question=r"What is the total amount of the invoices (?P<company>.+) sent in "
        r"(?P<month>\w+ \d{4})\?",
        searches=("invoice {company}",),
        rule=Rule.SUM,
        fact=_MONEY,
        month_filter=True,
    ),
    Form(
        question=r"How many invoices did (?P<company>.+) send\?",
        searches=("invoice {company}",),
        rule=Rule.COUNT,
    ),
    Form(
        question=r"What is the confirmation code for the flight to (?P<city>.+)\?",
        searches=("flight {city}",),
        rule=Rule.ONE,
        fact=r"Confirmation code: (\w+)",
    ),
    Form(
        question=r"When does the flight to (?P<city>.+) depart now\?",
        searches=("flight {city}",),
        rule=Rule.LATEST,
        fact=rf"now departs \w+ on {_WHEN}",
    ),
    Form(
        question=r"When does the flight to (?P<city>.+) depart\?",
        searches=("flight {city}",),
        rule=Rule.ONE,
        fact=rf"departs \w+ on {_WHEN}",
    ),
    Form(
        question=r"Which hotel is booked for the stay in (?P<city>.+)\?",
        searches=("stay {city} reservation",),
        rule=Rule.ONE,
        fact=r"reservation at (.+?) in \w+ is confirmed",
    ),
)


class OracleError(ValueError):
    """The oracle cannot play this item (an unknown question form, a fact missing from its email):
    a bug in the oracle or the generator, never a reason to guess."""


def match_form(question: str) -> tuple[Form, dict[str, str]]:
    for form in FORMS:
        found = re.fullmatch(form.question, question)
        if found:
            return form, found.groupdict()
    raise OracleError(f"no oracle form matches the question {question!r}")


def month_bounds(month: str) -> tuple[str, str]:
    """'March 2024' -> ('2024-03-01', '2024-04-01'), the after:/before: filters of that month."""
    name, year = month.split()
    number = MONTHS.index(name) + 1
    start = f"{year}-{number:02d}-01"
    end = f"{int(year) + number // 12}-{number % 12 + 1:02d}-01"
    return start, end


def find(
    form: Form, groups: dict[str, str], question: str, inbox: str, store: InboxStore, want: set[str]
) -> Call:
    """The first search (the form's keywords, then the question as asked) whose hits show every
    email in `want`; the first one tried when none does (the check then tells)."""
    after, before = month_bounds(groups["month"]) if form.month_filter else (None, None)
    dates = {k: v for k, v in (("after", after), ("before", before)) if v}
    searches = [
        Call(name="search", arguments={"keywords": keywords, **dates})
        for keywords in (*(t.format(**groups) for t in form.searches), question)
    ]
    for search in searches:
        hits = store.search(inbox, search.arguments["keywords"], after=after, before=before)
        if want <= {hit.id for hit in hits}:
            return search
    return searches[0]


def fact(form: Form, email: Email) -> str:
    found = re.search(form.fact, show_email(email))
    if found is None:
        raise OracleError(f"{email.inbox}/{email.id}: no {form.fact!r} in the email")
    return found.group(1).strip()


def conclude(form: Form, emails: list[Email]) -> str:
    """The answer the supporting `emails` give under the form's rule."""
    if form.rule is Rule.COUNT:
        return str(len(emails))
    if form.rule is Rule.SUM:
        return fmt_money(sum(int(re.sub(r"\D", "", fact(form, e))) for e in emails))
    return fact(form, max(emails, key=lambda e: e.date))  # ONE: the only one; LATEST: the last


def reads(form: Form, emails: list[Email]) -> list[Email]:
    """The emails whose text the answer comes from (a count needs only the search's hits)."""
    if form.rule is Rule.COUNT:
        return []
    if form.rule is Rule.SUM:
        return emails
    return [max(emails, key=lambda e: e.date)]


def plan(
    item: Item, inbox: Inbox, store: InboxStore, evidence_in_prompt: bool, max_turns: int
) -> tuple[OracleTurn, ...]:
    """The turns a correct agent plays on `item`: tool calls, then the final answer."""
    support = tuple(item.data["supporting_ids"])
    form, groups = match_form(item.prompt)
    if not support:  # nothing in the inbox answers it: look (unless all is shown), then say so
        absent = answer_line(NOT_IN_INBOX)
        search = find(form, groups, item.prompt, inbox.id, store, set())
        return (absent,) if evidence_in_prompt else (search, absent)
    emails = sorted((inbox.email(i) for i in support), key=lambda e: e.date)
    if evidence_in_prompt:  # the prompt shows every supporting email: answer at once
        return (answer_line(conclude(form, emails), support),)
    search = find(form, groups, item.prompt, inbox.id, store, set(support))
    # The answer comes from the emails as the read tool returns them, the policy's only view.
    shown = [read(store, inbox.id, e.id) for e in reads(form, emails)]
    answer = conclude(form, emails if form.rule is Rule.COUNT else shown)
    reading = [Call(name="read", arguments={"id": e.id}) for e in shown]
    actions = (search, *reading, answer_line(answer, support))
    if len(actions) > max_turns:
        raise OracleError(f"{item.id}: {len(actions)} actions do not fit in {max_turns} turns")
    return actions


def read(store: InboxStore, inbox: str, email_id: str) -> Email:
    email = store.read(inbox, email_id)
    if email is None:
        raise OracleError(f"{inbox}/{email_id}: a supporting email is missing from the store")
    return email
