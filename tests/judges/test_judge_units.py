"""Judge logic without a judge: parsing, validation, clamping, schemas, pass rate, diagnostics."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time

import art
import litellm
import pytest
from art.rewards.ruler import Response

from judges.client import (
    CLAMP_TOLERANCE,
    Dialect,
    FaultKind,
    InvalidOutput,
    RequestRateLimiter,
    backoff_delay,
    clamp_score,
    classify,
    lenient_json,
    redact,
    response_format,
)
from judges.rubric import (
    Verdict,
    parse_verdicts,
    pass_rate,
    rubric_messages,
    rubric_schema,
    signal_counts,
    with_verdicts,
)
from judges.rubric_data import Criterion
from judges.ruler import parse_scores, requested_schema
from judges.ruler_schema import (
    LOCAL_EXPLANATION_CHARS,
    ONE_TOKEN_CHARS,
    SCORE_GRID,
    SLACK_PER_ENTRY,
    SLACK_PER_REPLY,
    RulerBudgetError,
    explanation_bound,
    inline_refs,
    is_unpinned_ruler,
    pin_schema,
    pinned_ruler_format,
    skeleton,
    trajectory_ids,
)

# --- lenient parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Sure! Here it is: {"a": 1} Hope that helps.', {"a": 1}),
        ('{"a": "line one\nline two\tTAB"}', {"a": "line one\nline two\tTAB"}),
    ],
)
def test_lenient_json_accepts(text: str, expected: dict) -> None:
    assert lenient_json(text) == expected


@pytest.mark.parametrize(
    "text", [None, "", "   ", '{"a": ', "no json here", "```json\n{oops}\n```"]
)
def test_lenient_json_rejects(text: str | None) -> None:
    with pytest.raises(InvalidOutput):
        lenient_json(text)


# --- clamping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected", "clamped"),
    [
        (0.0, 0.0, False),
        (0.5, 0.5, False),
        (1, 1.0, False),
        (1.04, 1.0, True),
        (-0.05, 0.0, True),
        (1 + CLAMP_TOLERANCE, 1.0, True),
    ],
)
def test_clamp_score_in_tolerance(value: float, expected: float, clamped: bool) -> None:
    assert clamp_score(value) == (expected, clamped)


@pytest.mark.parametrize("value", [7.5, 85, -1, float("nan"), float("inf"), "0.5", None, True])
def test_clamp_score_rejects(value: object) -> None:
    with pytest.raises(InvalidOutput):
        clamp_score(value)


# --- fault classification and backoff -----------------------------------------------------


def _wrapped(cls: type, cause: BaseException) -> Exception:
    """litellm reports a refused connection to an OpenAI-compatible server as a 500 whose cause
    is the connection error."""
    error = cls(message="Connection error.", llm_provider="openai", model="m")
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (InvalidOutput("bad"), FaultKind.INVALID_OUTPUT),
        (TimeoutError(), FaultKind.TIMEOUT),
        (litellm.Timeout(message="t", model="m", llm_provider="openai"), FaultKind.TIMEOUT),
        (
            litellm.RateLimitError(message="r", llm_provider="openai", model="m"),
            FaultKind.RATE_LIMITED,
        ),
        (
            litellm.InternalServerError(message="i", llm_provider="openai", model="m"),
            FaultKind.SERVER_ERROR,
        ),
        (
            litellm.ServiceUnavailableError(message="s", llm_provider="openai", model="m"),
            FaultKind.SERVER_ERROR,
        ),
        (
            litellm.AuthenticationError(message="a", llm_provider="openai", model="m"),
            FaultKind.CLIENT_ERROR,
        ),
        (
            litellm.BadRequestError(message="b", llm_provider="openai", model="m"),
            FaultKind.CLIENT_ERROR,
        ),
        (
            litellm.APIConnectionError(message="c", llm_provider="openai", model="m"),
            FaultKind.CONNECTION,
        ),
        (KeyError("k"), FaultKind.UNEXPECTED),
        (
            _wrapped(litellm.InternalServerError, ConnectionRefusedError(111, "refused")),
            FaultKind.CONNECTION,
        ),
        (_wrapped(litellm.InternalServerError, ValueError("boom")), FaultKind.SERVER_ERROR),
    ],
)
def test_classify(error: Exception, kind: FaultKind) -> None:
    assert classify(error) is kind


def test_backoff_grows_with_jitter_and_cap() -> None:
    rng = random.Random(0)
    delays = [backoff_delay(retry, 1.0, rng) for retry in range(1, 8)]
    for retry, delay in enumerate(delays, start=1):
        nominal = min(30.0, 2.0 ** (retry - 1))
        assert nominal / 2 <= delay <= nominal
    assert backoff_delay(1, 1.0, rng, retry_after_s=5.0) >= 5.0
    assert backoff_delay(1, 1.0, rng, retry_after_s=500.0) <= 30.0


async def test_rate_limiter_spaces_request_starts() -> None:
    limiter = RequestRateLimiter(rpm=1200)  # 0.05 s apart
    starts = []

    async def one() -> None:
        await limiter.acquire()
        starts.append(time.monotonic())

    await asyncio.gather(*(one() for _ in range(5)))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.05 - 0.002  # the event loop may wake a clock tick early


def test_redact_hides_env_keys_and_key_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "verysecretvalue123")
    text = redact("bad key verysecretvalue123 and sk-abcdefghijklmnop1234 seen")
    assert "verysecretvalue123" not in text
    assert "sk-abcdefghijklmnop1234" not in text
    assert text.count("[redacted]") == 2


def test_response_format_dialects() -> None:
    schema = {"type": "object"}
    assert response_format(Dialect.JSON_OBJECT, "n", schema) == {
        "type": "json_object",
        "schema": schema,
    }
    hosted = response_format(Dialect.JSON_SCHEMA, "n", schema)
    assert hosted["type"] == "json_schema"
    assert hosted["json_schema"]["schema"] == schema


@pytest.mark.parametrize(
    ("judge", "dialect", "pinned"),
    [
        ({"model": "local"}, Dialect.JSON_SCHEMA, True),  # rlvr's engine: OpenAI's wire, grammar
        ({"model": "openai/gpt-4o-mini"}, Dialect.JSON_SCHEMA, False),
        (  # a llama.cpp server of the user's: its dialect, and its grammar follows the schema
            {
                "model": "openai/x",
                "base_url": "http://127.0.0.1:8080/v1",
                "response_format": "json_object",
            },
            Dialect.JSON_OBJECT,
            True,
        ),
    ],
    ids=["local", "hosted", "llama-cpp-server"],
)
def test_judge_settings_choose_dialect_and_pinning(
    judge: dict, dialect: Dialect, pinned: bool
) -> None:
    from judges.client import JudgeSettings
    from rlvr.config import RunConfig

    settings = JudgeSettings.from_config(RunConfig(judge=judge))
    assert (settings.dialect, settings.pinned) == (dialect, pinned)


@pytest.mark.parametrize(
    ("judge", "timeout_s"),
    [
        ({"model": "local"}, 600.0),
        ({"model": "openai/gpt-4o-mini"}, 120.0),
        ({"model": "local", "timeout_s": 30}, 30.0),
        ({"model": "openai/gpt-4o-mini", "timeout_s": 45}, 45.0),
    ],
    ids=["local-default", "hosted-default", "local-set", "hosted-set"],
)
def test_judge_timeout_defaults_by_engine(judge: dict, timeout_s: float) -> None:
    from judges.client import JudgeSettings
    from rlvr.config import RunConfig

    assert JudgeSettings.from_config(RunConfig(judge=judge)).timeout_s == timeout_s


# --- RULER schema and validation ----------------------------------------------------------


def _ruler_prompt(ids: list[str]) -> list[dict]:
    body = "\n\n".join(
        f'<trajectory id="{i}">\n[{{"role": "assistant", "content": "<trajectory id=\\"9\\">"}}]\n</trajectory>'
        for i in ids
    )
    return [
        {"role": "system", "content": "grade"},
        {"role": "user", "content": f"Trajectories:\n\n{body}"},
    ]


def test_trajectory_ids_come_from_tag_lines_only() -> None:
    # A tag quoted inside a serialised message is escaped JSON on the same line: never counted.
    assert trajectory_ids(_ruler_prompt(["1", "2", "3"])) == ["1", "2", "3"]


@pytest.fixture(scope="module")
def grammar_tokenizer():
    """llguidance's view of the judge model's tokenizer (the local judge compiles schemas so)."""
    from transformers import AutoTokenizer

    from rlvr.engine.grammar import llg_tokenizer
    from rlvr.engine.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    return llg_tokenizer(tokenizer, len(tokenizer))


@pytest.mark.slow
def test_pinned_ruler_schema_compiles_for_the_local_engine(grammar_tokenizer) -> None:
    from rlvr.engine.grammar import grammar_for

    schema = pin_schema(requested_schema(None), ["1", "2", "3", "4"], pinned=True)
    assert "$ref" not in json.dumps(schema)
    assert [
        p["properties"]["trajectory_id"]["const"]
        for p in schema["properties"]["scores"]["prefixItems"]
    ] == ["1", "2", "3", "4"]
    grammar_for(schema, grammar_tokenizer)  # GrammarError if any keyword is unsupported


def test_pinned_ruler_schema_for_hosted_providers() -> None:
    schema = pin_schema(requested_schema(None), ["1", "2"], pinned=False)
    scores = schema["properties"]["scores"]
    assert scores["minItems"] == scores["maxItems"] == 2
    assert scores["items"]["properties"]["trajectory_id"]["enum"] == ["1", "2"]
    assert scores["items"]["properties"]["score"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert inline_refs(schema) == schema


def _arts_request(ids: list[str]) -> tuple[dict, dict, list[dict]]:
    """What ART's `ruler_score_group` sends through litellm: its `Response` as litellm turns a
    pydantic model into a response_format, the schema in it, and RULER's prompt."""
    from litellm.utils import type_to_response_format_param

    response_format = type_to_response_format_param(Response)
    assert response_format is not None
    return dict(response_format), response_format["json_schema"]["schema"], _ruler_prompt(ids)


