"""Observations within a token budget: a long tool result is cut around what the call asked for.

    fitted = fit(text, budget=200, asked=Asked(terms=("invoice", "12345")))
    fitted.text   # at most 200 tokens, ending "[... 212 tokens cut]" when anything was cut

A tool result is a list of lines (search results one per line, an email's header and body lines,
a passage). When it is over the budget, `fit` ranks its lines by what the call asked for (the
`Asked` terms: the call's own, and for a call whose own terms find only the first line — a read
by id — the terms of the episode's earlier calls): lines holding more of the terms first, then
lines nearer to one that holds some, then earlier before later. It gives up the least useful
text first, until the result fits:

1. lines that hold none of the terms and are not next to one that does are dropped;
2. lines are shortened, those holding fewer terms first and all lines of a kind a little at a
   time, down to `SHORT_LINE_WORDS` words: the line's first word (the `[e012]` or `From:` that
   says what the line is) and the earliest run of words that holds the most terms, `…` where
   words were left out; then they are dropped, before the lines that hold more terms are
   touched (a search result's weaker hits lose their snippets, then go, before the best hits
   lose theirs);
3. the most useful line and the first (what the result is: "5 emails found:", "[e012]") stay;
   when they alone are over the budget, the most useful is cut to a window of itself, without
   the first line only when no window fits beside it.

A result many budgets long loses its least useful lines before any is shortened, so the work
stays linear in its length. The last line of a cut result says how much was cut:
`[... 212 tokens cut]`; nothing is cut without it, and `Fitted.cut` counts it for the episode's
metrics.

Tokens are counted by `approx_tokens` unless a counter is given: an estimate with no tokenizer
(its docstring says how good). Any `count(text) -> int` works, e.g. an exact one from the
policy's tokenizer: `lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from pydantic import BaseModel, ConfigDict

from rlvr.agent.search import search_terms

TokenCounter = Callable[[str], int]

SHORT_LINE_WORDS = 8  # lines are shortened down to this many words before any is dropped
BULK_FACTOR = 4  # a result over this many budgets loses whole lines before any is shortened
MIN_BUDGET = 24  # room for the marker and a few words of the result
STEM_CHARS = 5  # a word matches a term it starts with (its first letters): plurals, tenses
ELLIPSIS = "…"
LETTERS_PER_TOKEN = 4
CAPITALISED_LETTERS_PER_TOKEN = 3.5  # names are rarer words: split into more, shorter tokens

_PIECES = re.compile(r"(?P<digit>\d)|(?P<word>[A-Za-z]+)|(?P<newlines>\n+)|(?P<space>[ \t]+)|.")
_WORDS = re.compile(r"\w+")
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def approx_tokens(text: str) -> int:
    """An estimate of a byte-level BPE tokenizer's count, with no tokenizer: an ASCII word is a
    token per four letters, a capitalised one per three and a half (rounded up), a digit, an
    ASCII punctuation mark and a run of line breaks one each, a space is free before a word or a
    punctuation mark (BPE merges it) and one token elsewhere, any other character one per UTF-8
    byte. On the email and multihop tasks' prompts and observations it is never below SmolLM2's
    real count and about a quarter above it overall (tests/agent/test_budget.py checks both)."""
    count = 0
    for piece in _PIECES.finditer(text):
        kind = piece.lastgroup
        if kind == "word":
            word = piece.group()
            per_token = CAPITALISED_LETTERS_PER_TOKEN if word[0].isupper() else LETTERS_PER_TOKEN
            count += math.ceil(len(word) / per_token)
        elif kind == "space":
            after = text[piece.end() : piece.end() + 1]
            count += not (after.isascii() and (after.isalpha() or _PUNCTUATION.match(after)))
        elif kind in ("digit", "newlines"):
            count += 1
        else:
            count += len(piece.group().encode())
    return count


def marker(cut: int) -> str:
    return f"[... {cut} tokens cut]"


class Fitted(BaseModel):
    """An observation as shown: its text, its tokens, and the tokens cut from it (0: whole)."""

    model_config = ConfigDict(frozen=True)

    text: str
    tokens: int
    cut: int = 0


def call_terms(values: Iterable[object]) -> list[str]:
    """The search terms of a call's argument values (strings and lists of strings)."""
    words = [v for value in values for v in (value if isinstance(value, list) else [value])]
    return search_terms(" ".join(str(w) for w in words if isinstance(w, str)))


class Asked(BaseModel):
    """What a call asked for: its own terms, and the terms of the episode's calls before it,
    which count only where its own find nothing past the first line (a `read` by id: the id is
    in the header, the body is ranked by what the last search asked for)."""

    model_config = ConfigDict(frozen=True)

    terms: tuple[str, ...] = ()
    earlier: tuple[str, ...] = ()

    def stems(self) -> frozenset[tuple[int, str]]:
        """(0 for own, 1 for earlier, the term's first STEM_CHARS letters): a word matches a term
        it starts with."""
        own = {t.lower()[:STEM_CHARS] for t in self.terms}
        before = {t.lower()[:STEM_CHARS] for t in self.earlier} - own
        return frozenset({(0, t) for t in own} | {(1, t) for t in before})


