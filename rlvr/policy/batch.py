"""A live batch: rows decoding together on one set of weights, with their batched KV cache.

Rows are left-padded: every row's keys/values end at the cache's last column, and a mask hides
each row's padding. Positions are given per row, and a row's keys carry their rotary position
already, so a column that is padding for every row can be removed, and two batches can be joined
by padding the shorter one's columns on the left. That is how rows join a running decode and
leave it (rlvr.policy.sampler)."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.policy.rows import RowState
from rlvr.policy.weights import WeightsView


class LiveBatch:
    """`states[b]` is row b of `cache` ([B, heads, T, dim] per layer), `mask` ([B, T]),
    `next_logits` ([B, vocab]: the logits its next token is chosen from) and `last_position`
    ([B]: the position of its last fed token)."""

    def __init__(
        self,
        view: WeightsView,
        states: list[RowState],
        cache: Any,
        mask: torch.Tensor,
        next_logits: torch.Tensor,
        last_position: torch.Tensor,
    ) -> None:
        self.view = view
        self.states = states
        self.cache = cache
        self.mask = mask
        self.next_logits = next_logits
        self.last_position = last_position


def plain_layers(cache: Any) -> bool:
    """Whether every layer of `cache` holds all its columns (no sliding window): only then may
    columns be padded, removed or joined."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


def select_rows(batch: LiveBatch, keep: list[int]) -> None:
    """Keep rows `keep` of `batch` (in that order), then drop the columns no kept row uses."""
    index = torch.tensor(keep, device=batch.mask.device)
    batch.cache.batch_select_indices(index)
    batch.states = [batch.states[b] for b in keep]
    batch.mask = batch.mask[index]
    batch.next_logits = batch.next_logits[index]
    batch.last_position = batch.last_position[index]
    if plain_layers(batch.cache):
        _drop_empty_columns(batch)


def _drop_empty_columns(batch: LiveBatch) -> None:
    used = batch.mask.any(0)
    if bool(used.all()):
        return
    columns = used.nonzero()[:, 0]
    for layer in batch.cache.layers:
        layer.keys = layer.keys[:, :, columns]
        layer.values = layer.values[:, :, columns]
    batch.mask = batch.mask[:, columns]


def _left_padded(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def joined(live: LiveBatch, newcomers: LiveBatch) -> LiveBatch:
    """One batch of `live`'s rows then `newcomers`' (same weights, plain caches): the narrower
    cache is padded on the left to the wider one's columns."""
    width = max(live.mask.shape[1], newcomers.mask.shape[1])
    for mine, theirs in zip(live.cache.layers, newcomers.cache.layers, strict=True):
        mine.keys = torch.cat(
            [_left_padded(mine.keys, width, 2), _left_padded(theirs.keys, width, 2)]
        )
        mine.values = torch.cat(
            [_left_padded(mine.values, width, 2), _left_padded(theirs.values, width, 2)]
        )
    return LiveBatch(
        view=live.view,
        states=live.states + newcomers.states,
        cache=live.cache,
        mask=torch.cat([_left_padded(live.mask, width, 1), _left_padded(newcomers.mask, width, 1)]),
        next_logits=torch.cat([live.next_logits, newcomers.next_logits]),
        last_position=torch.cat([live.last_position, newcomers.last_position]),
    )
