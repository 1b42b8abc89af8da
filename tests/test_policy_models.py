"""Model resolution: errors are one line saying what to do; the converted SmolLM2 matches its GGUF."""

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.policy.models import (
    ALIASES,
    DEFAULT_MODEL,
    GgufSource,
    ModelError,
    _converted,
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
    """Ours, built from the GGUF's fields (rlvr.policy.models.tokenizer_from_gguf), and the one
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
