"""The judges against the real local judge: rlvr's engine serving SmolLM2-135M on 127.0.0.1
(judges.server, a child process), with structured output.

One local judge serves the scoring tests of this module; the lifecycle tests start their own, since
what they check is that a local judge starts lazily and never outlives its owner.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import art
import httpx
import litellm
import pytest
from art.rewards import ruler_score_group

from judges import open_judge
from judges.client import LOCAL_MODEL_ID, JudgeClient, JudgeSettings
from judges.local import LocalJudge, LocalJudgeSettings, ServerProcessError
from judges.rubric import RubricScorer
from judges.ruler import RulerScorer
from judges.server import SERVED_NAME
from rlvr.config import RunConfig
from rlvr.types import Item
from tests.helpers import warm
from tests.helpers.repo import ROOT
from tests.helpers.tiny_runs import tiny_model_path

# The lifecycle tests' local judge serves the tiny random model: when it starts and stops is the
# claim, not what it answers (the scoring tests' judge is SmolLM2-135M).
TINY_JUDGE = {"model": "local", "local_model": str(tiny_model_path())}

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France? Answer in one short sentence."


@pytest.fixture(scope="module")
def local_judge() -> Iterator[LocalJudge]:
    running = LocalJudge(LocalJudgeSettings.default())
    asyncio.run(running.ensure_started())
    yield running
    running.stop()


def local_client(local_judge: LocalJudge) -> JudgeClient:
    cfg = RunConfig(judge={"model": "local", "base_url": local_judge.base_url, "timeout_s": 600})
    return JudgeClient(JudgeSettings.from_config(cfg), endpoint_key=local_judge.key)


async def sample_answers(local_judge: LocalJudge, n: int) -> list[str]:
    """Real policy answers: SmolLM2 at T=1 from the same server (seeded), in flight together as a
    rollout group's are (the server decodes them in one batch)."""
    responses = await asyncio.gather(
        *(
            litellm.acompletion(
                model=LOCAL_MODEL_ID,
                api_base=local_judge.base_url,
                api_key=local_judge.key,
                messages=[{"role": "user", "content": QUESTION}],
                temperature=1.0,
                max_tokens=32,
                seed=seed,
            )
            for seed in range(n)
        )
    )
    return [response.choices[0].message.content or "" for response in responses]


def group_of(answers: list[str]) -> art.TrajectoryGroup:
    return art.TrajectoryGroup(
        [
            art.Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": answer},
                ],
                reward=0.0,
                metrics={"independent_reward": float("paris" in answer.lower())},
            )
            for answer in answers
        ]
    )


async def test_ruler_scores_a_group_of_four_real_trajectories(local_judge: LocalJudge) -> None:
    answers = await sample_answers(local_judge, 4)
    assert len(set(answers)) > 1  # a real group, not one answer four times
    group = group_of(answers)
    scorer = RulerScorer(local_client(local_judge))
    scored = await scorer.score(group, Item(id="capital", prompt=QUESTION))
    metrics = scorer.pop_metrics()

    assert scored is not None, "the local judge failed after its retries"
    assert len(scored.trajectories) == 4
    assert all(0.0 <= t.reward <= 1.0 for t in scored.trajectories)
    assert [t.metrics["ruler_score"] for t in scored.trajectories] == [
        t.reward for t in scored.trajectories
    ]
    assert [t.metrics["independent_reward"] for t in scored.trajectories] == [
        t.metrics["independent_reward"] for t in group.trajectories
    ]
    assert all(
        any(line.startswith("RULER explanation") for line in t.logs) for t in scored.trajectories
    )
    assert metrics["judge/calls"] == 1 and metrics["judge/failures"] == 0
    assert metrics["judge/prompt_tokens"] > 0 and metrics["judge/cost_usd"] == 0


ANSWERS = [
    "Paris.",
    "Lyon.",
    "The capital of France is Paris.",
    "Marseille, I think.",
    "paris",
    "I do not know.",
    "It is Paris, on the Seine.",
    "Berlin.",
]


@pytest.mark.parametrize("size", [2, 3, 8])
async def test_arts_own_ruler_scores_a_group_on_the_local_judge(
    local_judge: LocalJudge, size: int
) -> None:
    """The call an ART user writes, unchanged, pointed at the local judge `rlvr judge serve` runs:
    ART asks for a plain list of scores, the local judge pins it to the group's trajectories. A small
    max_tokens keeps it cheap: the local judge sizes the explanations to fit it."""
    group = group_of(ANSWERS[:size])
    judged = await ruler_score_group(
        group,
        f"hosted_vllm/{SERVED_NAME}",
        extra_litellm_params={
            "api_base": local_judge.base_url,
            "api_key": local_judge.key,
            "max_tokens": 40 * size,
        },
    )
    assert judged is not None
    assert len(judged.trajectories) == size
    assert all(0.0 <= t.reward <= 1.0 for t in judged.trajectories)
    assert [t.metrics["ruler_score"] for t in judged.trajectories] == [
        t.reward for t in judged.trajectories
    ]
    assert all(any(x.startswith("RULER explanation") for x in t.logs) for t in judged.trajectories)