NOTHING_ASKED = Asked()
Score = tuple[int, int]  # distinct own terms, distinct earlier terms


def held(text: str, wanted: frozenset[tuple[int, str]]) -> set[tuple[int, str]]:
    """The terms of `wanted` that a word of `text` starts with (`[e012]` holds e012)."""
    words = [w.lower() for w in _WORDS.findall(text)]
    return {term for term in wanted if any(w.startswith(term[1]) for w in words)}


def score(found: Iterable[tuple[int, str]]) -> Score:
    groups = [group for group, _ in set(found)]
    return groups.count(0), groups.count(1)


class _Line(BaseModel):
    """One line of a result while it is being fitted."""

    model_config = ConfigDict(frozen=True)

    words: tuple[str, ...]
    hits: Score  # the terms the line holds
    distance: int  # lines to the nearest line with a hit (0: this one, or no line has one)


def focused(rows: list[str], asked: Asked) -> Asked:
    """`asked` without the earlier terms when the call's own terms find lines past the first."""
    own = Asked(terms=asked.terms).stems()
    return Asked(terms=asked.terms) if any(held(row, own) for row in rows[1:]) else asked


def _distances(marked: list[bool]) -> list[int]:
    """For each line, how many lines away the nearest marked one is (all 0 when none is)."""
    if not any(marked):
        return [0] * len(marked)
    far = len(marked)
    before, after = [far] * len(marked), [far] * len(marked)
    for n, mark in enumerate(marked):
        before[n] = 0 if mark else (before[n - 1] + 1 if n else far)
    for n in range(len(marked) - 1, -1, -1):
        after[n] = 0 if marked[n] else (after[n + 1] + 1 if n + 1 < len(marked) else far)
    return [min(b, a) for b, a in zip(before, after, strict=True)]


def _lines(rows: list[str], asked: Asked) -> list[_Line]:
    wanted = asked.stems()
    hits = [score(held(row, wanted)) for row in rows]
    distances = _distances([any(h) for h in hits])
    return [
        _Line(words=tuple(row.split(" ")), hits=hits[n], distance=distances[n])
        for n, row in enumerate(rows)
    ]


def window(words: Sequence[str], size: int, asked: Asked) -> list[str]:
    """`words` cut to at most `size` words: the first word, then the earliest run of words that
    holds the most of the asked terms (with a few words after its last one), `…` where words
    were left out."""
    wanted = asked.stems()
    return _window(words, size, [held(word, wanted) for word in words[1:]])


