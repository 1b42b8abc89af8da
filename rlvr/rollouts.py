"""Rollout building blocks shared by scenarios: one chat turn against the policy through ART's
OpenAI client, with logprobs so ART trains on exactly the sampled tokens."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

import art
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ValidationError

from rlvr.types import Item, Sampling


async def chat_turn(
    model: art.Model, messages: list[dict[str, Any]], sampling: Sampling, **extra: Any
) -> Choice:
    """Sample one assistant turn. `extra` passes tools, tool_choice, stop, ..."""
    response = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(sampling.step),
        messages=messages,
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        logprobs=True,
        **extra,
    )
    return response.choices[0]


async def single_turn(
    model: art.Model, item: Item, messages: list[dict[str, Any]], sampling: Sampling
) -> art.Trajectory:
    """A one-turn episode: the prompt messages and the sampled Choice."""
    choice = await chat_turn(model, messages, sampling)
    return art.Trajectory(
        messages_and_choices=[*messages, choice],
        reward=0.0,
        metadata={"item_id": item.id},
        metrics={"truncated": choice.finish_reason == "length"},
    )


ToolArgs = TypeVar("ToolArgs", bound=BaseModel)


def tool_arguments(
    name: str | None, arguments: str | None, models: Mapping[str, type[ToolArgs]]
) -> ToolArgs | str:
    """An OpenAI tool call (function name, JSON arguments) validated into the named tool's
    pydantic model, or a one-line reason it is not one (for the episode to count as invalid:
    whatever the model writes, nothing raises)."""
    model = models.get(name or "")
    if model is None:
        return f"unknown tool {str(name)[:40]!r}; the tools are {', '.join(models)}"
    try:
        values = json.loads(arguments or "{}", strict=False)
    except (json.JSONDecodeError, RecursionError):
        return f"{name}: arguments are not valid JSON"
    if not isinstance(values, dict):
        return f"{name}: arguments must be a JSON object"
    try:
        return model.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        return f"{name}: {where}: {first['msg']}"
