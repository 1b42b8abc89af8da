"""Batched decoding: prefill (prompt prefixes shared by several rows, the prefix cache), KV-cached
decode with per-row temperature, top_p, max_tokens, stop strings, seed and grammar (structured
output), and the sampled tokens' logprobs.

The work comes in three moves over a live batch (rlvr.engine.batch): `admit` prefills new rows
into a batch of their own, `retire` drops the rows that ended (or whose client has gone) and keeps
their keys/values for a conversation's next turn, `advance` decodes one token of every row. A
static pass (`sample`) admits all its rows at once and advances until none is left; the server's
scheduler (rlvr.engine.scheduler) joins newcomers into a running batch between steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import torch

from rlvr.engine.batch import LiveBatch, joined, plain_layers, select_rows, slotted
from rlvr.engine.device import release_memory
from rlvr.engine.grammar import Matcher, grammar_for, llg_tokenizer
from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.prefix import Prefix, PrefixCache, shared_prefixes, worth_reusing
from rlvr.engine.token_sampling import RowRules, RowState, never
from rlvr.engine.types import (
    PASS_COLUMNS,
    PREFILL_TOKENS,
    EngineCounters,
    Sampled,
    SampleRow,
    width_groups,
)
from rlvr.engine.weights import WeightsSource, WeightsTag, WeightsView
from rlvr.json_types import JsonObject


def as_decoded(cache: Any, dtype: torch.dtype) -> None:
    """Cast a cache prefilled in another precision to the decoding one, so the decode steps'
    keys/values join it in one dtype (and the prefix cache stores one)."""
    for layer in cache.layers:
        if layer.keys.dtype != dtype or layer.values.dtype != dtype:
            layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)


# A decode step of up to this many columns costs little more than one column where few rows are
# left (the weights are streamed either way): the room greedy rows' drafts get.
SPECULATED_COLUMNS = 16


class Prefilled(NamedTuple):
    """Rows fed through the model into a fresh batched cache: the cache, its mask, the logits of
    the last `keep` columns, each row's last position and how many of its tokens were reused."""

    cache: Any
    mask: torch.Tensor
    logits: torch.Tensor
    last_position: torch.Tensor
    reused: list[int]


