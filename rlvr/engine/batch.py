"""A live batch: rows decoding together on one set of weights, with their batched KV cache.

Rows are right-aligned: every row's keys/values end at the cache's last column, and a mask hides
the columns before a row's own. Positions are given per row, and a row's keys carry their rotary
position already, so columns no row uses can be dropped and rows of other lengths can join.

The cache of a batch whose layers all keep every column (no sliding window) is held in
`SlotLayer`s: per layer one buffer with room for more rows below and more columns to the right,
of which the batch's rows are the first. A decode step writes its column in place instead of
copying the whole cache (`torch.cat` per layer and step); a row that ends is replaced by the last
row (one row copied, not the cache) and a row that joins is written below the others. The buffer
is laid out anew only when a side runs out of room."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rlvr.engine.token_sampling import RowState
from rlvr.engine.weights import WeightsView

# Room a buffer is laid out with, so that decode steps and joining rows seldom lay it out anew.
# Room is memory held by every layer: an eighth of the width and 2 rows held less than half the
# width and 8 rows, in the same time (docs/concepts/cpu-engine.md, Memory).
RIGHT_ROOM = 128  # columns free to the right: decode steps between two layouts
ROW_ROOM = 2  # rows free below
LEFT_ROOM_SHARE = 0.125  # columns free to the left, a share of the width: for wider newcomers


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


class CacheLayer:
    """What transformers' attention calls on a cache layer (`update`, `get_seq_length`...), for
    the engine's own layers: built holding what they continue from, never sliding. A layer
    writes a forward's new keys and values (`write`) and says how many columns came before."""

    is_sliding = False
    is_compileable = False
    is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Never needed: the layer is built holding what it continues from."""

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        cache_kwargs: Mapping[str, object] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.write(key_states, value_states)

    def write(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's keys and values with a forward's new ones after them."""
        raise NotImplementedError

    def get_seq_length(self) -> int:
        raise NotImplementedError

    def get_mask_sizes(self, cache_position: torch.Tensor) -> tuple[int, int]:
        return self.get_seq_length() + cache_position.shape[0], 0

    def get_max_cache_shape(self) -> int:
        return -1


