"""One causal LM loaded on one device: the module, its tokenizer, the precision of each phase, the
lock that keeps sampling and training apart, and what every part of the engine reads from it (end
tokens, context length). The decoder, the adapter store and the trainer are each given one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from rlvr.engine.attention import use_grouped_sdpa
from rlvr.engine.device import (
    bound_kernel_caches,
    choose_autocast,
    choose_device,
    hold_mmap_threshold,
    run_head_in_fp32,
)
from rlvr.engine.packed_weights import pack_head, packing_wanted, packs
from rlvr.engine.prefix import budget_bytes
from rlvr.engine.types import (
    THREADS_ENV,
    Phase,
    Precision,
    recompute_wanted,
    tree_tokens,
    whole_number,
)

DEFAULT_CONTEXT = 4096  # for a config that names no max_position_embeddings


@dataclass(frozen=True)
class LoadedModel:
    """A loaded model and what its users share; `model` is the base model or the PeftModel
    wrapping it (the same modules). Frozen: a part swaps nothing here, only inside `model`."""

    model: Any  # a transformers causal LM (or a PeftModel around one)
    tokenizer: Any
    device: torch.device
    train_dtype: torch.dtype | None  # training's autocast (None = fp32)
    sample_dtype: torch.dtype | None  # decoding's
    prefill_dtype: torch.dtype | None  # a prompt's prefill
    # Sampling's projections (merged sets, a frozen model's layers): their dtype, and whether
    # their weights are packed for the CPU's kernel (rlvr.engine.packed_weights).
    products_dtype: torch.dtype
    packed: bool
    lock: threading.Lock
    stop_ids: frozenset[int]
    max_context: int

    @contextmanager
    def autocast(self, phase: Phase) -> Iterator[None]:
        """The phase's precision (rlvr.engine.device.choose_autocast) and allocation threshold
        (rlvr.engine.device.hold_mmap_threshold)."""
        hold_mmap_threshold(phase)
        dtype = self.dtype_of(phase)
        if dtype is None:
            yield
            return
        with torch.autocast(self.device.type, dtype=dtype):
            yield

    def dtype_of(self, phase: Phase) -> torch.dtype | None:
        """The phase's autocast dtype (None: fp32)."""
        dtypes = {
            "prefill": self.prefill_dtype,
            "sample": self.sample_dtype,
            "train": self.train_dtype,
        }
        return dtypes[phase]

    def wrapped(self, model: Any) -> LoadedModel:
        """The same loaded model seen through `model` (a PeftModel around this one's module)."""
        return replace(self, model=model)


def stop_ids_of(model: Any, tokenizer: Any) -> frozenset[int]:
    """The tokens that end a completion: the generation config's end tokens and the tokenizer's."""
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    return frozenset(i for i in [*ids, tokenizer.eos_token_id] if i is not None)


def sampling_products(
    device: torch.device, prefill: torch.dtype | None, sample: torch.dtype | None
) -> tuple[torch.dtype, bool]:
    """The dtype of sampling's projections and whether their weights are packed. Packed weights
    are computed in their own dtype whatever autocast says, so where a prompt's prefill is bf16
    they are bf16 for decoding too (attention, norms and the KV cache stay in the decode
    precision); plain weights are in the decode precision, autocast casting them for a prefill."""
    wanted = prefill or sample or torch.float32
    if packs(device, wanted):
        return wanted, True
    return sample or torch.float32, False


def check_environment() -> None:
    """Read the engine's environment knobs now (RLVR_PRECISION, RLVR_PACKED_WEIGHTS,
    RLVR_TORCH_THREADS, RLVR_PREFIX_CACHE_MB, RLVR_TREE_TOKENS, RLVR_RECOMPUTE), so that a bad value stops a run
    with one line before it writes anything; each raises ConfigError naming its variable."""
    choose_autocast(torch.device("cpu"))
    packing_wanted()
    whole_number(THREADS_ENV, 0)
    budget_bytes()
    tree_tokens()
    recompute_wanted()


def load_model(model_dir: Path, device: str | None, precision: Precision | None) -> LoadedModel:
    """Load the tokenizer and the base model (fp32 weights, eval mode) on the chosen device.
    `precision`: see `choose_autocast` (None: automatic)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    bound_kernel_caches()
    if threads := whole_number(THREADS_ENV, 0):
        torch.set_num_threads(threads)
    chosen = choose_device(device)
    train_dtype = choose_autocast(chosen, precision, "train")
    sample_dtype = choose_autocast(chosen, precision, "sample")
    prefill_dtype = choose_autocast(chosen, precision, "prefill")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.to(chosen).eval()
    use_grouped_sdpa(model)
    if any(dtype is not None for dtype in (train_dtype, sample_dtype, prefill_dtype)):
        run_head_in_fp32(model)
    products_dtype, packed = sampling_products(chosen, prefill_dtype, sample_dtype)
    if packed:
        pack_head(model)
    context = model.config.to_dict().get("max_position_embeddings") or DEFAULT_CONTEXT
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=chosen,
        train_dtype=train_dtype,
        sample_dtype=sample_dtype,
        prefill_dtype=prefill_dtype,
        products_dtype=products_dtype,
        packed=packed,
        lock=threading.Lock(),
        stop_ids=stop_ids_of(model, tokenizer),
        max_context=int(context),
    )
