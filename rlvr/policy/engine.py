"""The policy engine: one causal LM with a LoRA adapter, on one device.

It does two things, never at the same time (one lock):
- `sample`: batched decoding with a KV cache for many rows at once (left padding, per-row
  temperature / top_p / max_tokens / stop strings / seed), returning the sampled token ids and their
  log-probabilities under the model (temperature 1, like vLLM's default), so ART can train on
  exactly what was sampled;
- `train`: one GRPO update on ART's packed tensors with ART's own `loss_fn`.

Callers run both off the event loop (`asyncio.to_thread`). Checkpoints are PEFT adapter directories
(plus `optimizer.pt`); the engine can serve an older step by loading its adapter next to the live one.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Literal

import torch
from art.utils.get_model_step import get_step_from_dir
from art.utils.output_dirs import get_step_checkpoint_dir
from pydantic import BaseModel, ConfigDict

from rlvr import atomic, faults
from rlvr.policy.prefix import MIN_REUSE, Prefix, PrefixCache, worth_reusing

logger = logging.getLogger(__name__)

FinishReason = Literal["stop", "length"]
Precision = Literal["fp32", "bf16"]
LIVE_ADAPTER = "default"  # PEFT's name for the adapter being trained
PRECISION_ENV = "RLVR_PRECISION"  # "fp32" or "bf16" to override the automatic choice
THREADS_ENV = "RLVR_TORCH_THREADS"  # torch CPU threads; 1 is fastest on a busy 2-core machine
OLD_ADAPTERS_KEPT = 2
# Packed rows at least this long recompute each layer in backward instead of keeping its
# activations: under the group attention mask every layer keeps heads x S x S attention weights,
# which made a 1,088-token email row peak near 5 GB; recomputing costs one more forward.
CHECKPOINT_FROM_TOKENS = 384
# A prompt batch is prefilled in column slices of about this many tokens (rows x columns): the
# attention weights of one forward are rows x heads x slice x context, so prefilling 16 distinct
# ~900-token email prompts at once peaked 1 GB above the rest of a step.
PREFILL_TOKENS = 4096
OPTIMIZER_FILE = "optimizer.pt"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

# Keys of the metrics `train` returns (named once; the backend adds ART's data/* summary keys).
LOSS = "loss"
KL = "kl"
KL_REF = "kl_ref"
ENTROPY = "entropy"
GRAD_NORM = "grad_norm"
NUM_TOKENS = "num_tokens"
NUM_SEQUENCES = "num_sequences"
GRADIENT_STEPS = "num_gradient_steps"


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


class Sampled(BaseModel):
    """One sampled completion: token ids (end-of-turn token included), their log-probabilities,
    the top alternatives per position when asked, the text (stop string and special tokens cut)."""

    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: FinishReason


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return None


_LIBC = _libc()
M_ARENA_MAX = -8
if _LIBC is not None:
    # Generation, training and the HTTP server run on different threads; glibc gives each its own
    # heap arena and keeps what they freed, so resident memory only ever grows. Two arenas.
    _LIBC.mallopt(M_ARENA_MAX, 2)


def release_memory() -> None:
    """Hand memory freed by the last update back to the OS (glibc keeps it otherwise)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def choose_device(device: str | None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def choose_autocast(device: torch.device, precision: Precision | None = None) -> torch.dtype | None:
    """bf16 autocast or fp32 (None): `precision` if given, else RLVR_PRECISION, else by hardware.

    Measured here (AVX2 CPU, no bf16 units): a LoRA step under bf16 autocast was 8x slower than
    fp32, so plain CPUs use fp32. On CPUs with AVX512-BF16/AMX bf16 autocast was faster (design.md
    §3); its sampler/trainer log-prob gap is measured in tests/test_precision.py.
    """
    forced = precision or os.environ.get(PRECISION_ENV, "").lower()
    if forced in ("fp32", "bf16"):
        return torch.bfloat16 if forced == "bf16" else None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    return torch.bfloat16 if device.type == "cpu" and _cpu_has_native_bf16() else None


def run_head_in_fp32(model: torch.nn.Module) -> None:
    """Make the LM head compute fp32 logits even under bf16 autocast, for the sampler and the
    trainer alike. bf16 logits keep ~3 significant digits (a step of 0.125 near a logit of 20),
    and two forwards of different shapes round differently: measured here, sampler and trainer
    log-probs of the same tokens differed by up to 0.17 (mean 0.03), an off-policy error in the
    PPO ratio; with the head in fp32 the bf16 body alone leaves the gap in the README."""
    head = model.get_output_embeddings()
    forward = head.forward

    def fp32_forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            return forward(hidden.float())

    head.forward = fp32_forward


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

    def __init__(self, row: SampleRow, generator: torch.Generator) -> None:
        self.row = row
        self.generator = generator
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[list[tuple[int, float]]] = []
        self.text: str | None = None  # set when a stop string cut it
        self.forced_chars = 0
        self.finish: FinishReason | None = None


class Engine:
    """A causal LM plus its live LoRA adapter, optimizer, and a few older adapters for serving."""

    def __init__(
        self,
        model_dir: Path,
        output_dir: Path,
        *,
        device: str | None = None,
        lora: LoraSettings | None = None,
        optim: OptimSettings | None = None,
        precision: Precision | None = None,
    ) -> None:
        """Load `model_dir` and resume from the latest checkpoint under `output_dir` (ART's model
        directory), or start a fresh adapter and save it as step 0. `precision`: see
        `choose_autocast` (None: automatic)."""
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if threads := os.environ.get(THREADS_ENV):
            torch.set_num_threads(int(threads))
        self.output_dir = output_dir
        self.live_step = get_step_from_dir(str(output_dir))
        adapter_dir: Path | None = self.checkpoint_dir(self.live_step)
        if not adapter_dir.exists():
            adapter_dir = None
        elif not (adapter_dir / ADAPTER_WEIGHTS).is_file():
            raise FileNotFoundError(
                f"checkpoint {adapter_dir} has no {ADAPTER_WEIGHTS} to resume from"
            )
        self.device = choose_device(device)
        self.autocast = choose_autocast(self.device, precision)
        self.optim = optim or OptimSettings()
        self.lock = threading.Lock()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        base.to(self.device).eval()
        if self.autocast is not None:
            run_head_in_fp32(base)
        if adapter_dir is not None:
            self.model = PeftModel.from_pretrained(
                base, adapter_dir, adapter_name=LIVE_ADAPTER, is_trainable=True
            )
        else:
            settings = lora or LoraSettings()
            config = LoraConfig(
                r=settings.r,
                lora_alpha=settings.lora_alpha,
                target_modules=list(settings.target_modules),
                lora_dropout=0.0,
                task_type="CAUSAL_LM",
            )
            self.model = get_peft_model(base, config, adapter_name=LIVE_ADAPTER)
        self.model.eval()  # no dropout anywhere; gradients still flow in train()
        # Active only in train mode, which `_recomputing` switches on for long rows (dropout is 0).
        self.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(),
            lr=1e-5,  # set per call from ART's TrainConfig
            betas=(self.optim.adam_beta1, self.optim.adam_beta2),
            weight_decay=self.optim.weight_decay,
        )
        if adapter_dir is not None and (adapter_dir / OPTIMIZER_FILE).is_file():
            # weights_only: a checkpoint from elsewhere must not run code when it is read.
            state = torch.load(
                adapter_dir / OPTIMIZER_FILE, map_location=self.device, weights_only=True
            )
            self.optimizer.load_state_dict(state)
        self.stop_ids = self._stop_ids()
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 4096))
        self._old_adapters: OrderedDict[Path, str] = OrderedDict()
        self._token_bytes: dict[int, bytes] = {}
        self.passes = 0  # batched sampling passes run (how well requests were batched)
        self.prefixes = PrefixCache()
        self._weights_version = 0
        if adapter_dir is None:
            self._save(self.live_step)

    # ----------------------------------------------------------------------------- adapters

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for n, p in self.model.named_parameters() if f".{LIVE_ADAPTER}." in n]

    def checkpoint_dir(self, step: int) -> Path:
        return Path(get_step_checkpoint_dir(str(self.output_dir), step))

    def has_step(self, step: int) -> bool:
        return step == self.live_step or (self.checkpoint_dir(step) / ADAPTER_WEIGHTS).is_file()

    def save_step(self, step: int) -> Path:
        """Save the live adapter (unchanged) as checkpoint `step` and serve it as the latest."""
        with self.lock:
            return self._save(step)

    def _save(self, step: int) -> Path:
        """Write adapter + optimizer into a temporary dir, fsync it and rename it to the step's
        checkpoint: a kill never leaves a half checkpoint that a restart would resume from."""
        target = self.checkpoint_dir(step)
        with atomic.writing_dir(target) as staging:
            self.model.save_pretrained(staging, selected_adapters=[LIVE_ADAPTER])
            faults.maybe_crash(faults.FaultPoint.CHECKPOINT, step)
            torch.save(self.optimizer.state_dict(), staging / OPTIMIZER_FILE)
        self.live_step = step
        return target

    @contextmanager
    def _adapter(self, step: int | None):
        """Serve from the live adapter (None or the live step) or from step's checkpoint."""
        if step is None or step == self.live_step:
            yield
            return
        adapter_dir = self.checkpoint_dir(step)
        name = self._old_adapters.get(adapter_dir)
        if name is None:
            if not (adapter_dir / ADAPTER_WEIGHTS).is_file():
                raise UnknownStep(f"step {step} has no checkpoint (latest is {self.live_step})")
            name = f"step{step}"
            self.model.load_adapter(adapter_dir, adapter_name=name, is_trainable=False)
            self._old_adapters[adapter_dir] = name
            while len(self._old_adapters) > OLD_ADAPTERS_KEPT:
                _, evicted = self._old_adapters.popitem(last=False)
                self.model.delete_adapter(evicted)
        self._old_adapters.move_to_end(adapter_dir)
        self.model.set_adapter(name, inference_mode=True)
        try:
            yield
        finally:
            self.model.set_adapter(LIVE_ADAPTER)

    def forget_adapters(self) -> None:
        """Drop cached older adapters (their checkpoint files may be gone)."""
        with self.lock:
            for name in self._old_adapters.values():
                self.model.delete_adapter(name)
            self._old_adapters.clear()
            self._weights_changed()

    # ----------------------------------------------------------------------------- sampling

    def _stop_ids(self) -> frozenset[int]:
        configured = self.model.generation_config.eos_token_id
        ids = configured if isinstance(configured, list) else [configured]
        return frozenset(i for i in [*ids, self.tokenizer.eos_token_id] if i is not None)

    def autocast_context(self):
        if self.autocast is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast)

    def token_bytes(self, token_id: int) -> bytes:
        """The token's text as UTF-8 (a partial character becomes U+FFFD, as vLLM reports it)."""
        cached = self._token_bytes.get(token_id)
        if cached is None:
            cached = self._token_bytes[token_id] = self.tokenizer.decode([token_id]).encode("utf-8")
        return cached

    def sample(self, rows: list[SampleRow], step: int | None = None) -> list[Sampled]:
        """Sample all rows in one batched pass with step's adapter (None: the latest)."""
        if not rows:
            return []
        with self.lock, torch.inference_mode(), self.autocast_context(), self._adapter(step):
            self.passes += 1
            try:
                return self._sample(rows, self._prefix_tag(step))
            finally:
                release_memory()  # a long prefill's transients would stay resident otherwise

    def _sample(self, rows: list[SampleRow], tag: Hashable) -> list[Sampled]:
        from transformers import DynamicCache

        states = [_Decoding(row, self._generator(row.seed)) for row in rows]
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
        input_ids, mask, positions = (t.to(self.device) for t in (input_ids, mask, positions))
        forced_width = max(len(row.forced_ids) for row in rows)
        cache = (
            self._cache_from(prefixes, cached) if cached else DynamicCache(config=self.model.config)
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
                keep = torch.tensor([live.index(i) for i in live_now], device=self.device)
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
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=-1)
            last_position = last_position + 1
            next_logits = self.model(
                input_ids=chosen[:, None],
                attention_mask=mask,
                position_ids=last_position[:, None],
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
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
            logits = self.model(
                input_ids=input_ids[:, start:end],
                attention_mask=mask[:, : past + end],
                position_ids=positions[:, start:end],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=keep if end == width else 1,
            ).logits
        return logits

    def _prefix_tag(self, step: int | None) -> Hashable:
        """Which weights computed a cache entry: the live adapter (its version changes with every
        update) or an older step's checkpoint."""
        if step is None or step == self.live_step:
            return ("live", self._weights_version)
        return ("step", step)

    def _weights_changed(self) -> None:
        self._weights_version += 1
        self.prefixes.clear()

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
        return DynamicCache(ddp_cache_data=layers, config=self.model.config)

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
        input_ids, mask, positions = (t.to(self.device) for t in (input_ids, mask, positions))
        cache = DynamicCache(config=self.model.config)
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

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _generator(self, seed: int | None) -> torch.Generator:
        generator = torch.Generator(device=self.device)
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
        """Pick one token per live row and record it; returns the chosen ids."""
        logits = logits.float()
        logprobs = torch.log_softmax(logits, -1)
        chosen = logprobs.argmax(-1)
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
        return chosen

    def _finish_if_done(self, state: _Decoding) -> None:
        """Set `finish` when the row hit an end token, a stop string or its token budget."""
        row = state.row
        if (len(state.ids) > len(row.forced_ids) and state.ids[-1] in self.stop_ids) or (
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

    # ----------------------------------------------------------------------------- training

    def train(
        self, packed: dict, config, dev_config: dict, *, step: int, num_substeps: int = 1
    ) -> dict[str, float]:
        """One GRPO update on ART's packed tensors (`art.preprocessing.pack.PackedTensors`),
        saved as checkpoint `step`, which is served from then on.

        The rows are split into `num_substeps` chunks; each chunk accumulates gradients of ART's
        `loss_fn` (summed, divided by the chunk's trained tokens) and takes one AdamW step.
        `config` is ART's `TrainConfig` (learning rate, kl_penalty_coef), `dev_config` ART's
        `dev.TrainConfig` (loss variant, clipping). Returns the metrics named at the top.
        """
        with self.lock:
            tensors = _trimmed(packed, self.device)
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
                    self.trainable_parameters(), self.optim.max_grad_norm
                )
                grad_norms.append(float(norm))
                self.optimizer.step()
                self._weights_changed()
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
            self._save(step)
            release_memory()
            return metrics

    def sft_batch(self, packed: dict, learning_rate: float) -> dict[str, float]:
        """One supervised update on packed demonstrations: cross-entropy on the assistant
        tokens only (ART's assistant mask), one AdamW step. Not saved: `save_step` once the
        whole warm start is done. Returns the mean loss per trained token before the update."""
        from art.loss import shift_tensor

        with self.lock:
            tensors = _trimmed(packed, self.device)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
            tokens = float(shift_tensor(tensors["assistant_mask"], False).sum())
            total = 0.0
            for row in range(len(tensors["tokens"])):
                inputs = {key: value[row : row + 1] for key, value in tensors.items()}
                _, logprobs = self._forward_logprobs(inputs)
                loss = -logprobs.sum() / max(tokens, 1.0)  # zero off the trained positions
                loss.backward()
                total += float(loss.detach()) * max(tokens, 1.0)
            norm = torch.nn.utils.clip_grad_norm_(
                self.trainable_parameters(), self.optim.max_grad_norm
            )
            self.optimizer.step()
            self._weights_changed()
            self.optimizer.zero_grad(set_to_none=True)
            release_memory()
            return {LOSS: total / max(tokens, 1.0), GRAD_NORM: float(norm), NUM_TOKENS: tokens}

    def _forward_logprobs(
        self, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log p(next token) for one packed row under ART's group attention mask, as ART's loss
        wants it ([1, S]), and the logits of the trained positions ([K, V]). Only those K
        positions go through the LM head: full-vocabulary logits for every packed position
        were most of a step's memory (S x 49k floats, twice more in backward)."""
        from art.loss import shift_tensor

        positions = _trained_positions(inputs, 0).nonzero()[:, 0]
        long_row = inputs["tokens"].shape[1] >= CHECKPOINT_FROM_TOKENS
        with self.autocast_context(), self._recomputing(long_row and torch.is_grad_enabled()):
            logits = self.model(
                input_ids=inputs["tokens"],
                attention_mask=group_attention_mask(inputs["group_ids"], inputs["parent_ids"]),
                position_ids=inputs["input_pos"],
                logits_to_keep=positions,
                use_cache=False,  # training: no cache to fill (and none under checkpointing)
            ).logits[0]
        targets = shift_tensor(inputs["tokens"], 0)[0, positions]
        kept = token_logprobs(logits, targets)
        full = torch.zeros(inputs["tokens"].shape, dtype=kept.dtype, device=kept.device)
        return logits, full.index_put((torch.zeros_like(positions), positions), kept)

    @contextmanager
    def _recomputing(self, on: bool):
        """Gradient checkpointing for this forward (HF layers checkpoint only in train mode)."""
        if not on:
            yield
            return
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()

    def _train_row(
        self, inputs: dict[str, torch.Tensor], dev_config: dict, kl_coef: float, chunk_tokens: float
    ) -> dict[str, float]:
        """Forward + backward of one packed row; returns sums for the step's metrics."""
        from art.loss import loss_fn, shift_tensor

        logits, new_logprobs = self._forward_logprobs(inputs)
        ref_logprobs = None
        if kl_coef > 0:  # reference = the base model, adapter disabled (as ART does)
            with torch.no_grad(), self.model.disable_adapter():
                ref_logprobs = self._forward_logprobs(inputs)[1]
        loss = loss_fn(inputs, new_logprobs, ref_logprobs, None, dev_config, reduction="sum")
        (loss.policy_loss / chunk_tokens).backward()
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


def _trimmed(packed: dict, device: torch.device) -> dict[str, torch.Tensor]:
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