class Decoder:
    """Batched, KV-cached decoding of many rows at once from `loaded`'s model, with the weights
    `weights` serves for the step asked (the live adapter, an older checkpoint, or the base)."""

    def __init__(
        self, loaded: LoadedModel, weights: WeightsSource, prefixes: PrefixCache | None = None
    ) -> None:
        self.loaded = loaded
        self.weights = weights
        self.prefixes = prefixes if prefixes is not None else PrefixCache()
        self.rules = RowRules(loaded.tokenizer, loaded.stop_ids)
        # Columns a decode step may feed for greedy rows' drafts (RowRules.drafts; 0: none).
        self.speculated_columns = SPECULATED_COLUMNS
        self._counters = EngineCounters()
        self._token_bytes: dict[int, bytes] = {}
        self._grammar_tokenizer: Any = (
            None  # llguidance's view of the tokenizer, built on first use
        )
        from transformers import DynamicCache

        # Whether this model's caches can be joined (every layer keeps all its columns).
        self.joinable = plain_layers(DynamicCache(config=loaded.model.config))

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def max_context(self) -> int:
        return self.loaded.max_context

    def counters(self) -> EngineCounters:
        """The sampling work done so far (running totals; training's stay 0 here)."""
        return self._counters

    def count(self, done: EngineCounters) -> None:
        """Add `done` to the running totals."""
        self._counters = self._counters.plus(done)

    def token_bytes(self, token_id: int) -> bytes:
        """The token's text as UTF-8 (a partial character becomes U+FFFD, as vLLM reports it)."""
        cached = self._token_bytes.get(token_id)
        if cached is None:
            cached = self._token_bytes[token_id] = self.tokenizer.decode([token_id]).encode("utf-8")
        return cached

    def cached_tokens(self, tag: WeightsTag, prompt_ids: list[int]) -> int:
        """How many tokens of a prompt the prefix cache would serve (its last token is always
        fed again, for the logits of the first sampled one)."""
        if not self.prefixes.enabled:
            return 0
        found = self.prefixes.lookup(tag, prompt_ids, len(prompt_ids) - 1)
        return found.length if found is not None else 0

    def compile_grammar(self, schema: JsonObject) -> str:
        """The grammar (for `SampleRow.grammar`) of a JSON schema; GrammarError if it has none."""
        return grammar_for(schema, self._grammar_view()[0])

    def sample(self, rows: list[SampleRow], step: int | None = None) -> list[Sampled]:
        """Sample all rows in one batched pass with step's weights (None: the latest)."""
        if not rows:
            return []
        with self.loaded.lock, torch.inference_mode(), self.loaded.autocast("sample"):
            started = time.perf_counter()
            view = self.weights.view(step)
            states = [self.new_state(row) for row in rows]
            try:
                with view.applied():
                    batch: LiveBatch | None = self.seat(self.admit(states, view))
                    while batch is not None:
                        batch, _ = self.retire(batch)
                        if batch is not None:
                            self.advance(batch)
            finally:
                release_memory()  # a long prefill's transients would stay resident otherwise
                self.count(EngineCounters(sampling_s=time.perf_counter() - started))
        return [state.result(self.rules.decode) for state in states]

    def new_state(self, row: SampleRow, gone: Callable[[], bool] = never) -> RowState:
        """A row's decoding state (its grammar compiled into a matcher, its seeded generator)."""
        generator = torch.Generator(device=self.loaded.device)
        if row.seed is None:
            generator.seed()
        else:
            generator.manual_seed(row.seed)
        return RowState(row, generator, self._matcher(row.grammar), gone)

    # -------------------------------------------------------------- the three moves (lock held)

    def admit(self, states: list[RowState], view: WeightsView) -> LiveBatch:
        """Prefill `states`' rows (applied weights: `view`'s) into a batch of their own: prompt
        prefixes several rows share are prefilled once, cached prefixes are reused where that
        shortens the batch, and each row's forced tokens are scored. Rows whose new tokens differ
        much in number are prefilled in passes of their own (`width_groups`) and joined."""
        rows = [state.row for state in states]
        if self.prefixes.enabled:
            self._prefill_shared(rows, view.tag)
        self.count(EngineCounters(sampling_passes=1))
        if not self.joinable:
            return self._admit_rows(states, view)
        new = [
            len(state.inputs) - self.cached_tokens(view.tag, state.row.prompt_ids)
            for state in states
        ]
        batches = [
            self._admit_rows([states[i] for i in group], view)
            for group in width_groups(new, PASS_COLUMNS)
        ]
        batch = batches[0]
        for other in batches[1:]:
            batch = joined(batch, other)
        return batch

    def _admit_rows(self, states: list[RowState], view: WeightsView) -> LiveBatch:
        """`admit` for rows prefilled in one pass (their shared prefixes already cached)."""
        rows = [state.row for state in states]
        forced_width = max(len(row.forced_ids) for row in rows)
        # At least one prompt token is fed again, for the logits of the first sampled token.
        prefilled = self._prefill_rows(
            [state.inputs for state in states],
            [len(row.prompt_ids) - 1 for row in rows],
            view.tag,
            keep=forced_width + 1,
        )
        prompt = sum(len(row.prompt_ids) for row in rows)
        reused = sum(prefilled.reused)
        self.count(
            EngineCounters(
                prompt_tokens=prompt,
                cached_prompt_tokens=reused,
                prefilled_tokens=prompt - reused,
            )
        )
        if forced_width:
            self.rules.score_forced(states, prefilled.logits, forced_width)
        for state in states:
            self.rules.finish_if_done(state)
        return LiveBatch(
            view=view,
            states=states,
            cache=prefilled.cache,
            mask=prefilled.mask,
            next_logits=prefilled.logits[:, -1],
            last_position=prefilled.last_position,
        )

    def seat(self, newcomers: LiveBatch) -> LiveBatch:
        """`newcomers` (just admitted) as a batch of their own that decodes in place and that
        later rows can join (rlvr.engine.batch.slotted)."""
        return slotted(newcomers)

    def join(self, live: LiveBatch | None, newcomers: LiveBatch) -> LiveBatch | None:
        """`newcomers` joined into `live` (same weights), or None when their caches cannot be
        joined (a sliding-window model): the caller keeps them apart."""
        if live is None:
            return self.seat(newcomers)
        if not (plain_layers(live.cache) and plain_layers(newcomers.cache)):
            return None
        return joined(live, newcomers)

    def retire(self, batch: LiveBatch) -> tuple[LiveBatch | None, list[RowState]]:
        """Drop the rows that ended, keeping their keys/values in the prefix cache, and the rows
        whose client has gone (`cancelled`); returns what is left (None: nothing) and the rows
        that left."""
        for state in batch.states:
            if state.finish is None and state.gone():
                state.cancelled = True
        keep = [b for b, s in enumerate(batch.states) if s.finish is None and not s.cancelled]
        if len(keep) == len(batch.states):
            return batch, []
        left = [s for s in batch.states if s.finish is not None or s.cancelled]
        for b, state in enumerate(batch.states):
            if state.finish is not None:
                self._store_row(batch.view.tag, state.fed(), batch.cache, batch.mask, b)
        self.count(
            EngineCounters(
                decoded_tokens=sum(len(s.ids) for s in left),
                cancelled_rows=sum(s.cancelled for s in left),
            )
        )
        if not keep:
            return None, left
        select_rows(batch, keep)
        return batch, left

    def advance(self, batch: LiveBatch) -> None:
        """Choose every row's next token and feed it (with the tokens a grammar forces after it,
        or a greedy row's draft of its next ones)."""
        states = batch.states
        chosen = self.rules.choose(batch.next_logits, states)
        chosen_ids = chosen.tolist()
        for state in states:
            self.rules.finish_if_done(state)
        # Tokens a grammar forces next (JSON keys, punctuation) go in with the chosen one, and so
        # do a greedy row's drafted ones where the batch is small: one forward for several tokens
        # costs about what one costs. Otherwise the chosen tensor is fed as it is.
        forced = (
            [self.rules.forced_next(s) for s in states]
            if any(s.matcher is not None for s in states)
            else [[] for _ in states]
        )
        drafts = self.rules.drafts(states, self.speculated_columns)
        fed = (
            [
                [token, *more, *draft]  # a row has forced tokens or a draft, never both
                for token, more, draft in zip(chosen_ids, forced, drafts, strict=True)
            ]
            if any(forced) or any(drafts)
            else None
        )
        width = max(len(tokens) for tokens in fed) if fed else 1
        if fed is None or width == 1:
            new_ids, new_mask = chosen[:, None], torch.ones_like(chosen)[:, None]
        else:
            pad = self.tokenizer.pad_token_id or 0
            device = self.loaded.device
            new_ids = torch.tensor([[pad] * (width - len(t)) + t for t in fed], device=device)
            new_mask = torch.tensor(
                [[0] * (width - len(t)) + [1] * len(t) for t in fed], device=device
            )
        batch.mask = torch.cat([batch.mask, new_mask.to(batch.mask.dtype)], dim=-1)
        positions = batch.last_position[:, None] + new_mask.cumsum(-1).clamp(min=1)
        batch.last_position = positions[:, -1]
        logits = self.loaded.model(
            input_ids=new_ids,
            attention_mask=batch.mask,
            position_ids=positions,
            past_key_values=batch.cache,
            use_cache=True,
            logits_to_keep=width,
        ).logits
        if any(forced):
            chosen_and_forced = [[t, *more] for t, more in zip(chosen_ids, forced, strict=True)]
            self.rules.record_forced_next(states, chosen_and_forced, logits)
        next_logits = logits[:, -1]
        drafted = kept = 0
        if any(drafts):
            # A turned-down draft token's column stays in the cache, masked out like padding.
            turned_down = self.rules.accept_drafts(states, drafts, logits)
            for b, refused in enumerate(turned_down):
                if refused:
                    batch.mask[b, -refused:] = 0
                    batch.last_position[b] = positions[b, -1 - refused]
                    next_logits[b] = logits[b, -1 - refused]
            drafted = sum(map(len, drafts))
            kept = drafted - sum(turned_down)
        batch.next_logits = next_logits
        self.count(EngineCounters(decode_steps=1, drafted_tokens=drafted, kept_draft_tokens=kept))

    # -------------------------------------------------------------- prefill

    def _prefill_rows(
        self, inputs: list[list[int]], limits: list[int], tag: WeightsTag, keep: int
    ) -> Prefilled:
        """Feed every row of `inputs` into a fresh batched cache, reusing a cached prefix (at most
        `limits[i]` tokens) where that shortens the batch; the logits of the last `keep` columns.
        Row layout: [pad | reused prefix | pad | new tokens]; the mask hides both pads."""
        from transformers import DynamicCache

        found = [
            self.prefixes.lookup(tag, ids, limit) if self.prefixes.enabled else None
            for ids, limit in zip(inputs, limits, strict=True)
        ]
        threshold = worth_reusing(
            [len(ids) for ids in inputs], [p.length if p is not None else 0 for p in found]
        )
        prefixes = [p if p is not None and p.length >= threshold else None for p in found]
        reused = [p.length if p is not None else 0 for p in prefixes]
        cached = max(reused)
        suffixes = [ids[r:] for ids, r in zip(inputs, reused, strict=True)]
        width = max(len(ids) for ids in suffixes)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in suffixes])
        mask = torch.tensor(
            [
                [0] * (cached - r) + [1] * r + [0] * (width - len(ids)) + [1] * len(ids)
                for ids, r in zip(suffixes, reused, strict=True)
            ]
        )
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]
        device = self.loaded.device
        input_ids, mask, positions = (t.to(device) for t in (input_ids, mask, positions))
        cache = (
            self._cache_from(prefixes, cached)
            if cached
            else DynamicCache(config=self.loaded.model.config)
        )
        logits = self._prefill(input_ids, mask, positions, cache, keep)
        return Prefilled(cache, mask, logits, positions[:, -1], reused)

    def _prefill(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        keep: int,
    ) -> torch.Tensor:
        """Feed the new columns `input_ids` ([B, N]) into `cache` in slices of about
        PREFILL_TOKENS tokens; the logits of the last `keep` columns. `mask` covers the cached
        columns and the new ones; `positions` the new ones."""
        started = time.perf_counter()
        rows, width = input_ids.shape
        past = mask.shape[1] - width
        step = max(PREFILL_TOKENS // rows, 1)
        # Slice boundaries counted from the end, so the last slice holds the `keep` columns.
        cuts = sorted({0, *range(width - max(keep, step), 0, -step)})
        logits: torch.Tensor | None = None
        with self.loaded.autocast("prefill"):
            for start, end in zip(cuts, [*cuts[1:], width], strict=True):
                logits = self.loaded.model(
                    input_ids=input_ids[:, start:end],
                    attention_mask=mask[:, : past + end],
                    position_ids=positions[:, start:end],
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=keep if end == width else 1,
                ).logits
        assert logits is not None  # cuts always holds 0: at least one slice was fed
        if self.loaded.prefill_dtype != self.loaded.sample_dtype:
            as_decoded(cache, self.loaded.sample_dtype or torch.float32)
        self.count(EngineCounters(prefill_s=time.perf_counter() - started))
        return logits

    def _cache_from(self, prefixes: list[Prefix | None], length: int) -> Any:
        """A batched KV cache holding each row's reused prefix, right-aligned in `length`."""
        from transformers import DynamicCache

        first = next(p for p in prefixes if p is not None)
        layers = []
        for layer in range(len(first.keys)):
            shape = (
                len(prefixes),
                *first.keys[layer].shape[:-2],
                length,
                first.keys[layer].shape[-1],
            )
            keys = first.keys[layer].new_zeros(shape)
            values = first.values[layer].new_zeros(shape)
            for b, prefix in enumerate(prefixes):
                if prefix is not None:
                    keys[b, :, length - prefix.length :] = prefix.keys[layer]
                    values[b, :, length - prefix.length :] = prefix.values[layer]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers, config=self.loaded.model.config)

    def _prefill_shared(self, rows: list[SampleRow], tag: WeightsTag) -> None:
        """Prefill once each uncached token prefix that several rows share (a group's whole
        prompt; one system prompt and tool protocol under different questions) and keep it, so
        those rows reuse it instead of each computing the same keys/values."""
        reusable = [row.prompt_ids[:-1] for row in rows]  # the last token is fed with its row
        have = [
            found.length if (found := self.prefixes.lookup(tag, ids, len(ids))) else 0
            for ids in reusable
        ]
        for shared in shared_prefixes(reusable, have):
            prefilled = self._prefill_rows(shared, [len(ids) - 1 for ids in shared], tag, keep=1)
            fed = sum(len(ids) for ids in shared) - sum(prefilled.reused)
            self.count(EngineCounters(prefilled_tokens=fed))
            for b, ids in enumerate(shared):
                self._store_row(tag, ids, prefilled.cache, prefilled.mask, b)

    def _store_row(
        self, tag: Hashable, fed: list[int], cache: Any, mask: torch.Tensor, b: int
    ) -> None:
        """Keep row `b` of a batched cache: the keys/values of its real positions, which hold
        the first tokens of `fed` (a token chosen but never fed has none)."""
        if not self.prefixes.enabled or not plain_layers(cache):
            return
        real = mask[b].bool()
        if int(real.sum()) > len(fed):
            return
        fed = fed[: int(real.sum())]
        self.prefixes.store(
            tag,
            fed,
            Prefix(
                length=len(fed),
                # a boolean index copies: the entry holds no view of the batch's buffers
                keys=tuple(layer.keys[b][:, real] for layer in cache.layers),
                values=tuple(layer.values[b][:, real] for layer in cache.layers),
            ),
        )

    # -------------------------------------------------------------- grammar

    def _grammar_view(self) -> tuple[object, int]:
        """llguidance's tokenizer (built on first use) and the logit width it covers."""
        width = self.loaded.model.get_output_embeddings().weight.shape[0]
        if self._grammar_tokenizer is None:
            self._grammar_tokenizer = llg_tokenizer(self.tokenizer, width)
        return self._grammar_tokenizer, width

    def _matcher(self, grammar: str | None) -> Matcher | None:
        if grammar is None:
            return None
        tokenizer, width = self._grammar_view()
        return Matcher(tokenizer, grammar, width)
