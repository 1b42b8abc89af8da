"""Observations within a token budget (rlvr.agent.budget): what is kept, the marker, the count.

Fast tests fit generated results (search lists, emails, passages, results many budgets long)
under several token counters; the slow test checks the estimate against SmolLM2's real tokenizer
on every observation and prompt of the email and multihop tasks' oracle episodes.
"""

from __future__ import annotations

import math
import re

import pytest

from rlvr.agent.budget import (
    ELLIPSIS,
    MIN_BUDGET,
    Asked,
    TokenCounter,
    approx_tokens,
    call_terms,
    fit,
    window,
)

SEARCH = """5 emails found:
[e034] May 9 | Joseph Lynn | Re: Escalation review meeting | Works for me, thanks Christina.
[e031] May 7 | Christina Harper | Escalation review meeting | Hi Joseph, Let's hold the escalation review meeting on Monday, 13 May 2024 ...
[e033] May 9 | Christina Harper | Re: Escalation review meeting | Hi Joseph, Something came up, so I need to move the escalation review meeting ...
[e010] Feb 29 | David Mills | Hiring committee meeting | Hi Joseph, Let's hold the hiring committee meeting on Friday, 8 March 2024 ...
[e018] Apr 8 | Dwayne Scott | Contract renewal meeting | Hi Joseph, Let's hold the contract renewal meeting on Tuesday, 16 April 2024 ..."""
NEWSLETTER = "\n".join(
    [
        "[e007]",
        "From: Ops Weekly",
        "To: Joseph Lynn",
        "Date: 2024-03-02 09:00",
        "Subject: Ops Weekly: How to run a shorter meeting",
        "",
        "This week:",
        *(f"- Item {n}: synergize scalable paradigms and robust deliverables." for n in range(12)),
        "- The warehouse expansion budget was approved at $48,000.",
        *(f"- Note {n}: leverage vertical channels." for n in range(12)),
        "",
        "Unsubscribe any time.",
    ]
)
PASSAGE = "[p012] Davis Group\n" + " ".join(
    [
        *["Davis Group is a shipping company with offices in many ports."] * 6,
        "It was founded by Lauren Stewart in 1968.",
        *["Its ships carry freight across the northern seas every year."] * 6,
    ]
)
HUGE = "\n".join(f"row {n}: invoices and meetings and other things" for n in range(5000))
SEARCH_ASKED = Asked(terms=("escalation", "review", "meeting"))
READ_ASKED = Asked(terms=("e007",), earlier=("warehouse", "expansion"))
PASSAGE_ASKED = Asked(terms=("founded", "lauren"))


def words_counter(text: str) -> int:
    """A counter unlike the estimate: a token per whitespace-separated word and per line."""
    return len(text.split()) + text.count("\n")


def chars_counter(text: str) -> int:
    return math.ceil(len(text) / 3)


COUNTERS: list[TokenCounter] = [approx_tokens, words_counter, chars_counter]
MARKER = re.compile(r"\[\.\.\. (\d+) tokens cut\]$")


@pytest.mark.parametrize(
    ("text", "budget", "asked", "kept", "gone"),
    [
        # a search result's weaker hits (fewer of the terms) get shorter snippets, then go,
        # before the best hits lose theirs
        (SEARCH, 200, SEARCH_ASKED, ["[e031]", "13 May 2024", "[e010] …"], ["[e018]"]),
        (
            SEARCH,
            120,
            SEARCH_ASKED,
            ["[e034]", "[e031]", "[e033]", "Escalation review"],
            ["[e010]"],
        ),
        # an email read by id keeps what the search before it asked for, whole
        (NEWSLETTER, 80, READ_ASKED, ["[e007]", "approved at $48,000."], ["Item 0:", "Note 9"]),
        # a long passage keeps the window around the terms, with words after the last one
        (PASSAGE, 48, PASSAGE_ASKED, ["[p012] Davis Group", "founded by Lauren Stewart"], []),
        # no term matches: the beginning is kept
        (PASSAGE, 40, Asked(terms=("zebra",)), ["[p012] Davis Group", "Davis"], ["northern"]),
        # a result many budgets long
        (HUGE, 60, Asked(terms=("invoice",)), ["row 0: invoices"], ["row 4999"]),
    ],
    ids=["search-200", "search-120", "read", "passage", "no-match", "huge"],
)
def test_trimming_keeps_the_matched_window_and_the_marker(
    text: str, budget: int, asked: Asked, kept: list[str], gone: list[str]
) -> None:
    fitted = fit(text, budget, asked)
    assert fitted.tokens == approx_tokens(fitted.text) <= budget
    assert all(k in fitted.text for k in kept), fitted.text
    assert not any(g in fitted.text for g in gone), fitted.text
    assert fitted.text.split("\n")[0] == text.split("\n")[0]  # what the result is stays
    marker = MARKER.search(fitted.text)
    assert marker is not None and int(marker.group(1)) == fitted.cut > 0
    # the cut is what the counter says is missing
    body = fitted.text[: marker.start()].rstrip("\n")
    assert fitted.cut == approx_tokens(text) - approx_tokens(body)


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("budget", [MIN_BUDGET, 25, 40, 64, 96, 150, 200, 300, 1000])
@pytest.mark.parametrize(
    ("text", "asked"),
    [
        (SEARCH, SEARCH_ASKED),
        (NEWSLETTER, READ_ASKED),
        (PASSAGE, PASSAGE_ASKED),
        (HUGE, Asked(terms=("invoice",))),
        ("x" * 5000, Asked()),  # one word, no spaces
        ("", Asked()),
        ("Error: lookup failed: KeyError: 'atlantis'", Asked(terms=("atlantis",))),
    ],
    ids=["search", "newsletter", "passage", "huge", "one-word", "empty", "error"],
)
def test_never_exceeds_the_budget_and_counts_what_it_cut(
    text: str, asked: Asked, budget: int, counter: TokenCounter
) -> None:
    fitted = fit(text, budget, asked, counter)
    assert fitted.tokens == counter(fitted.text) <= budget
    if counter(text) <= budget:
        assert fitted.text == text and fitted.cut == 0
    else:
        assert fitted.cut > 0 and fitted.text.endswith(f"[... {fitted.cut} tokens cut]")


