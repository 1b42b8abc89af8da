"""Fault injection: both judge scorers against a real HTTP server on 127.0.0.1 that answers 429,
5xx, hangs, malformed JSON, wrong counts and out-of-range scores on a schedule.

Every fault is retried and counted under its own `judge/...` key; a call that fails after its
retries skips the group (None), never scores it; the spend cap raises BudgetExhausted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import art
import pytest

from judges import open_judge
from judges.client import JudgeClient
from judges.rubric import RubricScorer
from judges.ruler import RulerScorer
from rlvr.config import RunConfig
from rlvr.types import BudgetExhausted, Item
from tests.helpers.fault_server import GOOD_SCORES, Fault, FaultServer

pytestmark = pytest.mark.slow

QUESTION = "A train leaves at 14:05 and arrives at 16:50. How long is the journey?"
ANSWERS = [
    "The journey takes 2 hours and 45 minutes.",
    "From 14:05 to 16:50 is 2 h 45 min.",
    "It takes about three hours.",
    "16:50 - 14:05 = 2:35, so 2 hours 35 minutes.",
]
TRUTHS = [1.0, 1.0, 0.0, 0.0]
ITEM = Item(
    id="train-times",
    prompt=QUESTION,
    answer="2 hours 45 minutes",
    data={
        "criteria": [
            {"text": "States a duration of 2 hours 45 minutes", "points": 5},
            {"text": "Shows how the duration was computed", "points": 2},
            {"text": "Gives a wrong duration", "points": -5},
        ]
    },
)


def make_group(n: int = 4) -> art.TrajectoryGroup:
    return art.TrajectoryGroup(
        [
            art.Trajectory(
                messages_and_choices=[
                    {"role": "system", "content": "Answer the question briefly."},
                    {"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": answer},
                ],
                reward=0.0,
                metrics={"independent_reward": truth},
            )
            for answer, truth in zip(ANSWERS[:n], TRUTHS[:n], strict=True)
        ]
    )


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer(hang_s=3.0) as running:
        yield running


def dotted(overrides: dict) -> dict:
    """judge_max_usd=... as the nested key judge.max_usd."""
    return {
        k.replace("judge_", "judge.", 1) if k.startswith("judge_") else k: v
        for k, v in overrides.items()
    }


def config(server: FaultServer, **overrides: object) -> RunConfig:
    values: dict = {
        "judge": "openai/gpt-4o-mini",  # litellm knows its price: cost and the cap are real
        "judge.base_url": server.base_url,
        # The server's hang is 3 s; a good reply takes milliseconds. Every timeout is waited out
        # (a call failing after its retries waits 9 of them: 4 calls, one at a time, in turn).
        "judge.timeout_s": 0.5,
        "judge.backoff_s": 0.01,
        "judge.max_retries": 3,
    }
    return RunConfig(**{**values, **dotted(overrides)})


def scorer_for(kind: str, judge: JudgeClient) -> RulerScorer | RubricScorer:
    return RulerScorer(judge) if kind == "ruler" else RubricScorer(judge)


RULER_FAULTS = [
    (Fault.RATE_LIMIT, "judge/rate_limited"),
    (Fault.SERVER_ERROR, "judge/server_errors"),
    (Fault.UNAVAILABLE, "judge/server_errors"),
    (Fault.HANG, "judge/timeouts"),
    (Fault.MALFORMED, "judge/invalid_output"),
    (Fault.WRONG_COUNT, "judge/invalid_output"),
    (Fault.OUT_OF_RANGE, "judge/invalid_output"),
    (Fault.WRONG_TYPE, "judge/invalid_output"),
]
RUBRIC_FAULTS = [
    (Fault.RATE_LIMIT, "judge/rate_limited"),
    (Fault.SERVER_ERROR, "judge/server_errors"),
    (Fault.HANG, "judge/timeouts"),
    (Fault.MALFORMED, "judge/invalid_output"),
    (Fault.WRONG_COUNT, "judge/invalid_output"),
    (Fault.WRONG_TYPE, "judge/invalid_output"),
]
CASES = [("ruler", f, m) for f, m in RULER_FAULTS] + [("rubric", f, m) for f, m in RUBRIC_FAULTS]


@pytest.mark.parametrize(("kind", "fault", "metric"), CASES, ids=[f"{k}-{f}" for k, f, _ in CASES])
async def test_one_fault_is_retried_and_counted(
    server: FaultServer, kind: str, fault: Fault, metric: str
) -> None:
    group = make_group()
    server.schedule([fault])
    async with open_judge(config(server)) as judge:
        scorer = scorer_for(kind, judge)
        scored = await scorer.score(group, ITEM)
        metrics = scorer.pop_metrics()

    assert scored is not None
    calls = 1 if kind == "ruler" else len(group.trajectories)
    assert metrics[metric] == 1
    assert metrics["judge/retries"] == 1
    assert metrics["judge/failures"] == 0
    assert metrics["judge/calls"] == calls
    assert metrics["judge/cost_usd"] > 0
    assert server.faults_served() == [fault] + [Fault.OK] * calls
    assert [t.metrics["independent_reward"] for t in scored.trajectories] == TRUTHS
    if kind == "ruler":
        assert [t.reward for t in scored.trajectories] == GOOD_SCORES[:4]
    else:
        assert all(0.0 <= t.reward <= 1.0 for t in scored.trajectories)
        assert all("rubric_verdicts" in t.metadata for t in scored.trajectories)
    assert [t.reward for t in group.trajectories] == [0.0] * 4  # input untouched


@pytest.mark.parametrize("kind", ["ruler", "rubric"])
@pytest.mark.parametrize(
    ("fault", "metric"),
    [
        (Fault.SERVER_ERROR, "judge/server_errors"),
        (Fault.OUT_OF_RANGE, "judge/invalid_output"),
        (Fault.HANG, "judge/timeouts"),
    ],
)
async def test_a_call_failing_after_retries_skips_the_group(
    server: FaultServer, kind: str, fault: Fault, metric: str
) -> None:
    if kind == "rubric" and fault is Fault.OUT_OF_RANGE:
        fault = Fault.WRONG_TYPE  # verdicts are booleans: their out-of-range is a wrong type
    group = make_group()
    retries = 2
    # Every request fails; one call at a time, so exactly one call runs out of retries first
    # (the rubric scorer then cancels the group's other calls).
    server.schedule([fault] * 20)
    async with open_judge(config(server, judge_max_retries=retries, judge_concurrency=1)) as judge:
        scorer = scorer_for(kind, judge)
        scored = await scorer.score(group, ITEM)
        metrics = scorer.pop_metrics()

    assert scored is None
    assert metrics["judge/failures"] == 1
    assert metrics["judge/retries"] >= retries
    assert metrics[metric] >= retries + 1
    assert metrics[metric] == len(server.log)  # every fault served was counted
    assert metrics[f"{kind}/groups_failed"] == 1 and metrics[f"{kind}/groups_scored"] == 0
    assert set(server.faults_served()) == {fault}
    assert [t.reward for t in group.trajectories] == [0.0] * 4
    assert all("ruler_score" not in t.metrics and not t.logs for t in group.trajectories)


async def test_slightly_out_of_range_scores_are_clamped_and_counted(server: FaultServer) -> None:
    server.schedule([Fault.SLIGHTLY_OUT])
    async with open_judge(config(server)) as judge:
        scorer = RulerScorer(judge)
        scored = await scorer.score(make_group(), ITEM)
        metrics = scorer.pop_metrics()
    assert scored is not None
    assert [t.reward for t in scored.trajectories] == [1.0] * 4
    assert metrics["judge/clamped"] == 4 and metrics["judge/retries"] == 0


@pytest.mark.parametrize("kind", ["ruler", "rubric"])
async def test_fenced_reply_is_parsed_without_retry(server: FaultServer, kind: str) -> None:
    server.schedule([Fault.FENCED] * 4)
    async with open_judge(config(server)) as judge:
        scorer = scorer_for(kind, judge)
        scored = await scorer.score(make_group(), ITEM)
        metrics = scorer.pop_metrics()
    assert scored is not None
    assert metrics["judge/retries"] == 0 and metrics["judge/invalid_output"] == 0


async def test_identical_trajectories_get_one_score_each(server: FaultServer) -> None:
    server.schedule([])
    group = art.TrajectoryGroup(
        [make_group(1).trajectories[0].model_copy(deep=True) for _ in range(3)]
    )
    async with open_judge(config(server)) as judge:
        scored = await RulerScorer(judge).score(group, ITEM)
    assert scored is not None and [t.reward for t in scored.trajectories] == [GOOD_SCORES[0]] * 3


async def test_an_unlabelled_group_gets_no_ground_truth_from_ruler(server: FaultServer) -> None:
    # ART's RULER copies each incoming reward into `independent_reward`; an unlabelled item's
    # rollouts have no truth, and a placeholder 0 read as one would fake judge agreement.
    server.schedule([])
    group = make_group()
    for trajectory in group.trajectories:
        trajectory.metrics.pop("independent_reward")
    unlabelled = ITEM.model_copy(update={"answer": None})
    async with open_judge(config(server)) as judge:
        scored = await RulerScorer(judge).score(group, unlabelled)
    assert scored is not None
    assert all("independent_reward" not in t.metrics for t in scored.trajectories)


async def test_client_error_is_not_retried_and_the_key_never_logged(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-fault-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server.schedule([Fault.UNAUTHORIZED])  # echoes the key it was sent, as OpenAI does
    caplog.set_level(logging.INFO)
    async with open_judge(config(server)) as judge:
        scorer = RulerScorer(judge)
        scored = await scorer.score(make_group(), ITEM)
        metrics = scorer.pop_metrics()
    assert scored is None
    assert metrics["judge/client_errors"] == 1 and metrics["judge/retries"] == 0
    assert metrics["judge/failures"] == 1
    assert "Incorrect API key" in caplog.text
    assert secret not in caplog.text


@pytest.mark.parametrize("kind", ["ruler", "rubric"])
async def test_spend_cap_raises_budget_exhausted(server: FaultServer, kind: str) -> None:
    server.schedule([])
    async with open_judge(config(server, judge_max_usd=1e-6)) as judge:
        scorer = scorer_for(kind, judge)
        first = await scorer.score(make_group(), ITEM)  # under the cap when it starts
        requests = len(server.log)
        assert first is not None and judge.spent_usd >= 1e-6
        with pytest.raises(BudgetExhausted, match=r"judge\.max_usd"):
            await scorer.score(make_group(), ITEM)
    assert len(server.log) == requests  # the call that would exceed the cap is never sent


async def test_zero_budget_sends_nothing(server: FaultServer) -> None:
    server.schedule([])
    async with open_judge(config(server, judge_max_usd=0.0)) as judge:
        with pytest.raises(BudgetExhausted):
            await RubricScorer(judge).score(make_group(), ITEM)
    assert server.log == []


@pytest.mark.parametrize(("concurrency", "expect_overlap"), [(1, False), (4, True)])
async def test_concurrency_limit(
    server: FaultServer, concurrency: int, expect_overlap: bool
) -> None:
    server.schedule([], delay_s=0.3)
    try:
        async with open_judge(config(server, judge_concurrency=concurrency)) as judge:
            assert await RubricScorer(judge).score(make_group(), ITEM) is not None
    finally:
        server.delay_s = 0.0
    assert len(server.log) == 4
    assert (server.max_overlap() > 1) is expect_overlap


async def test_requests_per_minute_limit_spaces_requests(server: FaultServer) -> None:
    server.schedule([])
    async with open_judge(config(server, judge_rpm=600)) as judge:  # one request per 0.1 s
        assert await RubricScorer(judge).score(make_group(), ITEM) is not None
    arrivals = [served.arrived for served in server.log]
    assert len(arrivals) == 4
    # Starts are 0.1 s apart on the client; arrival can jitter by a few ms, the span cannot shrink much.
    assert arrivals[-1] - arrivals[0] >= 0.25
