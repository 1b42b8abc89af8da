"""A chunk's sequences as a tree of shared runs (rlvr.engine.prefix_tree), and the trainer computing
that tree (rlvr.engine.trainer.TreeForward): every sequence gets the log-probabilities and
gradients it gets computed alone, with a tiny Llama (random weights) and a real PEFT LoRA adapter."""

from __future__ import annotations

import random
from typing import cast

import pytest
import torch
from art.preprocessing.pack import PackedTensors

from rlvr.config import ConfigError
from rlvr.engine.prefix_tree import (
    Tree,
    build_tree,
    cheapest_tree,
    cut_tree,
    tree_chunks,
    tree_cost,
)
from rlvr.engine.trainer import Trainer, sequences_of, trained_positions
from rlvr.engine.types import (
    SFT_TREE_TOKENS,
    TREE_TOKENS,
    TREE_TOKENS_ENV,
    UPDATE_KL,
    OptimSettings,
    sft_tree_tokens,
    tree_tokens,
)
from tests.helpers.tiny_llama import adapter_store, perturb, tiny_loaded

PAD = -1


def distinct_prefixes(sequences: list[list[int]]) -> int:
    """The tokens of the sequences' trie, counted the slow way."""
    return len({tuple(s[: i + 1]) for s in sequences for i in range(len(s))})


def check_tree(sequences: list[list[int]], tree: Tree | None = None) -> None:
    """`tree` (the sequences' whole tree where None) spells every sequence along its path, one
    run a level; the whole tree holds each shared token once."""
    whole = tree is None
    tree = build_tree(sequences) if tree is None else tree
    for index, run in enumerate(tree.runs):
        assert run.length > 0
        if run.parent == -1:
            assert run.start == 0
        else:
            assert run.parent < index and tree.runs[run.parent].end == run.start
    for row, sequence in enumerate(sequences):
        covered = [
            t
            for i in tree.paths[row]
            for t in sequences[tree.runs[i].row][tree.runs[i].start : tree.runs[i].end]
        ]
        assert covered == sequence  # a path spells its sequence
        levels = [
            next(k for k, level in enumerate(tree.levels) if i in level) for i in tree.paths[row]
        ]
        assert levels == list(range(len(levels)))  # one run a level, root first
    assert sorted(i for level in tree.levels for i in level) == list(range(len(tree.runs)))
    if whole:
        assert tree.tokens() == distinct_prefixes(sequences)


@pytest.mark.parametrize(
    "sequences",
    [
        [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]],  # identical: one run
        [[1, 2, 3], [4, 5], [6]],  # nothing shared: three roots
        [[1, 2, 3], [1, 2, 3, 4, 5], [1, 2]],  # sequences that are prefixes of others
        [[1, 2, 3, 4, 5], [1, 2, 3, 9, 9], [1, 2, 7], [1, 2, 3, 4, 6]],  # branching at three depths
        [[5]],
    ],
    ids=["identical", "disjoint", "prefixes", "branching", "one-token"],
)
def test_a_tree_spells_every_sequence_and_holds_each_shared_token_once(sequences):
    check_tree(sequences)


@pytest.mark.parametrize("seed", range(6))
def test_random_sequences_with_shared_stems_make_a_valid_tree(seed):
    rng = random.Random(seed)
    stems = [[rng.randrange(5) for _ in range(rng.randrange(1, 12))] for _ in range(3)]
    sequences = [
        rng.choice(stems)[: rng.randrange(1, 13)]
        + [rng.randrange(5) for _ in range(rng.randrange(0, 8))]
        for _ in range(rng.randrange(1, 14))
    ]
    check_tree(sequences)


BRANCHING = [[1, 2, 3, 4, 5], [1, 2, 3, 9, 9], [1, 2, 7], [1, 2, 3, 4, 6], [1, 2, 3, 4, 5], [8]]


@pytest.mark.parametrize("depth", range(5))
def test_a_cut_tree_spells_every_sequence_and_computes_the_rest_in_full(depth):
    tree = build_tree(BRANCHING)
    cut = cut_tree(tree, BRANCHING, depth)
    check_tree(BRANCHING, cut)
    assert len(cut.levels) == min(depth + 1, len(tree.levels))
    # the whole tree's first `depth` levels once, then each distinct sequence's rest in full
    upper = sum(tree.runs[i].length for level in tree.levels[:depth] for i in level)
    ends = {
        tuple(sequence): tree.runs[path[min(depth, len(path)) - 1]].end if depth else 0
        for sequence, path in zip(BRANCHING, tree.paths, strict=True)
    }
    assert cut.tokens() == upper + sum(len(s) - end for s, end in ends.items())
    if depth >= len(tree.levels) - 1:
        assert cut.tokens() == tree.tokens()


