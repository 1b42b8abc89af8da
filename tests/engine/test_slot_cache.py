"""The live batch's slot cache (rlvr.engine.batch): rows that join a running decode, leave it and
have their slots reused, across every re-layout (more slots, room on the left for a wider
newcomer, room on the right after many steps, regrouping once many slots stand free), decode
exactly what each row decodes alone. A tiny Llama with random weights and the real tokenizer."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from rlvr.engine import batch as batch_module
from rlvr.engine.batch import RIGHT_ROOM, SlotLayer
from rlvr.engine.decoding import Decoder
from rlvr.engine.models import DEFAULT_MODEL, resolve_model
from rlvr.engine.prefix import PrefixCache
from rlvr.engine.types import PASS_COLUMNS, SampleRow, width_groups
from rlvr.engine.weights import BaseWeights
from tests.helpers.engine import continuous
from tests.helpers.tiny_llama import fp32_loaded, tiny_llama

VOCAB = 49152  # the real tokenizer's


@pytest.fixture(scope="module")
def decoder() -> Decoder:
    from transformers import AutoTokenizer

    from rlvr.engine.attention import use_grouped_sdpa

    model = tiny_llama(vocab_size=VOCAB, max_positions=1024)
    use_grouped_sdpa(model)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    loaded = fp32_loaded(model, tokenizer, max_context=1024)
    return Decoder(loaded, BaseWeights(), PrefixCache(max_bytes=0))


def rows(count: int, seed: int) -> list[SampleRow]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 90, (count,), generator=generator).tolist()
    budgets = torch.randint(2, RIGHT_ROOM + 30, (count,), generator=generator).tolist()
    return [
        SampleRow(
            prompt_ids=torch.randint(10, VOCAB, (length,), generator=generator).tolist(),
            max_tokens=budget,
            temperature=0.0,
        )
        for length, budget in zip(lengths, budgets, strict=True)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_joining_and_leaving_decode_what_each_decodes_alone(decoder, seed, monkeypatch):
    calls: Counter[str] = Counter()
    for name in ("_relayout", "move", "append"):
        original = getattr(SlotLayer, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(SlotLayer, name, counted)
    batch = rows(14, seed)
    # Two rows first, then newcomers every few steps: some wider than the batch, and more at
    # once than free slots.
    arrivals = {0: batch[:2], 3: batch[2:3], 7: batch[3:9], 12: batch[9:10], 40: batch[10:14]}
    joined = continuous(decoder, arrivals)
    alone = [
        decoder.sample([row])[0].token_ids for step in sorted(arrivals) for row in arrivals[step]
    ]
    assert joined == alone
    # Rows left from above the last (moved up), joined, and the buffers ran out of room.
    assert calls["_relayout"] > 0 and calls["move"] > 0 and calls["append"] > 0


def test_a_row_that_leaves_is_replaced_by_the_last_and_every_row_keeps_its_cache(decoder):
    view = decoder.weights.view(None)
    with torch.inference_mode(), view.applied():
        states = [decoder.new_state(row) for row in rows(6, 5)]
        live = decoder.seat(decoder.admit(states, view))
        admitted = [states.index(s) for s in live.states]  # rows of very other lengths: grouped
        for _ in range(3):
            decoder.advance(live)
        before = {
            id(state): (live.cache.layers[0].keys[b].clone(), live.mask[b].clone())
            for b, state in enumerate(live.states)
        }
        batch_module.select_rows(live, [0, 2, 4, 5])
    # the rows at 4 and 5 filled the places of 1 and 3
    assert [states.index(s) for s in live.states] == [admitted[b] for b in (0, 4, 2, 5)]
    for b, state in enumerate(live.states):
        keys, mask = before[id(state)]
        width = live.mask.shape[1]  # columns no kept row used were dropped on the left
        assert torch.equal(live.mask[b], mask[-width:])
        assert torch.equal(live.cache.layers[0].keys[b], keys[:, -width:])


@pytest.mark.parametrize(
    ("new", "groups"),
    [
        ([100, 100, 100], [[0, 1, 2]]),  # nothing padded: one pass
        ([300, 20], [[0], [1]]),  # the short row padded to 300 costs more than a pass
        ([20, 300, 25, 22], [[1], [3, 2, 0]]),  # the short ones together, longest first
        ([70, 60], [[0, 1]]),  # 10 padded columns cost less than a pass
        ([5], [[0]]),
    ],
)
def test_width_groups_pass_rows_of_other_lengths_apart(new, groups):
    assert [sorted(g) for g in width_groups(new)] == [sorted(g) for g in groups]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_width_groups_cover_every_row_once_and_never_cost_more_than_one_pass(seed):
    generator = torch.Generator().manual_seed(seed)
    new = torch.randint(
        1, 400, (int(torch.randint(1, 40, (1,), generator=generator)),), generator=generator
    ).tolist()
    groups = width_groups(new)
    assert sorted(i for g in groups for i in g) == list(range(len(new)))
    cost = sum(PASS_COLUMNS + len(g) * max(new[i] for i in g) for g in groups)
    assert cost <= PASS_COLUMNS + len(new) * max(new)


def test_an_admission_of_rows_of_other_lengths_decodes_what_each_decodes_alone(decoder):
    """Rows prefilled in passes of their own (a long prompt beside short ones) and joined into
    one batch sample what each samples alone."""
    generator = torch.Generator().manual_seed(7)
    batch = [
        SampleRow(
            prompt_ids=torch.randint(10, VOCAB, (length,), generator=generator).tolist(),
            max_tokens=12,
            temperature=0.0,
        )
        for length in (300, 6, 9, 280, 4)
    ]
    assert len(width_groups([len(r.prompt_ids) for r in batch])) > 1
    together = [s.token_ids for s in decoder.sample(batch)]
    alone = [decoder.sample([row])[0].token_ids for row in batch]
    assert together == alone
