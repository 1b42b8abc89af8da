"""A user's tool agent as the file they would write outside the repository (capitals, two tools,
a scripted demonstration for the warm start); `PROTOCOL` is replaced by the protocol a test
chooses. The session's `agent_run` (tests/conftest.py) trains it, and the preflight and warm-start
budget tests read it."""

from __future__ import annotations

USER_AGENT = '''
"""A user's tool agent: capitals, two tools (one raises on an unknown country)."""
import rlvr

CAPITALS = {"france": "Paris", "peru": "Lima", "kenya": "Nairobi", "japan": "Tokyo",
            "chile": "Santiago", "egypt": "Cairo", "canada": "Ottawa", "india": "New Delhi"}


def lookup(country: str) -> str:
    """Look up the capital of a country."""
    return CAPITALS[country.strip().lower()]


def spell(word: str) -> str:
    """Spell a word letter by letter."""
    return "-".join(word)


def load():
    asked = ("What is the capital of {}?", "Which city is the capital of {}?")
    return [{"id": f"{c}-{n}", "prompt": q.format(c.title()), "answer": city, "data": {"country": c}}
            for c, city in CAPITALS.items() for n, q in enumerate(asked)]


def messages(item):
    return [{"role": "system", "content": "Answer with the city only."},
            {"role": "user", "content": item.prompt}]


async def rollout(model, item, sampling):
    return await rlvr.tool_episode(model, item, messages(item), [lookup, spell], sampling,
                                   max_turns=2, protocol="PROTOCOL")


async def demonstrate(item):
    turns = [rlvr.Call(name="lookup", arguments={"country": item.data["country"]}), item.answer]
    return await rlvr.tool_episode(None, item, messages(item), [lookup, spell], rlvr.Sampling(),
                                   max_turns=2, protocol="PROTOCOL", script=lambda _, n: turns[n])


def check(item, trajectory):
    return float(item.answer.lower() in (rlvr.final_reply(trajectory) or "").lower())


def make():
    return rlvr.environment(name="capitals", load=load, rollout=rollout, check=check,
                         demonstrate=demonstrate)
'''
