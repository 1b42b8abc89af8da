"""Training: one GRPO update on ART's tensors with ART's loss, and supervised steps for the warm
start, each sequence's tokens computed as the tree of what the sequences share.

ART tokenises a step's trajectories and normalises their advantages and weights
(`rlvr.engine.backend.pack_groups`: one sequence a row). A group's rollouts share their prompt,
and an agent's rollouts often play their first turns alike and part near the end, so computed row
by row most of a step's tokens would be computed several times. The trainer computes each chunk
of sequences as their tree (rlvr.engine.prefix_tree): level by level, a pass feeds every run of
one level side by side, each continuing from the keys and values of the runs before it on its
path (`TreeForward`); below the depth where a level costs more passes than it saves, each
sequence's rest is one run (`cheapest_tree`). The log-probabilities every sequence gets are
those it would get alone, and ART's `loss_fn` then sees the sequences as ART laid them out.

An update's tree activations, all held until its backward, would be most of a step's memory
(~2-2.6 MB a token in fp32), so there each decoder layer keeps only its input and runs again in
backward (`recomputed_layers`), continuing from a cache that gives the same keys however often it
runs (`PassLayer`). RLVR_RECOMPUTE=0 keeps them instead: an update then skips one forward pass.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import torch
from art import dev
from art.loss import loss_fn, shift_tensor
from art.preprocessing.inputs import TrainInputs
from art.preprocessing.pack import PackedTensors
from art.types import TrainConfig
from torch.optim.optimizer import StateDict

from rlvr.engine.adapters import AdapterStore
from rlvr.engine.batch import CacheLayer
from rlvr.engine.device import release_memory
from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.prefix_tree import Tree, cheapest_tree, tree_chunks
from rlvr.engine.types import (
    ENTROPY,
    GRAD_NORM,
    GRADIENT_STEPS,
    KL_REF,
    LOSS,
    NUM_SEQUENCES,
    NUM_TOKENS,
    PASS_COLUMNS,
    SAMPLER_KL,
    UPDATE_KL,
    UPDATE_KL_STRIDE,
    EngineCounters,
    OptimSettings,
    recompute_wanted,
    sft_tree_tokens,
    tree_tokens,
    width_groups,
)
from rlvr.runs.damage import fault_point


def _trimmed(packed: PackedTensors, device: torch.device) -> dict[str, torch.Tensor]:
    """The packed tensors on `device`, cut after the last column any row uses (ART pads rows to a
    fixed length)."""
    used = (packed["group_ids"] != -1).any(0).nonzero()
    length = int(used.max()) + 1 if len(used) else 1
    return {
        key: value[:, :length].to(device)
        for key, value in packed.items()
        if isinstance(value, torch.Tensor)
    }


def trained_positions(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """[n, S]: the positions whose next token is trained on (ART's assistant mask shifted by one)."""
    return shift_tensor(tensors["assistant_mask"], False)


def sequences_of(tensors: dict[str, torch.Tensor]) -> list[list[int]]:
    """Each row's tokens (one sequence a row, its padding cut). A row whose positions are not its
    token indices (ART's positions of a multimodal prompt) cannot be computed as a tree."""
    lengths = (tensors["group_ids"] != -1).sum(1).tolist()
    positions = tensors["input_pos"]
    for row, length in enumerate(lengths):
        expected = torch.arange(length, device=positions.device)
        if not torch.equal(positions[row, :length], expected):
            raise ValueError(
                f"training row {row}: positions are not 0..{length - 1} (one sequence a row, "
                "text only, is what the trainer computes)"
            )
    return [row[:length] for row, length in zip(tensors["tokens"].tolist(), lengths, strict=True)]


class Scored(NamedTuple):
    """What one forward of a chunk's sequences gives: log p(next token) at their trained
    positions ([n, S], 0 elsewhere; with the graph when a gradient is taken) under the sampling
    temperature, the entropy of that next-token distribution summed over those positions, the
    tokens the tree computed, and the untempered log p (no graph) — what the sampler reports."""

    logprobs: torch.Tensor
    entropy: float
    tokens: int
    raw: torch.Tensor


Objective = Literal["sft", "rl"]
# The objective an optimizer's moments were accumulated on, kept in its param group (saved and
# restored with its state_dict).
OBJECTIVE_KEY = "rlvr_objective"


def k3_kl(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimates of KL(before || after) from the log-probabilities two policies give
    tokens sampled from the first: r - 1 - log r with r = p_after / p_before (never negative)."""
    log_ratio = after - before
    return log_ratio.exp() - 1 - log_ratio


def as_sampled(logprobs: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
    """Logprobs at the `trained` positions ([n, S], position p predicting token p + 1) laid out
    as ART's `logprobs` input (at the token's own position; NaN elsewhere), without the graph."""
    laid = torch.full(logprobs.shape, float("nan"), device=logprobs.device)
    kept = torch.where(trained, logprobs.detach().float(), float("nan"))
    laid[:, 1:] = kept[:, :-1]
    return laid


class PassLayer(CacheLayer):
    """One layer's keys and values in one training pass: those of the rows' paths (fixed), then
    the pass's own. `write` gives the same result however often it runs (a layer recomputed in
    backward runs it again), where transformers' DynamicLayer would append the pass's keys a
    second time."""

    def __init__(self, past: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        self.past = past
        self.keys: torch.Tensor | None = None if past is None else past[0]
        self.values: torch.Tensor | None = None if past is None else past[1]

    def write(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.past is not None:
            keys = torch.cat([self.past[0], keys], dim=-2)
            values = torch.cat([self.past[1], values], dim=-2)
        self.keys, self.values = keys, values
        return keys, values

    def get_seq_length(self) -> int:
        return 0 if self.past is None else self.past[0].shape[-2]


def pass_cache(config: Any, contexts: list[tuple[torch.Tensor, torch.Tensor]] | None) -> Any:
    """A pass's cache: `contexts` (per layer the paths' keys and values) in PassLayers, where the
    model's layers all hold every column; transformers' own layers otherwise (sliding windows)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        return cache if contexts is None else DynamicCache(ddp_cache_data=contexts, config=config)
    pasts = contexts if contexts is not None else [None] * len(cache.layers)
    cache.layers = [PassLayer(past) for past in pasts]
    return cache