@pytest.mark.parametrize(
    ("sequences", "depth"),
    [
        # a long shared prompt, completions that part at once: the prompt once, each rest in one pass
        ([[7] * 200 + [i, 5, 6, 7] for i in range(8)], 1),
        # pairs of rollouts that share one token after their 200-token prompt, then run 30 tokens
        # each: the prompt once and each rest in one pass, not a level for the shared tokens
        ([[7] * 200 + [i // 2] + [i] * 30 for i in range(8)], 1),
        # two short sequences sharing 3 tokens: one pass of both in full beats two passes
        ([[1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9, 9]], 0),
        # long turns played alike: every level is worth its pass
        ([[7] * 200 + [1] * 100 + [i] * 50 for i in range(2)] + [[7] * 200 + [2] * 100], 2),
    ],
    ids=["prompt-then-rests", "one-shared-token", "short-pair", "deep-turns"],
)
def test_the_cheapest_cut_pays_a_level_only_where_it_saves_more_than_a_pass(sequences, depth):
    tree = build_tree(sequences)
    chosen = cheapest_tree(sequences, budget=10_000)
    assert chosen == cut_tree(tree, sequences, depth) or (
        depth >= len(tree.levels) - 1 and chosen.tokens() == tree.tokens()
    )
    cuts = [cut_tree(tree, sequences, d) for d in range(len(tree.levels) + 1)]
    assert tree_cost(chosen) == min(tree_cost(cut) for cut in cuts)


def test_the_cheapest_cut_holds_no_more_tokens_than_the_budget_or_the_whole_tree():
    sequences = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9, 9]]
    assert cheapest_tree(sequences, budget=10_000).tokens() == 12  # both in full: one pass
    assert cheapest_tree(sequences, budget=9).tokens() == 9  # over budget: the tree


@pytest.mark.parametrize("budget", [1, 6, 20, 1000])
def test_chunks_cover_every_sequence_once_within_the_budget(budget):
    rng = random.Random(budget)
    sequences = [
        [1, 2, 3] + [rng.randrange(4) for _ in range(rng.randrange(1, 9))] for _ in range(12)
    ]
    chunks = tree_chunks(sequences, budget)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(sequences)))
    for chunk in chunks:
        size = build_tree([sequences[i] for i in chunk]).tokens()
        assert size <= budget or len(chunk) == 1
    if budget >= distinct_prefixes(sequences):
        assert len(chunks) == 1


def rows(
    sequences: list[list[int]], trained_from: list[int], width: int
) -> dict[str, torch.Tensor]:
    """ART's tensors one sequence a row: tokens, padding after them, the tokens from
    `trained_from[i]` on trained (ART's assistant mask), sampled logprobs where trained."""
    tokens, groups, positions, mask, logprobs = [], [], [], [], []
    for i, (sequence, start) in enumerate(zip(sequences, trained_from, strict=True)):
        pad = width - len(sequence)
        tokens.append(sequence + [0] * pad)
        groups.append([i] * len(sequence) + [PAD] * pad)
        positions.append(list(range(len(sequence))) + [0] * pad)
        trained = [int(j >= start) for j in range(len(sequence))] + [0] * pad
        mask.append(trained)
        logprobs.append([-1.0 if t else float("nan") for t in trained])
    return {
        "tokens": torch.tensor(tokens),
        "group_ids": torch.tensor(groups),
        "parent_ids": torch.tensor(groups),
        "input_pos": torch.tensor(positions),
        "assistant_mask": torch.tensor(mask, dtype=torch.bool),
        "logprobs": torch.tensor(logprobs),
    }


