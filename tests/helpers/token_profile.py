"""The token profile of a tool task's oracle episodes, in the policy's real tokens (a measuring
helper, not a test): per episode and per turn, what the system prompt, the tool protocol, the
question, the observations and the replies cost, and how much of the first prompt a group's
rollouts and a task's items share.

    .venv/bin/python -m tests.token_profile email [difficulty] [protocol] [items] [budget]
    .venv/bin/python -m tests.token_profile multihop medium text 60 none

`budget` is the task's observation_tokens option: a number, `none`, or (left out) its default.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from typing import Any

from rlvr.agent import as_tools, text_instructions
from rlvr.agent.tokens import EpisodeTokens, episode_tokens, shared_prefix
from rlvr.engine.models import DEFAULT_MODEL, resolve_model

GROUP_SIZE = 8
EPISODES_SHOWN = 5


def environment_for(
    task: str, difficulty: str, protocol: str, items: int, budget: int | str | None = "default"
) -> Any:
    """The task's environment; `budget` is its observation_tokens option ("default": the task's)."""
    chosen = {} if budget == "default" else {"observation_tokens": budget}
    if task == "email":
        from scenarios.email import Options as EmailOptions
        from scenarios.email.environment import make_environment as make_email

        return make_email(
            EmailOptions(difficulty=difficulty, tool_protocol=protocol, num_items=items, **chosen)
        )
    from scenarios.multihop import Options as MultihopOptions
    from scenarios.multihop.environment import make_environment as make_multihop

    return make_multihop(
        MultihopOptions(difficulty=difficulty, tool_protocol=protocol, num_items=items, **chosen)
    )


def tool_set(task: str, environment: Any, item: Any) -> dict[str, Any]:
    if task == "email":
        from scenarios.email.tools import inbox_tools

        return as_tools(inbox_tools(environment.store, item.data["inbox"]))
    from scenarios.multihop.tools import corpus_tools

    return as_tools(corpus_tools(environment.index, environment.top_k))


async def profile(
    task: str, difficulty: str, protocol: str, count: int, budget: int | str | None = "default"
) -> tuple[list[EpisodeTokens], float]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))
    environment = environment_for(task, difficulty, protocol, max(count, 10), budget)
    items = environment.load()[:count]
    episodes, solved = [], 0.0
    for item in items:
        demo = await environment.demonstrate(item)
        solved += await environment.check(item, demo)
        tools = tool_set(task, environment, item)
        instructions = text_instructions(tools) if protocol != "tools" else ""
        episodes.append(episode_tokens(demo, tokenizer, instructions, list(tools)))
    return episodes, solved / len(items)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def report(task: str, difficulty: str, protocol: str, episodes: list[EpisodeTokens]) -> str:
    tools = sorted({name for e in episodes for name in e.observations})
    cached = [sum(t.new for t in e.turns) for e in episodes]
    rows = [
        ("system prompt (task)", mean([e.system for e in episodes])),
        ("tool protocol", mean([e.protocol for e in episodes])),
        ("question", mean([e.question for e in episodes])),
        *(
            (f"observations: {t}", mean([e.observations.get(t, 0) for e in episodes]))
            for t in tools
        ),
        ("replies", mean([e.replies for e in episodes])),
        ("episode sequence (trained)", mean([e.sequence for e in episodes])),
        ("prefill, no prefix cache", mean([e.prefill for e in episodes])),
        ("prefill, prefix cache over turns", mean(cached)),
        (
            f"first prompt (a group of {GROUP_SIZE} shares it)",
            mean([len(e.first_prompt) for e in episodes]),
        ),
        ("prefix shared by every item", shared_prefix(e.first_prompt for e in episodes)),
    ]
    lines = [f"{task} {difficulty} {protocol}: {len(episodes)} oracle episodes (mean tokens)"]
    lines += [f"  {name:<44} {value:8.1f}" for name, value in rows]
    most = max(len(e.turns) for e in episodes)
    lines.append("  turn  episodes   prompt     new   reply  observation")
    for n in range(most):
        turns = [e.turns[n] for e in episodes if len(e.turns) > n]
        lines.append(
            f"  {n + 1:>4} {len(turns):>9} {mean([t.prompt for t in turns]):8.1f}"
            f" {mean([t.new for t in turns]):7.1f} {mean([t.reply for t in turns]):7.1f}"
            f" {mean([t.observation for t in turns]):12.1f}"
        )
    largest = max(t.observation for e in episodes for t in e.turns)
    lines.append(f"  largest single turn's observations: {largest} tokens")
    lines.append(f"  the first {EPISODES_SHOWN} episodes; per turn: prompt/reply/observation")
    for e in episodes[:EPISODES_SHOWN]:
        seen = " ".join(f"{k} {v}" for k, v in sorted(e.observations.items()))
        turns = "  ".join(f"{t.prompt}/{t.reply}/{t.observation}" for t in e.turns)
        lines.append(
            f"  system {e.system} protocol {e.protocol} question {e.question} {seen} "
            f"replies {e.replies} sequence {e.sequence} | {turns}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    task = argv[0] if argv else "email"
    difficulty = argv[1] if len(argv) > 1 else "medium"
    protocol = argv[2] if len(argv) > 2 else "text"
    count = int(argv[3]) if len(argv) > 3 else 60
    budget: int | str | None = "default"
    if len(argv) > 4:
        budget = None if argv[4] == "none" else int(argv[4])
    episodes, solved = asyncio.run(profile(task, difficulty, protocol, count, budget))
    print(report(task, difficulty, protocol, episodes))
    print(f"  oracle solve rate: {solved:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
