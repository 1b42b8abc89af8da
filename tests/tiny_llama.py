"""A tiny Llama with random weights (no download): 2 layers, grouped key/value heads, for tests of
the engine's parts that need a real transformers model but not a trained one."""

from __future__ import annotations

from typing import Any

import torch


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
