"""The prefix cache: a conversation's next turn reuses the keys/values of its earlier turns and
samples exactly what a full prefill would."""

from pathlib import Path

import pytest
import torch

from rlvr.engine.prefix import (
    MIN_REUSE,
    Prefix,
    PrefixCache,
    common_prefix,
    shared_prefixes,
    worth_reusing,
)


def prefix_of(length: int, fill: float = 1.0, layers: int = 2) -> Prefix:
    tensor = torch.full((3, length, 4), fill)
    return Prefix(length=length, keys=(tensor,) * layers, values=(tensor,) * layers)


@pytest.mark.parametrize(
    ("a", "b", "shared"),
    [([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2, 4], 2), ([5], [1], 0)],
)
def test_common_prefix(a: list[int], b: list[int], shared: int) -> None:
    assert common_prefix(a, b) == shared


@pytest.mark.parametrize("length", [1, 2, 7, 64, 1000])
def test_common_prefix_finds_the_first_difference_wherever_it_is(length: int) -> None:
    ids = list(range(length))
    for first in range(length):
        changed = [*ids[:first], -1, *ids[first + 1 :]]
        assert common_prefix(ids, changed) == first
        assert common_prefix(changed[: first + 1], ids) == first
    assert common_prefix(ids, [*ids, 5]) == length


@pytest.mark.parametrize(
    ("lengths", "reused", "threshold"),
    [
        ([100, 100], [99, 99], 99),  # a group's shared prompt: every row reuses it
        ([50], [0], 51),  # nothing cached: nothing reused
        ([950, 350], [900, 300], 300),  # two conversations' next turns: both reuse
        ([950, 350], [900, 0], 900),  # one new row: context 1,250 but 700 columns less to fill
        ([910, 910, 650, 650], [900, 900, 0, 0], 911),  # half cached distinct prompts: no reuse
        ([36, 36, 30], [35, 35, 27], 27),  # a group and a stranger sharing the system prompt
    ],
)
def test_worth_reusing_minimises_the_batch_context(
    lengths: list[int], reused: list[int], threshold: int
) -> None:
    assert worth_reusing(lengths, reused) == threshold


SYSTEM = list(range(100, 130))  # a 30-token system prompt
QUESTION_A = list(range(200, 220))  # questions of 20 tokens each
QUESTION_B = list(range(300, 320))


@pytest.mark.parametrize(
    ("prompts", "have", "expected"),
    [
        # An evaluation: one system prompt, different questions -> the system prompt, once.
        ([[*SYSTEM, 1, 2], [*SYSTEM, 3], [*SYSTEM, 4, 5]], [0, 0, 0], [[SYSTEM]]),
        # A group's first turn: one prompt four times -> the whole prompt, once.
        ([SYSTEM + QUESTION_A] * 4, [0] * 4, [[SYSTEM + QUESTION_A]]),
        # Two groups under one system prompt: the system prompt, then each group's prompt on it.
        (
            [SYSTEM + QUESTION_A, SYSTEM + QUESTION_B] * 2,
            [0] * 4,
            [[SYSTEM], [SYSTEM + QUESTION_A, SYSTEM + QUESTION_B]],
        ),
        # Clusters sharing different prefixes, in any order, and a stranger.
        (
            [[*QUESTION_B, 1], [*SYSTEM, 7], [*QUESTION_B, 2], [9] * 40, [*SYSTEM, 8]],
            [0] * 5,
            [[SYSTEM, QUESTION_B]],
        ),
        ([[*SYSTEM, 1], [*SYSTEM, 2]], [30, 30], []),  # already cached: nothing to prefill
        ([[*SYSTEM, 1], [*SYSTEM, 2]], [30, 0], []),  # one row gains: no sharing
        ([[*SYSTEM[:10], 1], [*SYSTEM[:10], 2]], [0, 0], []),  # too short to be worth it
        ([SYSTEM], [0], []),  # one row
        ([], [], []),
    ],
)
def test_shared_prefixes_are_found_once_per_cluster(
    prompts: list[list[int]], have: list[int], expected: list[list[list[int]]]
) -> None:
    assert [sorted(r) for r in shared_prefixes(prompts, have)] == [sorted(r) for r in expected]


def test_lookup_takes_the_longest_shared_prefix_of_the_same_adapter_only() -> None:
    cache = PrefixCache(max_bytes=2**20)
    base = list(range(40))
    cache.store("live", base[:30], prefix_of(30, 1.0))
    cache.store("live", base[:20] + [99] * 20, prefix_of(40, 2.0))
    cache.store("old", base, prefix_of(40, 3.0))
    found = cache.lookup("live", [*base, 7, 8], limit=100)
    assert found is not None and found.length == 30 and float(found.keys[0][0, 0, 0]) == 1.0
    assert cache.lookup("live", base, limit=25).length == 25  # capped by the caller's limit
    assert cache.lookup("live", base, limit=MIN_REUSE - 1) is None  # too short to be worth it
    assert cache.lookup("other", base, limit=100) is None


def test_a_longer_turn_replaces_its_prefix_and_the_budget_evicts_the_oldest() -> None:
    one = prefix_of(20).keys[0].numel() * 4 * 2 * 2  # bytes of a 20-token entry, 2 layers
    cache = PrefixCache(max_bytes=int(one * 2.2))
    cache.store("live", list(range(20)), prefix_of(20))
    cache.store("live", list(range(30)), prefix_of(30))  # extends the first: replaces it
    assert len(cache) == 1
    cache.store("live", [9] * 20, prefix_of(20))
    assert len(cache) == 1  # 30 + 20 tokens exceed the budget: the older entry went
    assert cache.lookup("live", list(range(30)), limit=100) is None
    cache.clear()
    assert len(cache) == 0


