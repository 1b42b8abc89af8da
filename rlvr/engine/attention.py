"""Attention that hands grouped key/value heads to the kernel as they are.

transformers' SDPA attention copies every key/value head `num_key_value_groups` times whenever an
attention mask is given (`repeat_kv`), and the engine always gives one (rows of different lengths
share a batch). A decode step then copies the whole key/value cache of every layer: on a CPU that
copy cost more than the attention itself. PyTorch's own kernel takes grouped heads directly
(`enable_gqa`) with the same result; where a gradient is taken (training) transformers' path is
kept, since there the copy is cheap beside the backward pass and the kernel's backward sums in
another order.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "rlvr_sdpa"  # the attention implementation's registered name


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; the output as its SDPA attention gives it."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if torch.is_grad_enabled() or key.shape[1] == query.shape[1]:
        output, _ = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
        return output, None
    causal = is_causal if is_causal is not None else bool(getattr(module, "is_causal", True))
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=query.shape[2] > 1 and attention_mask is None and causal,
        enable_gqa=True,
    )
    return output.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: Any) -> None:
    """Compute `model`'s attention with `grouped_sdpa` (registered once; masks built as for SDPA)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, grouped_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
