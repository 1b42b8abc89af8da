"""Full-text search for agent tools: model-written keywords as a safe SQLite FTS5 query.

FTS5's MATCH expression is itself a small query language (NEAR, OR, *, column filters, quotes),
so a search tool must not pass the model's text through. `search_terms` reduces keywords to word
tokens (lowercased, without stopwords or duplicates, bounded in count and length) and `fts_match`
quotes each as a literal term; the result is bound as a parameter, never formatted into SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MAX_KEYWORD_CHARS = 500
MAX_TERMS = 16
MAX_TERM_CHARS = 40

# Words that carry no signal in a question ("what is the amount ...") and would only add noise to
# an OR query.
# fmt: off
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had",
    "has", "have", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our",
    "please", "show", "tell", "that", "the", "their", "them", "there", "this", "to", "was", "we",
    "were", "what", "when", "where", "which", "who", "whom", "why", "will", "with", "you", "your",
    "can", "could", "would", "should", "about", "any", "all", "find", "search", "now",
))
# fmt: on


def search_terms(keywords: str, stopwords: Iterable[str] = STOPWORDS) -> list[str]:
    """Word tokens of `keywords`: `\\w+` runs, so they never contain quotes or FTS5 operators."""
    skip = frozenset(stopwords)
    words = re.findall(r"\w+", keywords[:MAX_KEYWORD_CHARS].lower())
    kept = [w[:MAX_TERM_CHARS] for w in words if w not in skip]
    return list(dict.fromkeys(kept))[:MAX_TERMS]


def fts_match(terms: Sequence[str]) -> str:
    """An FTS5 query matching any of the terms, each a quoted literal (`"term"`). Quotes inside a
    term are doubled, FTS5's escape, although `search_terms` never produces any."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
