"""Training: one GRPO update on ART's packed tensors with ART's loss, and supervised steps for the
warm start; long rows recompute their activations (gradient checkpointing).

ART packs a group's rollouts behind one copy of their shared prompt: a packed row is [prompt |
rollout 1 | rollout 2 | ...], each rollout seeing the prompt and itself (ART's group attention
mask). Computed as one masked sequence, every rollout's tokens would still pay attention over the
whole row. A row that holds a shared prompt is therefore computed in two passes with the same
result: its prompts side by side, then all its rollouts side by side, each continuing from its
prompt's keys and values (`SharedPrompt`), so a prompt's work is done once per row, not once per
rollout, and a row of many short groups still streams the weights twice, not twice a group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, cast

import torch
from art import dev
from art.loss import loss_fn, shift_tensor
from art.preprocessing.inputs import TrainInputs
from art.preprocessing.pack import PackedTensors
from art.types import TrainConfig

from rlvr import faults
from rlvr.policy.adapters import AdapterStore
from rlvr.policy.common import (
    CHECKPOINT_FROM_TOKENS,
    ENTROPY,
    GRAD_NORM,
    GRADIENT_STEPS,
    KL,
    KL_REF,
    LOSS,
    NUM_SEQUENCES,
    NUM_TOKENS,
    SHARED_PROMPT_TOKENS,
    EngineCounters,
    OptimSettings,
)
from rlvr.policy.device import release_memory
from rlvr.policy.loaded import LoadedModel


def group_attention_mask(group_ids: torch.Tensor, parent_ids: torch.Tensor) -> torch.Tensor:
    """[B, 1, S, S] boolean mask for ART's packed rows: a token sees earlier tokens of its own
    sequence and of the prompt it continues (whose group id is its parent id)."""
    length = group_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=group_ids.device).tril()
    same = group_ids[:, :, None] == group_ids[:, None, :]
    prompt = parent_ids[:, :, None] == group_ids[:, None, :]
    return (causal & (same | prompt))[:, None]


class Segment(NamedTuple):
    """One sequence's run of columns in a packed row: a prompt (its group id is its parent id) or
    a rollout continuing the prompt whose group id is its `parent`."""

    start: int
    end: int
    group: int
    parent: int

    @property
    def is_prompt(self) -> bool:
        return self.group == self.parent


def row_segments(group_ids: torch.Tensor, parent_ids: torch.Tensor) -> list[Segment]:
    """The runs of equal group id in one packed row ([S]); padding (group id -1) left out."""
    groups, parents = group_ids.tolist(), parent_ids.tolist()
    starts = [i for i in range(len(groups)) if i == 0 or groups[i] != groups[i - 1]]
    return [
        Segment(start, end, groups[start], parents[start])
        for start, end in zip(starts, [*starts[1:], len(groups)], strict=True)
        if groups[start] != -1
    ]


def shared_prompts(segments: list[Segment]) -> dict[Segment, list[Segment]]:
    """Each prompt in the row with the rollouts that continue it (a prompt always comes before
    them: ART packs a rollout without its prompt only behind that prompt)."""
    prompts = {s.group: s for s in segments if s.is_prompt}
    shared: dict[Segment, list[Segment]] = {prompt: [] for prompt in prompts.values()}
    for segment in segments:
        if not segment.is_prompt and segment.parent in prompts:
            shared[prompts[segment.parent]].append(segment)
    return {prompt: rollouts for prompt, rollouts in shared.items() if rollouts}


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position, computed in fp32 (cross-entropy fuses log-softmax and gather)."""
    flat = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    )
    return -flat.view(targets.shape)


def _trimmed(packed: PackedTensors, device: torch.device) -> dict[str, torch.Tensor]:
    """The packed tensors on `device`, cut after the last column any row uses (ART pads rows to a
    fixed length; attention cost grows with the square of it)."""
    used = (packed["group_ids"] != -1).any(0).nonzero()
    length = int(used.max()) + 1 if len(used) else 1
    return {
        key: value[:, :length].to(device)
        for key, value in packed.items()
        if isinstance(value, torch.Tensor)
    }


def _trained_positions(tensors: dict[str, torch.Tensor], row: int) -> torch.Tensor:
    """Positions whose next token is trained on (ART's assistant mask shifted by one)."""
    from art.loss import shift_tensor

    return shift_tensor(tensors["assistant_mask"][row : row + 1], False)[0]


