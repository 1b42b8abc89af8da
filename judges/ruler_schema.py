"""RULER's reply schema pinned to the trajectories a request asks about.

ART's RULER asks for `Response(scores: list[TrajectoryScore])`: a plain list, which a strong judge
fills with one entry per trajectory and a 135M judge may fill with one entry, or with scores above
1. Pinned, the schema admits exactly one entry per trajectory of the prompt, in its order, each
with its id and a score in [0, 1], so a judge whose decoding follows the schema cannot answer
anything ART's parse refuses.

Two callers pin it: rlvr's RULER transport (judges.ruler) before a request leaves, and the local
judge server (judges.server) when a request arrives unpinned, as ART's own `ruler_score_group`
sends it. Pure functions; nothing here imports ART or litellm (the judge server loads this)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence

from pydantic import JsonValue

from rlvr.json_types import JsonObject, as_object

SCORE_GRID = [round(i * 0.05, 2) for i in range(21)]
LOCAL_EXPLANATION_CHARS = 200
TRAJECTORY_FIELDS = {"trajectory_id", "explanation", "score"}  # ART's TrajectoryScore
# Printable ASCII but for the two characters JSON escapes: one token at most per character, so a
# reply sized to a `max_tokens` budget always fits in it.
ONE_TOKEN_CHARS = r"^[ !#-\[\]-~]*$"
# Tokens of a reply that neither the skeleton nor the explanations account for: a score's digits
# and the token that closes each string are sampled and may split differently from the skeleton.
SLACK_PER_ENTRY = 4
SLACK_PER_REPLY = 4
_TRAJECTORY_TAG = re.compile(r'^<trajectory id="(\d+)">$', re.M)


class RulerBudgetError(ValueError):
    """`max_tokens` cannot hold a reply that scores every trajectory; the message says how many
    it needs."""


def trajectory_ids(messages: Sequence[Mapping[str, object]]) -> list[str]:
    """The ids RULER asked about, from its prompt. ART serialises each trajectory as JSON on one
    line, so a tag line can only come from RULER itself."""
    text = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    ids = _TRAJECTORY_TAG.findall(text)
    if not ids:
        raise ValueError("RULER prompt has no <trajectory id=...> lines")
    return ids


def inline_refs(schema: JsonObject) -> JsonObject:
    """Replace `$ref`s into `$defs` by the definitions (not every server resolves them)."""
    definitions = as_object(schema.get("$defs", {}), "$defs")

    def resolve(node: JsonValue) -> JsonValue:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(definitions[str(node["$ref"]).rsplit("/", 1)[-1]])
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return as_object(resolve(schema), "schema")


def pin_schema(
    schema: JsonObject,
    ids: list[str],
    pinned: bool,
    explanation: JsonObject | None = None,
) -> JsonObject:
    """RULER's schema, fixed to `ids` (count, order, ids) and to scores in [0, 1]; `pinned`: one
    entry per position (`JudgeSettings.pinned`), its explanation bounded by `explanation` (default:
    at most LOCAL_EXPLANATION_CHARS characters)."""
    schema = inline_refs(schema)
    top = as_object(schema["properties"], "properties")
    scores = dict(as_object(top["scores"], "properties.scores"))
    item = as_object(scores.pop("items"), "properties.scores.items")
    properties = as_object(item["properties"], "properties.scores.items.properties")
    scores["minItems"] = scores["maxItems"] = len(ids)
    if pinned:
        bounded: JsonObject = explanation or {
            "type": "string",
            "maxLength": LOCAL_EXPLANATION_CHARS,
        }
        scores["prefixItems"] = [
            {
                **item,
                "properties": {
                    **properties,
                    "trajectory_id": {"const": tid},
                    "explanation": bounded,
                    "score": {"enum": list[JsonValue](SCORE_GRID)},
                },
            }
            for tid in ids
        ]
    else:
        scores["items"] = {
            **item,
            "properties": {
                **properties,
                "trajectory_id": {"type": "string", "enum": list[JsonValue](ids)},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            },
        }
    return {**schema, "properties": {**top, "scores": scores}}


def is_unpinned_ruler(schema: JsonObject) -> bool:
    """Whether `schema` is ART's RULER `Response` as ART sends it: `scores`, a list of entries
    with TrajectoryScore's fields and no count (rlvr's own RULER requests come pinned already)."""
    try:
        properties = as_object(inline_refs(schema)["properties"])
        scores = as_object(properties["scores"])
        fields = set(as_object(as_object(scores["items"])["properties"]))
    except (KeyError, TypeError):
        return False
    counted = {"minItems", "maxItems", "prefixItems"} & set(scores)
    return scores.get("type") == "array" and fields == TRAJECTORY_FIELDS and not counted


def skeleton(ids: list[str]) -> str:
    """A pinned reply with empty explanations and the longest scores, written as the local
    engine writes JSON (rlvr.engine.grammar): what every reply spends besides its explanations."""
    entries = [{"trajectory_id": tid, "explanation": "", "score": 0.05} for tid in ids]
    return json.dumps({"scores": entries}, separators=(", ", ": "))


def explanation_bound(
    ids: list[str], max_tokens: int | None, count_tokens: Callable[[str], int]
) -> JsonObject:
    """The explanation schema that keeps a reply on `ids` within `max_tokens` (None: no budget,
    LOCAL_EXPLANATION_CHARS). A reply cut at max_tokens would be no JSON at all; sized so, each
    explanation gets an equal share of what the skeleton leaves, one token per character."""
    if max_tokens is None:
        return {"type": "string", "maxLength": LOCAL_EXPLANATION_CHARS}
    fixed = count_tokens(skeleton(ids)) + SLACK_PER_ENTRY * len(ids) + SLACK_PER_REPLY
    if max_tokens < fixed:
        raise RulerBudgetError(
            f"max_tokens: {max_tokens} cannot hold a RULER reply scoring {len(ids)} trajectories; "
            f"it needs at least {fixed}"
        )
    share = min(LOCAL_EXPLANATION_CHARS, (max_tokens - fixed) // len(ids))
    return {"type": "string", "maxLength": share, "pattern": ONE_TOKEN_CHARS}


def pinned_ruler_format(
    response_format: JsonObject,
    schema: JsonObject,
    messages: Sequence[Mapping[str, object]],
    max_tokens: int | None,
    count_tokens: Callable[[str], int],
) -> JsonObject | None:
    """The `response_format` that pins an unpinned RULER request (`schema`: the one it asks for)
    to the trajectories its prompt lists; None when it is not such a request."""
    if not is_unpinned_ruler(schema):
        return None
    try:
        ids = trajectory_ids(messages)
    except ValueError:
        return None  # the shape of RULER's reply without RULER's prompt: not ours to pin
    bound = explanation_bound(ids, max_tokens, count_tokens)
    spec = response_format.get("json_schema")
    strict = bool(spec.get("strict")) if isinstance(spec, dict) else False
    name = spec.get("name", "Response") if isinstance(spec, dict) else "Response"
    return {
        "type": "json_schema",
        "json_schema": {
            "name": name,
            "schema": pin_schema(schema, ids, pinned=True, explanation=bound),
            "strict": strict,
        },
    }
