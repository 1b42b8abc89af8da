"""JSON as it crosses rlvr's boundaries (JSON schemas, tool arguments, request bodies): pydantic's
`JsonValue`, and a JSON object read from one with its shape checked where it is used."""

from __future__ import annotations

from pydantic import JsonValue

JsonObject = dict[str, JsonValue]


def as_object(value: JsonValue, where: str = "value") -> JsonObject:
    """`value` as a JSON object; a TypeError naming `where` when it is something else."""
    if not isinstance(value, dict):
        raise TypeError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def as_array(value: JsonValue, where: str = "value") -> list[JsonValue]:
    """`value` as a JSON array; a TypeError naming `where` when it is something else."""
    if not isinstance(value, list):
        raise TypeError(f"{where}: expected a JSON array, got {type(value).__name__}")
    return value