class Trainer:
    """GRPO and SFT updates of `adapters`' live adapter in `loaded`'s model, with its AdamW;
    each update is saved as a checkpoint of the store (adapter plus optimizer state)."""

    def __init__(
        self,
        loaded: LoadedModel,
        adapters: AdapterStore,
        optim: OptimSettings,
        optimizer_state: dict[str, Any] | None = None,
    ) -> None:
        self.loaded = loaded
        self.adapters = adapters
        self.optim = optim
        self.optimizer = torch.optim.AdamW(
            adapters.trainable_parameters(),
            lr=1e-5,  # set per call from ART's TrainConfig
            betas=(optim.adam_beta1, optim.adam_beta2),
            weight_decay=optim.weight_decay,
        )
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self._counters = EngineCounters()

    def counters(self) -> EngineCounters:
        """The training work done so far (running totals; sampling's stay 0 here)."""
        return self._counters

    def _count(self, tensors: dict[str, torch.Tensor], trained: float, started: float) -> None:
        """Add one update over `tensors` (`trained` positions), begun at `started`."""
        done = EngineCounters(
            trained_tokens=int(trained),
            forwarded_tokens=int((tensors["group_ids"] != -1).sum()),
            training_s=time.perf_counter() - started,
        )
        self._counters = self._counters.plus(done)

    def save_step(self, step: int) -> Path:
        """Save the live adapter (unchanged) as checkpoint `step` and serve it as the latest."""
        with self.loaded.lock:
            return self.adapters.save(step, self.optimizer)

    def train(
        self,
        packed: PackedTensors,
        config: TrainConfig,
        dev_config: dev.TrainConfig,
        *,
        step: int,
        num_substeps: int = 1,
    ) -> dict[str, float]:
        """One GRPO update on ART's packed tensors (`art.preprocessing.pack.PackedTensors`),
        saved as checkpoint `step`, which is served from then on.

        The rows are split into `num_substeps` chunks; each chunk accumulates gradients of ART's
        `loss_fn` (summed, divided by the chunk's trained tokens) and takes one AdamW step.
        `config` is ART's `TrainConfig` (learning rate, kl_penalty_coef), `dev_config` ART's
        `dev.TrainConfig` (loss variant, clipping). Returns the metrics named at the top.
        """
        with self.loaded.lock:
            started = time.perf_counter()
            tensors = _trimmed(packed, self.loaded.device)
            chunks = [
                c.tolist() for c in torch.arange(len(tensors["tokens"])).tensor_split(num_substeps)
            ]
            chunks = [c for c in chunks if c]
            totals: dict[str, float] = dict.fromkeys(
                ("loss", "k3", "sampled", "entropy", "tokens", "kl_ref"), 0.0
            )
            grad_norms = []
            for chunk in chunks:
                for group in self.optimizer.param_groups:
                    group["lr"] = config.learning_rate
                chunk_tokens = sum(_trained_positions(tensors, row).sum().item() for row in chunk)
                for row in chunk:
                    inputs = {key: value[row : row + 1] for key, value in tensors.items()}
                    for key, value in self._train_row(
                        inputs, dev_config, config.kl_penalty_coef, max(chunk_tokens, 1)
                    ).items():
                        totals[key] += value
                norm = torch.nn.utils.clip_grad_norm_(
                    self.adapters.trainable_parameters(), self.optim.max_grad_norm
                )
                grad_norms.append(float(norm))
                self.optimizer.step()
                self.adapters.changed()
                self.optimizer.zero_grad(set_to_none=True)
            tokens = max(totals["tokens"], 1.0)
            metrics = {
                LOSS: totals["loss"] / tokens,
                KL: totals["k3"] / max(totals["sampled"], 1.0),
                ENTROPY: totals["entropy"] / tokens,
                GRAD_NORM: sum(grad_norms) / max(len(grad_norms), 1),
                NUM_TOKENS: totals["tokens"],
                NUM_SEQUENCES: float(len(tensors["tokens"])),
                GRADIENT_STEPS: float(len(chunks)),
            }
            if config.kl_penalty_coef > 0:
                metrics[KL_REF] = totals["kl_ref"] / tokens
            faults.maybe_crash(faults.FaultPoint.OPTIMIZER, step)
            self.adapters.save(step, self.optimizer)
            release_memory()
            self._count(tensors, totals["tokens"], started)
            return metrics

    def sft_batch(self, packed: PackedTensors, learning_rate: float) -> dict[str, float]:
        """One supervised update on packed demonstrations: cross-entropy on the assistant
        tokens only (ART's assistant mask), one AdamW step. Not saved: `save_step` once the
        whole warm start is done. Returns the mean loss per trained token before the update."""
        with self.loaded.lock:
            started = time.perf_counter()
            tensors = _trimmed(packed, self.loaded.device)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
            tokens = float(shift_tensor(tensors["assistant_mask"], False).sum())
            total = 0.0
            for row in range(len(tensors["tokens"])):
                inputs = {key: value[row : row + 1] for key, value in tensors.items()}
                _, logprobs = self.forward_logprobs(inputs)
                loss = -logprobs.sum() / max(tokens, 1.0)  # zero off the trained positions
                torch.autograd.backward(loss)
                total += float(loss.detach()) * max(tokens, 1.0)
            norm = torch.nn.utils.clip_grad_norm_(
                self.adapters.trainable_parameters(), self.optim.max_grad_norm
            )
            self.optimizer.step()
            self.adapters.changed()
            self.optimizer.zero_grad(set_to_none=True)
            release_memory()
            self._count(tensors, tokens, started)
            return {LOSS: total / max(tokens, 1.0), GRAD_NORM: float(norm), NUM_TOKENS: tokens}

    def forward_logprobs(
        self, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log p(next token) for one packed row under ART's group attention mask, as ART's loss
        wants it ([1, S]), and the logits of the trained positions ([K, V]). Only those K
        positions go through the LM head: full-vocabulary logits for every packed position
        were most of a step's memory (S x 49k floats, twice more in backward)."""
        positions = _trained_positions(inputs, 0).nonzero()[:, 0]
        segments = row_segments(inputs["group_ids"][0], inputs["parent_ids"][0])
        shared = shared_prompts(segments)
        length = inputs["tokens"].shape[1]
        with self.loaded.autocast("train"):
            if shared and length <= SHARED_PROMPT_TOKENS:
                logits = SharedPrompt(self.loaded.model, inputs, segments, shared).logits(positions)
            else:
                logits = self._masked_logits(inputs, positions, length >= CHECKPOINT_FROM_TOKENS)
        targets = shift_tensor(inputs["tokens"], 0)[0, positions]
        kept = token_logprobs(logits, targets)
        full = torch.zeros(inputs["tokens"].shape, dtype=kept.dtype, device=kept.device)
        return logits, full.index_put((torch.zeros_like(positions), positions), kept)

    def _masked_logits(
        self, inputs: dict[str, torch.Tensor], positions: torch.Tensor, long_row: bool
    ) -> torch.Tensor:
        """The row as one sequence under ART's group attention mask; a long row recomputes its
        activations in backward."""
        with self._recomputing(long_row and torch.is_grad_enabled()):
            logits: torch.Tensor = self.loaded.model(
                input_ids=inputs["tokens"],
                attention_mask=group_attention_mask(inputs["group_ids"], inputs["parent_ids"]),
                position_ids=inputs["input_pos"],
                logits_to_keep=positions,
                use_cache=False,  # training: no cache to fill (and none under checkpointing)
            ).logits[0]
        return logits

    @contextmanager
    def _recomputing(self, on: bool) -> Iterator[None]:
        """Gradient checkpointing for this forward (HF layers checkpoint only in train mode)."""
        if not on:
            yield
            return
        self.loaded.model.train()
        try:
            yield
        finally:
            self.loaded.model.eval()

    def _train_row(
        self,
        inputs: dict[str, torch.Tensor],
        dev_config: dev.TrainConfig,
        kl_coef: float,
        chunk_tokens: float,
    ) -> dict[str, float]:
        """Forward + backward of one packed row; returns sums for the step's metrics."""
        logits, new_logprobs = self.forward_logprobs(inputs)
        ref_logprobs = None
        if kl_coef > 0:  # reference = the base model, adapter disabled (as ART does)
            with torch.no_grad(), self.loaded.model.disable_adapter():
                ref_logprobs = self.forward_logprobs(inputs)[1]
        loss = loss_fn(
            cast(TrainInputs, inputs), new_logprobs, ref_logprobs, None, dev_config, reduction="sum"
        )
        torch.autograd.backward(loss.policy_loss / chunk_tokens)
        with torch.no_grad():
            trained = _trained_positions(inputs, 0)[None]
            old = shift_tensor(inputs["logprobs"], float("nan"))
            sampled = trained & ~torch.isnan(old)
            # k3 estimate of KL(sampler || trainer) over the sampled tokens.
            delta = (new_logprobs.detach() - old)[sampled]
            log_probs = torch.log_softmax(logits.detach().float(), -1)  # trained positions
            n_tokens = float(trained.sum())
            return {
                "loss": float(loss.policy_loss),
                "k3": float((delta.exp() - 1 - delta).sum()),
                "sampled": float(sampled.sum()),
                "entropy": float(-(log_probs.exp() * log_probs).sum()),
                "tokens": n_tokens,
                "kl_ref": float(loss.kl_policy_ref or 0.0) * n_tokens,
            }


class SharedPrompt:
    """One packed row computed prompt first, in two forwards whatever the number of groups in it:
    the row's prompts side by side (their keys and values kept), then all its rollouts side by side,
    each continuing from its own prompt's keys and values (a rollout whose prompt is in another row
    continues from none). Each pass streams the weights once, so a row of many short groups costs
    two passes, not two a group. The logits are those of the masked row (module docstring): each
    rollout sees exactly its prompt and itself, at ART's positions."""

    def __init__(
        self,
        model: Any,
        inputs: dict[str, torch.Tensor],
        segments: list[Segment],
        shared: dict[Segment, list[Segment]],
    ) -> None:
        self.causal_lm = model.get_base_model()  # the LoRA layers are inside it
        self.tokens, self.positions = inputs["tokens"][0], inputs["input_pos"][0]
        self.prompts = list(shared)
        by_group = {prompt.group: index for index, prompt in enumerate(self.prompts)}
        self.rollouts = [s for s in segments if not s.is_prompt or s.group not in by_group]
        # each rollout's prompt (its row in the prompt pass), None: its prompt is in another row
        self.parents = [by_group.get(s.parent) for s in self.rollouts]

    def logits(self, trained: torch.Tensor) -> torch.Tensor:
        """[K, V] logits of the row's `trained` positions (sorted column indices)."""
        device = self.tokens.device
        prompt_hidden, cache = self._forward(self.prompts, None, keep_cache=True)
        rollout_hidden, _ = self._forward(self.rollouts, cache, keep_cache=False)
        passes = [(self.prompts, prompt_hidden), (self.rollouts, rollout_hidden)]
        columns = [
            torch.arange(s.start, s.end, device=device) for segments, _ in passes for s in segments
        ]
        hidden = [
            states[row, : s.end - s.start]
            for segments, states in passes
            for row, s in enumerate(segments)
        ]
        where = torch.full((len(self.tokens),), -1, dtype=torch.long, device=device)
        where[torch.cat(columns)] = torch.arange(sum(len(c) for c in columns), device=device)
        logits: torch.Tensor = self.causal_lm.get_output_embeddings()(
            torch.cat(hidden)[where[trained]]
        )
        return logits

    def _forward(
        self, segments: list[Segment], prompt_cache: Any, keep_cache: bool
    ) -> tuple[torch.Tensor, Any]:
        """Hidden states [B, L, H] of `segments` side by side (right-padded) and the cache they
        fill when `keep_cache`; with `prompt_cache` (the prompt pass's), row i continues from the
        keys and values of prompt `self.parents[i]`, its padding columns masked."""
        from transformers import DynamicCache

        width = max(s.end - s.start for s in segments)
        past = prompt_cache.get_seq_length() if prompt_cache is not None else 0
        device = self.tokens.device

        def padded(values: torch.Tensor, s: Segment) -> torch.Tensor:
            piece = values[s.start : s.end]
            return torch.nn.functional.pad(piece, (0, width - len(piece)))

        mask = torch.zeros(len(segments), past + width, dtype=torch.long, device=device)
        for row, s in enumerate(segments):
            mask[row, past : past + s.end - s.start] = 1
        cache = DynamicCache(config=self.causal_lm.config) if keep_cache else None
        if prompt_cache is not None:
            for row, parent in enumerate(self.parents):
                if parent is not None:
                    prompt = self.prompts[parent]
                    mask[row, : prompt.end - prompt.start] = 1
            cache = DynamicCache(
                ddp_cache_data=[
                    (self._continued(layer.keys), self._continued(layer.values))
                    for layer in prompt_cache.layers
                ],
                config=self.causal_lm.config,
            )
        out = self.causal_lm.model(
            input_ids=torch.stack([padded(self.tokens, s) for s in segments]),
            attention_mask=mask,
            position_ids=torch.stack([padded(self.positions, s) for s in segments]),
            past_key_values=cache,
            use_cache=cache is not None,
        )
        return out.last_hidden_state, out.past_key_values

    def _continued(self, states: torch.Tensor) -> torch.Tensor:
        """The prompt pass's keys or values [P, ...] as the rollout pass's rows see them: one
        prompt is expanded (no copy); several are gathered by each rollout's parent (a rollout
        without one gets prompt 0's, all masked)."""
        if len(self.prompts) == 1:
            return states.expand(len(self.rollouts), *states.shape[1:])
        parents = [0 if parent is None else parent for parent in self.parents]
        return states.index_select(0, torch.tensor(parents, device=states.device))
