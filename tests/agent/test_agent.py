"""The episode layer (rlvr.agent): plain functions as tools, one episode loop, both protocols.

Fast tests drive `tool_episode` with a scripted stand-in for the policy endpoint (fault
injection: tools that raise, unknown tools, bad arguments, truncated and refused turns) and with
a scripted policy (demonstrations). The slow test reads the session's `agent_run`
(tests/conftest.py): the tool agent below, written in a folder outside the repository and trained
1 real step after a warm start with `rlvr train file.py:make`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import art
import httpx
import openai
import pytest

import rlvr
from rlvr.agent import (
    Call,
    EpisodeEnd,
    ToolError,
    as_tool,
    as_tools,
    text_call,
    text_instructions,
    tool_episode,
)
from rlvr.agent.budget import approx_tokens
from rlvr.agent.episode import run_call
from rlvr.agent.tools import find_text_call, text_arguments
from rlvr.config import ConfigError
from rlvr.metrics import M
from rlvr.task_api.api import PluginError, Task
from rlvr.types import Item, Sampling
from tests.helpers.scripted import ScriptedPolicy

CAPITALS = {"france": "Paris", "peru": "Lima", "kenya": "Nairobi"}


def lookup(country: str) -> str:
    """Look up the capital of a country.

    Args:
        country: the country's name, e.g. France
    """
    return CAPITALS[country.strip().lower()]  # KeyError for the rest: a tool that raises


async def multiply(a: int, b: int = 2) -> int:
    """Multiply two whole numbers."""
    return a * b


def note(text: str, tags: list[str] | None = None) -> dict[str, Any]:
    """Keep a note."""
    return {"text": text, "tags": tags or []}


TOOLS = [lookup, multiply]
ITEM = Item(id="q1", prompt="What is the capital of Peru?", answer="Lima")
SAMPLING = Sampling(temperature=0.5, top_p=0.9, max_tokens=32, step=4)
MESSAGES = [
    {"role": "system", "content": "Answer with the capital."},
    {"role": "user", "content": ITEM.prompt},
]


# --- tools from functions -------------------------------------------------------------------------


async def play(
    policy: ScriptedPolicy, tools: list[Any] | None = None, **settings: Any
) -> art.Trajectory:
    """One episode of the test item against a scripted policy (TOOLS unless `tools`)."""
    return await tool_episode(policy, ITEM, MESSAGES, tools or TOOLS, SAMPLING, **settings)  # type: ignore[arg-type]


def test_the_schema_comes_from_the_signature_and_docstring() -> None:
    schema = as_tool(lookup).schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "lookup"
    assert function["description"] == "Look up the capital of a country."
    assert function["parameters"]["required"] == ["country"]
    assert function["parameters"]["properties"]["country"] == {
        "type": "string",
        "description": "the country's name, e.g. France",
    }
    assert json.loads(json.dumps(as_tool(multiply).schema()))["function"]["parameters"] == {
        "additionalProperties": False,
        "properties": {"a": {"type": "integer"}, "b": {"default": 2, "type": "integer"}},
        "required": ["a"],
        "type": "object",
    }


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda x: x, "give it a name"),
        (lambda *args: None, "give it a name"),
    ],
)
def test_what_cannot_be_a_tool_is_a_type_error(fn: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        as_tool(fn)


def test_variadic_parameters_are_refused() -> None:
    def spread(*words: str) -> str:
        return " ".join(words)

    with pytest.raises(TypeError, match="spread: parameter 'words'"):
        as_tool(spread)
    with pytest.raises(TypeError, match="two tools share"):
        as_tools([lookup, as_tool(multiply, name="LOOKUP")])


@pytest.mark.parametrize(
    ("name", "arguments", "rest", "observation", "failed"),
    [
        ("lookup", '{"country": "France"}', None, "Paris", False),
        ("LOOKUP", None, "peru", "Lima", False),
        ("multiply", '{"a": 6, "b": 7}', None, "42", False),
        ("multiply", None, "6 | 7", "42", False),
        ("multiply", None, "6 b:5", "30", False),
        ("multiply", '{"a": "6"}', None, "12", False),  # lax: "6" is a whole number
        (
            "lookup",
            '{"country": "Atlantis"}',
            None,
            "Error: lookup failed: KeyError: 'atlantis'",
            True,
        ),
        ("lookup", "{}", None, "Error: lookup: country: Field required", True),
        (
            "lookup",
            '{"country": "France", "city": 1}',
            None,
            "Error: lookup: city: Extra inputs",
            True,
        ),
        (
            "multiply",
            '{"a": "six"}',
            None,
            "Error: multiply: a: Input should be a valid integer",
            True,
        ),
        ("lookup", "{oops", None, "Error: lookup: arguments are not valid JSON", True),
        ("lookup", "[1]", None, "Error: lookup: arguments must be a JSON object", True),
        (
            "divide",
            "{}",
            None,
            "Error: unknown tool 'divide'; the tools are lookup, multiply",
            True,
        ),
        (None, "{}", None, "Error: unknown tool", True),
    ],
)
async def test_calls_are_validated_and_failures_are_one_line(
    name: str | None, arguments: str | None, rest: str | None, observation: str, failed: bool
) -> None:
    shown, ran = await run_call(as_tools(TOOLS), name, arguments, rest)
    assert shown.startswith(observation) and (ran is None) is failed
    assert "\n" not in shown


async def test_a_tool_error_raised_by_the_tool_is_shown_as_written() -> None:
    def read(id: str) -> str:
        """Read a page."""
        raise ToolError(f"no page {id!r}; search first")

    shown, ran = await run_call(as_tools([read]), "read", '{"id": "p9"}', None)
    assert (shown, ran) == ("Error: read: no page 'p9'; search first", None)


@pytest.mark.parametrize(
    ("tool", "rest", "expected"),
    [
        (lookup, "France", {"country": "France"}),
        (lookup, "'New Zealand'", {"country": "New Zealand"}),
        (lookup, "a | b", {"country": "a | b"}),  # one free parameter takes the whole line
        (multiply, "3 | 4", {"a": "3", "b": "4"}),
        (multiply, "b:4 3", {"a": "3", "b": "4"}),
        (note, "buy milk tags:home,shop", {"text": "buy milk", "tags": ["home", "shop"]}),
        (note, "at 10:30 sharp", {"text": "at 10:30 sharp"}),  # only parameter names are keys
        (note, "", {}),
    ],
)
def test_text_arguments(tool: Any, rest: str, expected: dict[str, Any]) -> None:
    assert text_arguments(as_tool(tool), rest) == expected


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (lookup, {"country": "Peru"}),
        (multiply, {"a": 3, "b": 4}),
        (multiply, {"a": 3}),
        (note, {"text": "call Ana back", "tags": ["work"]}),
    ],
)
def test_text_calls_read_back(tool: Any, arguments: dict[str, Any]) -> None:
    made = as_tool(tool)
    line = text_call(made, arguments)
    assert line.startswith(made.name.upper() + ":")
    parsed = made.validate_arguments(text_arguments(made, line.split(":", 1)[1]))
    assert parsed == made.validate_arguments(arguments)


# --- episodes with a scripted policy endpoint -----------------------------------------------------

EPISODE_TURNS = {
    "tools": [
        [("lookup", '{"country": "Atlantis"}')],
        [("lookup", '{"country": "Peru"}'), ("multiply", '{"a": 2}')],
        "Lima",
    ],
    "text": ["LOOKUP: Atlantis", "Let me check.\nlookup: Peru", "Lima"],
}


@pytest.mark.parametrize("protocol", ["tools", "text"])
async def test_an_episode_runs_tools_until_the_final_reply(protocol: str) -> None:
    policy = ScriptedPolicy(EPISODE_TURNS[protocol])
    trajectory = await play(policy, max_turns=5, protocol=protocol)
    request = policy.requests[0]
    assert request["model"] == "policy@4" and request["logprobs"] is True
    assert (request["temperature"], request["top_p"], request["max_tokens"]) == (0.5, 0.9, 32)
    schemas = [as_tool(t).schema() for t in TOOLS]
    if protocol == "tools":
        assert request["tools"] == trajectory.tools == schemas
        assert request["messages"][0] == MESSAGES[0]  # no text instructions
    else:
        assert "tools" not in request and trajectory.tools is None
        assert "LOOKUP: country" in request["messages"][0]["content"]
    # The model saw exactly what the trajectory holds, observation by observation.
    assert policy.requests[-1]["messages"] == trajectory.messages()[:-1]
    observations = [m["content"] for m in trajectory.messages() if m["role"] in ("tool", "user")]
    assert observations[1].startswith("Error: lookup failed: KeyError")
    assert "Lima" in observations[2]
    calls = 3 if protocol == "tools" else 2
    shown = sum(approx_tokens(o) for o in observations[1:])
    assert trajectory.metrics == {
        "turns": 3,
        "tool_calls": calls,
        "tool_errors": 1,
        "tool_timeouts": 0.0,
        "truncated": 0.0,
        "turn_limit": 0.0,
        "cut_call": 0.0,
        "observation_tokens": shown,
        "trimmed_observations": 0.0,
        "observation_tokens_cut": 0.0,
        "calls/lookup": 1.0,
        "calls/multiply": calls - 2.0,
    }
    assert trajectory.metadata["end"] == EpisodeEnd.REPLIED
    assert rlvr.completion_text(trajectory) == rlvr.final_reply(trajectory) == "Lima"
    art.TrajectoryGroup([trajectory])  # a valid ART trajectory


async def test_auto_uses_tool_calls_when_the_model_emits_them() -> None:
    policy = ScriptedPolicy([[("lookup", '{"country": "Kenya"}')], "LOOKUP: Peru", "Nairobi"])
    trajectory = await play(policy, protocol="auto")
    roles = [m["role"] for m in trajectory.messages()]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert (
        "tools" in policy.requests[0] and "LOOKUP:" in policy.requests[0]["messages"][0]["content"]
    )
    assert trajectory.metrics["tool_calls"] == 2 and trajectory.metrics["tool_errors"] == 0


async def test_the_tools_protocol_ends_at_a_reply_without_tool_calls() -> None:
    policy = ScriptedPolicy(["LOOKUP: Peru"])
    trajectory = await play(policy, protocol="tools")
    assert trajectory.metrics["tool_calls"] == 0
    assert rlvr.final_reply(trajectory) == "LOOKUP: Peru"


async def test_the_turn_limit_ends_an_episode_of_whole_calls() -> None:
    policy = ScriptedPolicy([], then="LOOKUP: Peru")
    trajectory = await play(policy, max_turns=3, protocol="text")
    assert len(policy.requests) == 3
    assert trajectory.metrics["turn_limit"] == 1.0 and trajectory.metrics["truncated"] == 0.0
    assert trajectory.metadata["end"] == EpisodeEnd.TURN_LIMIT
    assert rlvr.final_reply(trajectory) is None
    assert "One turn left" in policy.requests[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("protocol", ["text", "tools"])
async def test_a_cut_turn_that_calls_a_tool_ends_the_episode_without_running_it(
    protocol: str,
) -> None:
    calls = [("lookup", '{"country": "Peru"}')]
    turn = calls if protocol == "tools" else "LOOKUP: Peru"
    ran: list[str] = []

    def lookup(country: str) -> str:
        """Capital of a country."""
        ran.append(country)
        return "Lima"

    policy = ScriptedPolicy([turn, turn, "Lima"], cut=frozenset({1}))
    trajectory = await play(policy, [lookup], max_turns=5, protocol=protocol)
    # The whole first call ran; the cut second one did not, and nothing was asked after it.
    assert ran == ["Peru"] and len(policy.requests) == 2
    assert trajectory.metadata["end"] == EpisodeEnd.CUT_CALL
    assert trajectory.metrics["cut_call"] == 1.0 and trajectory.metrics["truncated"] == 1.0
    assert trajectory.metrics["turns"] == 2 and trajectory.metrics["tool_calls"] == 1
    assert trajectory.messages()[-1]["role"] == "assistant"  # the cut turn, trained on as sampled
    assert rlvr.final_reply(trajectory) is None


async def test_a_cut_final_reply_is_still_the_final_reply() -> None:
    policy = ScriptedPolicy(["LOOKUP: Peru", "Lima, the capital of Peru, is"], cut=frozenset({1}))
    trajectory = await play(policy, protocol="text")
    assert trajectory.metadata["end"] == EpisodeEnd.REPLIED
    assert trajectory.metrics["truncated"] == 1.0 and trajectory.metrics["cut_call"] == 0.0
    assert rlvr.final_reply(trajectory) == "Lima, the capital of Peru, is"


def _refused() -> openai.BadRequestError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(400, request=request, json={"error": "context length exceeded"})
    return openai.BadRequestError("context length exceeded", response=response, body=None)


async def test_a_refused_later_turn_ends_the_episode_a_refused_first_turn_raises() -> None:
    ended = await tool_episode(
        ScriptedPolicy(["LOOKUP: Peru", _refused()]),  # type: ignore[arg-type]
        ITEM,
        MESSAGES,
        TOOLS,
        SAMPLING,
        protocol="text",
    )
    assert ended.metadata["end"] == EpisodeEnd.POLICY_ERROR and ended.metrics["turns"] == 1
    with pytest.raises(openai.BadRequestError):
        await tool_episode(ScriptedPolicy([_refused()]), ITEM, MESSAGES, TOOLS, SAMPLING)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"protocol": "xml"}, "protocol='xml'"),
        ({"max_turns": 0}, "max_turns=0"),
        ({"observation_tokens": 10}, "observation_tokens=10: expected at least 24"),
    ],
)
async def test_bad_episode_settings_are_value_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await tool_episode(ScriptedPolicy([]), ITEM, MESSAGES, TOOLS, SAMPLING, **kwargs)  # type: ignore[arg-type]


# --- observations within a token budget ------------------------------------------------------

DOCUMENTS = {
    f"d{n}": "\n".join(
        [
            f"[d{n}] report {n}",
            *(
                f"Paragraph {k}: routine figures and minutes of the weekly meeting."
                for k in range(8)
            ),
            f"The warehouse expansion in region {n} was approved at ${n},000." if n == 7 else "",
            *(f"Appendix {k}: tables of regional statistics." for k in range(8)),
        ]
    )
    for n in range(1, 10)
}


def search(query: str) -> str:
    """Search the reports."""
    terms = set(query.lower().split())

    def best(text: str) -> str:  # the line that holds most of the query, as a snippet
        return max(text.splitlines()[1:], key=lambda line: len(terms & set(line.lower().split())))

    return "\n".join(f"[{key}] report {key[1:]}: {best(text)}" for key, text in DOCUMENTS.items())


def read(id: str) -> str:
    """Read one report."""
    return DOCUMENTS[id]


BUDGET_TURNS = {
    "text": ["SEARCH: warehouse expansion", "READ: d7", "Approved at $7,000."],
    "tools": [
        [("search", '{"query": "warehouse expansion"}')],
        [("read", '{"id": "d7"}')],
        "Approved at $7,000.",
    ],
}
CUT = re.compile(r"\[\.\.\. (\d+) tokens cut\]$")


@pytest.mark.parametrize("protocol", ["text", "tools"])
@pytest.mark.parametrize("budget", [None, 48, 96])
async def test_an_episode_holds_observations_to_the_budget(
    protocol: str, budget: int | None
) -> None:
    trajectory = await tool_episode(
        ScriptedPolicy(BUDGET_TURNS[protocol]),  # type: ignore[arg-type]
        ITEM,
        MESSAGES,
        [search, read],
        SAMPLING,
        max_turns=4,
        protocol=protocol,  # type: ignore[arg-type]
        observation_tokens=budget,
    )
    found, report = [m["content"] for m in trajectory.messages()[3:-1:2]]
    metrics = trajectory.metrics
    assert metrics["observation_tokens"] == approx_tokens(found) + approx_tokens(report)
    if budget is None:
        assert (found, report) == (search("warehouse expansion"), DOCUMENTS["d7"])
        assert metrics["trimmed_observations"] == metrics["observation_tokens_cut"] == 0
        return
    assert approx_tokens(found) <= budget and approx_tokens(report) <= budget
    cuts = [CUT.search(o) for o in (found, report)]
    assert all(cuts) and metrics["trimmed_observations"] == 2
    assert metrics["observation_tokens_cut"] == sum(int(c.group(1)) for c in cuts if c)
    assert "[d7] report 7: The warehouse expansion" in found  # the hit that holds the query
    # the read (asked only for an id) keeps the window around what the search asked for
    assert report.startswith("[d7] report 7") and "warehouse expansion" in report
    assert "Appendix 7" not in report and "Paragraph 3" not in report


async def test_a_script_plays_within_the_budget_too() -> None:
    turns = [Call(name="search", arguments={"query": "warehouse expansion"}), "done"]
    demo = await tool_episode(
        None, ITEM, MESSAGES, [search, read], Sampling(), protocol="text",
        script=lambda _, n: turns[n], observation_tokens=48,
    )  # fmt: skip
    assert demo.metrics["trimmed_observations"] == 1
    assert CUT.search(demo.messages()[3]["content"])


def test_the_loop_reports_the_budget_metrics_per_rollout() -> None:
    from rlvr.metrics import trajectory_metric_means

    made = [
        art.Trajectory(
            messages_and_choices=[{"role": "user", "content": "q"}],
            reward=0.0,
            metrics={"observation_tokens": tokens, "trimmed_observations": trimmed},
        )
        for tokens, trimmed in ((100.0, 1.0), (60.0, 0.0))
    ]
    means = trajectory_metric_means([art.TrajectoryGroup(made)])
    assert means["rollout/observation_tokens"] == 80.0
    assert means["rollout/trimmed_observations"] == 0.5


# --- the text protocol's instructions ---------------------------------------------------------


def _email_tools() -> list[Any]:
    from scenarios.email.store import InboxStore
    from scenarios.email.tools import inbox_tools

    return inbox_tools(InboxStore([]), "inbox-000")


def _multihop_tools() -> list[Any]:
    from scenarios.multihop.index import PassageIndex
    from scenarios.multihop.tools import corpus_tools

    return corpus_tools(PassageIndex([]), 3)


def _shown(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value)


@pytest.mark.parametrize(
    ("tools", "name", "values"),
    [
        (lambda: [lookup, multiply, note], "lookup", {"country": "Peru"}),
        (lambda: [lookup, multiply, note], "multiply", {"a": 3, "b": 4}),
        (lambda: [lookup, multiply, note], "note", {"text": "call Ana", "tags": ["work"]}),
        (_email_tools, "search", {"keywords": "invoice Acme", "after": "2024-03-01"}),
        (_email_tools, "search", {"keywords": "flight Lisbon", "sender": "reservations"}),
        (_email_tools, "read", {"id": "e012"}),
        (_multihop_tools, "search", {"query": "Who founded Davis Group?"}),
        (_multihop_tools, "read", {"passage_id": "p012"}),
    ],
)
def test_the_text_protocol_parses_what_its_instructions_ask_for(
    tools: Any, name: str, values: dict[str, Any]
) -> None:
    """A line written as the instructions' usage line says (the required arguments in place of
    their names, given optional ones as name:value) is the demonstrations' line, and parses
    back into the call."""
    by_name = as_tools(tools())
    instructions = text_instructions(by_name)
    assert "final answer" in instructions
    usage = next(line for line in instructions.splitlines() if line.startswith(f"{name.upper()}:"))
    line = usage.split(" - ", 1)[0]
    for param, value in values.items():
        line = line.replace(f"[{param}:VALUE]", f"{param}:{_shown(value)}")
        line = re.sub(rf"(?<=[:|] ){param}\b", _shown(value), line)
    line = re.sub(r" \[\w+:VALUE\]", "", line)
    tool = by_name[name]
    assert line == text_call(tool, values)
    found = find_text_call(f"Let me look.\n{line}", by_name)
    assert found is not None and found[0] is tool
    assert tool.validate_arguments(text_arguments(tool, found[1])) == tool.validate_arguments(
        values
    )


# --- scripted policies (demonstrations) -----------------------------------------------------------


def script(messages: list[dict[str, Any]], turn: int) -> Call | list[Call] | str:
    return [
        Call(name="lookup", arguments={"country": "Peru"}),
        [Call(name="multiply", arguments={"a": 3, "b": 4})],
        "Lima",
    ][turn]


@pytest.mark.parametrize("protocol", ["tools", "text"])
async def test_a_script_plays_the_same_episode(protocol: str) -> None:
    demo = await tool_episode(
        None, ITEM, MESSAGES, TOOLS, Sampling(), protocol=protocol, script=script
    )  # type: ignore[arg-type]
    assert demo.metadata["policy"] == "scripted"
    assert demo.metrics["tool_calls"] == 2 and demo.metrics["tool_errors"] == 0
    assert rlvr.final_reply(demo) == "Lima"
    # A model that replies with the script's messages gets the same episode.
    assistant = [m for m in demo.messages() if m["role"] == "assistant"]
    turns: list[Any] = [
        [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
        if m.get("tool_calls")
        else m["content"]
        for m in assistant
    ]
    replayed = await tool_episode(
        ScriptedPolicy(turns), ITEM, MESSAGES, TOOLS, Sampling(), protocol=protocol
    )  # type: ignore[arg-type]
    assert without_ids(replayed.messages()) == without_ids(demo.messages())
    assert replayed.metrics == demo.metrics


def without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without call ids (a server and a script number calls their own way)."""
    return [
        {
            k: [{**c, "id": ""} for c in v] if k == "tool_calls" else v
            for k, v in m.items()
            if k != "tool_call_id"
        }
        for m in messages
    ]


