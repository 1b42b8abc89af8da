"""Model resolution: errors are one line saying what to do; the converted SmolLM2 matches its GGUF."""

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.engine.models import (
    ALIASES,
    DEFAULT_MODEL,
    GgufSource,
    ModelError,
    _converted,
    convert_gguf,
    resolve_model,
)


def test_a_missing_package_says_what_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path))
    source = GgufSource(
        module="rlvr_no_such_module",
        pip_name="rlvr-no-such-package",
        file="x.gguf",
        cache_name="x",
        default_system="s",
    )
    with pytest.raises(ModelError) as error:
        _converted(source)
    assert (
        str(error.value)
        == "model: package rlvr-no-such-package is missing; pip install rlvr-no-such-package"
    )
    assert not (tmp_path / "models" / "x").exists()


@pytest.mark.parametrize(
    ("name", "words"),
    [("no-such-alias", ["not an alias", "smollm2-135m"]), ("./a/b/c", ["not an alias"])],
)
def test_an_unknown_name_is_a_one_line_error(name: str, words: list[str]) -> None:
    with pytest.raises(ModelError) as error:
        resolve_model(name)
    assert "\n" not in str(error.value)
    assert all(w in str(error.value) for w in words)


def test_a_directory_without_config_is_rejected(tmp_path) -> None:
    with pytest.raises(ModelError, match=r"no config\.json"):
        resolve_model(str(tmp_path))


def test_a_local_hf_directory_is_used_as_is(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert resolve_model(str(tmp_path)) == tmp_path.resolve()


def test_a_hub_id_offline_is_a_one_line_error(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as error:
        resolve_model("rlvr-tests/no-such-model")
    assert "HF_HUB_OFFLINE" in str(error.value) and "\n" not in str(error.value)


# ----------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def converted() -> Path:
    return resolve_model(DEFAULT_MODEL)


def _gguf() -> Path:
    spec = importlib.util.find_spec(ALIASES[DEFAULT_MODEL].module)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / ALIASES[DEFAULT_MODEL].file


TEXTS = [
    "hi",
    "What is 7+5? Answer 12345 with café and 😀 <|im_end|> x",
    "  two  spaces\n\nnew lines\tand tabs",
    "I'm sure it's 3.14159, isn't it?",
    "def f(x):\n    return x**2  # square",
    "Ünïcödé 日本語 текст",
]


@pytest.mark.slow
def test_conversion_is_cached_and_complete(converted: Path) -> None:
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in converted.iterdir()
    }
    assert not list(converted.parent.glob(".*partial*"))
    assert resolve_model(DEFAULT_MODEL) == converted


@pytest.fixture(scope="module")
def tokenizers(converted: Path) -> tuple:
    """Ours, built from the GGUF's fields (rlvr.engine.models.tokenizer_from_fields), and the one
    transformers' GGUF loader builds from the same file (an independent reference; ~6 s)."""
    from transformers import AutoTokenizer

    gguf = _gguf()
    return (
        AutoTokenizer.from_pretrained(converted),
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name),
    )


@pytest.mark.slow
@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_matches_transformers_own_gguf_reader(tokenizers: tuple, text: str) -> None:
    tokenizer, reference = tokenizers
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == reference.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


@pytest.mark.slow
def test_end_of_turn_and_plain_chats_render_like_the_gguf_template(converted: Path) -> None:
    from gguf import GGUFReader
    from jinja2 import Template
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    field = GGUFReader(str(_gguf())).fields["tokenizer.chat_template"]
    original = Template(bytes(field.parts[field.data[0]]).decode())
    chats = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    ]
    for chat in chats:
        for generation_prompt in (True, False):
            ours = tokenizer.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=generation_prompt
            )
            assert ours == original.render(messages=chat, add_generation_prompt=generation_prompt)


