"""Batched sampling: prefill (shared prompt prefixes, the prefix cache), KV-cached decode with per-row
temperature, top_p, max_tokens, stop strings, seed and grammar (structured output), and the sampled
tokens' logprobs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from rlvr.policy.common import PREFILL_TOKENS, FinishReason, Sampled, SampleRow
from rlvr.policy.device import release_memory
from rlvr.policy.grammar import Matcher, grammar_for, llg_tokenizer
from rlvr.policy.loaded import LoadedModel
from rlvr.policy.prefix import MIN_REUSE, Prefix, PrefixCache, worth_reusing


def group_attention_mask(group_ids: torch.Tensor, parent_ids: torch.Tensor) -> torch.Tensor:
    """[B, 1, S, S] boolean mask for ART's packed rows: a token sees earlier tokens of its own
    sequence and of the prompt it continues (whose group id is its parent id)."""
    length = group_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=group_ids.device).tril()
    same = group_ids[:, :, None] == group_ids[:, None, :]
    prompt = parent_ids[:, :, None] == group_ids[:, None, :]
    return (causal & (same | prompt))[:, None]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position, computed in fp32 (cross-entropy fuses log-softmax and gather)."""
    flat = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    )
    return -flat.view(targets.shape)


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row beyond its nucleus (the most likely token is always kept)."""
    sorted_probs, order = probs.sort(-1, descending=True)
    outside = (sorted_probs.cumsum(-1) - sorted_probs) > top_p[:, None]
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


class _Decoding:
    """Mutable per-row state of one `sample` call."""

    def __init__(
        self, row: SampleRow, generator: torch.Generator, matcher: Matcher | None = None
    ) -> None:
        self.row = row
        self.generator = generator
        self.matcher = matcher
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[list[tuple[int, float]]] = []
        self.text: str | None = None  # set when a stop string cut it
        self.forced_chars = 0
        self.finish: FinishReason | None = None


class WeightsSource(Protocol):
    """Which weights a step is sampled from (rlvr.policy.adapters.AdapterStore for a trained
    engine, BaseWeights for a frozen one)."""

    def tag(self, step: int | None) -> Hashable:
        """The identity of the weights serving `step` (UnknownStep if none): what cached keys and
        values are filed under."""
        ...

    def serving(self, step: int | None) -> AbstractContextManager[Hashable]:
        """Make `model` compute with step's weights for one pass (the caller holds the lock);
        yields their tag."""
        ...


class Sampler:
    """Batched, KV-cached sampling for many rows at once from `loaded`'s model, with the weights
    `weights` serves for the step asked (the live adapter, an older checkpoint, or the base)."""

    def __init__(
        self, loaded: LoadedModel, weights: WeightsSource, prefixes: PrefixCache | None = None
    ) -> None:
        self.loaded = loaded
        self.weights = weights
        self.prefixes = prefixes if prefixes is not None else PrefixCache()
        self.passes = 0  # batched sampling passes run (how well requests were batched)
        self._token_bytes: dict[int, bytes] = {}
        self._grammar_tokenizer: Any = (
            None  # llguidance's view of the tokenizer, built on first use
        )

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def max_context(self) -> int:
        return self.loaded.max_context

    def token_bytes(self, token_id: int) -> bytes:
        """The token's text as UTF-8 (a partial character becomes U+FFFD, as vLLM reports it)."""
        cached = self._token_bytes.get(token_id)
        if cached is None:
            cached = self._token_bytes[token_id] = self.tokenizer.decode([token_id]).encode("utf-8")
        return cached

    def sample(self, rows: list[SampleRow], step: int | None = None) -> list[Sampled]:
        """Sample all rows in one batched pass with step's weights (None: the latest)."""
        if not rows:
            return []
        with (
            self.loaded.lock,
            torch.inference_mode(),
            self.loaded.autocast("sample"),
            self.weights.serving(step) as tag,
        ):
            self.passes += 1
            try:
                return self._sample(rows, tag)
            finally:
                release_memory()  # a long prefill's transients would stay resident otherwise

    def _sample(self, rows: list[SampleRow], tag: Hashable) -> list[Sampled]:
        from transformers import DynamicCache

        states = [
            _Decoding(row, self._generator(row.seed), self._matcher(row.grammar)) for row in rows
        ]
        inputs = [row.prompt_ids + row.forced_ids for row in rows]
        if self.prefixes.enabled:
            self._prefill_shared(rows, tag)
        # Reuse what an earlier call of the same conversation computed; at least one prompt token
        # is fed again, for the logits of the first sampled (or forced) token.
        found = [
            self.prefixes.lookup(tag, ids, len(row.prompt_ids) - 1)
            if self.prefixes.enabled
            else None
            for row, ids in zip(rows, inputs, strict=True)
        ]
        threshold = worth_reusing(
            [len(ids) for ids in inputs], [p.length if p is not None else 0 for p in found]
        )
        prefixes = [p if p is not None and p.length >= threshold else None for p in found]
        reused = [p.length if p is not None else 0 for p in prefixes]
        if self.prefixes.enabled:
            for ids, r in zip(inputs, reused, strict=True):
                self.prefixes.count(len(ids), r)
        cached = max(reused)
        suffixes = [ids[r:] for ids, r in zip(inputs, reused, strict=True)]
        width = max(len(ids) for ids in suffixes)
        pad = self.tokenizer.pad_token_id or 0
        # Row layout: [pad | reused prefix | pad | new tokens]; the mask hides both pads.
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in suffixes])
        mask = torch.tensor(
            [
                [0] * (cached - r) + [1] * r + [0] * (width - len(ids)) + [1] * len(ids)
                for ids, r in zip(suffixes, reused, strict=True)
            ]
        )
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]
        input_ids, mask, positions = (
            t.to(self.loaded.device) for t in (input_ids, mask, positions)
        )
        forced_width = max(len(row.forced_ids) for row in rows)
        cache = (
            self._cache_from(prefixes, cached)
            if cached
            else DynamicCache(config=self.loaded.model.config)
        )
        logits = self._prefill(input_ids, mask, positions, cache, keep=forced_width + 1)
        if forced_width:
            self._score_forced(states, logits, forced_width)
        for state in states:
            self._finish_if_done(state)
        live = list(range(len(states)))
        next_logits = logits[:, -1]
        last_position = positions[:, -1]
        while True:
            live_now = [i for i in live if states[i].finish is None]
            if len(live_now) < len(live):  # keep the finished rows' keys/values, then drop them
                for b, i in enumerate(live):
                    if states[i].finish is not None:
                        self._keep_prefix(tag, inputs[i], states[i], cache, mask, b)
            if not live_now:
                break
            if len(live_now) < len(live):  # drop finished rows from the batch and the cache
                keep = torch.tensor([live.index(i) for i in live_now], device=self.loaded.device)
                cache.batch_select_indices(keep)
                mask, next_logits, last_position = (
                    mask[keep],
                    next_logits[keep],
                    last_position[keep],
                )
                live = live_now
            chosen = self._choose(next_logits, [states[i] for i in live])
            for i in live:
                self._finish_if_done(states[i])
            # Tokens a grammar forces next (JSON keys, punctuation) go in with the chosen one:
            # one forward for several tokens costs about what one costs.
            # Free text (no grammar in the batch) feeds the chosen tensor as it is.
            fed = (
                [[int(chosen[b]), *self._forced_next(states[i])] for b, i in enumerate(live)]
                if any(states[i].matcher is not None for i in live)
                else None
            )
            width = max(len(tokens) for tokens in fed) if fed else 1
            if fed is None or width == 1:
                new_ids, new_mask = chosen[:, None], torch.ones_like(chosen)[:, None]
            else:
                pad = self.tokenizer.pad_token_id or 0
                new_ids = torch.tensor(
                    [[pad] * (width - len(t)) + t for t in fed], device=self.loaded.device
                )
                new_mask = torch.tensor(
                    [[0] * (width - len(t)) + [1] * len(t) for t in fed], device=self.loaded.device
                )
            mask = torch.cat([mask, new_mask.to(mask.dtype)], dim=-1)
            positions = last_position[:, None] + new_mask.cumsum(-1).clamp(min=1)
            last_position = positions[:, -1]
            logits = self.loaded.model(
                input_ids=new_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=width,
            ).logits
            if fed is not None and width > 1:
                self._record_forced_next(live, states, fed, logits)
            next_logits = logits[:, -1]
        return [
            Sampled(
                token_ids=s.ids,
                logprobs=s.logprobs,
                top_logprobs=s.top,
                text=s.text if s.text is not None else self._decode(s.ids),
                finish_reason=s.finish or "length",
            )
            for s in states
        ]

    def _prefill(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache,
        keep: int,
    ) -> torch.Tensor:
        """Feed the new columns `input_ids` ([B, N]) into `cache` in slices of about
        PREFILL_TOKENS tokens; the logits of the last `keep` columns. `mask` covers the cached
        columns and the new ones; `positions` the new ones."""
        rows, width = input_ids.shape
        past = mask.shape[1] - width
        step = max(PREFILL_TOKENS // rows, 1)
        # Slice boundaries counted from the end, so the last slice holds the `keep` columns.
        cuts = sorted({0, *range(width - max(keep, step), 0, -step)})
        logits = None
        for start, end in zip(cuts, [*cuts[1:], width], strict=True):
            logits = self.loaded.model(
                input_ids=input_ids[:, start:end],
                attention_mask=mask[:, : past + end],
                position_ids=positions[:, start:end],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=keep if end == width else 1,
            ).logits
        return logits

    def _cache_from(self, prefixes: list[Prefix | None], length: int):
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

    def _prefill_shared(self, rows: list[SampleRow], tag: Hashable) -> None:
        """Prefill once each uncached prompt that several rows share (a group's first turn) and
        keep it, so those rows reuse it instead of each computing the same keys/values."""
        from transformers import DynamicCache

        counts = Counter(tuple(row.prompt_ids) for row in rows)
        shared = [
            list(ids[:-1])  # the last prompt token is fed with the row, for its logits
            for ids, n in counts.items()
            if n > 1
            and len(ids) > MIN_REUSE
            and self.prefixes.lookup(tag, list(ids), len(ids) - 1) is None
        ]
        if not shared:
            return
        width = max(len(ids) for ids in shared)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in shared])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in shared])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        input_ids, mask, positions = (
            t.to(self.loaded.device) for t in (input_ids, mask, positions)
        )
        cache = DynamicCache(config=self.loaded.model.config)
        self._prefill(input_ids, mask, positions, cache, keep=1)
        for b, ids in enumerate(shared):
            self._store_row(tag, ids, cache, mask, b)

    def _keep_prefix(
        self, tag: Hashable, ids: list[int], state: _Decoding, cache, mask: torch.Tensor, b: int
    ) -> None:
        """Store row `b`'s keys/values (its real positions only) for the conversation's next turn."""
        if not self.prefixes.enabled:
            return
        fed = ids + state.ids[len(state.row.forced_ids) :]
        self._store_row(tag, fed, cache, mask, b)

    def _store_row(self, tag: Hashable, fed: list[int], cache, mask: torch.Tensor, b: int) -> None:
        """Keep row `b` of a batched cache: the keys/values of its real positions, which hold
        the first tokens of `fed` (a token chosen but never fed has none)."""
        if not self._plain_layers(cache):
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
                keys=tuple(layer.keys[b][:, real].clone() for layer in cache.layers),
                values=tuple(layer.values[b][:, real].clone() for layer in cache.layers),
            ),
        )

    @staticmethod
    def _plain_layers(cache) -> bool:
        from transformers.cache_utils import DynamicLayer

        return all(type(layer) is DynamicLayer for layer in cache.layers)

    def compile_grammar(self, schema: dict) -> str:
        """The grammar (for `SampleRow.grammar`) of a JSON schema; GrammarError if it has none."""
        return grammar_for(schema, self._grammar_view()[0])

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

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _generator(self, seed: int | None) -> torch.Generator:
        generator = torch.Generator(device=self.loaded.device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        return generator

    def _score_forced(self, states: list[_Decoding], logits: torch.Tensor, width: int) -> None:
        """Record the model's log-probabilities of each row's forced prefix tokens."""
        logprobs = torch.log_softmax(logits.float(), -1)
        for b, state in enumerate(states):
            forced = state.row.forced_ids
            for j, token in enumerate(forced):
                position = width - len(forced) + j
                self._record(state, token, logprobs[b, position])
            state.forced_chars = len(self._decode(forced))

    def _record(self, state: _Decoding, token: int, logprobs: torch.Tensor) -> None:
        state.ids.append(token)
        state.logprobs.append(float(logprobs[token]))
        if state.row.top_logprobs:
            values, ids = logprobs.topk(state.row.top_logprobs)
            state.top.append(list(zip(ids.tolist(), values.tolist(), strict=True)))

    def _choose(self, logits: torch.Tensor, states: list[_Decoding]) -> torch.Tensor:
        """Pick one token per live row and record it; returns the chosen ids. A row with a
        grammar picks among the tokens it allows; its recorded logprob is the model's own."""
        logits = logits.float()
        logprobs = torch.log_softmax(logits, -1)
        constrained = [b for b, s in enumerate(states) if s.matcher is not None]
        if constrained:
            allowed = torch.stack([states[b].matcher.allowed() for b in constrained])
            logits = logits.clone()
            logits[constrained] = logits[constrained].masked_fill(
                ~allowed.to(logits.device), float("-inf")
            )
        chosen = logits.argmax(-1)
        temperatures = torch.tensor([s.row.temperature for s in states], device=logits.device)
        sampled = temperatures > 0
        if sampled.any():
            probs = torch.softmax(logits / temperatures.clamp(min=1e-6)[:, None], -1)
            top_p = torch.tensor([s.row.top_p for s in states], device=logits.device)
            if (top_p < 1).any():
                probs = top_p_filter(probs, top_p)
            for b in sampled.nonzero().flatten().tolist():
                chosen[b] = torch.multinomial(probs[b], 1, generator=states[b].generator)[0]
        for b, state in enumerate(states):
            self._record(state, int(chosen[b]), logprobs[b])
            if state.matcher is not None:
                state.matcher.consume(int(chosen[b]))
        return chosen

    def _forced_next(self, state: _Decoding) -> list[int]:
        """The tokens the row's grammar allows as the only continuation (consumed here; recorded
        once the forward that feeds them has scored them), within the row's token budget."""
        if state.matcher is None or state.finish is not None:
            return []
        room = state.row.max_tokens - len(state.ids)
        forced = state.matcher.forced()[:room]
        for token in forced:
            state.matcher.consume(token)
        return forced

    def _record_forced_next(
        self, live: list[int], states: list[_Decoding], fed: list[list[int]], logits: torch.Tensor
    ) -> None:
        """Record each row's grammar-forced tokens with the model's log-probabilities: the one at
        column c of the forward predicts the token fed at column c + 1."""
        width = logits.shape[1]
        for b, i in enumerate(live):
            forced = fed[b][1:]
            if not forced:
                continue
            start = width - len(fed[b])
            logprobs = torch.log_softmax(logits[b, start : start + len(forced)].float(), -1)
            for j, token in enumerate(forced):
                self._record(states[i], token, logprobs[j])
            self._finish_if_done(states[i])

    def _finish_if_done(self, state: _Decoding) -> None:
        """Set `finish` when the row hit an end token, a stop string or its token budget."""
        row = state.row
        # A finished document leaves the grammar only the end token to allow: it ends there too.
        if (len(state.ids) > len(row.forced_ids) and state.ids[-1] in self.loaded.stop_ids) or (
            row.stop and self._cut_at_stop(state)
        ):
            state.finish = "stop"
        elif len(state.ids) >= row.max_tokens:
            state.finish = "length"

    def _cut_at_stop(self, state: _Decoding) -> bool:
        """Whether a stop string appeared after the forced prefix; if so keep the text before it."""
        text = self.tokenizer.decode(state.ids, skip_special_tokens=True)
        start = state.forced_chars
        cuts = [i for i in (text.find(s, start) for s in state.row.stop if s) if i >= 0]
        if cuts:
            state.text = text[: min(cuts)]
        return bool(cuts)
