"""Option values from the command line as the type their receiver declares.

`key=value` settings arrive as text; a task whose options are another library's (a reasoning-gym
generator's config fields, a verifiers environment's `load_environment` arguments) validates each
one against the declared type with pydantic: lists and tuples also as `a,b,c`, JSON for `[...]`
and `{...}`. An undeclared type takes JSON scalars (`3`, `true`, `null`) and keeps other text.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError

_UNION = type(int | None)  # `X | Y` annotations (types.UnionType)


def is_sequence(annotation: Any) -> bool:
    """A list, tuple or sequence type (or an optional one): text for it may be `a,b,c`."""
    origin = typing.get_origin(annotation) or annotation
    if origin in (typing.Union, _UNION):
        return any(is_sequence(a) for a in typing.get_args(annotation) if a is not type(None))
    return origin in (list, tuple, collections.abc.Sequence)


def _undeclared(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def coerce(annotation: Any, raw: Any) -> Any:
    """`raw` (text from the command line, or a value) as `annotation`. Raises ValueError with
    pydantic's reason in one line."""
    if annotation in (inspect.Parameter.empty, Any):
        return _undeclared(raw.strip()) if isinstance(raw, str) else raw
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith(("[", "{")):
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"not valid JSON ({error.msg})") from None
        elif is_sequence(annotation):
            raw = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return TypeAdapter(annotation).validate_python(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{first['msg']}{f' (at {where})' if where else ''}") from None


def type_name(annotation: Any) -> str:
    """A type as a reader writes it (`int`, `list[str]`)."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")
