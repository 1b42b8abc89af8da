"""Training rows computed prompt first (rlvr.policy.trainer.SharedPrompt) give the masked row's
log-probabilities and gradients: a tiny Llama with random weights and a real PEFT LoRA adapter,
rows laid out as ART packs them (a prompt once, its rollouts behind it, padding last)."""

from __future__ import annotations

import pytest
import torch

from rlvr.policy.common import OptimSettings
from rlvr.policy.trainer import Segment, Trainer, row_segments, shared_prompts
from tests.test_merged import perturb, store, tiny_loaded

PAD = -1


def packed_row(layout: list[tuple[int, int, int, int]], width: int) -> dict[str, torch.Tensor]:
    """One packed row from (group id, parent id, length, first position) runs, as ART lays it
    out: a prompt's group id is its parent id; a rollout's first token is not trained."""
    generator = torch.Generator().manual_seed(1)
    groups, parents, positions, trained = [], [], [], []
    for group, parent, length, first in layout:
        groups += [group] * length
        parents += [parent] * length
        positions += list(range(first, first + length))
        trained += [0] * length if group == parent else [0] + [1] * (length - 1)
    pad = width - len(groups)
    return {
        "tokens": torch.randint(0, 64, (1, width), generator=generator),
        "group_ids": torch.tensor([groups + [PAD] * pad]),
        "parent_ids": torch.tensor([parents + [PAD] * pad]),
        "input_pos": torch.tensor([positions + [0] * pad]),
        "assistant_mask": torch.tensor([trained + [0] * pad], dtype=torch.bool),
    }


# prompt 7 (12 tokens) with three rollouts of different lengths, then a rollout whose prompt is
# in another row, then padding
ONE_PROMPT = [(7, 7, 12, 0), (1, 7, 9, 12), (2, 7, 5, 12), (3, 7, 11, 12), (4, 8, 6, 20)]
# two groups' prompts in one row, each followed by its rollouts
TWO_PROMPTS = [(7, 7, 10, 0), (1, 7, 8, 10), (2, 7, 6, 10), (9, 9, 6, 0), (5, 9, 7, 6)]
# two prompts with rollouts, a rollout whose prompt is in another row, a prompt with no rollout
MIXED = [(7, 7, 10, 0), (1, 7, 8, 10), (9, 9, 6, 0), (5, 9, 7, 6), (4, 8, 6, 20), (11, 11, 4, 0)]


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (ONE_PROMPT, {(0, 12): [(12, 21), (21, 26), (26, 37)]}),
        (TWO_PROMPTS, {(0, 10): [(10, 18), (18, 24)], (24, 30): [(30, 37)]}),
        ([(1, 8, 6, 20), (2, 9, 4, 0)], {}),  # rollouts whose prompts are elsewhere
    ],
)
def test_rows_are_split_into_prompts_and_the_rollouts_that_continue_them(layout, expected):
    row = packed_row(layout, 40)
    segments = row_segments(row["group_ids"][0], row["parent_ids"][0])
    assert [(s.start, s.end) for s in segments] == [
        (sum(r[2] for r in layout[:i]), sum(r[2] for r in layout[: i + 1]))
        for i in range(len(layout))
    ]
    shared = shared_prompts(segments)
    assert {(p.start, p.end): [(r.start, r.end) for r in rs] for p, rs in shared.items()} == (
        expected
    )


def test_a_segment_knows_a_prompt_by_its_parent():
    assert Segment(0, 4, 7, 7).is_prompt and not Segment(4, 9, 1, 7).is_prompt


@pytest.mark.parametrize(
    "layout", [ONE_PROMPT, TWO_PROMPTS, MIXED], ids=["one-prompt", "two-prompts", "mixed"]
)
def test_prompt_first_gives_the_masked_rows_logprobs_and_gradients(tmp_path, layout):
    loaded = tiny_loaded()
    perturb(loaded)  # a non-zero adapter: the LoRA path contributes to both
    trainer = Trainer(loaded, store(loaded, tmp_path), OptimSettings())
    row = packed_row(layout, 48)
    trained = row["assistant_mask"][0, 1:].nonzero()[:, 0]  # ART's mask shifted by one

    def run(shared: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        trainer.optimizer.zero_grad(set_to_none=True)
        if shared:
            _, logprobs = trainer.forward_logprobs(row)
        else:
            logits = trainer._masked_logits(row, trained, long_row=False)
            targets = row["tokens"][0, 1:][trained]
            logprobs = -torch.nn.functional.cross_entropy(logits, targets, reduction="none")
            logprobs = torch.zeros(row["tokens"].shape).index_put(
                (torch.zeros_like(trained), trained), logprobs
            )
        weights = torch.linspace(0.5, 1.5, logprobs.shape[1])  # gradients of a non-trivial loss
        (logprobs * weights).sum().backward()
        grads = [p.grad.clone() for p in loaded.model.parameters() if p.grad is not None]
        return logprobs.detach(), grads

    shared_logprobs, shared_grads = run(shared=True)
    masked_logprobs, masked_grads = run(shared=False)
    assert trained.numel() > 10
    assert torch.allclose(shared_logprobs, masked_logprobs, atol=1e-5)
    assert len(shared_grads) == len(masked_grads) > 0
    for a, b in zip(shared_grads, masked_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
