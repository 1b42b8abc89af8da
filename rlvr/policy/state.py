"""The state one policy engine holds. `Engine.__init__` (rlvr.policy.engine) sets it; its parts —
adapters, sampler, trainer — are mixins that read and update it, typed here once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

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
