"""A tiny Llama with random weights (no download): 2 layers, grouped key/value heads, for tests of
the engine's parts that need a real transformers model but not a trained one."""

from __future__ import annotations

import threading
from typing import Any

import torch

from rlvr.engine.loaded_model import LoadedModel


def tiny_llama(vocab_size: int = 64, max_positions: int = 128) -> Any:
    """A seeded 2-layer LlamaForCausalLM in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(config).eval()


def fp32_loaded(model: Any, tokenizer: Any = None, max_context: int = 128) -> LoadedModel:
    """`model` as the engine's parts see it, fp32 in every phase with plain weights (no packing)
    and no end tokens (rows end at their max_tokens: lengths are the test's to set)."""
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=torch.device("cpu"),
        train_dtype=None,
        sample_dtype=None,
        prefill_dtype=None,
        products_dtype=torch.float32,
        packed=False,
        lock=threading.Lock(),
        stop_ids=frozenset(),
        max_context=max_context,
    )
