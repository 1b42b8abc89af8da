"""What the agent can do in an inbox, as plain functions for `rlvr.tool_episode`, and how its final
reply is read.

Tools (one set per episode, bound to its inbox): `search(keywords, sender, to, after, before)`
and `read(id)`. In the text protocol the policy writes, for example,

    SEARCH: dinner reservation after:2024-03-01
    READ: e012

and ends the episode with its answer and the ids of the emails it comes from:

    ANSWER: Room 4B | e012, e015

A final reply without an `ANSWER:` line is the answer as it stands (`Answer.implicit`): a model that
ignores the format still answers and is scored like any other, which gives a small model a graded
reward instead of a wall of zeros. Observations tag every email with its id (`[e012]`);
`seen_ids` reads the tags back, which is how the rollout and the check agree on what was found.
A call repeated within an episode (the same email read again, the same search again) is answered
with one line starting `SHOWN_ABOVE`, not the text again: a repeat adds nothing the context does not
hold, and RL on this task drifted toward re-reading, which grew every later turn's context (and the
evaluations' time and memory) by a whole email each time.
They name people without their addresses: no question asks for an address, the `sender:` and
`to:` filters match names too, and an address costs about fourteen tokens each time it is shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.agent import ToolError
from rlvr.agent.tools import marked_line
from scenarios.email.inbox import MONTHS, Email
from scenarios.email.store import InboxStore, SearchHit, ToolInputError

MAX_ANSWER_CHARS = 500
MAX_BODY_CHARS = 1500
MAX_SOURCE_IDS = 20
ANSWER_VERB = "ANSWER"
SHOWN_ABOVE = "Shown above:"

_EMAIL_ID = re.compile(r"\be\d{1,4}\b", re.IGNORECASE)


class Answer(BaseModel):
    """The episode's final answer and the email ids it cites."""

    model_config = ConfigDict(frozen=True)

    answer: str
    source_ids: tuple[str, ...] = ()
    implicit: bool = False  # a plain reply taken as the answer, not an ANSWER line


def email_ids(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i.lower() for i in _EMAIL_ID.findall(text)))[:MAX_SOURCE_IDS]


def parse_answer(reply: str | None) -> Answer | None:
    """The answer of a final reply: the first `ANSWER: text | ids` line (the answer may sit on
    the next line), else the whole reply with the ids it mentions; None for an empty reply."""
    marked = marked_line(reply, [ANSWER_VERB])
    if marked is not None:
        text, bar, ids = marked[1].rpartition("|") if "|" in marked[1] else (marked[1], "", "")
        text = text.strip().strip("\"'`").strip()
        if text:
            return Answer(answer=text[:MAX_ANSWER_CHARS], source_ids=email_ids(ids) if bar else ())
    text = (reply or "").strip()
    if not text:
        return None
    return Answer(answer=text[:MAX_ANSWER_CHARS], source_ids=email_ids(text), implicit=True)


def answer_line(answer: str, source_ids: Iterable[str] = ()) -> str:
    """The final reply that `parse_answer` reads back as (answer, source_ids)."""
    return f"{ANSWER_VERB}: {answer} | {', '.join(source_ids)}".rstrip()


def inbox_tools(store: InboxStore, inbox: str) -> list[Callable[..., Any]]:
    """The search and read tools of one inbox, for one episode: they remember its calls."""
    read_ids: set[str] = set()
    searches: set[tuple[str, str | None, str | None, str | None, str | None]] = set()

    def search(
        keywords: str | list[str],
        sender: str | None = None,
        to: str | None = None,
        after: str | None = None,
        before: str | None = None,
    ) -> str:
        """Search the inbox; shows the 5 best matches.

        Args:
            keywords: words to look for
            sender: only emails whose sender contains this
            to: only emails whose recipients contain this
            after: only emails on or after this date, YYYY-MM-DD
            before: only emails before this date, YYYY-MM-DD
        """
        words = " ".join(keywords) if isinstance(keywords, list) else keywords
        query = (" ".join(words.lower().split()), sender, to, after, before)
        if query in searches:  # only searches that ran are kept, so this one would run too
            return f"{SHOWN_ABOVE} the same search ran earlier. Try other words, or read an email."
        try:
            hits = store.search(inbox, words, sender, to, after, before)
        except ToolInputError as error:
            raise ToolError(str(error)) from None
        searches.add(query)
        return show_hits(hits)

    def read(id: str) -> str:
        """Read one email in full.

        Args:
            id: email id, e.g. e012
        """
        found = _EMAIL_ID.search(id)
        email_id = found.group(0).lower() if found else id.strip(" []()<>\"'`.")
        email = store.read(inbox, email_id)
        if email is None:
            raise ToolError(f"no email with id {id[:40]!r} in this inbox; read an id from a search")
        if email.id in read_ids:
            return f"{SHOWN_ABOVE} [{email.id}] was read earlier. Answer from it, or read another."
        read_ids.add(email.id)
        return show_email(email)

    return [search, read]


_SHOWN_WHOLE = re.compile(r"^\[(e\d{1,4})\]\nFrom: ", re.MULTILINE)


def read_ids(texts: Iterable[str]) -> set[str]:
    """Ids of the emails shown whole (`show_email`: a read, or the evidence in a prompt), not
    those a search only listed."""
    return {m.lower() for text in texts for m in _SHOWN_WHOLE.findall(text)}


def seen_ids(texts: Iterable[str]) -> set[str]:
    """Email ids tagged `[e012]` in observations (what the model was shown)."""
    return {m.lower() for text in texts for m in re.findall(r"\[(e\d{1,4})\]", text)}


# --- Observations ---------------------------------------------------------------------------------


def person(header: str) -> str:
    """'Ann Lee <ann.lee@acme.com>' -> 'Ann Lee'; a bare address stays as it is."""
    name = header.split("<", 1)[0].strip()
    return name or header.strip()


def people(headers: Iterable[str]) -> str:
    return ", ".join(person(h) for h in headers)


def fmt_day(when: datetime) -> str:
    """'Apr 17': a search result's date (the ids follow date order; a read shows the full date)."""
    return f"{MONTHS[when.month - 1][:3]} {when.day}"


def show_hits(hits: list[SearchHit]) -> str:
    if not hits:
        return "No emails match. Try other keywords."
    lines = [
        f"[{h.id}] {fmt_day(h.date)} | {person(h.sender)} | {h.subject} | {' '.join(h.snippet.split())}"
        for h in hits
    ]
    return f"{len(hits)} emails found:\n" + "\n".join(lines)


def show_email(email: Email) -> str:
    body = email.body if len(email.body) <= MAX_BODY_CHARS else email.body[:MAX_BODY_CHARS] + " ..."
    header = [
        f"[{email.id}]",
        f"From: {person(email.sender)}",
        f"To: {people(email.to)}",
        *([f"Cc: {people(email.cc)}"] if email.cc else []),
        f"Date: {email.date:%Y-%m-%d %H:%M}",
        f"Subject: {email.subject}",
    ]
    return "\n".join(header) + "\n\n" + body
