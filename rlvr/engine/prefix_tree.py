"""The sequences of one training pass as a tree of shared token runs, so that a token several
sequences share is computed once.

A GRPO group's rollouts start with the same prompt, and an agent's rollouts often play their first
turns alike (the same search, the same email read) and part only near the end; a supervised batch
shares its system prompt. Computed row by row, every sequence pays for those tokens again. In the
tree, a run is a stretch of tokens that the same sequences hold at the same positions; a run
continues the run before it on its path (its `parent`), and the sequences part where their tokens
differ. The trainer (rlvr.engine.trainer) computes the runs level by level, each continuing from the
keys and values of its path, so each sequence's log-probabilities are those it would get alone.

Pure functions over token lists: nothing here touches a model.
"""

from __future__ import annotations

from typing import NamedTuple

from rlvr.engine.prefix import common_prefix
from rlvr.engine.types import PASS_COLUMNS, width_groups


class Run(NamedTuple):
    """Tokens `start`..`end` of sequence `row` (every sequence whose path holds the run has these
    tokens there), continuing run `parent` (-1: a root, starting at position 0)."""

    row: int
    start: int
    end: int
    parent: int

    @property
    def length(self) -> int:
        return self.end - self.start


class Tree(NamedTuple):
    """`runs`, each after its parent; `levels[k]`: the runs with k runs before them on their path;
    `paths[i]`: sequence i's runs from its root on (they cover its tokens in order)."""

    runs: list[Run]
    levels: list[list[int]]
    paths: list[list[int]]

    def tokens(self) -> int:
        """Tokens the tree computes (each shared token once)."""
        return sum(run.length for run in self.runs)


def build_tree(sequences: list[list[int]]) -> Tree:
    """The tree of `sequences` (each non-empty): sorted, sequences that share a prefix are adjacent,
    so a set's common prefix is that of its first and last members."""
    order = sorted(range(len(sequences)), key=lambda i: sequences[i])
    runs: list[Run] = []
    levels: list[list[int]] = []
    paths: list[list[int]] = [[] for _ in sequences]
    pending = [(order, 0, -1, 0)]  # members (sorted), tokens they share, parent run, level
    while pending:
        members, depth, parent, level = pending.pop()
        first, last = sequences[members[0]], sequences[members[-1]]
        end = depth + common_prefix(first[depth:], last[depth:])
        if end > depth:
            index = len(runs)
            runs.append(Run(members[0], depth, end, parent))
            if len(levels) == level:
                levels.append([])
            levels[level].append(index)
            for member in members:
                paths[member].append(index)
            parent, level = index, level + 1
        going_on = [m for m in members if len(sequences[m]) > end]
        for children in _split_by_token(going_on, sequences, end):
            pending.append((children, end, parent, level))
    return Tree(runs, levels, paths)


def cut_tree(tree: Tree, sequences: list[list[int]], depth: int) -> Tree:
    """`tree` with its levels from `depth` on merged: each sequence's tokens after its first
    `depth` runs are one run of its own (identical sequences still share it). Depth 0: every
    sequence computed in full; the tree's own depth: the tree itself."""
    upper = [index for level in tree.levels[:depth] for index in level]
    renumber = {index: k for k, index in enumerate(upper)}
    runs = [tree.runs[i]._replace(parent=renumber.get(tree.runs[i].parent, -1)) for i in upper]
    levels = [[renumber[index] for index in level] for level in tree.levels[:depth]]
    paths: list[list[int]] = []
    rests: dict[tuple[int, tuple[int, ...]], int] = {}
    for row, path in enumerate(tree.paths):
        kept = [renumber[index] for index in path[:depth]]
        start = runs[kept[-1]].end if kept else 0
        if start < len(sequences[row]):
            key = (kept[-1] if kept else -1, tuple(sequences[row][start:]))
            if key not in rests:
                rests[key] = len(runs)
                runs.append(Run(row, start, len(sequences[row]), key[0]))
                if len(levels) == len(kept):
                    levels.append([])
                levels[len(kept)].append(rests[key])
            kept.append(rests[key])
        paths.append(kept)
    return Tree(runs, levels, paths)


def tree_cost(tree: Tree, pass_columns: int = PASS_COLUMNS) -> int:
    """What computing `tree` costs in token columns: each level's runs fed in passes of similar
    widths (`width_groups`), a pass as wide as its longest run, plus `pass_columns` a pass."""
    cost = 0
    for level in tree.levels:
        lengths = [tree.runs[index].length for index in level]
        for group in width_groups(lengths, pass_columns):
            cost += pass_columns + len(group) * max(lengths[i] for i in group)
    return cost


def cheapest_tree(
    sequences: list[list[int]], budget: int, pass_columns: int = PASS_COLUMNS
) -> Tree:
    """The sequences' tree cut at the depth that costs least (`cut_tree`, `tree_cost`), among the
    cuts that hold at most `budget` tokens or no more than the whole tree: a level whose runs are
    short (rollouts that part a few tokens after their prompt) costs more passes than the tokens
    it shares save."""
    tree = build_tree(sequences)
    cuts = [cut_tree(tree, sequences, depth) for depth in range(len(tree.levels))] + [tree]
    held = [cut for cut in cuts if cut.tokens() <= max(budget, tree.tokens())]
    return min(held, key=lambda cut: tree_cost(cut, pass_columns))


def _split_by_token(members: list[int], sequences: list[list[int]], at: int) -> list[list[int]]:
    """`members` (sorted) in runs of equal token at position `at`."""
    groups: list[list[int]] = []
    for member in members:
        if groups and sequences[groups[-1][0]][at] == sequences[member][at]:
            groups[-1].append(member)
        else:
            groups.append([member])
    return groups


def tree_chunks(sequences: list[list[int]], budget: int) -> list[list[int]]:
    """The sequences (indices) in chunks whose trees hold at most `budget` tokens each (a sequence
    longer than that alone), neighbours in sorted order kept together so that shared prefixes stay
    in one chunk: sorted, each sequence adds its tokens beyond the prefix it shares with the one
    before it."""
    order = sorted(range(len(sequences)), key=lambda i: sequences[i])
    chunks: list[list[int]] = []
    size = 0
    previous: list[int] = []
    for index in order:
        sequence = sequences[index]
        added = len(sequence) - common_prefix(previous, sequence)
        if chunks and size + added <= budget:
            chunks[-1].append(index)
            size += added
        else:
            chunks.append([index])
            size = len(sequence)
        previous = sequence
    return chunks
