"""The state one policy engine holds. `Engine.__init__` (rlvr.policy.engine) sets it; its parts —
adapters, sampler, trainer — are mixins that read and update it, typed here once. `_load` sets
what sampling needs, for the trained engine and the frozen one (rlvr.policy.frozen) alike."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from rlvr.policy.common import THREADS_ENV, Precision
from rlvr.policy.device import choose_autocast, choose_device, run_head_in_fp32
from rlvr.policy.prefix import PrefixCache


class EngineState:
    """What every part of the engine shares (set by Engine.__init__)."""

    model: Any
    tokenizer: Any
    device: torch.device
    autocast: torch.dtype | None  # training's precision (None = fp32)
    sample_autocast: torch.dtype | None  # sampling's
    lock: threading.Lock
    live_step: int
    output_dir: Path
    optimizer: torch.optim.Optimizer
    optim: Any
    stop_ids: frozenset[int]
    max_context: int
    passes: int
    prefixes: PrefixCache
    _old_adapters: OrderedDict[Path, str]
    _token_bytes: dict[int, bytes]
    _weights_version: int
    _grammar_tokenizer: Any  # llguidance's view of `tokenizer`, built on first use

    def _load(self, model_dir: Path, device: str | None, precision: Precision | None) -> Any:
        """Load the tokenizer and the base model (fp32 weights, eval mode) on the chosen device and
        set the sampling state around them; returns the base model. `precision`: see
        `choose_autocast` (None: automatic)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if threads := os.environ.get(THREADS_ENV):
            torch.set_num_threads(int(threads))
        self.device = choose_device(device)
        self.autocast = choose_autocast(self.device, precision, "train")
        self.sample_autocast = choose_autocast(self.device, precision, "sample")
        self.lock = threading.Lock()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        base.to(self.device).eval()
        if self.autocast is not None or self.sample_autocast is not None:
            run_head_in_fp32(base)
        self.max_context = int(getattr(base.config, "max_position_embeddings", 4096))
        self._old_adapters = OrderedDict()
        self._token_bytes = {}
        self.passes = 0  # batched sampling passes run (how well requests were batched)
        self.prefixes = PrefixCache()
        self._weights_version = 0
        self._grammar_tokenizer = None
        return base