async def test_a_ruler_reply_that_cannot_fit_max_tokens_is_a_400_naming_it(
    local_judge: LocalJudge,
) -> None:
    with pytest.raises(Exception, match="max_tokens: 20 cannot hold a RULER reply scoring 3"):
        await ruler_score_group(
            group_of(ANSWERS[:3]),
            f"hosted_vllm/{SERVED_NAME}",
            extra_litellm_params={
                "api_base": local_judge.base_url,
                "api_key": local_judge.key,
                "max_tokens": 20,
                "num_retries": 0,
            },
        )


FIVE_CRITERIA = [
    {"text": "Names Paris as the capital of France", "points": 5},
    {"text": "Answers in a single sentence", "points": 2},
    {"text": "Mentions a landmark of the city", "points": 1},
    {"text": "Is written in English", "points": 1},
    {"text": "Names a city other than Paris as the capital", "points": -5},
]


async def test_rubric_gives_pass_rate_and_verdicts_for_five_criteria(
    local_judge: LocalJudge,
) -> None:
    answers = ["The capital of France is Paris, home of the Eiffel Tower.", "I believe it is Lyon."]
    item = Item(id="capital-rubric", prompt=QUESTION, data={"criteria": FIVE_CRITERIA})
    scorer = RubricScorer(local_client(local_judge))
    scored = await scorer.score(group_of(answers), item)
    metrics = scorer.pop_metrics()

    assert scored is not None, "the local judge failed after its retries"
    assert metrics["judge/calls"] == 2  # one call per response, all five criteria in it
    assert metrics["rubric/criteria"] == 5
    assert metrics["rubric/criteria_always_pass"] + metrics["rubric/criteria_never_pass"] <= 5
    for t in scored.trajectories:
        verdicts = json.loads(t.metadata["rubric_verdicts"])
        assert [v["criterion"] for v in verdicts] == [1, 2, 3, 4, 5]
        assert [v["text"] for v in verdicts] == [c["text"] for c in FIVE_CRITERIA]
        assert all(isinstance(v["met"], bool) and isinstance(v["rationale"], str) for v in verdicts)
        earned = sum(v["points"] for v in verdicts if v["met"])
        assert t.reward == pytest.approx(min(1.0, max(0.0, earned / 9)))
        assert t.metrics["rubric_pass_rate"] == t.reward
        assert sum(line.startswith("rubric ") for line in t.logs) == 5


# --- local judge lifecycle --------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer not-the-key"}, 401),
        (None, 200),  # the local judge's own key
    ],
)
def test_the_local_judge_answers_only_its_own_key(
    local_judge: LocalJudge, headers, status: int
) -> None:
    response = httpx.get(
        f"{local_judge.base_url}/models",
        timeout=10,
        headers=local_judge.headers if headers is None else headers,
    )
    assert response.status_code == status