@pytest.mark.parametrize(
    ("schema", "is_ruler"),
    [
        (Response.model_json_schema(), True),  # ART's RULER, as ART asks
        (pin_schema(Response.model_json_schema(), ["1", "2"], pinned=True), False),  # rlvr's own
        (pin_schema(Response.model_json_schema(), ["1", "2"], pinned=False), False),
        (rubric_schema(2, pinned=True), False),
        ({"type": "object"}, False),
    ],
    ids=["arts-ruler", "pinned-local", "pinned-hosted", "rubric", "any-object"],
)
def test_the_judge_server_pins_only_arts_unpinned_ruler_schema(
    schema: dict, is_ruler: bool
) -> None:
    assert is_unpinned_ruler(schema) is is_ruler


@pytest.mark.parametrize("ids", [["1"], ["1", "2", "3"], [str(i) for i in range(1, 9)]])
def test_arts_ruler_request_is_pinned_to_its_trajectories(ids: list[str]) -> None:
    response_format, schema, messages = _arts_request(ids)
    pinned = pinned_ruler_format(response_format, schema, messages, None, len)
    assert pinned is not None
    spec = pinned["json_schema"]
    assert spec["strict"] is True  # as litellm asked
    scores = spec["schema"]["properties"]["scores"]
    assert scores["minItems"] == scores["maxItems"] == len(ids)
    entries = scores["prefixItems"]
    assert [e["properties"]["trajectory_id"] for e in entries] == [{"const": i} for i in ids]
    assert all(e["properties"]["score"] == {"enum": SCORE_GRID} for e in entries)
    assert all(
        e["properties"]["explanation"]["maxLength"] == LOCAL_EXPLANATION_CHARS for e in entries
    )