def test_a_zero_budget_turns_it_off(monkeypatch) -> None:
    monkeypatch.setenv("RLVR_PREFIX_CACHE_MB", "0")
    cache = PrefixCache()
    assert not cache.enabled
    cache.store("live", list(range(20)), prefix_of(20))
    assert len(cache) == 0


# --- slow: the real model --------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from rlvr.engine.lora_engine import Engine
    from tests.helpers.tiny_runs import tiny_model_path

    # fp32: the cache must reproduce a fresh prefill exactly (bf16 rounds differently per shape).
    # The tiny random model: what a cache holds and reuses does not depend on the weights.
    return Engine(tiny_model_path(), Path(tmp_path_factory.mktemp("model")), precision="fp32")


def chat(engine, turns: list[str]) -> list[int]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(turns)
    ]
    return engine.loaded.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def greedy(engine, prompts: list[list[int]], cached: bool):
    """Greedy samples of `prompts` and the prompt tokens served from the prefix cache (with
    `cached` False, the cache is off for this call: every row is prefilled in full)."""
    from rlvr.engine.types import SampleRow

    budget = engine.prefixes.max_bytes
    if not cached:
        engine.prefixes.max_bytes = 0
    before = engine.decoder.counters()
    rows = [SampleRow(prompt_ids=p, max_tokens=12, temperature=0.0) for p in prompts]
    try:
        out = engine.decoder.sample(rows)
    finally:
        engine.prefixes.max_bytes = budget
    return out, engine.decoder.counters().minus(before).cached_prompt_tokens


@pytest.mark.slow
def test_the_next_turn_reuses_the_first_and_samples_the_same(engine) -> None:
    first_turn = chat(engine, ["Tell me about the sea in one sentence."])
    other = chat(engine, ["What is the capital of France?"])
    (reply,), _ = greedy(engine, [first_turn], cached=True)
    second = chat(engine, ["Tell me about the sea in one sentence.", reply.text, "And rivers?"])
    # One row continues a cached conversation, one is new: the padded layout mixes both.
    uncached, none = greedy(engine, [second, other], cached=False)
    greedy(engine, [first_turn], cached=True)  # leave the first turn in the cache again
    reused, saved = greedy(engine, [second, other], cached=True)
    assert none == 0 and saved >= len(first_turn) - 1
    for fresh, again in zip(uncached, reused, strict=True):
        assert again.token_ids == fresh.token_ids
        assert again.logprobs == pytest.approx(fresh.logprobs, abs=1e-3)


@pytest.mark.slow
def test_entries_of_changed_weights_are_never_reused(engine) -> None:
    prompt = chat(engine, ["Name three colors."])
    greedy(engine, [prompt], cached=True)
    assert len(engine.prefixes) > 0
    engine.adapters.changed()  # what every optimizer step calls
    assert len(engine.prefixes) == 0
    _, saved = greedy(engine, [prompt], cached=True)
    assert saved == 0


@pytest.mark.slow
def test_a_group_sharing_one_prompt_prefills_it_once(engine) -> None:
    prompt = chat(engine, ["Write one sentence about mountains."])
    uncached, _ = greedy(engine, [prompt, prompt, chat(engine, ["Hi."])], cached=False)
    engine.prefixes.clear()
    shared, saved = greedy(engine, [prompt, prompt, chat(engine, ["Hi."])], cached=True)
    # Both rows reused the one prefill (the third may reuse the shared system prompt too).
    assert saved >= 2 * (len(prompt) - 1)
    for fresh, again in zip(uncached, shared, strict=True):
        assert again.token_ids == fresh.token_ids
        assert again.logprobs == pytest.approx(fresh.logprobs, abs=1e-3)


@pytest.mark.slow
def test_rows_sharing_a_system_prompt_prefill_it_once(engine) -> None:
    """An evaluation's first turns: one long system prompt, different questions. The shared part
    is prefilled once and every row reuses it; tokens and log-probabilities are those of rows
    prefilled alone (greedy, fp32)."""
    from rlvr.engine.types import SampleRow

    system = "You are a careful assistant. " * 8 + "Answer in one short sentence."
    questions = ["What is the capital of Italy?", "Name a red fruit.", "How many legs has a cat?"]
    prompts = [
        engine.loaded.tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": q}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for q in questions
    ]
    shared = min(common_prefix(prompts[0], p) for p in prompts[1:])
    assert shared > 40
    rows = [SampleRow(prompt_ids=p, max_tokens=10, temperature=0.0) for p in prompts]
    budget = engine.prefixes.max_bytes
    engine.prefixes.clear()
    engine.prefixes.max_bytes = 0  # off: every row prefilled in full
    before = engine.decoder.counters()
    alone = engine.decoder.sample(rows)
    off = engine.decoder.counters().minus(before)
    engine.prefixes.max_bytes = budget
    before = engine.decoder.counters()
    together = engine.decoder.sample(rows)
    on = engine.decoder.counters().minus(before)
    engine.prefixes.clear()
    total = sum(len(p) for p in prompts)
    assert off.prefilled_tokens == total and off.cached_prompt_tokens == 0
    assert on.prompt_tokens == total
    assert on.cached_prompt_tokens == 3 * shared  # every row reused the shared prefix ...
    assert on.prefilled_tokens == total - 2 * shared  # ... prefilled once
    for fresh, again in zip(alone, together, strict=True):
        assert again.token_ids == fresh.token_ids
        assert again.logprobs == pytest.approx(fresh.logprobs, abs=1e-4)