class SlotLayer(CacheLayer):
    """One layer's keys and values in buffers [capacity, heads, columns, dim]: rows [0, rows)
    and columns [start, end) are in use (`keys`/`values` are views of them). A forward's new
    columns are written at `end`; a full buffer is laid out anew with room again."""

    def __init__(
        self, keys: torch.Tensor, values: torch.Tensor, rows: int, start: int, end: int
    ) -> None:
        self.key_buffer, self.value_buffer = keys, values
        self.rows, self.start, self.end = rows, start, end
        self._expose()

    @classmethod
    def laid_out(
        cls, keys: torch.Tensor, values: torch.Tensor, capacity: int, left: int, right: int
    ) -> SlotLayer:
        """A layer holding `keys`/`values` ([rows, heads, width, dim]) with room for `capacity`
        rows and `left`/`right` free columns around them (zeros: a masked column must still hold
        finite numbers, or the attention's masked sum is NaN)."""
        rows, heads, width, dim = keys.shape
        shape = (max(capacity, rows), heads, left + width + right, dim)
        key_buffer, value_buffer = keys.new_zeros(shape), values.new_zeros(shape)
        key_buffer[:rows, :, left : left + width] = keys
        value_buffer[:rows, :, left : left + width] = values
        return cls(key_buffer, value_buffer, rows, left, left + width)

    def _expose(self) -> None:
        self.keys = self.key_buffer[: self.rows, :, self.start : self.end]
        self.values = self.value_buffer[: self.rows, :, self.start : self.end]

    def write(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        columns = keys.shape[-2]
        if self.end + columns > self.key_buffer.shape[2]:
            self._relayout(self.key_buffer.shape[0], left=0, right=columns + RIGHT_ROOM)
        self.key_buffer[: self.rows, :, self.end : self.end + columns] = keys
        self.value_buffer[: self.rows, :, self.end : self.end + columns] = values
        self.end += columns
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.end - self.start

    # ------------------------------------------------------------ what the batch does to it

    def move(self, source: int, target: int) -> None:
        """Row `source`'s keys/values into row `target` (the columns in use)."""
        columns = slice(self.start, self.end)
        self.key_buffer[target, :, columns] = self.key_buffer[source, :, columns]
        self.value_buffer[target, :, columns] = self.value_buffer[source, :, columns]

    def keep_rows(self, rows: int) -> None:
        """Use only the first `rows` rows (nothing is copied)."""
        self.rows = rows
        self._expose()

    def narrow(self, columns: int) -> None:
        """Stop using the first `columns` columns (nothing is copied)."""
        self.start += columns
        self._expose()

    def append(self, keys: torch.Tensor, values: torch.Tensor, left_room: int) -> None:
        """Rows ([n, heads, width, dim], right-aligned like the rest) written below the others;
        columns wider than the layer's are taken into use on the left. Laid out anew with more
        rows or `left_room` more columns where the buffer has too few."""
        added, width = keys.shape[0], keys.shape[-2]
        extra = max(width - (self.end - self.start), 0)
        rows_short = self.rows + added > self.key_buffer.shape[0]
        if rows_short or self.start < extra:
            capacity = self.rows + added + ROW_ROOM if rows_short else self.key_buffer.shape[0]
            self._relayout(capacity, left=extra + left_room, right=RIGHT_ROOM)
        self.start -= extra
        rows = slice(self.rows, self.rows + added)
        self.key_buffer[rows, :, self.end - width : self.end] = keys
        self.value_buffer[rows, :, self.end - width : self.end] = values
        self.rows += added
        self._expose()

    def _relayout(self, capacity: int, left: int, right: int) -> None:
        other = SlotLayer.laid_out(self.keys, self.values, capacity, left=left, right=right)
        self.key_buffer, self.value_buffer = other.key_buffer, other.value_buffer
        self.start, self.end = other.start, other.end
        self._expose()


def slot_layers(cache: Any) -> list[SlotLayer]:
    return [layer for layer in cache.layers if isinstance(layer, SlotLayer)]


def plain_layers(cache: Any) -> bool:
    """Whether every layer of `cache` holds all its columns (no sliding window): only then may
    columns be padded, removed or joined."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) in (DynamicLayer, SlotLayer) for layer in cache.layers)


def slotted(batch: LiveBatch) -> LiveBatch:
    """`batch` (a prefill's plain cache) with its cache moved into slot layers with room on
    every side; a sliding-window cache, or one in slot layers already, is left as it is."""
    from transformers.cache_utils import Cache

    if not plain_layers(batch.cache) or slot_layers(batch.cache):
        return batch
    rows, width = batch.mask.shape
    batch.cache = Cache(
        layers=[
            SlotLayer.laid_out(
                layer.keys,
                layer.values,
                rows + ROW_ROOM,
                left=int(width * LEFT_ROOM_SHARE),
                right=RIGHT_ROOM,
            )
            for layer in batch.cache.layers
        ]
    )
    return batch


def select_rows(batch: LiveBatch, keep: list[int]) -> None:
    """Keep rows `keep` of `batch`, then drop the columns no kept row uses. A plain cache keeps
    them in `keep`'s order; slot layers move each kept row from below into a gap (so the kept
    rows' order may change), copying those rows only."""
    layers = slot_layers(batch.cache)
    if layers:
        kept = set(keep)
        gaps = [b for b in range(len(keep)) if b not in kept]
        movers = [b for b in keep if b >= len(keep)]
        for layer in layers:
            for source, target in zip(movers, gaps, strict=True):
                layer.move(source, target)
            layer.keep_rows(len(keep))
        moved = dict(zip(gaps, movers, strict=True))
        order = [moved.get(b, b) for b in range(len(keep))]
    else:
        order = keep
    index = torch.tensor(order, device=batch.mask.device)
    if not layers:
        batch.cache.batch_select_indices(index)
    batch.states = [batch.states[b] for b in order]
    batch.mask = batch.mask[index]
    batch.next_logits = batch.next_logits[index]
    batch.last_position = batch.last_position[index]
    if plain_layers(batch.cache):
        _drop_empty_columns(batch)


def _drop_empty_columns(batch: LiveBatch) -> None:
    """Drop the columns on the left that no row uses (rows are right-aligned)."""
    used = batch.mask.any(0)
    if bool(used.all()) or not bool(used.any()):
        return
    first = int(used.nonzero()[0, 0])
    for layer in batch.cache.layers:
        if isinstance(layer, SlotLayer):
            layer.narrow(first)
        else:
            layer.keys = layer.keys[:, :, first:]
            layer.values = layer.values[:, :, first:]
    batch.mask = batch.mask[:, first:]


def _left_padded(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def joined(live: LiveBatch, newcomers: LiveBatch) -> LiveBatch:
    """One batch of `live`'s rows then `newcomers'` (same weights, plain caches; `live`'s in
    slot layers, the newcomers' written below its rows): the narrower is padded on the left to
    the wider one's columns."""
    live = slotted(live)
    width = max(live.mask.shape[1], newcomers.mask.shape[1])
    for mine, theirs in zip(live.cache.layers, newcomers.cache.layers, strict=True):
        mine.append(theirs.keys, theirs.values, left_room=int(width * LEFT_ROOM_SHARE))
    return LiveBatch(
        view=live.view,
        states=live.states + newcomers.states,
        cache=live.cache,
        mask=torch.cat([_left_padded(live.mask, width, 1), _left_padded(newcomers.mask, width, 1)]),
        next_logits=torch.cat([live.next_logits, newcomers.next_logits]),
        last_position=torch.cat([live.last_position, newcomers.last_position]),
    )
