"""The inboxes in SQLite with an FTS5 index, queried only through bound parameters.

The database lives in memory (about a thousand short emails; building it takes well under a
second), so nothing is written to disk and there is no cache to invalidate. After the build the
connection is switched to `query_only`, so even a bug in a query could not modify it.

Model-written text never becomes SQL: every value is a bound parameter. The FTS5 MATCH expression
is itself a small query language (NEAR, OR, *, column filters, quotes), so keywords are reduced to
word tokens and each is quoted as a literal term before it is bound.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from rlvr.agent import ToolError, search
from rlvr.agent.search import fts_match
from scenarios.email.inbox import Email, Inbox

MAX_FILTER_CHARS = 200
SEARCH_LIMIT = 5
# Inbox words carry no signal in an inbox search.
STOPWORDS = search.STOPWORDS | {"email", "emails", "inbox"}

_SCHEMA = """
CREATE TABLE emails (
    rowid INTEGER PRIMARY KEY,
    inbox TEXT NOT NULL,
    id TEXT NOT NULL,
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    cc TEXT NOT NULL,
    date TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    thread TEXT NOT NULL,
    UNIQUE (inbox, id)
);
CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, people, tokenize = 'porter unicode61');
"""

_FILTERS = """
    AND e.inbox = :inbox
    AND (:sender IS NULL OR instr(lower(e.sender), :sender) > 0)
    AND (:to IS NULL OR instr(lower(e.recipients || ' ' || e.cc), :to) > 0)
    AND (:after IS NULL OR e.date >= :after)
    AND (:before IS NULL OR e.date < :before)
"""
# Subject matches weigh more than body matches: subjects name the thing an email is about.
_SEARCH_FTS = f"""
SELECT e.id, e.date, e.sender, e.subject, snippet(emails_fts, 1, '', '', ' ... ', 14)
FROM emails_fts JOIN emails AS e ON e.rowid = emails_fts.rowid
WHERE emails_fts MATCH :match {_FILTERS}
ORDER BY bm25(emails_fts, 4.0, 1.0, 2.0), e.date DESC
LIMIT :limit
"""
_SEARCH_FILTERS_ONLY = f"""
SELECT e.id, e.date, e.sender, e.subject, substr(e.body, 1, 90)
FROM emails AS e
WHERE 1 = 1 {_FILTERS}
ORDER BY e.date DESC
LIMIT :limit
"""


class SearchHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    date: datetime
    sender: str
    subject: str
    snippet: str


class ToolInputError(ToolError, ValueError):
    """A tool argument the model got wrong; its message is shown to the model as the observation."""


def search_terms(keywords: str) -> list[str]:
    """Word tokens of `keywords` without the inbox stopwords (rlvr.agent.search)."""
    return search.search_terms(keywords, STOPWORDS)


def parse_day(value: str | None, field: str) -> str | None:
    """A model-written date filter as an ISO string comparable with the stored dates."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()[:40]
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        raise ToolInputError(f"{field}: expected a date like 2024-03-01, got {text!r}") from None


class InboxStore:
    """Read-only search and lookup over generated inboxes."""

    def __init__(self, inboxes: Sequence[Inbox]) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        rows = [
            (
                e.inbox,
                e.id,
                e.sender,
                ", ".join(e.to),
                ", ".join(e.cc),
                e.date.isoformat(),
                e.subject,
                e.body,
                e.thread,
            )
            for inbox in inboxes
            for e in inbox.emails
        ]
        with self._db:
            self._db.executemany(
                "INSERT INTO emails (inbox, id, sender, recipients, cc, date, subject, body, thread)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            self._db.execute(
                "INSERT INTO emails_fts (rowid, subject, body, people)"
                " SELECT rowid, subject, body, sender || ' ' || recipients || ' ' || cc FROM emails"
            )
        self._db.execute("PRAGMA query_only = ON")

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM emails").fetchone()[0]

    def integrity(self) -> bool:
        """True when the FTS index and the table still agree (used by the injection tests)."""
        with self._lock:
            fts = self._db.execute("SELECT count(*) FROM emails_fts").fetchone()[0]
            rows = self._db.execute("SELECT count(*) FROM emails").fetchone()[0]
            ok = self._db.execute("PRAGMA integrity_check").fetchone()[0]
        return fts == rows and ok == "ok"

    def search(
        self,
        inbox: str,
        keywords: str = "",
        sender: str | None = None,
        to: str | None = None,
        after: str | None = None,
        before: str | None = None,
        limit: int = SEARCH_LIMIT,
    ) -> list[SearchHit]:
        """Best matches first. Raises ToolInputError for an unusable request."""
        terms = search_terms(keywords or "")
        params = {
            "inbox": inbox,
            "sender": _filter_text(sender),
            "to": _filter_text(to),
            "after": parse_day(after, "after"),
            "before": parse_day(before, "before"),
            "limit": limit,
        }
        if not terms and all(params[k] is None for k in ("sender", "to", "after", "before")):
            raise ToolInputError("search_inbox: give keywords (or a from/to/after/before filter)")
        sql = _SEARCH_FTS if terms else _SEARCH_FILTERS_ONLY
        if terms:
            params["match"] = fts_match(terms)
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [
            SearchHit(
                id=i, date=datetime.fromisoformat(d), sender=s, subject=subj, snippet=snip.strip()
            )
            for i, d, s, subj, snip in rows
        ]

    def read(self, inbox: str, email_id: str) -> Email | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, inbox, sender, recipients, cc, date, subject, body, thread"
                " FROM emails WHERE inbox = ? AND id = ?",
                (inbox, str(email_id)[:MAX_FILTER_CHARS]),
            ).fetchone()
        if row is None:
            return None
        i, ib, sender, to, cc, date, subject, body, thread = row
        return Email(
            id=i,
            inbox=ib,
            sender=sender,
            to=tuple(t for t in to.split(", ") if t),
            cc=tuple(c for c in cc.split(", ") if c),
            date=datetime.fromisoformat(date),
            subject=subject,
            body=body,
            thread=thread,
        )


def _filter_text(value: str | None) -> str | None:
    text = str(value).strip().lower()[:MAX_FILTER_CHARS] if value is not None else ""
    return text or None
