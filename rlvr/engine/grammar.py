"""Structured output: a reply constrained to a JSON schema while it is sampled (llguidance).

A request's `response_format` becomes an llguidance grammar (`grammar_for`); each row sampled
under it gets a matcher (`Matcher`) that says, before every token, which tokens keep the reply a
valid prefix of a document of that schema. The decoder draws only from those tokens; the
log-probabilities it records stay the model's own (as vLLM reports them by default), so a policy
sampled this way is trained on what the model itself assigns, not on the mask.

JSON is generated compactly (`", "` and `": "` separators, no other whitespace): a small model
given free whitespace can spend its whole budget on newlines inside a valid document.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch
from pydantic import JsonValue

from rlvr.json_types import JsonObject

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

# Compiler options for every schema; `lenient` ignores keywords it does not implement (titles,
# formats) rather than refusing a schema a hosted provider would accept.
JSON_OPTIONS: JsonCompileOptions = {
    "item_separator": ", ",
    "key_separator": ": ",
    "whitespace_flexible": False,
    "lenient": True,
}
ANY_OBJECT: JsonObject = {"type": "object"}
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions"}  # name -> schema
_VALUES = {"const", "enum", "default", "examples"}  # data, not schemas


class GrammarError(ValueError):
    """A `response_format` that cannot be honoured; the message names the field."""


def closed(schema: JsonValue) -> JsonValue:
    """`schema` with every object that lists its properties closed to others, as OpenAI's strict
    mode reads a schema (JSON Schema itself admits extra properties unless told otherwise)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        key: (
            value
            if key in _VALUES
            else {name: closed(sub) for name, sub in value.items()}
            if key in _SCHEMA_MAPS and isinstance(value, dict)
            else closed(value)
        )
        for key, value in schema.items()
    }
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def schema_of(response_format: JsonObject | None) -> JsonObject | None:
    """The JSON schema a `response_format` asks for, None for plain text. Accepts OpenAI's
    `{"type": "json_schema", "json_schema": {"schema": ..., "strict": ...}}`, its
    `{"type": "json_object"}` (any object) and llama.cpp's `{"type": "json_object", "schema": ...}`."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema", ANY_OBJECT)
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise GrammarError("response_format.json_schema: expected an object with a 'schema'")
        schema = closed(spec["schema"]) if spec.get("strict") else spec["schema"]
    else:
        raise GrammarError(
            f"response_format.type: expected 'text', 'json_object' or 'json_schema', got {kind!r}"
        )
    if not isinstance(schema, dict):
        raise GrammarError("response_format schema: expected a JSON object")
    return schema


def grammar_for(schema: JsonObject, tokenizer: Any) -> str:
    """The llguidance grammar of `schema`, checked against `tokenizer` (an `LLTokenizer`)."""
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_OPTIONS)
    except (TypeError, ValueError) as error:
        raise GrammarError(f"response_format schema: {error}") from None
    problem = LLMatcher.validate_grammar(grammar, tokenizer)
    if problem:
        raise GrammarError(f"response_format schema: {problem.splitlines()[0]}")
    return grammar


def llg_tokenizer(tokenizer: Any, vocab_size: int) -> Any:
    """llguidance's view of a Hugging Face fast tokenizer (about 0.5 s: build once per engine).
    `vocab_size` is the model's logit width, which may exceed the tokenizer's."""
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)


_BITS = torch.arange(8, dtype=torch.uint8)


class Matcher:
    """One row's position in its grammar."""

    def __init__(self, tokenizer: Any, grammar: str, vocab_size: int) -> None:
        from llguidance import LLMatcher

        self._matcher = LLMatcher(tokenizer, grammar)
        self.vocab_size = vocab_size
        if self._matcher.is_error():
            raise GrammarError(f"response_format schema: {self._matcher.get_error()}")

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens that may come next (end-of-text once the document is whole)."""
        packed = torch.frombuffer(bytearray(self._matcher.compute_bitmask()), dtype=torch.uint8)
        # Bit j of byte k is token 8k + j (little-endian 32-bit words).
        bits = ((packed[:, None] >> _BITS) & 1).flatten().bool()
        return bits[: self.vocab_size]

    def forced(self) -> list[int]:
        """The tokens that must come next, whatever is sampled (empty when there is a choice)."""
        return list(self._matcher.compute_ff_tokens())

    def consume(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            raise GrammarError(f"token {token} breaks the grammar: {self._matcher.get_error()}")