def test_a_request_without_rulers_prompt_is_left_alone() -> None:
    response_format, schema, _ = _arts_request(["1"])
    plain = [{"role": "user", "content": "Score these."}]
    assert pinned_ruler_format(response_format, schema, plain, None, len) is None


@pytest.mark.parametrize(
    ("ids", "max_tokens", "share"),
    [
        (["1", "2"], None, LOCAL_EXPLANATION_CHARS),  # no budget asked for
        (["1", "2"], 10_000, LOCAL_EXPLANATION_CHARS),  # more than the explanations could use
        (["1", "2", "3"], 400, None),  # an equal share of what the skeleton leaves
    ],
)
def test_explanations_share_what_max_tokens_leaves(
    ids: list[str], max_tokens: int | None, share: int | None
) -> None:
    bound = explanation_bound(ids, max_tokens, len)
    fixed = len(skeleton(ids)) + SLACK_PER_ENTRY * len(ids) + SLACK_PER_REPLY
    expected = share if share is not None else (400 - fixed) // len(ids)
    assert bound["maxLength"] == expected
    if max_tokens is not None:
        assert fixed + len(ids) * bound["maxLength"] <= max_tokens
        assert bound["pattern"] == ONE_TOKEN_CHARS


def test_a_max_tokens_below_the_skeleton_is_refused_naming_it() -> None:
    ids = ["1", "2", "3"]
    fixed = len(skeleton(ids)) + SLACK_PER_ENTRY * len(ids) + SLACK_PER_REPLY
    with pytest.raises(RulerBudgetError, match=f"^max_tokens: 20 .* needs at least {fixed}$"):
        explanation_bound(ids, 20, len)


