"""Greedy rows' drafts (prompt lookup, rlvr.engine.token_sampling): where a greedy reply's next tokens
followed its last ones earlier in its context, they are fed with the chosen token and kept while
each is what greedy decoding chooses. Decoding with drafts is decoding without them: the same
tokens and log-probabilities (fp32), rows joining and leaving, and the prefix cache keeps only
the tokens a row really fed. The tiny random model: drafting is the engine's, and its greedy replies
fall into loops (and out of them) as a real model's replies copy and repeat."""

from __future__ import annotations

import pytest
import torch

from rlvr.engine.decoding import SPECULATED_COLUMNS, Decoder
from rlvr.engine.prefix import PrefixCache
from rlvr.engine.token_sampling import RowRules, RowState, lookup_draft
from rlvr.engine.types import SampleRow
from rlvr.engine.weights import BaseWeights
from tests.helpers.engine import continuous
from tests.helpers.tiny_llama import fp32_loaded
from tests.helpers.tiny_runs import tiny_model_path


@pytest.mark.parametrize(
    ("context", "most", "draft"),
    [
        ([1, 2, 3, 9, 1, 2, 3], 4, [9, 1, 2, 3]),  # what followed the last 3 tokens before
        ([1, 2, 3, 9, 8, 7, 6, 1, 2, 3], 2, [9, 8]),  # at most `most`
        ([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3], 4, [5, 1, 2, 3]),  # the latest occurrence
        ([5, 5, 5, 5, 5], 3, [5, 5, 5]),  # a loop of one token, gone round
        ([1, 2, 3, 9, 1, 2, 3], 6, [9, 1, 2, 3, 9, 1]),  # a loop of four tokens, gone round
        ([7, 1, 2, 3, 1, 2, 3], 5, [1, 2, 3, 1, 2]),
        ([1, 2, 3, 4, 5, 6], 4, []),  # no earlier occurrence
        ([1, 2, 3, 1, 2, 3], 0, []),
        ([1, 2], 4, []),
    ],
)
def test_a_draft_is_what_followed_the_last_tokens_before(context, most, draft):
    assert lookup_draft(context, most) == draft


def test_only_greedy_free_text_rows_of_a_small_batch_draft():
    rules = RowRules(tokenizer=None, stop_ids=frozenset())
    looping = [1, 2, 3, 4, 1, 2, 3]

    def state(temperature: float, max_tokens: int, ids: list[int]) -> RowState:
        row = SampleRow(prompt_ids=looping, max_tokens=max_tokens, temperature=temperature)
        made = RowState(row, torch.Generator())
        made.ids = ids
        return made

    # each has chosen its next token; the last has one token of its budget left
    states = [state(0.0, 50, [4]), state(0.7, 50, [4]), state(0.0, 2, [4])]
    assert rules.drafts(states, columns=12) == [[1, 2, 3], [], [1]]
    assert rules.drafts(states, columns=18) == [[1, 2, 3, 4, 1], [], [1]]  # round the loop
    assert rules.drafts(states, columns=3) == [[], [], []]  # one column a row: no room
    states[0].finish = "stop"
    assert rules.drafts(states[:1], columns=8) == [[]]


@pytest.fixture(scope="module")
def decoder() -> Decoder:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    loaded = fp32_loaded(model, AutoTokenizer.from_pretrained(path), max_context=2048)
    return Decoder(loaded, BaseWeights(), PrefixCache(max_bytes=0))


# The first one's greedy reply loops from its 30th token or so, and leaves its loop again: with a
# budget past that, its drafts are kept and then turned down.
QUESTIONS = [
    "Write the alphabet twice.",
    "Copy this id twice: msg-4471-ab93-ff01-7723",
    "Write a long poem about rivers.",
    "List the numbers from 1 to 30.",
    "Say hi.",
    "Repeat this exactly three times: the cat sat on the mat.",
]


def chat_rows(decoder: Decoder, budgets: list[int]) -> list[SampleRow]:
    return [
        SampleRow(
            prompt_ids=decoder.tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, return_dict=True
            )["input_ids"],
            max_tokens=budget,
            temperature=0.0,
        )
        for q, budget in zip(QUESTIONS, budgets, strict=True)
    ]


@pytest.mark.slow
def test_drafted_decoding_is_greedy_decoding(decoder, monkeypatch):
    rows = chat_rows(decoder, [48, 20, 12, 16, 8, 12])
    arrivals = {0: rows[:1], 4: rows[1:3], 12: rows[3:6]}  # a small batch, joined and left
    decoded, drafts = {}, []
    for columns in (0, SPECULATED_COLUMNS):
        monkeypatch.setattr(decoder, "speculated_columns", columns)
        before = decoder.counters()
        joined = continuous(decoder, arrivals)
        between = decoder.counters()
        static = [(s.token_ids, s.logprobs) for s in decoder.sample(rows[:2])]
        decoded[columns] = (joined, static)
        drafts += [between.minus(before), decoder.counters().minus(between)]
    (plain_ids, plain_static), (ids, static) = decoded[0], decoded[SPECULATED_COLUMNS]
    assert ids == plain_ids
    for (got, got_logprobs), (want, want_logprobs) in zip(static, plain_static, strict=True):
        assert got == want
        assert got_logprobs == pytest.approx(want_logprobs, abs=1e-4)
    # none without room for drafts; with it, both passes kept drafts and turned some down (the
    # first reply loops, and leaves its loop)
    assert [d.drafted_tokens for d in drafts[:2]] == [0, 0]
    assert all(d.drafted_tokens > d.kept_draft_tokens > 0 for d in drafts[2:]), drafts


@pytest.mark.slow
def test_a_row_with_turned_down_drafts_stores_its_real_tokens_for_the_next_turn(decoder):
    """The prefix cache keeps exactly the tokens a row fed (drafted columns it turned down are
    masked out, not stored), so its next turn starts from the cache and decodes the same."""
    cached = Decoder(decoder.loaded, BaseWeights(), PrefixCache())
    row = chat_rows(decoder, [48] * len(QUESTIONS))[0]
    first = cached.sample([row])[0]
    drafted = cached.counters()
    assert drafted.drafted_tokens > drafted.kept_draft_tokens > 0  # it turned drafts down
    fed = row.prompt_ids + first.token_ids
    tag = cached.weights.view(None).tag
    assert cached.cached_tokens(tag, [*fed, 11]) == len(fed)
    follow = SampleRow(prompt_ids=[*fed, 11, 12], max_tokens=16, temperature=0.0)
    assert cached.sample([follow])[0].token_ids == decoder.sample([follow])[0].token_ids
