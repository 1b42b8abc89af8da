"""What a tool episode costs in the model's real tokens (rlvr.agent.tokens), and the prompt layout
that lets every item of a task share the system prompt and tool protocol as a token prefix.

The slow tests use SmolLM2's real tokenizer and chat template on the oracle's episodes.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from rlvr.agent import text_instructions
from rlvr.agent.tokens import episode_tokens, rendered, shared_prefix
from tests.helpers.token_profile import environment_for, tool_set


@pytest.mark.parametrize(
    ("prompts", "length"),
    [
        ([], 0),
        ([[1, 2, 3]], 3),
        ([[1, 2, 3], [1, 2, 4]], 2),
        ([[1, 2, 3], [1, 2]], 2),
        ([[1, 2, 3], [1, 2, 3], [9]], 0),
    ],
)
def test_shared_prefix(prompts: list[list[int]], length: int) -> None:
    assert shared_prefix(prompts) == length


@functools.cache
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from rlvr.engine.models import DEFAULT_MODEL, resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))


async def profiled(task: str, level: str, protocol: str, budget: Any = "default") -> list[Any]:
    environment = environment_for(task, level, protocol, 40, budget)
    profiles = []
    for item in environment.load()[:24]:
        demo = await environment.demonstrate(item)
        tools = tool_set(task, environment, item)
        protocol_text = text_instructions(tools) if protocol != "tools" else ""
        profiles.append((demo, episode_tokens(demo, tokenizer(), protocol_text, list(tools))))
    return profiles


SETTINGS = [
    ("email", "medium", "text"),
    ("email", "hard", "text"),
    ("email", "easy", "text"),
    ("email", "medium", "tools"),
    ("multihop", "medium", "text"),
    ("multihop", "hard", "tools"),
]


@pytest.mark.slow  # the real tokenizer (converted from the GGUF once per machine)
@pytest.mark.parametrize(("task", "level", "protocol"), SETTINGS)
async def test_every_item_shares_the_system_prompt_and_protocol_as_a_token_prefix(
    task: str, level: str, protocol: str
) -> None:
    """The first prompts of different items (different inboxes, questions) share at least the
    whole system turn: the task's instructions and the tool protocol, tokens the engine's
    shared-prefix prefill and prefix cache compute once."""
    profiles = await profiled(task, level, protocol)
    demo, first = profiles[0]
    system_turn = len(rendered(tokenizer(), demo.messages()[:1], demo.tools or None))
    assert system_turn == first.system + first.protocol
    assert first.protocol > 0
    assert shared_prefix(p.first_prompt for _, p in profiles) >= system_turn


@pytest.mark.slow
@pytest.mark.parametrize(("task", "level", "protocol"), SETTINGS)
async def test_an_episodes_parts_add_up_to_its_sequence(
    task: str, level: str, protocol: str
) -> None:
    for demo, tokens in await profiled(task, level, protocol):
        parts = tokens.system + tokens.protocol + tokens.question
        assert parts + tokens.observation_total + tokens.replies == tokens.sequence
        assert len(tokens.turns) == demo.metrics["turns"]
        assert tokens.turns[0].prompt == len(tokens.first_prompt)
        # each turn's prompt is the previous one, its reply and the observations after it
        for before, after in zip(tokens.turns, tokens.turns[1:], strict=False):
            assert after.prompt == before.prompt + before.reply + before.observation
        assert sum(t.new for t in tokens.turns) == tokens.turns[-1].prompt


@pytest.mark.slow
@pytest.mark.parametrize("task", ["email", "multihop"])
async def test_the_default_budget_spends_fewer_real_tokens_per_episode(task: str) -> None:
    budgeted = [t.sequence for _, t in await profiled(task, "medium", "text")]
    whole = [t.sequence for _, t in await profiled(task, "medium", "text", None)]
    assert sum(budgeted) < 0.9 * sum(whole)