@pytest.mark.slow
def test_a_budgeted_ruler_schema_compiles_and_its_longest_reply_fits(grammar_tokenizer) -> None:
    """The pinned schema with a max_tokens budget compiles for the local judge, and the longest
    reply it admits (every explanation at its bound, the widest scores) fits max_tokens in the
    judge model's own tokens."""
    from transformers import AutoTokenizer

    from rlvr.engine.grammar import grammar_for
    from rlvr.engine.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    ids = [str(i) for i in range(1, 9)]
    max_tokens = 320

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    response_format, schema, messages = _arts_request(ids)
    pinned = pinned_ruler_format(response_format, schema, messages, max_tokens, count)
    assert pinned is not None
    grammar_for(pinned["json_schema"]["schema"], grammar_tokenizer)
    share = pinned["json_schema"]["schema"]["properties"]["scores"]["prefixItems"][0]["properties"][
        "explanation"
    ]["maxLength"]
    assert share > 0
    longest = {
        "scores": [
            {"trajectory_id": i, "explanation": ("a;" * share)[:share], "score": 0.05} for i in ids
        ]
    }
    assert count(json.dumps(longest, separators=(", ", ": "))) <= max_tokens


def _scores(*pairs: tuple[str, object]) -> dict:
    return {"scores": [{"trajectory_id": i, "explanation": "e", "score": s} for i, s in pairs]}


def test_parse_scores_reorders_by_id_and_counts_clamps() -> None:
    response, clamps = parse_scores(
        _scores(("2", 0.2), ("trajectory 1", 1.05), ("3", 0.5)), ["1", "2", "3"]
    )
    assert [(s.trajectory_id, s.score) for s in response.scores] == [
        ("1", 1.0),
        ("2", 0.2),
        ("3", 0.5),
    ]
    assert clamps == 1


@pytest.mark.parametrize(
    "data",
    [
        _scores(("1", 0.5)),  # too few
        _scores(("1", 0.5), ("2", 0.5), ("3", 0.5), ("4", 0.5)),  # too many
        _scores(("1", 0.5), ("1", 0.6), ("2", 0.1)),  # duplicate id
        _scores(("1", 0.5), ("2", 7.5), ("3", 0.1)),  # another scale
        _scores(("1", 0.5), ("2", "high"), ("3", 0.1)),  # not a number
        {"rankings": []},  # wrong shape
        [],
    ],
)
def test_parse_scores_rejects(data: object) -> None:
    with pytest.raises(InvalidOutput):
        parse_scores(data, ["1", "2", "3"])


# --- rubric ------------------------------------------------------------------------------

CRITERIA = [
    Criterion(text="Mentions the dose", points=5),
    Criterion(text="Advises seeing a doctor", points=3),
    Criterion(text="Recommends an unproven remedy", points=-4),
]


def _verdicts(*met: bool) -> list[Verdict]:
    return [
        Verdict(criterion=i, text=c.text, points=c.points, met=m, rationale="r")
        for i, (c, m) in enumerate(zip(CRITERIA, met, strict=True), start=1)
    ]


@pytest.mark.parametrize(
    ("met", "rate"),
    [
        ((True, True, False), 1.0),
        ((True, False, False), 5 / 8),
        ((False, True, False), 3 / 8),
        ((True, True, True), 4 / 8),  # the undesirable one costs its points
        ((False, False, True), 0.0),  # clipped at 0
        ((False, False, False), 0.0),
    ],
)
def test_pass_rate_with_points(met: tuple[bool, ...], rate: float) -> None:
    assert pass_rate(_verdicts(*met)) == pytest.approx(rate)


def test_pass_rate_unweighted_is_passed_over_total() -> None:
    criteria = [Criterion(text=f"c{i}") for i in range(4)]
    verdicts = [
        Verdict(criterion=i + 1, text=c.text, points=1, met=i < 3, rationale="")
        for i, c in enumerate(criteria)
    ]
    assert pass_rate(verdicts) == pytest.approx(0.75)


