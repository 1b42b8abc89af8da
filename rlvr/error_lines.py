"""One-line messages for users, written one way everywhere: where a validation failed and why,
a "did you mean" hint, and the words a `key=value` uses for None."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

NONE_WORDS = frozenset({"", "none", "None", "null"})  # `key=` / `key=none` on the CLI


class FirstError(BaseModel):
    """The first error of a pydantic validation: where (dotted location), the message, the
    value given."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    where: str
    message: str
    value: Any


def first_error(error: ValidationError, default_where: str) -> FirstError:
    """The first of `error`'s problems, its location dotted (`default_where` when it has none)."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or default_where
    return FirstError(where=where, message=first["msg"], value=first.get("input"))


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest known word, or nothing."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def means_none(value: Any) -> bool:
    """Whether a value given as text means None (for a key that accepts None)."""
    return isinstance(value, str) and value in NONE_WORDS
