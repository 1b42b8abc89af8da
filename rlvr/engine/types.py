"""What the policy engine and its parts share: names of checkpoint files and metrics, the
settings models, the rows a caller samples and what comes back."""

from __future__ import annotations

import logging
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rlvr.config import ConfigError

logger = logging.getLogger(__name__)

FinishReason = Literal["stop", "length"]
# mixed: bf16 training and prompt prefill, fp32 decoding (what CPUs with bf16 units choose;
# rlvr.engine.device)
Precision = Literal["fp32", "bf16", "mixed"]
# The engine chooses a precision per phase: a prompt's tokens fed at once (prefill), decoding a
# token a row (sample), the training step (train).
Phase = Literal["prefill", "sample", "train"]
LIVE_ADAPTER = "default"  # PEFT's name for the adapter being trained
PRECISION_ENV = "RLVR_PRECISION"  # "fp32", "bf16" or "mixed" to override the automatic choice
THREADS_ENV = "RLVR_TORCH_THREADS"  # torch CPU threads; 1 is fastest on a busy 2-core machine
# A training pass computes the tree of at most this many tokens of its sequences
# (rlvr.engine.prefix_tree.tree_chunks; a longer sequence alone). An RL update recomputes each
# layer's activations in backward (RLVR_RECOMPUTE), so its tree holds about a layer input a
# token, and this mostly sets how much of a group's prompt is shared: a smaller tree forwards
# several times the tokens, a larger one saves few and holds more memory
# (docs/concepts/cpu-engine.md, Memory).
TREE_TOKENS = 1024
# A warm-start batch's trees hold at most this many: demonstrations share only their system prompt,
# so smaller trees cost no time there and cap the warm start's peak memory; its activations are
# kept (rlvr.engine.trainer).
SFT_TREE_TOKENS = 512
TREE_TOKENS_ENV = "RLVR_TREE_TOKENS"  # a smaller budget for a machine with less memory


def whole_number(name: str, default: int, least: int = 1) -> int:
    """The environment variable `name` as a whole number of at least `least` (`default` where
    it is unset or empty); ConfigError naming it otherwise."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < least:
        raise ConfigError(f"{name}={value!r}: expected a whole number >= {least} (or unset)")
    return int(value)


def tree_tokens() -> int:
    """RLVR_TREE_TOKENS, or TREE_TOKENS where it is unset."""
    return whole_number(TREE_TOKENS_ENV, TREE_TOKENS)


RECOMPUTE_ENV = "RLVR_RECOMPUTE"  # 0 keeps an RL update's activations: faster, more memory


def recompute_wanted() -> bool:
    """RLVR_RECOMPUTE: unset or 1 has an RL update recompute each layer's activations in
    backward, 0 keeps them."""
    value = os.environ.get(RECOMPUTE_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"{RECOMPUTE_ENV}={value!r}: expected 0 or 1 (or unset)")
    return value != "0"


def sft_tree_tokens() -> int:
    """A warm-start batch's tree budget: SFT_TREE_TOKENS, or RLVR_TREE_TOKENS where smaller."""
    return min(tree_tokens(), SFT_TREE_TOKENS)


# A prompt batch is prefilled in column slices of about this many tokens (rows x columns): the
# attention weights of one forward are rows x heads x slice x context, so prefilling a batch of
# long distinct prompts at once would set a step's peak memory.
PREFILL_TOKENS = 4096
# The fixed cost of one forward pass, in the token columns a pass computes for one row: a pass of a
# few tokens still streams every weight and walks every layer, while a row padded to a longer row's
# width computes every padded column (docs/concepts/cpu-engine.md).
PASS_COLUMNS = 64
OPTIMIZER_FILE = "optimizer.pt"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

# Keys of the metrics `train` returns (named once; the backend adds ART's data/* summary keys).
LOSS = "loss"
# KL(sampler || trainer) on the sampled tokens before the update: how far the logprobs the
# rollouts were sampled with are from those the trainer computes for the same weights.
SAMPLER_KL = "sampler_kl"
# KL(before || after) on the step's trained tokens: how far the update moved the policy.
UPDATE_KL = "update_kl"
# train/update_kl is measured on every UPDATE_KL_STRIDE-th sequence of a step (the first always):
# its forward pass after the update was a large share of an update's time (`rlvr bench train`),
# and what reads it (rlvr.training.hints) reads its order of magnitude.
UPDATE_KL_STRIDE = 4
KL_REF = "kl_ref"
ENTROPY = "entropy"
GRAD_NORM = "grad_norm"
NUM_TOKENS = "num_tokens"
NUM_SEQUENCES = "num_sequences"
GRADIENT_STEPS = "num_gradient_steps"