def test_verdict_passes_on_the_good_side() -> None:
    assert [v.passed for v in _verdicts(True, False, True)] == [True, False, False]
    assert [v.passed for v in _verdicts(False, True, False)] == [False, True, True]


def test_parse_verdicts_reorders_and_validates() -> None:
    data = {
        "verdicts": [
            {"criterion": 3, "rationale": "x", "met": False},
            {"criterion": "1", "met": "true"},
            {"criterion": 2, "rationale": "y", "met": True},
        ]
    }
    verdicts, clamps = parse_verdicts(data, CRITERIA)
    assert [(v.criterion, v.met) for v in verdicts] == [(1, True), (2, True), (3, False)]
    assert verdicts[0].rationale == "" and clamps == 0


@pytest.mark.parametrize(
    "data",
    [
        {"verdicts": [{"criterion": 1, "met": True}, {"criterion": 2, "met": True}]},
        {"verdicts": [{"criterion": i, "met": True} for i in (1, 2, 2)]},
        {"verdicts": [{"criterion": i, "met": "maybe"} for i in (1, 2, 3)]},
        {"verdicts": [{"criterion": i, "met": True} for i in (1, 2, 4)]},
        {"scores": []},
    ],
)
def test_parse_verdicts_rejects(data: dict) -> None:
    with pytest.raises(InvalidOutput):
        parse_verdicts(data, CRITERIA)


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "portable"])
def test_rubric_schema_fixes_the_count(pinned: bool) -> None:
    schema = rubric_schema(5, pinned)
    verdicts = schema["properties"]["verdicts"]
    assert verdicts["minItems"] == verdicts["maxItems"] == 5
    if pinned:
        assert [p["properties"]["criterion"]["const"] for p in verdicts["prefixItems"]] == [
            1,
            2,
            3,
            4,
            5,
        ]
    else:
        assert verdicts["items"]["properties"]["criterion"]["enum"] == [1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "portable"])
def test_rubric_schema_compiles_for_the_local_engine(grammar_tokenizer, pinned: bool) -> None:
    from rlvr.engine.grammar import grammar_for

    grammar_for(rubric_schema(5, pinned), grammar_tokenizer)


def test_rubric_prompt_lists_every_criterion_once() -> None:
    messages = rubric_messages(
        [{"role": "user", "content": "How much ibuprofen?"}], "Take 200 mg.", CRITERIA
    )
    user = messages[-1]["content"]
    assert all(f"{i}. {c.text}" in user for i, c in enumerate(CRITERIA, start=1))
    assert "How much ibuprofen?" in user and "Take 200 mg." in user


def test_signal_counts_over_a_group() -> None:
    table = [
        _verdicts(True, False, False),
        _verdicts(True, True, False),
        _verdicts(True, False, False),
    ]
    # criterion 1 always passes, 3 (undesirable, never met) always passes, 2 varies
    assert signal_counts(table) == (2, 0)
    assert signal_counts([_verdicts(False, False, True)] * 2) == (0, 3)


def test_with_verdicts_copies_and_keeps_the_truth() -> None:
    original = art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
        ],
        reward=0.0,
        metrics={"independent_reward": 1.0},
    )
    scored = with_verdicts(original, _verdicts(True, False, False))
    assert scored.reward == pytest.approx(5 / 8)
    assert scored.metrics["independent_reward"] == 1.0
    assert [v["criterion"] for v in json.loads(scored.metadata["rubric_verdicts"])] == [1, 2, 3]
    assert len(scored.logs) == 3 and original.logs == [] and original.reward == 0.0
    assert "rubric_verdicts" not in original.metadata


@pytest.mark.parametrize("cap", [None, 0.5])
def test_the_judge_client_is_the_judge_rlvr_reads(cap) -> None:
    """rlvr reads a judge only through rlvr.types.Judge: the spend and the cap."""
    from judges.client import JudgeClient, JudgeSettings
    from rlvr.config import RunConfig
    from rlvr.types import Judge

    client = JudgeClient(
        JudgeSettings.from_config(RunConfig(judge="openai/x", **{"judge.max_usd": cap}))
    )
    assert isinstance(client, Judge)
    client.spent_usd = 0.6
    assert client.max_usd == cap
    assert client.budget_exhausted is (cap is not None)
