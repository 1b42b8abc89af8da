"""Reading a move out of whatever the model wrote; never raises.

Lenient on purpose: a small model says "I would move left." or "**LEFT**" or "←" as often as
"left". The first direction named wins; a reply that names several different directions is
still played (first wins) but counted as ambiguous, and a reply naming none is unparsed.
"""

from __future__ import annotations

import re

from scenarios.game2048.game import Direction

ARROWS = {"↑": Direction.UP, "↓": Direction.DOWN, "←": Direction.LEFT, "→": Direction.RIGHT}
LETTERS = {"u": Direction.UP, "d": Direction.DOWN, "l": Direction.LEFT, "r": Direction.RIGHT}
MAX_REPLY_CHARS = 2000  # longer replies are cut before matching (max_tokens keeps them short)

_NAMED = re.compile(r"(?<![a-z])(up|down|left|right)(?![a-z])|([↑↓←→])", re.IGNORECASE)


def directions_named(text: str | None) -> tuple[Direction, ...]:
    """The distinct directions a reply names, in order of first mention. A reply that is a bare
    letter (u, d, l, r) names that direction."""
    text = (text or "")[:MAX_REPLY_CHARS]
    bare = text.strip(" \t\n.!*_`'\"").lower()
    if bare in LETTERS:
        return (LETTERS[bare],)
    found = [
        Direction(word.lower()) if word else ARROWS[arrow] for word, arrow in _NAMED.findall(text)
    ]
    return tuple(dict.fromkeys(found))


def parse_move(text: str | None) -> Direction | None:
    """The move a reply makes: the first direction it names, or None."""
    named = directions_named(text)
    return named[0] if named else None