def width_groups(lengths: list[int], pass_columns: int = PASS_COLUMNS) -> list[list[int]]:
    """The rows (indices into `lengths`, each row's new-token count) fed together, pass by pass:
    a pass is as wide as its longest row, so rows of very different lengths go in passes of
    their own when the padding they would share costs more than another pass. The partition of
    the rows, longest first, into consecutive runs that minimises passes x `pass_columns` +
    padded cells (exact: dynamic programming over the sorted lengths)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = [0] * (len(order) + 1)  # best[k]: cost of the first k rows in order
    cut = [0] * (len(order) + 1)  # where the last run of that best partition starts
    for k in range(1, len(order) + 1):
        best[k], cut[k] = min(
            (best[j] + pass_columns + (k - j) * lengths[order[j]], j) for j in range(k)
        )
    groups, k = [], len(order)
    while k > 0:
        groups.append(order[cut[k] : k])
        k = cut[k]
    return groups[::-1]


class UnknownStep(LookupError):
    """A step with no checkpoint to serve."""


class LoraSettings(BaseModel):
    """The adapter of a fresh model; ART's defaults (rank 8, alpha 16, all linear layers)."""

    model_config = ConfigDict(frozen=True)

    r: int = 8
    lora_alpha: int = 16
    target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    # A fresh adapter's A matrices are random (B starts at 0): drawn from this seed, so two runs
    # of one config start from the same adapter and can replay each other.
    seed: int = 0


class OptimSettings(BaseModel):
    """AdamW and clipping; ART's defaults for its Unsloth trainer."""

    model_config = ConfigDict(frozen=True)

    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    weight_decay: float = 0.1
    max_grad_norm: float = 0.1


class SampleRow(BaseModel):
    """One sequence to sample. `forced_ids` start the completion without being sampled (a named
    tool choice); they are returned with the completion and their model log-probabilities."""

    model_config = ConfigDict(frozen=True)

    prompt_ids: list[int]
    forced_ids: list[int] = []
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    # An llguidance grammar (rlvr.engine.grammar.grammar_for) the completion must follow.
    grammar: str | None = None


class Sampled(BaseModel):
    """One sampled completion: token ids (end-of-turn token included), their log-probabilities,
    the top alternatives per position when asked, the text (stop string and special tokens cut)."""

    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: FinishReason


class EngineCounters(BaseModel):
    """Running totals of one engine's work, for a step's metrics and `rlvr bench step`: take two
    snapshots and `minus` them. Prompt tokens sent = served from the prefix cache + prefilled for
    their own row; `prefilled_tokens` also counts a prefix shared by several rows once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_tokens: int = 0  # prompt tokens of the rows sent to sampling
    cached_prompt_tokens: int = 0  # of those, served from the prefix cache (not prefilled)
    prefilled_tokens: int = 0  # prompt tokens fed through the model
    decoded_tokens: int = 0  # completion tokens (sampled, or forced by a tool choice or grammar)
    drafted_tokens: int = (
        0  # greedy rows' drafted tokens fed (rlvr.engine.token_sampling.lookup_draft)
    )
    kept_draft_tokens: int = 0  # of those, kept (what greedy decoding chose)
    decode_steps: int = 0  # forwards of a live batch, a token (or a draft) a row
    sampling_passes: int = 0  # batched admissions of new rows (how well requests were batched)
    cancelled_rows: int = 0  # rows dropped unfinished or unadmitted (their client had gone)
    sampling_s: float = 0.0  # seconds the decoder held the model
    prefill_s: float = 0.0  # of those, seconds feeding prompts (the rest: decode steps)
    trained_tokens: int = 0  # positions trained on (the loss's tokens)
    sequence_tokens: int = 0  # tokens of the trained sequences, each counted in full
    forwarded_tokens: int = 0  # of those, tokens computed (and back-propagated): their trees
    training_s: float = 0.0  # seconds the trainer held the model

    def plus(self, other: EngineCounters) -> EngineCounters:
        mine, theirs = self.model_dump(), other.model_dump()
        return EngineCounters(**{name: mine[name] + theirs[name] for name in mine})

    def minus(self, earlier: EngineCounters) -> EngineCounters:
        """What was counted since `earlier` (a snapshot of the same engine)."""
        mine, before = self.model_dump(), earlier.model_dump()
        return EngineCounters(**{name: mine[name] - before[name] for name in mine})