STEM = [3, 9, 14, 15, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
# a group's rollouts: one prompt, turns played alike, parting at different depths; one identical
# pair; one rollout that is a prefix of another; a sequence of another group sharing 5 tokens
GROUP = [
    [*STEM, 1, 2, 3, 4, 5, 6],
    [*STEM, 1, 2, 3, 4, 5, 6],
    [*STEM, 1, 2, 3, 9, 9, 9, 9, 9],
    [*STEM, 1, 2, 7],
    [*STEM, 11, 12, 13, 14, 15, 16, 17, 18, 19],
    [*STEM, 1, 2, 3, 4, 5, 6, 7, 8],
    [*STEM[:5], 40, 41, 42, 43, 44, 45],
]


@pytest.fixture
def checkpointed(monkeypatch) -> list[object]:
    """The layer forwards the trainer ran through torch's checkpoint (recomputed in backward)."""
    import rlvr.engine.trainer as trainer_module

    calls: list[object] = []
    layer_forward = trainer_module._checkpointed

    def counted(forward, *args, **kwargs):
        calls.append(forward)
        return layer_forward(forward, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "_checkpointed", counted)
    return calls


@pytest.mark.parametrize(
    ("budget", "depth"),
    [
        (10_000, "whole"),
        (30, "whole"),
        (10, "whole"),
        (10_000, None),
        (10_000, 0),
        (10_000, 1),
        (10_000, 2),
    ],
    ids=["one-tree", "several-trees", "alone", "cheapest", "flat", "cut-1", "cut-2"],
)
@pytest.mark.parametrize("recompute", [True, False], ids=["recomputed", "kept"])
def test_the_tree_gives_every_sequence_its_own_logprobs_and_gradients(
    tmp_path, monkeypatch, checkpointed, budget, depth, recompute
):
    """`depth`: "whole", every level of the tree; None, the trainer's own cut (`cheapest_tree`);
    a number, the tree cut there. `recompute`: each layer's activations recomputed in backward
    (what training does), or kept from the forward."""
    import rlvr.engine.trainer as trainer_module

    def cut(sequences: list[list[int]], budget: int) -> Tree:
        tree = build_tree(sequences)
        return tree if depth == "whole" else cut_tree(tree, sequences, depth)

    if depth is not None:
        monkeypatch.setattr(trainer_module, "cheapest_tree", cut)
    loaded = tiny_loaded()
    perturb(loaded)  # a non-zero adapter: the LoRA path contributes to both
    trainer = Trainer(loaded, adapter_store(loaded, tmp_path), OptimSettings())
    trainer.tree_tokens = budget
    inputs = rows(GROUP, [len(STEM)] * 6 + [5], width=32)
    trained = trained_positions(inputs)
    weights = torch.linspace(0.5, 1.5, trained.shape[1])  # gradients of a non-trivial loss

    def gradients() -> list[torch.Tensor]:
        grads = [p.grad.clone() for p in loaded.model.parameters() if p.grad is not None]
        trainer.optimizer.zero_grad(set_to_none=True)
        return grads

    sequences = sequences_of(inputs)
    tree_logprobs = torch.zeros(trained.shape)
    computed = 0
    for part in tree_chunks(sequences, budget):
        scored = trainer.forward_logprobs(
            {k: v[part] for k, v in inputs.items()}, recompute=recompute
        )
        (scored.logprobs * weights).sum().backward()
        tree_logprobs[part] = scored.logprobs.detach()
        computed += scored.tokens
    tree_grads = gradients()

    alone = torch.zeros(trained.shape)
    for row, sequence in enumerate(sequences):
        logits = loaded.model(input_ids=torch.tensor([sequence])).logits[0]
        logprobs = torch.log_softmax(logits.float(), -1)[:-1].gather(
            -1, torch.tensor(sequence[1:])[:, None]
        )[:, 0]
        kept = torch.nn.functional.pad(logprobs, (0, trained.shape[1] - len(logprobs)))
        kept = torch.where(trained[row], kept, 0.0)
        (kept * weights).sum().backward()
        alone[row] = kept.detach()
    alone_grads = gradients()

    assert int(trained.sum()) > 30
    assert torch.allclose(tree_logprobs, alone, atol=1e-5)
    assert (tree_logprobs[trained] != 0).all() and (tree_logprobs[~trained] == 0).all()
    assert len(tree_grads) == len(alone_grads) > 0
    for a, b in zip(tree_grads, alone_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    if depth == "whole" and budget > 1000:
        assert computed == distinct_prefixes(sequences) < sum(map(len, sequences)) // 2
    if depth is None:
        assert computed == cheapest_tree(sequences, budget).tokens()
    if depth == 0:
        assert computed == sum(map(len, sequences)) - len(STEM) - 6  # the identical pair once
    # Recomputed, every pass of every layer went through the checkpoint. Kept, only passes
    # longer than the budget did (each sequence here is longer than 10 tokens, alone in its chunk).
    layers = len(loaded.model.get_base_model().model.layers)
    assert len(checkpointed) % layers == 0
    if recompute or budget == 10:
        assert checkpointed
    elif budget > 1000:
        assert not checkpointed


def test_rows_whose_positions_are_not_their_indices_are_refused():
    inputs = rows([[1, 2, 3, 4]], [2], width=4)
    inputs["input_pos"][0, 2] = 7
    with pytest.raises(ValueError, match=r"training row 0: positions are not 0\.\.3"):
        sequences_of(inputs)


@pytest.mark.parametrize(("value", "expected"), [(None, TREE_TOKENS), ("512", 512), (" 64 ", 64)])
def test_the_tree_budget_comes_from_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(TREE_TOKENS_ENV, raising=False)
    else:
        monkeypatch.setenv(TREE_TOKENS_ENV, value)
    assert tree_tokens() == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(None, SFT_TREE_TOKENS), ("2048", SFT_TREE_TOKENS), ("256", 256)]
)
def test_a_warm_start_batch_s_trees_are_smaller_unless_the_environment_asks_less(
    monkeypatch, value, expected
):
    if value is None:
        monkeypatch.delenv(TREE_TOKENS_ENV, raising=False)
    else:
        monkeypatch.setenv(TREE_TOKENS_ENV, value)
    assert SFT_TREE_TOKENS < TREE_TOKENS
    assert sft_tree_tokens() == expected