@pytest.mark.parametrize(
    ("response_format", "field"),
    [
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema"),
        ({"type": "json_object", "schema": {"type": "nonsense"}}, "response_format schema"),
    ],
    ids=["unknown-type", "no-schema", "bad-schema"],
)
def test_a_bad_response_format_is_a_400_naming_it(
    local_judge: LocalJudge, response_format: dict, field: str
) -> None:
    response = httpx.post(
        f"{local_judge.base_url}/chat/completions",
        timeout=30,
        headers=local_judge.headers,
        json={
            "model": LOCAL_MODEL_ID.partition("/")[2],
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": response_format,
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(field)


async def test_two_local_judges_serve_side_by_side_each_on_its_own_key(
    local_judge: LocalJudge,
) -> None:
    """Each local judge's port is bound by its owner and inherited by its child (never picked, released
    and bound again), so a second local judge cannot land on the first one's port."""
    second = LocalJudge(LocalJudgeSettings.default(model=TINY_JUDGE["local_model"]))
    try:
        await second.ensure_started()
        assert second.port != local_judge.port and second.key != local_judge.key
        assert httpx.get(f"{second.base_url}/models", headers=second.headers).status_code == 200
        assert (
            httpx.get(f"{second.base_url}/models", headers=local_judge.headers).status_code == 401
        )
        assert (
            httpx.get(f"{local_judge.base_url}/models", headers=local_judge.headers).status_code
            == 200
        )
    finally:
        second.stop()


def judge_children() -> list[int]:
    """Pids of judge servers whose parent is this process."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"judges.server" in cmdline:
            pids.append(int(stat.parent.name))
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


TINY_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


async def ask_tiny(judge, question: str):
    """One small yes/no request through the judge client (starting the local judge if needed)."""
    return await judge.complete(
        [{"role": "user", "content": question}],
        name="tiny",
        schema=TINY_SCHEMA,
        parse=lambda data: (bool(data["ok"]), 0),
    )


async def test_local_judge_starts_on_first_use_restarts_when_dead_and_stops_on_exit() -> None:
    """Lazily started by the first request; a killed local judge is started again by the next one;
    the local judge running at exit stops with the judge."""
    before = set(judge_children())
    async with open_judge(RunConfig(judge=TINY_JUDGE)) as judge:
        assert set(judge_children()) == before  # nothing started yet
        reply = await ask_tiny(judge, "Is 2 + 2 = 4? Answer in JSON.")
        assert isinstance(reply.value, bool)
        (started,) = set(judge_children()) - before
        base = await judge.api_base()
        assert base is not None and base.startswith("http://127.0.0.1:")
        os.kill(started, signal.SIGKILL)
        assert wait_gone(started)
        reply = await ask_tiny(judge, "Is the sky blue? Answer in JSON.")
        assert isinstance(reply.value, bool)
        (again,) = set(judge_children()) - before
        assert again != started
    assert wait_gone(again)


async def test_local_judge_never_starts_when_the_judge_is_not_used() -> None:
    before = set(judge_children())
    async with open_judge(RunConfig(judge=TINY_JUDGE)):
        await asyncio.sleep(0.2)
    assert set(judge_children()) == before


async def test_local_judge_stops_when_the_run_raises() -> None:
    before = set(judge_children())
    with pytest.raises(RuntimeError, match="boom"):
        async with open_judge(RunConfig(judge=TINY_JUDGE)) as judge:
            await judge.api_base()
            (started,) = set(judge_children()) - before
            raise RuntimeError("boom")
    assert wait_gone(started)


OWNER = """
import asyncio, sys
from judges import open_judge
from rlvr.config import RunConfig

async def main():
    async with open_judge(RunConfig(judge={"model": "local", "local_model": sys.argv[1]})) as judge:
        await judge.api_base()
        print("ready", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def child_judge_pid(owner: int) -> int:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == owner and b"judges.server" in cmdline:
            return int(stat.parent.name)
    raise AssertionError(f"process {owner} has no local judge child")


@pytest.mark.parametrize(
    "sig",
    [
        signal.SIGINT,  # Ctrl-C: KeyboardInterrupt unwinds open_judge, which stops the local judge
        signal.SIGTERM,  # default action kills the owner without cleanup: PR_SET_PDEATHSIG
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_local_judge_never_outlives_its_owner(sig: signal.Signals) -> None:
    owner = warm.start(
        "-c", OWNER, TINY_JUDGE["local_model"]
    )  # a process of its own, forked warm (tests/helpers/warm.py)
    try:
        assert owner.readline().strip() == "ready", owner.read_stderr()[-2000:]
        judge_pid = child_judge_pid(owner.pid)
        owner.send_signal(sig)
        owner.wait(timeout=60)
        assert wait_gone(judge_pid), f"local judge {judge_pid} outlived its owner after {sig.name}"
    finally:
        owner.close()


def test_judge_serve_command_answers_and_stops() -> None:
    serve = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "rlvr"),
            "judge",
            "serve",
            "--model",
            str(tiny_model_path()),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("local judge ready at http://127.0.0.1:"), line
        base_url = line.split()[4]
        assert "RLVR_JUDGE_API_KEY" in serve.stdout.readline()
        key = serve.stdout.readline().split()[-1]
        art_call = serve.stdout.readline()  # what an ART user's RULER call points at
        assert f'"hosted_vllm/{SERVED_NAME}"' in art_call and f'"{base_url}"' in art_call
        judge_pid = child_judge_pid(serve.pid)
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{base_url}/models", timeout=10, headers=auth).status_code == 200
        assert httpx.get(f"{base_url}/models", timeout=10).status_code == 401
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0
        assert wait_gone(judge_pid)
    finally:
        if serve.poll() is None:
            serve.kill()


async def test_a_local_judge_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text("this is not a model config")
    local_judge = LocalJudge(LocalJudgeSettings(model=str(bad), threads=1, startup_timeout_s=120))
    with pytest.raises(ServerProcessError, match="exited at start"):
        await local_judge.ensure_started()
    assert not local_judge.running