@pytest.mark.slow
def test_the_template_describes_tools_and_renders_calls(converted: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    chat = [
        {"role": "user", "content": "1+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "content": "3", "tool_call_id": "c"},
    ]
    text = tokenizer.apply_chat_template(chat, tools=tools, tokenize=False)
    assert '{"name": "add", "parameters": {"type": "object"}}' in text
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><|im_end|>'
        in text
    )
    assert "<|im_start|>tool\n3<|im_end|>" in text


# ------------------------------------------------- the converter against transformers' own loader

SMALL = {"hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "layers": 2, "ffn": 128}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def write_small_llama_gguf(path: Path, untied: bool) -> None:
    """A two-layer llama GGUF with random weights, quantised as the shipped model is (Q4_1
    projections, Q8_0 embedding, fp32 norms), written by gguf-py, and a byte-level vocabulary."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = SPECIAL + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["ab", "abc"]
    tokens += [f"t{i}" for i in range(64 - len(tokens))]  # 64: a whole number of quant blocks
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("small test llama")
    writer.add_context_length(256)
    writer.add_embedding_length(SMALL["hidden"])
    writer.add_block_count(SMALL["layers"])
    writer.add_feed_forward_length(SMALL["ffn"])
    writer.add_head_count(SMALL["heads"])
    writer.add_head_count_kv(SMALL["kv_heads"])
    writer.add_rope_dimension_count(SMALL["head_dim"])
    writer.add_rope_freq_base(50000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL else 1 for t in tokens])
    writer.add_token_merges(["a b", "ab c"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)

    def add(name: str, shape: tuple[int, ...], kind: gguf.GGMLQuantizationType) -> None:
        values = rng.standard_normal(shape).astype(np.float32) * 0.1
        if kind == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, values)
        else:
            writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)

    q4, q8, f32 = (
        gguf.GGMLQuantizationType.Q4_1,
        gguf.GGMLQuantizationType.Q8_0,
        gguf.GGMLQuantizationType.F32,
    )
    hidden, kv = SMALL["hidden"], SMALL["kv_heads"] * SMALL["head_dim"]
    add("token_embd.weight", (len(tokens), hidden), q8)
    for layer in range(SMALL["layers"]):
        block = f"blk.{layer}"
        add(f"{block}.attn_norm.weight", (hidden,), f32)
        add(f"{block}.attn_q.weight", (SMALL["heads"] * SMALL["head_dim"], hidden), q4)
        add(f"{block}.attn_k.weight", (kv, hidden), q4)
        add(f"{block}.attn_v.weight", (kv, hidden), q4)
        add(f"{block}.attn_output.weight", (hidden, SMALL["heads"] * SMALL["head_dim"]), q4)
        add(f"{block}.ffn_norm.weight", (hidden,), f32)
        add(f"{block}.ffn_gate.weight", (SMALL["ffn"], hidden), q4)
        add(f"{block}.ffn_up.weight", (SMALL["ffn"], hidden), q4)
        add(f"{block}.ffn_down.weight", (hidden, SMALL["ffn"]), q4)
    add("output_norm.weight", (hidden,), f32)
    if untied:
        add("output.weight", (len(tokens), hidden), q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("untied", [False, True], ids=["tied-head", "own-head"])
def test_the_converter_gives_what_transformers_gguf_loader_gives(tmp_path, untied) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    gguf_file = tmp_path / "small.gguf"
    write_small_llama_gguf(gguf_file, untied)
    convert_gguf(gguf_file, tmp_path / "ours", "You are a test.")
    ours = AutoModelForCausalLM.from_pretrained(tmp_path / "ours", dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=gguf_file.name, dtype=torch.float32
    )
    mine, theirs = ours.state_dict(), reference.state_dict()
    assert set(mine) == set(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(mine[name], tensor), name
    fields = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    fields += ("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps")
    fields += ("max_position_embeddings", "tie_word_embeddings", "rope_parameters")
    for field in fields:
        assert getattr(ours.config, field) == getattr(reference.config, field), field
    assert ours.config.tie_word_embeddings is not untied
    ids = torch.tensor([[1, 5, 9, 30, 2, 7]])
    with torch.no_grad():
        assert torch.equal(ours(input_ids=ids).logits, reference(input_ids=ids).logits)
    assert ours.config.eos_token_id == ours.config.pad_token_id == 2  # <|im_end|>


@pytest.mark.parametrize(
    ("architecture", "message"),
    [
        ("gpt2", "architecture 'gpt2'; only llama GGUFs are converted"),
        (
            "llama",
            "no 'llama.embedding_length' field; expected a llama GGUF as llama.cpp's "
            "converter writes it",
        ),
    ],
    ids=["other-architecture", "missing-field"],
)
def test_a_gguf_that_cannot_be_converted_is_a_one_line_error(
    tmp_path, architecture, message
) -> None:
    import gguf

    path = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError) as error:
        convert_gguf(path, tmp_path / "out", "s")
    assert str(error.value) == f"model: other.gguf: {message}"
    assert not (tmp_path / "out").exists()
