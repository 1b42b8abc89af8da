"""BM25 search over the passages: SQLite FTS5 in memory, bound parameters only.

A corpus is a few hundred short passages, so the index is built in memory per environment (well
under a second) and switched to `query_only`. Model-written queries go through `rlvr.agent.search`
(`search_terms`, `fts_match`: word tokens, each quoted as an FTS5 literal), so no query can reach
FTS5's operators or SQL.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from rlvr.agent import ToolError
from rlvr.agent.search import fts_match, search_terms
from scenarios.multihop.corpus import Passage

MAX_REF_CHARS = 200
SNIPPET_TOKENS = 16

_SCHEMA = """
CREATE TABLE passages (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, title TEXT NOT NULL,
                       text TEXT NOT NULL, kind TEXT NOT NULL);
CREATE VIRTUAL TABLE passages_fts USING fts5(title, text, tokenize = 'porter unicode61');
"""
# A title match names the entity a passage is about: it weighs more than a mention in the text.
_SEARCH = """
SELECT p.id, p.title, snippet(passages_fts, 1, '', '', ' ... ', :tokens)
FROM passages_fts JOIN passages AS p ON p.rowid = passages_fts.rowid
WHERE passages_fts MATCH :match
ORDER BY bm25(passages_fts, 4.0, 1.0), p.rowid
LIMIT :limit
"""
_READ = """
SELECT id, title, text, kind FROM passages
WHERE id = lower(:ref) OR lower(title) = lower(:ref)
ORDER BY id = lower(:ref) DESC
LIMIT 1
"""


class Hit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    snippet: str


class PassageIndex:
    """Read-only search and lookup over one corpus's passages."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        with self._db:
            self._db.executemany(
                "INSERT INTO passages (id, title, text, kind) VALUES (?, ?, ?, ?)",
                [(p.id, p.title, p.text, p.kind.value) for p in passages],
            )
            self._db.execute(
                "INSERT INTO passages_fts (rowid, title, text) SELECT rowid, title, text FROM passages"
            )
        self._db.execute("PRAGMA query_only = ON")

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM passages").fetchone()[0]

    def integrity(self) -> bool:
        """True when the FTS index and the table still agree (used by the injection tests)."""
        with self._lock:
            fts = self._db.execute("SELECT count(*) FROM passages_fts").fetchone()[0]
            rows = self._db.execute("SELECT count(*) FROM passages").fetchone()[0]
            ok = self._db.execute("PRAGMA integrity_check").fetchone()[0]
        return fts == rows and ok == "ok"

    def search(self, query: str, k: int) -> list[Hit]:
        """The `k` best passages for `query`, best first. Raises ToolError for a query with
        no usable words."""
        terms = search_terms(query or "")
        if not terms:
            raise ToolError("give a few keywords, e.g. SEARCH: Acme Inc headquarters")
        params = {"match": fts_match(terms), "limit": k, "tokens": SNIPPET_TOKENS}
        with self._lock:
            rows = self._db.execute(_SEARCH, params).fetchall()
        return [Hit(id=i, title=t, snippet=" ".join(s.split())) for i, t, s in rows]

    def read(self, ref: str) -> Passage | None:
        """A passage by id (`p012`) or by its exact title, case-insensitive; None when neither."""
        with self._lock:
            row = self._db.execute(_READ, {"ref": str(ref).strip()[:MAX_REF_CHARS]}).fetchone()
        if row is None:
            return None
        i, title, text, kind = row
        return Passage(id=i, title=title, text=text, kind=kind)
