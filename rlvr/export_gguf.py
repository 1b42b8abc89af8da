"""`rlvr export --gguf`: the merged model as an f16 GGUF for llama.cpp and ollama, written with
gguf-py (the library llama.cpp's own converter writes with).

Only for a base that rlvr itself converted from a shipped GGUF (an alias such as `smollm2-135m`):
its metadata and vocabulary are copied from that file, exactly what llama.cpp already loads, and
only the tensors and the chat template are the trained model's. Any other base needs llama.cpp's
`convert_hf_to_gguf.py`, which reads the vocabulary of every tokenizer family; the model card says
how to run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ExportError(ValueError):
    """An export that cannot be made; the message is one line naming the path and what to do
    (defined here, beneath `rlvr.export`, which raises it too)."""


# Keys the writer sets itself, or that describe the source file's quantisation.
SKIPPED_KEYS = frozenset(
    {"general.architecture", "general.file_type", "general.quantization_version", "general.name"}
)
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"


def check_gguf(base_model: str, base_dir: Path) -> None:
    """Refuse `--gguf` before anything is written when the base is not a shipped llama GGUF."""
    import json

    from rlvr.engine import ALIASES

    if base_model not in ALIASES:
        raise ExportError(
            f"--gguf: the run's base model '{base_model}' was not converted from a GGUF by rlvr "
            f"(aliases: {', '.join(ALIASES)}); export without --gguf and convert the directory "
            "with llama.cpp's convert_hf_to_gguf.py (its README.md says how)"
        )
    architectures = json.loads((base_dir / "config.json").read_text()).get("architectures")
    if architectures != ["LlamaForCausalLM"]:
        raise ExportError(f"--gguf: only llama models are written as GGUF, not {architectures}")


def permuted(weights: Any, heads: int) -> Any:
    """llama.cpp's row order of a query or key projection: each head's rotary halves interleaved
    (the inverse of rlvr.engine.models._unpermuted)."""
    rows = weights.shape[0] // heads
    split = weights.reshape(heads, 2, rows // 2, *weights.shape[1:])
    return split.swapaxes(1, 2).reshape(weights.shape)


def gguf_tensors(model: Any) -> list[tuple[str, Any]]:
    """(GGUF name, numpy array) of every weight: matrices in f16, norms in f32 as llama.cpp's
    converter keeps them; a tied LM head is not written (llama.cpp ties it again)."""
    import numpy as np
    from gguf import MODEL_ARCH, get_tensor_name_map

    config = model.config
    table = get_tensor_name_map(MODEL_ARCH.LLAMA, config.num_hidden_layers)
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    out = []
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        base, _, suffix = name.rpartition(".")
        mapped = table.get_name(base)
        if mapped is None:
            raise ExportError(f"--gguf: no GGUF name for the model's tensor {name}")
        data = tensor.detach().float().cpu().numpy()
        kind = mapped.split(".")[-1]
        if kind in heads:
            data = permuted(data, heads[kind])
        out.append((f"{mapped}.{suffix}", data.astype(np.float16 if data.ndim > 1 else np.float32)))
    return out


def write_gguf(model: Any, base_model: str, tokenizer_dir: Path, path: Path, name: str) -> None:
    """Write `model` (a merged llama) as an f16 GGUF at `path` named `name`: the shipped GGUF's
    metadata and vocabulary, the exported tokenizer's chat template, the model's tensors."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
    from transformers import AutoTokenizer

    from rlvr.engine.models import ALIASES, _gguf_path

    reader = GGUFReader(str(_gguf_path(ALIASES[base_model])))
    writer = GGUFWriter(path, "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in SKIPPED_KEYS:
            continue
        if field.name == CHAT_TEMPLATE_KEY:
            continue
        kind = field.types[0]
        sub = field.types[1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    writer.add_name(name)
    writer.add_file_type(LlamaFileType.MOSTLY_F16)
    template = AutoTokenizer.from_pretrained(tokenizer_dir).chat_template
    if template:
        writer.add_chat_template(template)
    for name, data in gguf_tensors(model):
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