# --- the Environment protocol's hooks -------------------------------------------------------------


class Bare:
    """An environment written before the hooks were declared."""

    name = "bare"
    default_scorer = "verifier"

    def load(self) -> list[Item]:
        return [ITEM]

    async def rollout(self, model: Any, item: Item, sampling: Sampling) -> art.Trajectory:
        raise NotImplementedError

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return 0.0

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        return 0.0


class Based(rlvr.EnvironmentBase, Bare):
    pass


def test_the_hooks_are_declared_with_defaults() -> None:
    cfg = rlvr.build_config({"task": "x"})
    with pytest.raises(
        PluginError, match=r"missing demonstrate, judged_check, ruler_rubric.*EnvironmentBase"
    ):
        Task(name="bare", make=Bare).build(cfg)
    built = Task(name="based", make=Based).build(cfg)
    assert isinstance(built, rlvr.Environment)
    assert (built.demonstrate, built.judged_check, built.ruler_rubric) == (None, False, None)


def test_sft_without_demonstrate_is_a_config_error() -> None:
    from rlvr.training.warmstart import check_can_demonstrate

    with pytest.raises(ConfigError, match="sft_steps=2: task bare has no demonstrate"):
        check_can_demonstrate(rlvr.build_config({"task": "x", "sft_steps": 2}), Based())


# --- a user's tool agent, trained for real --------------------------------------------------------


@pytest.mark.slow
def test_a_users_tool_agent_trains_from_its_file(agent_run) -> None:
    """`rlvr train` of USER_AGENT (tests/helpers/agents.py, text protocol) from its own file: the
    session's shared run (tests/conftest.py), a 3-step warm start on 6 demonstrations, then 1 RL
    step."""
    from rlvr.runs import store

    rows = [
        r
        for r in (row.on_disk() for row in store.read_metrics(agent_run.run_dir))
        if M.REWARD_MEAN in r
    ]
    assert [r[M.STEP] for r in rows] == [1]
    for row in rows:
        for key in (
            "rollout/turns",
            "rollout/tool_calls",
            "rollout/tool_errors",
            "rollout/observation_tokens",
            "rollout/trimmed_observations",
        ):
            assert isinstance(row[key], float), key
        assert 1.0 <= row["rollout/turns"] <= 2.0
    warm = next(
        r
        for r in (row.on_disk() for row in store.read_metrics(agent_run.run_dir))
        if "warm/demonstrations" in r
    )
    assert warm["warm/demonstrations"] == 6 and warm["warm/rejected"] == 0  # 3 steps x 2