def is_plain(cache: Any) -> bool:
    """Whether `cache` is a pass's own (PassLayers), so its layers may be recomputed."""
    return all(isinstance(layer, PassLayer) for layer in cache.layers)


@contextmanager
def recomputed_layers(layers: Any, recompute: bool) -> Iterator[None]:
    """With `recompute`, each decoder layer in `layers` keeps only its inputs for backward and
    runs again there (torch's non-reentrant checkpoint), so a tree's passes hold a layer input a
    token, not every activation. transformers' own checkpointing drops the cache a pass continues
    from, so it is not used."""
    if not recompute:
        yield
        return
    for layer in layers:
        layer.forward = functools.partial(_checkpointed, type(layer).forward.__get__(layer))
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)


class TreeForward:
    """A chunk's sequences computed as their tree (rlvr.engine.prefix_tree.Tree) with `model`'s
    LoRA-adapted body: level by level, each pass feeds runs of one level side by side (runs of
    much different lengths in passes of their own, `width_groups`), right-padded, each
    continuing from its path's keys and values (left-padded) under a mask hiding both pads. The
    logits are computed for the wanted positions only (full-vocabulary logits for every position
    would be most of a step's memory)."""

    def __init__(
        self,
        model: Any,
        sequences: list[list[int]],
        tree: Tree,
        budget: int,
        recompute: bool = False,
    ) -> None:
        self.causal_lm = model.get_base_model()  # the LoRA layers are inside it
        self.sequences, self.tree, self.budget = sequences, tree, budget
        # `recompute`: where a gradient is taken, each layer keeps only its input and recomputes
        # the rest in backward (`recomputed_layers`); a pass of more than `budget` tokens (a
        # sequence longer than a chunk's budget, alone in its chunk) recomputes in any case.
        self.recompute = recompute
        self.device = next(self.causal_lm.parameters()).device
        self.hidden: dict[int, torch.Tensor] = {}  # run -> its tokens' hidden states [L, H]
        # run -> per layer the keys and values [heads, end, dim] of its whole path (runs that
        # others continue only)
        self.context: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def run(self) -> None:
        """Compute every run's hidden states."""
        continued = {run.parent for run in self.tree.runs}
        for level in self.tree.levels:
            lengths = [self.tree.runs[index].length for index in level]
            for group in width_groups(lengths, PASS_COLUMNS):
                self._pass([level[i] for i in group], continued)

    def _pass(self, indices: list[int], continued: set[int]) -> None:
        runs = [self.tree.runs[index] for index in indices]
        width = max(run.length for run in runs)
        past = max(run.start for run in runs)  # runs of one level may start at other positions
        device = self.device
        ids = torch.tensor(
            [self.sequences[r.row][r.start : r.end] + [0] * (width - r.length) for r in runs],
            device=device,
        )
        positions = torch.stack(
            [torch.arange(r.start, r.start + width, device=device) for r in runs]
        )
        mask = torch.zeros(len(runs), past + width, dtype=torch.long, device=device)
        for b, run in enumerate(runs):
            mask[b, past - run.start : past + run.length] = 1
        contexts = self._contexts([run.parent for run in runs], past) if past else None
        cache = pass_cache(self.causal_lm.config, contexts)
        wanted = self.recompute or len(runs) * width > self.budget
        recompute = wanted and torch.is_grad_enabled() and is_plain(cache)
        with recomputed_layers(self.causal_lm.model.layers, recompute):
            out = self.causal_lm.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
        for b, (index, run) in enumerate(zip(indices, runs, strict=True)):
            self.hidden[index] = out.last_hidden_state[b, : run.length]
            if index in continued:
                self.context[index] = [
                    (
                        layer.keys[b, :, past - run.start : past + run.length],
                        layer.values[b, :, past - run.start : past + run.length],
                    )
                    for layer in out.past_key_values.layers
                ]
        if recompute:
            # Each layer's whole keys and values (the paths' and the pass's) stay with the
            # checkpoint until backward unless let go here; a layer recomputed there makes its own.
            for layer in cache.layers:
                layer.keys = layer.values = None

    def _contexts(self, parents: list[int], past: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer the keys and values [B, heads, past, dim] each row continues: its parent's
        path, left-padded to `past` (one parent for all rows is expanded, not copied)."""
        distinct = list(dict.fromkeys(parents))
        layers = []
        for layer in range(len(self.context[distinct[0]])):
            pair = []
            for part in (0, 1):
                states = [self.context[p][layer][part] for p in distinct]
                stacked = torch.stack(
                    [torch.nn.functional.pad(s, (0, 0, past - s.shape[-2], 0)) for s in states]
                )
                if len(distinct) == 1:
                    pair.append(stacked.expand(len(parents), *stacked.shape[1:]))
                else:
                    where = torch.tensor([distinct.index(p) for p in parents], device=self.device)
                    pair.append(stacked.index_select(0, where))
            layers.append((pair[0], pair[1]))
        return layers

    def scored(self, trained: torch.Tensor, temperature: float = 1.0) -> Scored:
        """log p(next token) at the `trained` positions ([n, S] booleans over the sequences'
        rows) with the logits divided by `temperature`, 0 elsewhere. A position several
        sequences share is computed once; the token it predicts may differ (their paths part
        right after it)."""
        rows, columns = trained.nonzero(as_tuple=True)
        pairs = list(zip(rows.tolist(), columns.tolist(), strict=True))
        nodes: dict[tuple[int, int], int] = {}
        node_of_pair = []
        for row, position in pairs:
            node_of_pair.append(nodes.setdefault(self._node(row, position), len(nodes)))
        by_run: dict[int, list[int]] = {}
        for k, (run, _) in enumerate(nodes):
            by_run.setdefault(run, []).append(k)
        listed = list(nodes)
        gathered = torch.cat(
            [
                self.hidden[run][torch.tensor([listed[k][1] for k in ks], device=self.device)]
                for run, ks in by_run.items()
            ]
        )
        order = torch.tensor([k for ks in by_run.values() for k in ks], device=self.device)
        hidden = gathered[torch.argsort(order)]  # node k's hidden state at row k
        logits = self.causal_lm.get_output_embeddings()(hidden).float()
        log_probs = torch.log_softmax(logits if temperature == 1 else logits / temperature, -1)
        pair_nodes = torch.tensor(node_of_pair, device=self.device, dtype=torch.long)
        targets = torch.tensor(
            [self.sequences[row][position + 1] for row, position in pairs],
            device=self.device,
            dtype=torch.long,
        )
        chosen = log_probs[pair_nodes, targets]
        with torch.no_grad():
            entropy = float(-(log_probs.exp() * log_probs).sum(-1)[pair_nodes].sum())
            raw = (
                chosen.detach()
                if temperature == 1
                else torch.log_softmax(logits.detach(), -1)[pair_nodes, targets]
            )
        full = torch.zeros(trained.shape, dtype=chosen.dtype, device=self.device)
        return Scored(
            full.index_put((rows, columns), chosen),
            entropy,
            self.tree.tokens(),
            full.detach().index_put((rows, columns), raw),
        )

    def _node(self, row: int, position: int) -> tuple[int, int]:
        """The run holding sequence `row`'s token at `position`, and its offset there."""
        for index in self.tree.paths[row]:
            run = self.tree.runs[index]
            if run.start <= position < run.end:
                return index, position - run.start
        raise IndexError(f"sequence {row} has no token at position {position}")


def update_kl_rows(sequences: int) -> list[int]:
    """The rows of a step that `train/update_kl` is measured on: every UPDATE_KL_STRIDE-th,
    the first always, since the measure's own forward pass is paid on each (UPDATE_KL_STRIDE)."""
    return list(range(0, sequences, UPDATE_KL_STRIDE))


class Trainer:
    """GRPO and SFT updates of `adapters`' live adapter in `loaded`'s model, with its AdamW;
    each update is saved as a checkpoint of the store (adapter plus optimizer state)."""

    def __init__(
        self,
        loaded: LoadedModel,
        adapters: AdapterStore,
        optim: OptimSettings,
        optimizer_state: StateDict | None = None,
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
        self.tree_tokens = tree_tokens()  # a chunk's tree at most (RLVR_TREE_TOKENS)
        self.sft_tree_tokens = sft_tree_tokens()  # a warm-start batch's (smaller: its peak)

    def counters(self) -> EngineCounters:
        """The training work done so far (running totals; sampling's stay 0 here)."""
        return self._counters

    def _begin(self, objective: Objective) -> None:
        """Start AdamW's moments afresh when the objective changes (the warm start's
        cross-entropy, then GRPO). Carried over, the warm start's first moment kept pushing its
        last batches' direction for tens of RL steps, and its second moment, sized by gradients
        ~100x larger than GRPO's, shrank every RL update to a fraction of the learning rate.
        A checkpoint that does not name its objective (older runs) starts afresh once."""
        groups = self.optimizer.param_groups
        if groups[0].get(OBJECTIVE_KEY) == objective:
            return
        self.optimizer.state.clear()
        for group in groups:
            group[OBJECTIVE_KEY] = objective

    def _count(
        self, trained: float, sequence_tokens: int, tree_tokens: int, started: float
    ) -> None:
        """Add one update (`trained` positions; the sequences' tokens and those their trees
        computed), begun at `started`."""
        done = EngineCounters(
            trained_tokens=int(trained),
            sequence_tokens=sequence_tokens,
            forwarded_tokens=tree_tokens,
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
        temperature: float = 1.0,
    ) -> dict[str, float]:
        """One GRPO update on ART's tensors (`art.preprocessing.pack.PackedTensors`, one sequence
        a row: `rlvr.engine.backend.pack_groups`), saved as checkpoint `step`, which is served from
        then on.

        The rows are split into `num_substeps` chunks; each chunk accumulates gradients of ART's
        `loss_fn` (summed, divided by the chunk's trained tokens) and takes one AdamW step. Within
        a chunk the sequences are computed as trees of at most `tree_tokens` tokens (`TreeForward`).
        `config` is ART's `TrainConfig` (learning rate, kl_penalty_coef), `dev_config` ART's
        `dev.TrainConfig` (loss variant, clipping). `temperature` is the one the rollouts were
        sampled at: the trainer computes the policy they were sampled from, logits / temperature,
        taking each row as sampled from its weights before its update (the sampler reports
        untempered logprobs, which the sampler-trainer gap is measured on). Returns the metrics
        named at the top.
        """
        with self.loaded.lock:
            self._begin("rl")
            self.adapters.make_room()
            started = time.perf_counter()
            tensors = _trimmed(packed, self.loaded.device)
            sequences = sequences_of(tensors)
            trained = trained_positions(tensors)
            before = torch.zeros(trained.shape, dtype=torch.float32, device=trained.device)
            chunks = [
                c.tolist() for c in torch.arange(len(tensors["tokens"])).tensor_split(num_substeps)
            ]
            chunks = [c for c in chunks if c]
            totals: dict[str, float] = dict.fromkeys(
                ("loss", "k3", "sampled", "entropy", "tokens", "kl_ref", "tree"), 0.0
            )
            grad_norms = []
            for chunk in chunks:
                for group in self.optimizer.param_groups:
                    group["lr"] = config.learning_rate
                chunk_tokens = float(trained[chunk].sum())
                for part in tree_chunks([sequences[row] for row in chunk], self.tree_tokens):
                    rows = [chunk[i] for i in part]
                    sums, logprobs = self._train_rows(
                        {key: value[rows] for key, value in tensors.items()},
                        [sequences[row] for row in rows],
                        dev_config,
                        config.kl_penalty_coef,
                        max(chunk_tokens, 1.0),
                        temperature,
                    )
                    before[rows] = logprobs.float()
                    for key, value in sums.items():
                        totals[key] += value
                norm = torch.nn.utils.clip_grad_norm_(
                    self.adapters.trainable_parameters(), self.optim.max_grad_norm
                )
                grad_norms.append(float(norm))
                self.optimizer.step()
                self.adapters.changed()
                self.optimizer.zero_grad(set_to_none=True)
            tokens = max(totals["tokens"], 1.0)
            moved, measured = self._update_kl(
                tensors, sequences, trained, before, temperature, update_kl_rows(len(sequences))
            )
            metrics = {
                LOSS: totals["loss"] / tokens,
                SAMPLER_KL: totals["k3"] / max(totals["sampled"], 1.0),
                UPDATE_KL: moved / max(measured, 1.0),
                ENTROPY: totals["entropy"] / tokens,
                GRAD_NORM: sum(grad_norms) / max(len(grad_norms), 1),
                NUM_TOKENS: totals["tokens"],
                NUM_SEQUENCES: float(len(tensors["tokens"])),
                GRADIENT_STEPS: float(len(chunks)),
            }
            if config.kl_penalty_coef > 0:
                metrics[KL_REF] = totals["kl_ref"] / tokens
            fault_point(f"optimizer:{step}")  # weights updated, checkpoint not written
            self.adapters.save(step, self.optimizer)
            release_memory()
            self._count(totals["tokens"], sum(map(len, sequences)), int(totals["tree"]), started)
            return metrics

    def sft_batch(self, packed: PackedTensors, learning_rate: float) -> dict[str, float]:
        """One supervised update on demonstrations (one sequence a row): cross-entropy on the
        assistant tokens only (ART's assistant mask), one AdamW step. Not saved: `save_step` once
        the whole warm start is done. Returns the mean loss per trained token before the update."""
        with self.loaded.lock:
            self._begin("sft")
            self.adapters.make_room()
            started = time.perf_counter()
            tensors = _trimmed(packed, self.loaded.device)
            sequences = sequences_of(tensors)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
            tokens = max(float(trained_positions(tensors).sum()), 1.0)
            total, computed = 0.0, 0
            for part in tree_chunks(sequences, self.sft_tree_tokens):
                scored = self.forward_logprobs(
                    {key: value[part] for key, value in tensors.items()},
                    [sequences[row] for row in part],
                    budget=self.sft_tree_tokens,
                )
                loss = -scored.logprobs.sum() / tokens  # zero off the trained positions
                torch.autograd.backward(loss)
                total += float(loss.detach()) * tokens
                computed += scored.tokens
            norm = torch.nn.utils.clip_grad_norm_(
                self.adapters.trainable_parameters(), self.optim.max_grad_norm
            )
            self.optimizer.step()
            self.adapters.changed()
            self.optimizer.zero_grad(set_to_none=True)
            release_memory()
            self._count(tokens, sum(map(len, sequences)), computed, started)
            return {LOSS: total / tokens, GRAD_NORM: float(norm), NUM_TOKENS: tokens}

    def forward_logprobs(
        self,
        inputs: dict[str, torch.Tensor],
        sequences: list[list[int]] | None = None,
        tree: Tree | None = None,
        temperature: float = 1.0,
        budget: int | None = None,
        recompute: bool = False,
    ) -> Scored:
        """log p(next token) at the trained positions of `inputs`' rows (ART's tensors, one
        sequence a row), computed as the rows' tree, cut where its levels would cost more passes
        than they save (`cheapest_tree`, `TreeForward`); `sequences` and `tree`: the rows' tokens
        and that tree, where the caller has them already; `budget`: the tree's tokens at most
        (the trainer's `tree_tokens` where None); `recompute`: each layer's activations
        recomputed in backward, not kept."""
        sequences = sequences if sequences is not None else sequences_of(inputs)
        budget = budget if budget is not None else self.tree_tokens
        tree = tree if tree is not None else cheapest_tree(sequences, budget)
        forward = TreeForward(self.loaded.model, sequences, tree, budget, recompute)
        with self.loaded.autocast("train"):
            forward.run()
            return forward.scored(trained_positions(inputs), temperature)

    def _update_kl(
        self,
        tensors: dict[str, torch.Tensor],
        sequences: list[list[int]],
        trained: torch.Tensor,
        before: torch.Tensor,
        temperature: float,
        rows: list[int],
    ) -> tuple[float, float]:
        """The summed k3 estimate of KL(before || after) over the trained tokens of `rows`, and
        how many those are: `before` the log-probabilities the rows were trained against, after
        those of the updated adapter (one more forward without a gradient). It is the step's size
        in what the policy says, which the learning rate alone does not tell (Adam, clipping, how
        many tokens a step has); a sample of the rows estimates it (UPDATE_KL_STRIDE)."""
        total, counted = 0.0, 0.0
        with torch.no_grad():
            for part in tree_chunks([sequences[row] for row in rows], self.tree_tokens):
                chosen = [rows[i] for i in part]
                after = self.forward_logprobs(
                    {key: value[chosen] for key, value in tensors.items()},
                    [sequences[row] for row in chosen],
                    temperature=temperature,
                ).logprobs.float()
                mask = trained[chosen]
                total += float(k3_kl(before[chosen][mask], after[mask]).sum())
                counted += float(mask.sum())
        return total, counted

    def _train_rows(
        self,
        inputs: dict[str, torch.Tensor],
        sequences: list[list[int]],
        dev_config: dev.TrainConfig,
        kl_coef: float,
        chunk_tokens: float,
        temperature: float,
    ) -> tuple[dict[str, float], torch.Tensor]:
        """Forward + backward of some rows (one tree); returns sums for the step's metrics and
        the rows' log-probabilities as computed before the update ([rows, S], no graph)."""
        tree = cheapest_tree(sequences, self.tree_tokens)  # once, for the reference pass too
        # An update's trees are what held a step's memory, so an update recomputes its
        # activations; a warm-start batch's trees are smaller (SFT_TREE_TOKENS) and keep theirs,
        # since recomputing made it slower (docs/concepts/cpu-engine.md, Memory).
        scored = self.forward_logprobs(
            inputs, sequences, tree, temperature, recompute=recompute_wanted()
        )
        ref_logprobs = None
        if kl_coef > 0:  # reference = the base model, adapter disabled (as ART does)
            with torch.no_grad(), self.loaded.model.disable_adapter():
                ref_logprobs = self.forward_logprobs(inputs, sequences, tree, temperature).logprobs
        # Tempered, the sampled logprobs are not the sampling policy's: ART's loss then takes the
        # rows as sampled from the weights they are trained on (ratio 1, as for missing logprobs).
        trained_inputs = (
            inputs
            if temperature == 1
            else {**inputs, "logprobs": as_sampled(scored.logprobs, trained_positions(inputs))}
        )
        loss = loss_fn(
            cast(TrainInputs, trained_inputs),
            scored.logprobs,
            ref_logprobs,
            None,
            dev_config,
            reduction="sum",
        )
        torch.autograd.backward(loss.policy_loss / chunk_tokens)
        with torch.no_grad():
            trained = trained_positions(inputs)
            old = shift_tensor(inputs["logprobs"], float("nan"))
            sampled = trained & ~torch.isnan(old)
            # KL(sampler || trainer) over the sampled tokens.
            n_tokens = float(trained.sum())
            return {
                "loss": float(loss.policy_loss),
                "k3": float(k3_kl(old[sampled], scored.raw[sampled]).sum()),
                "sampled": float(sampled.sum()),
                "entropy": scored.entropy,
                "tokens": n_tokens,
                "kl_ref": float(loss.kl_policy_ref or 0.0) * n_tokens,
                "tree": float(scored.tokens),
            }, scored.logprobs.detach()
