"""What the agent can do in the corpus, as plain functions for `rlvr.tool_episode`, and how its
final reply is read.

Tools (bound to one corpus index): `search(query)` shows the best `top_k` passages (id, title,
snippet) and `read(passage_id)` one passage in full (by id, or by its exact title: small models copy
titles). In the text protocol:

    SEARCH: Acme Inc headquarters
    READ: p012

The episode ends with the answer, `ANSWER: Oslo`. A final reply without an `ANSWER:` line is the
answer as it stands (`implicit`): the text after "answer is"/"Answer:" (the verifier library's
`final_answer`), else the whole reply, so a model that ignores the format still gets graded credit
(F1 falls with every extra word). Observations tag every passage they show as `[p012]`;
`shown_ids` reads the tags back, which is how the rollout and the reward agree on what was
retrieved.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.agent import ToolError
from rlvr.agent.tools import marked_line
from rlvr.scoring.verifiers import final_answer
from scenarios.multihop.corpus import Passage
from scenarios.multihop.index import Hit, PassageIndex

MAX_ANSWER_CHARS = 300
MAX_QUERY_CHARS = 500
ANSWER_VERB = "ANSWER"

PASSAGE_ID = re.compile(r"\bp\d{1,4}\b", re.IGNORECASE)
_SHOWN_TAG = re.compile(r"\[(p\d{1,4})\]")


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    implicit: bool = False  # a plain reply taken as the answer, not an ANSWER line


def parse_answer(reply: str | None) -> Answer | None:
    """The answer of a final reply (module docstring); None for an empty reply."""
    marked = marked_line(reply, [ANSWER_VERB])
    text = marked[1].split("|")[0].strip().strip("\"'`*").strip() if marked else ""
    if text:
        return Answer(text=text[:MAX_ANSWER_CHARS])
    text = (reply or "").strip()
    if not text:
        return None
    # "... the answer is X." -> "X."; a reply without an answer mark is the answer whole.
    marked = final_answer(text) if "answer" in text.lower() else ""
    return Answer(text=(marked or text)[:MAX_ANSWER_CHARS], implicit=True)


def answer_line(answer: str) -> str:
    """The final reply that `parse_answer` reads back as `answer`."""
    return f"{ANSWER_VERB}: {answer}"


def corpus_tools(index: PassageIndex, top_k: int) -> list[Callable[..., Any]]:
    """The search and read tools over one corpus."""

    def search(query: str | list[str]) -> str:
        """Search the passages; shows the best matches.

        Args:
            query: keywords, e.g. a name
        """
        words = " ".join(str(q) for q in query) if isinstance(query, list) else query
        return show_hits(index.search(words[:MAX_QUERY_CHARS], top_k))

    def read(passage_id: str) -> str:
        """Read one passage in full.

        Args:
            passage_id: passage id, e.g. p012
        """
        found = PASSAGE_ID.search(passage_id)
        ref = found.group(0).lower() if found else passage_id.strip(" []()<>\"'`.")
        passage = index.read(ref)
        if passage is None:
            raise ToolError(
                f"no passage {passage_id[:40]!r}; read an id from the search results, e.g. p012."
            )
        return show_passage(passage)

    return [search, read]


# --- Observations ---------------------------------------------------------------------------------


def show_hit(hit: Hit) -> str:
    """One search result: its id, and its title unless the snippet opens with it (a passage
    starts with its entity's name, which would be shown twice)."""
    if hit.snippet.startswith(hit.title):
        return f"[{hit.id}] {hit.snippet}"
    return f"[{hit.id}] {hit.title}: {hit.snippet}"


def show_hits(hits: list[Hit]) -> str:
    if not hits:
        return "No passages match. Try other keywords."
    return f"{len(hits)} passages found:\n" + "\n".join(show_hit(h) for h in hits)


def show_passage(passage: Passage) -> str:
    return f"[{passage.id}] {passage.title}\n{passage.text}"


def shown_ids(observations: Iterable[str]) -> set[str]:
    """The passage ids tagged in observations (search hits, passages read or shown)."""
    return {tag.lower() for text in observations for tag in _SHOWN_TAG.findall(text)}
