"""One-turn rollout building blocks: one chat turn against the policy through ART's OpenAI client,
with logprobs so ART trains on exactly the sampled tokens. Multi-turn tool agents use
`rlvr.tool_episode` (rlvr.agent)."""

from __future__ import annotations

from typing import Any

import art
from art.types import Messages
from openai.types.chat.chat_completion import ChatCompletion, Choice

from rlvr.types import Item, Sampling


async def chat_turn(
    model: art.Model[Any, Any], messages: Messages, sampling: Sampling, **extra: Any
) -> Choice:
    """Sample one assistant turn. `extra` passes tools, tool_choice, stop, ..."""
    response: ChatCompletion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(sampling.step),
        messages=messages,
        **sampling.request(),
        **extra,
    )
    return response.choices[0]


async def single_turn(
    model: art.Model[Any, Any], item: Item, messages: Messages, sampling: Sampling
) -> art.Trajectory:
    """A one-turn episode: the prompt messages and the sampled Choice."""
    choice = await chat_turn(model, messages, sampling)
    return art.Trajectory(
        messages_and_choices=[*messages, choice],
        reward=0.0,
        metadata={"item_id": item.id},
        metrics={"truncated": choice.finish_reason == "length"},
    )