def _window(words: Sequence[str], size: int, found: Sequence[set[tuple[int, str]]]) -> list[str]:
    """`window`, given the terms each word after the first holds."""
    if len(words) <= size:
        return list(words)
    if size <= 1:
        return [words[0], ELLIPSIS]
    span = size - 1
    hits = [n for n, f in enumerate(found) if f]

    def inside(start: int) -> list[int]:
        return hits[bisect_left(hits, start) : bisect_left(hits, start + span)]

    def run(start: int) -> Score:
        return score(t for n in inside(start) for t in found[n])

    # A best run can start at a hit; then it is placed so that a third of the words it can spare
    # follow its last hit (what a term is about often comes after it) and the rest precede.
    starts = sorted({0, *(min(n, len(found) - span) for n in hits)})
    best = max(starts, key=lambda s: (run(s), -s))
    kept = inside(best)
    if kept:
        after = min(span - (kept[-1] - kept[0] + 1), span // 3)
        best = min(max(0, kept[-1] + after - span + 1), kept[0], len(found) - span)
    head = [words[0], ELLIPSIS] if best > 0 else [words[0]]
    tail = [ELLIPSIS] if 1 + best + span < len(words) else []
    return [*head, *words[1 + best : 1 + best + span], *tail]


def _joined(lines: list[list[str] | None]) -> str:
    """The kept lines; a blank line left next to another by a cut is dropped."""
    rows = [" ".join(words) for words in lines if words is not None]
    kept = [r for n, r in enumerate(rows) if r.strip() or n == 0 or rows[n - 1].strip()]
    return "\n".join(kept).rstrip()


class _Cutting:
    """The lines of one result as they are cut, with an additive estimate of their tokens (each
    line and its line break) that spares exact counts of texts that cannot fit yet."""

    def __init__(self, text: str, total: int, budget: int, count: TokenCounter) -> None:
        self.total, self.budget, self.count = total, budget, count
        rows = [row.split(" ") for row in text.split("\n")]
        self.shown: list[list[str] | None] = list(rows)
        self.costs = [count(" ".join(words)) + 1 for words in rows]
        self.estimate = sum(self.costs)
        self.room = budget - count(marker(total))

    def set(self, n: int, words: list[str] | None) -> Fitted | None:
        """Line `n` as `words` (None: dropped); the result when it now fits the budget."""
        self.shown[n] = words
        cost = 0 if words is None else self.count(" ".join(words)) + 1
        self.estimate += cost - self.costs[n]
        self.costs[n] = cost
        if self.estimate > self.room:
            return None
        body = _joined(self.shown)
        cut = max(self.total - self.count(body), 1)
        text = f"{body}\n{marker(cut)}" if body else marker(cut)
        tokens = self.count(text)
        return Fitted(text=text, tokens=tokens, cut=cut) if tokens <= self.budget else None


def _sizes(longest: int, budget: int) -> list[int]:
    """The word counts lines are shortened to in turn: about a tenth fewer each time, down to
    SHORT_LINE_WORDS, from no more words than the budget has tokens."""
    sizes, size = [], min(longest - 1, budget)
    while size >= SHORT_LINE_WORDS:
        sizes.append(size)
        size = min(size - 1, int(size * 0.9))
    return sizes


def _shortened(
    lines: list[_Line], group: list[int], asked: Asked, budget: int
) -> Iterator[tuple[int, list[str]]]:
    """The lines of `group` shortened evenly, a few words at a time, down to SHORT_LINE_WORDS."""
    wanted = asked.stems()
    found: dict[int, list[set[tuple[int, str]]]] = {}  # the terms of each word, once per line
    for size in _sizes(max((len(lines[n].words) for n in group), default=0), budget):
        for n in group:
            if len(lines[n].words) > size:
                if n not in found:
                    found[n] = [held(word, wanted) for word in lines[n].words[1:]]
                yield n, _window(lines[n].words, size, found[n])


def _ranked(lines: list[_Line]) -> list[int]:
    """Line numbers, least useful first: fewer terms, farther from a line with terms, later; the
    first line (what the result is: "5 emails found:", "[e012]") after its equals."""
    return sorted(range(len(lines)), key=lambda n: (lines[n].hits, -lines[n].distance, n == 0, -n))


def _cuts(
    lines: list[_Line], order: list[int], asked: Asked, cutting: _Cutting
) -> Iterator[tuple[int, list[str] | None]]:
    """The cuts in the order they are made (module docstring): (line, its new words or None),
    until only the most useful line is left."""
    near = [n for n in order if lines[n].distance <= 1]
    yield from ((n, None) for n in order if lines[n].distance > 1)
    dropped = set()  # a result many budgets long loses lines before any is shortened
    for n in [n for n in near[:-1] if n != 0]:
        if cutting.estimate <= BULK_FACTOR * cutting.budget:
            break
        dropped.add(n)
        yield n, None
    kept = [n for n in near if n not in dropped]
    # Lines holding as much of the terms are shortened together, then dropped, before lines that
    # hold more are touched.
    groups = [
        [n for n in kept if lines[n].hits == hits]
        for hits in dict.fromkeys(lines[n].hits for n in kept)
    ]
    for group in groups:
        yield from _shortened(lines, group, asked, cutting.budget)
        yield from ((n, None) for n in group if n not in (0, order[-1]))


def fit(
    text: str, budget: int, asked: Asked = NOTHING_ASKED, count: TokenCounter = approx_tokens
) -> Fitted:
    """`text` within `budget` tokens (module docstring). Raises ValueError for a budget below
    MIN_BUDGET."""
    if budget < MIN_BUDGET:
        raise ValueError(f"observation budget {budget}: expected at least {MIN_BUDGET} tokens")
    total = count(text)
    if total <= budget:
        return Fitted(text=text, tokens=total)
    asked = focused(text.split("\n"), asked)
    lines = _lines(text.split("\n"), asked)
    order = _ranked(lines)
    cutting = _Cutting(text, total, budget, count)
    for n, words in _cuts(lines, order, asked, cutting):
        if (done := cutting.set(n, words)) is not None:
            return done
    # The most useful line is left (with the first): the longest window of it that fits, with
    # the first line while it can, without it when it cannot.
    top = order[-1]
    top_words = lines[top].words
    terms = [held(word, asked.stems()) for word in top_words[1:]]
    done = _longest_window(cutting, top, top_words, terms)
    if done is None and top != 0:
        cutting.set(0, None)
        done = _longest_window(cutting, top, top_words, terms)
    if done is None:  # not even one word of it fits beside the marker
        done = cutting.set(top, None)
    return done or Fitted(text=marker(total), tokens=count(marker(total)), cut=total)


def _longest_window(
    cutting: _Cutting, n: int, words: Sequence[str], terms: list[set[tuple[int, str]]]
) -> Fitted | None:
    """The result with line `n` cut to its longest window that fits (None: none does)."""
    low, high, best = 1, min(len(words), cutting.budget), None
    while low <= high:
        size = (low + high) // 2
        found = cutting.set(n, _window(words, size, terms))
        best, low, high = (found, size + 1, high) if found else (best, low, size - 1)
    return best