@pytest.mark.parametrize("budget", [0, 10, MIN_BUDGET - 1])
def test_a_budget_too_small_for_the_marker_is_an_error(budget: int) -> None:
    with pytest.raises(ValueError, match=f"observation budget {budget}: expected at least"):
        fit(SEARCH, budget)


@pytest.mark.parametrize(
    ("words", "size", "terms", "expected"),
    [
        (["a", "b", "c"], 5, (), ["a", "b", "c"]),
        (["[p1]", "a", "b", "c", "d", "e", "f"], 1, (), ["[p1]", ELLIPSIS]),
        (["[p1]", "a", "b", "c", "d", "e", "f"], 3, (), ["[p1]", "a", "b", ELLIPSIS]),
        (["[p1]", "a", "b", "c", "needle", "d", "e", "f", "g", "h"], 4, ("needle",), ["[p1]", ELLIPSIS, "c", "needle", "d", ELLIPSIS]),
        # the run that holds the most distinct terms wins over one that repeats a term
        (
            ["[p1]", "x", "x", "cat", "cat", "x", "x", "x", "cat", "dog", "x"],
            4,
            ("cat", "dog"),
            ["[p1]", ELLIPSIS, "cat", "dog", "x"],
        ),
        # words match a term they start with: plurals, tenses
        (["[e1]", "x", "x", "x", "invoices", "due", "x", "x"], 4, ("invoice",), ["[e1]", ELLIPSIS, "x", "invoices", "due", ELLIPSIS]),
    ],
)  # fmt: skip
def test_a_window_keeps_the_first_word_and_the_terms(
    words: list[str], size: int, terms: tuple[str, ...], expected: list[str]
) -> None:
    assert window(words, size, Asked(terms=terms)) == expected


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("hello", 2),  # five letters: two tokens of four
        ("Hi there", 3),  # the space merges into the word
        ("2024-04-17", 10),  # every digit and mark
        ("at 14:45", 7),  # a space before a digit is a token of its own
        ("a | b", 3),  # ... before a mark it merges
        ("line\n\nnext", 3),  # a run of line breaks is one
        ("café", 3),  # caf + two UTF-8 bytes of é
    ],
)
def test_the_estimate(text: str, tokens: int) -> None:
    assert approx_tokens(text) == tokens


@pytest.mark.parametrize(
    ("values", "terms"),
    [
        (["invoice INV-12345"], ["invoice", "inv", "12345"]),
        (["What is the amount due?", None, 3], ["amount", "due"]),
        ([["flight", "Lisbon"], "e012"], ["flight", "lisbon", "e012"]),
    ],
)
def test_a_calls_terms_are_the_words_of_its_text_arguments(
    values: list[object], terms: list[str]
) -> None:
    assert call_terms(values) == terms


@pytest.mark.slow  # the real tokenizer (converted from the GGUF once per machine)
@pytest.mark.parametrize("task", ["email", "multihop"])
async def test_the_estimate_is_above_the_real_count(task: str) -> None:
    """Over every prompt and observation of the oracle's episodes, with and without a budget:
    never below SmolLM2's count, and within a third of it overall."""
    from transformers import AutoTokenizer

    from rlvr.engine.models import DEFAULT_MODEL, resolve_model
    from tests.helpers.token_profile import environment_for

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    texts = []
    for level in ("easy", "medium", "hard"):
        for budget in (None, 48):
            environment = environment_for(task, level, "text", 60, budget)
            for item in environment.load()[:60]:
                demo = await environment.demonstrate(item)
                texts += [m["content"] for m in demo.messages() if m["role"] != "assistant"]
    pairs = [
        (approx_tokens(t), len(tokenizer(t, add_special_tokens=False).input_ids)) for t in texts
    ]
    assert all(estimate >= real for estimate, real in pairs)
    estimated, real = sum(e for e, _ in pairs), sum(r for _, r in pairs)
    assert 1.0 <= estimated / real <= 1.33
