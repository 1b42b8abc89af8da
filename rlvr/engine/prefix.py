"""Keys and values of recently sampled sequences, so a conversation's next turn skips the prefill
of everything it shares with an earlier call (the system prompt, the tools, earlier turns).

A multi-turn rollout sends the whole chat again every turn; on a CPU the prefill of that chat is
most of a turn's cost. Each finished row leaves its per-layer keys/values here, tagged with the
adapter that computed them; the next request reuses the longest common token prefix with any entry
of the same adapter. The match is on token ids, not text, so a chat template that re-tokenises an
assistant turn differently simply reuses less. Entries are evicted least-recently-used beyond a
byte budget, and everything is dropped when the live adapter's weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from itertools import pairwise

import torch
from pydantic import BaseModel, ConfigDict

from rlvr.engine.types import whole_number

BUDGET_ENV = "RLVR_PREFIX_CACHE_MB"  # 0 turns the cache off
# 128 MB holds the entries a multi-turn episode reuses (its next turn comes soon after, so LRU keeps
# it): a larger cache was no faster and held more memory, a smaller one slower
# (docs/concepts/cpu-engine.md, Memory).
DEFAULT_BUDGET_MB = 128
MIN_REUSE = 16  # shorter shared prefixes are not worth the copy


class Prefix(BaseModel):
    """One reusable prefix: its length and, per layer, keys and values `[heads, length, dim]`."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    length: int
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists: the first difference found by
    halving, each probe one list comparison in C (a lookup compares every cached entry)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    same, differs = 0, n  # a[:same] == b[:same] and a[:differs] != b[:differs]
    while differs - same > 1:
        middle = (same + differs) // 2
        if a[:middle] == b[:middle]:
            same = middle
        else:
            differs = middle
    return same


def worth_reusing(lengths: list[int], reused: list[int]) -> int:
    """The shortest cached prefix worth reusing in one batch of rows (`lengths` tokens each,
    `reused` of them cached); rows with a shorter one are fed in full.

    A batch's rows are laid out [pad | reused | pad | new]: every row is as wide as the longest
    reused prefix plus the longest new part, so a row fed in full beside reused ones lengthens
    every row's context (attention, the key/value cache; a batch of distinct prompts, half of
    them cached, sampled slower with reuse than without). The threshold minimises that context
    plus the columns to prefill (the weights' work); `max(lengths) + 1` reuses nothing."""
    none = max(lengths, default=0) + 1

    def cost(threshold: int) -> tuple[int, int]:
        kept = [r if r >= threshold else 0 for r in reused]
        width = max((n - k for n, k in zip(lengths, kept, strict=True)), default=0)
        return max(kept, default=0) + 2 * width, width

    return min([none, *sorted({r for r in reused if r > 0})], key=cost)


def shared_prefixes(prompts: list[list[int]], have: list[int]) -> list[list[list[int]]]:
    """The token prefixes that several rows of one batch share, worth prefilling once, in rounds:
    each round's prefixes may extend an earlier round's (one system prompt for every row, then a
    group's whole prompt for its rows), so a round reuses what the rounds before it stored.

    `prompts`: each row's reusable tokens (its prompt less the token fed for its logits); `have`:
    how many of them the prefix cache already holds. A prefix is worth it when it adds at least
    MIN_REUSE tokens to what is covered for at least two rows. Rows are sorted, so rows sharing a
    prefix are adjacent and a run's shared prefix is its smallest adjacent common prefix; each run
    is split where that minimum falls (clusters are found greedily, longest shared runs first)."""
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    adjacent = [common_prefix(prompts[a], prompts[b]) for a, b in pairwise(order)]
    rounds: dict[int, list[list[int]]] = {}

    def visit(lo: int, hi: int, depth: int, covered: int) -> None:
        """Rows order[lo:hi], whose first `covered` tokens an earlier round prefills."""
        if hi - lo < 2:
            return
        shared = min(adjacent[lo : hi - 1])
        gaining = [i for i in order[lo:hi] if max(have[i], covered) + MIN_REUSE <= shared]
        if len(gaining) >= 2:
            rounds.setdefault(depth, []).append(prompts[order[lo]][:shared])
            depth, covered = depth + 1, shared
        start = lo
        for k in range(lo, hi - 1):
            if adjacent[k] == shared:
                visit(start, k + 1, depth, covered)
                start = k + 1
        visit(start, hi, depth, covered)

    visit(0, len(order), 0, 0)
    return [rounds[depth] for depth in sorted(rounds)]


def budget_bytes() -> int:
    """RLVR_PREFIX_CACHE_MB in bytes (0: the cache is off)."""
    return whole_number(BUDGET_ENV, DEFAULT_BUDGET_MB, least=0) * 2**20


class PrefixCache:
    """Least-recently-used store of sampled sequences' keys/values, per adapter tag."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = budget_bytes() if max_bytes is None else max_bytes
        self._entries: OrderedDict[int, tuple[Hashable, list[int], Prefix]] = OrderedDict()
        self._bytes = 0
        self._next = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def lookup(self, tag: Hashable, ids: list[int], limit: int) -> Prefix | None:
        """The longest cached prefix of `ids` (at most `limit` tokens) computed by adapter `tag`
        (the caller decides whether to use it)."""
        best, best_key = 0, None
        for key, (entry_tag, entry_ids, _) in self._entries.items():
            if entry_tag == tag:
                shared = min(common_prefix(entry_ids, ids), limit)
                if shared > best:
                    best, best_key = shared, key
        if best < MIN_REUSE or best_key is None:
            return None
        self._entries.move_to_end(best_key)
        prefix = self._entries[best_key][2]
        return Prefix(
            length=best,
            keys=tuple(k[:, :best] for k in prefix.keys),
            values=tuple(v[:, :best] for v in prefix.values),
        )

    def store(self, tag: Hashable, ids: list[int], prefix: Prefix) -> None:
        """Keep `prefix` (the keys/values of `ids`), evicting the least recently used."""
        if not self.enabled or prefix.length < MIN_REUSE:
            return
        size = sum(t.numel() * t.element_size() for t in (*prefix.keys, *prefix.values))
        if size > self.max_bytes:
            return
        for key, (entry_tag, entry_ids, _) in list(self._entries.items()):
            if entry_tag == tag and ids[: len(entry_ids)] == entry_ids:
                self._drop(key)  # the new sequence extends it: the old entry adds nothing
        self._entries[self._next] = (tag, list(ids[: prefix.length]), prefix)
        self._next += 1
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: int) -> None:
        _, _, prefix = self._entries.pop(key)
        self._bytes -= sum(t.numel() * t.element_size() for t in (*prefix.keys, *prefix.values))

    def __len__(self) -> int:
        return len(self._entries)