@pytest.mark.parametrize("value", ["0", "-5", "many", "1.5"])
def test_a_bad_tree_budget_is_one_line_naming_it(monkeypatch, value):
    monkeypatch.setenv(TREE_TOKENS_ENV, value)
    with pytest.raises(ConfigError, match=f"^{TREE_TOKENS_ENV}=.*expected a whole number"):
        tree_tokens()


def test_an_update_computes_without_merged_sets_or_cached_prefixes_held(
    tmp_path, monkeypatch
) -> None:
    """The decoder's merged weights and prefix cache go stale at an update's first optimizer
    step; they are dropped before its passes, so their memory is not held beside the
    activations."""
    from rlvr.engine.adapters import AdapterStore

    loaded = tiny_loaded()
    cleared: list[bool] = []
    adapters = AdapterStore(loaded, tmp_path, 0, on_change=lambda: cleared.append(True))
    trainer = Trainer(loaded, adapters, OptimSettings())
    adapters.view(None)  # the live set, as after a step's rollouts
    assert adapters.merged_bytes > 0
    held: list[tuple[int, int]] = []
    forward = Trainer.forward_logprobs

    def watched(self, *args, **kwargs):
        held.append((adapters.merged_bytes, len(cleared)))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "forward_logprobs", watched)
    trainer.sft_batch(rows(GROUP, [len(STEM)] * len(GROUP), width=30), learning_rate=1e-3)
    assert held and all(merged == 0 and clears >= 1 for merged, clears in held)


@pytest.mark.parametrize(
    ("setting", "update_recomputes"), [(None, True), ("1", True), ("0", False)]
)
def test_an_update_recomputes_its_layers_and_a_warm_start_batch_keeps_them(
    tmp_path, monkeypatch, checkpointed, setting, update_recomputes
):
    """RLVR_RECOMPUTE (default 1) recomputes an RL update's layers in backward; a warm-start
    batch's smaller trees keep their activations either way."""
    from art import dev
    from art.types import TrainConfig

    from rlvr.engine.types import RECOMPUTE_ENV

    if setting is None:
        monkeypatch.delenv(RECOMPUTE_ENV, raising=False)
    else:
        monkeypatch.setenv(RECOMPUTE_ENV, setting)
    loaded = tiny_loaded()
    trainer = Trainer(loaded, adapter_store(loaded, tmp_path), OptimSettings())
    inputs = rows(GROUP, [len(STEM)] * len(GROUP), width=30)
    trainer.sft_batch(inputs, learning_rate=1e-3)
    assert checkpointed == []
    advantages = torch.linspace(-1.0, 1.0, len(GROUP))[:, None].expand(-1, 30).contiguous()
    packed = {**inputs, "advantages": advantages, "weights": torch.ones(len(GROUP), 30)}
    metrics = trainer.train(
        cast(PackedTensors, packed), TrainConfig(learning_rate=1e-3), dev.TrainConfig(), step=1
    )
    assert metrics[UPDATE_KL] > 0  # the update moved the policy either way
    assert bool(checkpointed) == update_recomputes
