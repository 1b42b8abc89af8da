"""A tiny Llama with random weights (no download): 2 layers, grouped key/value heads, for tests of
the engine's parts that need a real transformers model but not a trained one; with a LoRA adapter,
which `perturb` makes non-zero as training would. `tiny_model_dir` saves it as a model directory
with SmolLM2's tokenizer and chat template, for whole runs (`model=DIR`) that test plumbing: what
they check is the run directory, the CLI and the loop, not what the policy says."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

from rlvr.engine.adapters import AdapterStore, attach_adapter
from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.types import LIVE_ADAPTER, LoraSettings

# What a model directory holds besides its weights and config: copied from SmolLM2's.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
)


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


def tiny_model_dir(folder: Path) -> Path:
    """`folder` made a Hugging Face model directory: the seeded tiny Llama at SmolLM2's vocabulary
    (its tokenizer, chat template and end tokens, copied from the converted model), for `model=`.
    A token costs it about a hundredth of SmolLM2-135M's products (most of them its LM head); its
    replies are noise, so a run that must train every step scores with a scorer giving spread."""
    import json
    import shutil

    from rlvr.engine.models import DEFAULT_MODEL, resolve_model

    real = resolve_model(DEFAULT_MODEL)
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(real / name, folder / name)
    vocab = json.loads((real / "config.json").read_text())["vocab_size"]
    model = tiny_llama(vocab_size=vocab, max_positions=2048)
    model.config.update({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2})
    model.save_pretrained(folder)
    return folder


def cached_tiny_model() -> Path:
    """`tiny_model_path()`, made once per machine: every test worker calls it at start, and the
    first to finish renames its copy into place (a rename is atomic; the losers drop theirs)."""
    import contextlib
    import os
    import shutil
    import tempfile

    from tests.helpers.tiny_runs import tiny_model_path

    target = tiny_model_path()
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tiny-"))
    tiny_model_dir(scratch / "model")
    with contextlib.suppress(OSError):  # another worker's copy is in place
        os.rename(scratch / "model", target)
    shutil.rmtree(scratch, ignore_errors=True)
    return target


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


TINY_LORA = LoraSettings(r=4, lora_alpha=8)


def tiny_loaded() -> LoadedModel:
    """A 2-layer Llama with random weights and a fresh LoRA adapter on every projection."""
    return fp32_loaded(attach_adapter(tiny_llama(), None, TINY_LORA))


def perturb(loaded: LoadedModel, scale: float = 0.2) -> None:
    """Give the live adapter non-zero B matrices (a fresh one adds nothing), as training would."""
    with torch.no_grad():
        for name, parameter in loaded.model.named_parameters():
            if f"lora_B.{LIVE_ADAPTER}" in name:
                parameter.normal_(std=scale)


def adapter_store(loaded: LoadedModel, tmp_path: Path, **options) -> AdapterStore:
    """The adapter store of `loaded` in `tmp_path`, from step 0, telling no one of a change."""
    return AdapterStore(loaded, tmp_path, 0, on_change=lambda: None, **options)
