"""Structured output: `response_format` -> schema -> llguidance grammar -> constrained sampling.

The pure parts run without a model; the sampling tests use the engine on the tiny random model
(SmolLM2's tokenizer, which is what a grammar is compiled for) and check that what comes back
parses and obeys the schema, greedy and sampled, alone and batched beside free-text rows: the
grammar, not the model, makes a reply obey.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.engine.grammar import ANY_OBJECT, GrammarError, closed, schema_of
from tests.helpers.tiny_runs import tiny_model_path

OBJECT = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        (None, None),
        ({"type": "text"}, None),
        ({"type": "json_object"}, ANY_OBJECT),
        ({"type": "json_object", "schema": OBJECT}, OBJECT),  # llama.cpp's dialect
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": OBJECT}}, OBJECT),
        (
            {"type": "json_schema", "json_schema": {"schema": OBJECT, "strict": True}},
            {**OBJECT, "additionalProperties": False},
        ),
    ],
    ids=["none", "text", "any-object", "llama-cpp", "json-schema", "strict"],
)
def test_schema_of_reads_every_dialect(response_format, expected) -> None:
    assert schema_of(response_format) == expected


@pytest.mark.parametrize(
    ("response_format", "field"),
    [
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema"),
        ({"type": "json_object", "schema": [1, 2]}, "response_format schema"),
    ],
    ids=["unknown-type", "no-spec", "no-schema", "schema-not-object"],
)
def test_a_bad_response_format_names_its_field(response_format, field: str) -> None:
    with pytest.raises(GrammarError, match=field):
        schema_of(response_format)


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, {"type": "string"}),
        (
            {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}},
            {
                "type": "object",
                "properties": {
                    "a": {"type": "object", "properties": {}, "additionalProperties": False}
                },
                "additionalProperties": False,
            },
        ),
        (  # an explicit choice is kept
            {"type": "object", "properties": {}, "additionalProperties": True},
            {"type": "object", "properties": {}, "additionalProperties": True},
        ),
        (  # a property named "properties" is a property, and enum values are data
            {"properties": {"properties": {"enum": [{"properties": 1}]}}},
            {
                "properties": {"properties": {"enum": [{"properties": 1}]}},
                "additionalProperties": False,
            },
        ),
        (
            {"type": "array", "prefixItems": [{"properties": {}}]},
            {"type": "array", "prefixItems": [{"properties": {}, "additionalProperties": False}]},
        ),
    ],
    ids=["scalar", "nested", "explicit", "names-and-data", "arrays"],
)
def test_strict_closes_objects_as_openai_reads_them(schema: dict, expected: dict) -> None:
    assert closed(schema) == expected


# --- real engine ----------------------------------------------------------------------------

VERDICTS = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "minItems": 3,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "criterion": {"type": "integer", "enum": [1, 2, 3]},
                    "rationale": {"type": "string", "maxLength": 40},
                    "met": {"type": "boolean"},
                    # a range of integers, whose digits end: the tiny model's greedy row would
                    # write a fraction's digits for ever
                    "score": {"type": "integer", "minimum": 0, "maximum": 100},
                },
                "required": ["criterion", "rationale", "met", "score"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["verdicts"],
    "additionalProperties": False,
}


def obeys(data: object) -> bool:
    """Whether `data` fits VERDICTS (the test's own check, not the grammar's)."""
    if not isinstance(data, dict) or set(data) != {"verdicts"}:
        return False
    verdicts = data["verdicts"]
    return len(verdicts) == 3 and all(
        set(v) == {"criterion", "rationale", "met", "score"}
        and v["criterion"] in (1, 2, 3)
        and isinstance(v["met"], bool)
        and isinstance(v["rationale"], str)
        and len(v["rationale"]) <= 40
        and isinstance(v["score"], int)
        and 0 <= v["score"] <= 100
        for v in verdicts
    )


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory):
    from rlvr.engine.lora_engine import Engine

    return Engine(tiny_model_path(), Path(tmp_path_factory.mktemp("grammar"))).decoder


def prompt(decoder) -> list[int]:
    messages = [
        {
            "role": "user",
            "content": "Grade 'Paris is the capital of France' against 3 criteria. Reply in JSON.",
        }
    ]
    return decoder.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


@pytest.mark.slow
def test_constrained_rows_obey_the_schema_beside_free_rows(decoder) -> None:
    from rlvr.engine.types import SampleRow

    grammar = decoder.compile_grammar(VERDICTS)
    ids = prompt(decoder)
    rows = [
        SampleRow(prompt_ids=ids, max_tokens=300, temperature=0.0, grammar=grammar),
        *[
            SampleRow(prompt_ids=ids, max_tokens=300, temperature=1.0, seed=s, grammar=grammar)
            for s in range(3)
        ],
        SampleRow(prompt_ids=ids, max_tokens=24, temperature=1.0, seed=7),  # free text
    ]
    *constrained, free = decoder.sample(rows)
    for sampled in constrained:
        assert sampled.finish_reason == "stop", sampled.text
        assert obeys(json.loads(sampled.text)), sampled.text
        assert (
            sampled.token_ids[-1] in decoder.loaded.stop_ids
        )  # ended by the model, as the grammar allowed
    assert len({s.text for s in constrained[1:]}) > 1  # sampling still samples
    assert free.text and len(free.token_ids) <= 24


@pytest.mark.slow
def test_constrained_logprobs_are_the_models_own(decoder) -> None:
    """The recorded logprob of each constrained token is the model's unmasked one: the same
    tokens forced through the model without a grammar score the same (what training reads)."""
    from rlvr.engine.types import SampleRow

    ids = prompt(decoder)
    grammar = decoder.compile_grammar(OBJECT)
    (constrained,) = decoder.sample(
        [SampleRow(prompt_ids=ids, max_tokens=20, temperature=0.0, grammar=grammar)]
    )
    (forced,) = decoder.sample(
        [
            SampleRow(
                prompt_ids=ids,
                forced_ids=constrained.token_ids,
                max_tokens=1 + len(constrained.token_ids),
            )
        ]
    )
    n = len(constrained.token_ids)
    assert forced.token_ids[:n] == constrained.token_ids
    # Prefill and step-by-step decoding agree to fp32 rounding; where either runs in bf16 (a
    # CPU with bf16 units prefills, and multiplies its projections, in bf16), to bf16's three
    # significant digits: the gap grows with a token's improbability.
    loaded = decoder.loaded
    fp32 = loaded.products_dtype == torch.float32 and loaded.prefill_dtype is None
    tolerance = {"abs": 1e-4} if fp32 else {"abs": 0.1, "rel": 0.02}
    assert forced.logprobs[:n] == pytest.approx(constrained.logprobs, **tolerance)
    # Renormalised over the allowed tokens, a token the grammar left alone would score 0; the
    # tiny model finds every token improbable.
    assert max(constrained.logprobs) < -1.0


@pytest.mark.slow
def test_a_schema_without_a_grammar_is_refused(decoder) -> None:
    with pytest.raises(GrammarError, match="response_format schema"):
        decoder.compile_grammar({"type": "object", "properties": {"a": {"type": "nonsense"}}})
