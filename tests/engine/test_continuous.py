"""Continuous batching and cancel-on-disconnect, as a user of the endpoint sees them: the engine
(fp32) behind the real server, over HTTP, on the tiny random model (scheduling is the engine's,
whatever the model says; it never ends a reply itself, so each reply's budget sets its length).

- requests whose clients went away (closed connection, or their own announced timeout) are
  dropped at the next decode step: a short request after them takes about what it takes alone;
- a request arriving while a long one decodes joins it and is answered first;
- rows that joined a running decode sample exactly what a static pass samples (greedy).
"""

from __future__ import annotations

import asyncio
import statistics
import time

import art
import httpx
import pytest
import pytest_asyncio

from rlvr.engine.backend import LocalTorchBackend
from rlvr.engine.server import TIMEOUT_HEADER, ChatRequest, build_rows
from tests.helpers.tiny_runs import tiny_model_path

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]
# A reply that cannot end early: its one string must be long (llguidance enforces minLength).
LONG_JSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "story",
        "schema": {
            "type": "object",
            "properties": {"story": {"type": "string", "minLength": 2000}},
            "required": ["story"],
        },
    },
}
KINDS = {
    "free text": {},
    "structured output": {"response_format": LONG_JSON},
    "tool choice": {
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "search"}},
    },
}


class Endpoint:
    def __init__(self, backend: LocalTorchBackend, model: art.TrainableModel, url: str, key: str):
        self.backend, self.model, self.url = backend, model, url
        self.headers = {"Authorization": f"Bearer {key}"}

    def body(self, content: str, max_tokens: int, **options) -> dict:
        return {
            "model": self.model.get_inference_name(),
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "logprobs": True,
            **options,
        }

    async def post(self, body: dict, timeout: float = 600.0, **headers: str) -> httpx.Response:
        async with httpx.AsyncClient(headers={**self.headers, **headers}, timeout=timeout) as c:
            return await c.post(f"{self.url}/chat/completions", json=body)

    async def timed(self, body: dict) -> float:
        started = time.perf_counter()
        response = await self.post(body)
        assert response.status_code == 200, response.text
        return time.perf_counter() - started

    def counters(self):
        return self.backend.counters(self.model)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def endpoint(tmp_path_factory):
    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")), precision="fp32")
    model = art.TrainableModel(name="policy", project="tests", base_model=str(tiny_model_path()))
    await model.register(backend)
    url, key = await backend._prepare_backend_for_training(model)
    served = Endpoint(backend, model, url, key)
    await served.post(served.body("Hi.", 4))  # warm-up: server, caches, merged weights
    yield served
    await backend.close()


@pytest.mark.parametrize("kind", list(KINDS))
async def test_abandoned_long_requests_never_delay_a_short_one(endpoint, kind: str) -> None:
    """8 requests for 1,500 tokens whose clients give up after 0.5 s, then a short request: it
    takes about what it takes on a quiet engine (measured here first), not the abandoned work.
    The faster of two tries is compared, as rows still decoding would delay both alike while a
    test worker beside this one delays only one."""
    options = KINDS[kind]
    short = endpoint.body("Say hello.", 8, temperature=0.0, **options)
    quiet = statistics.median([await endpoint.timed(short) for _ in range(3)])
    before = endpoint.counters()

    async def abandoned(i: int) -> None:
        body = endpoint.body("Write a very long story about the sea.", 1500, seed=i, **options)
        with pytest.raises(httpx.TimeoutException):
            await endpoint.post(body, timeout=0.5)

    await asyncio.gather(*(abandoned(i) for i in range(8)))
    after_abandoned = min([await endpoint.timed(short) for _ in range(2)])
    done = endpoint.counters().minus(before)
    print(f"{kind}: quiet {quiet:.2f} s, after abandoned requests {after_abandoned:.2f} s")
    assert done.cancelled_rows == 8
    assert done.decoded_tokens < 8 * 200  # nothing decoded the abandoned rows to their end
    assert after_abandoned <= 3 * quiet


async def test_a_request_past_its_announced_timeout_is_dropped(endpoint) -> None:
    """A client that announces its read timeout (OpenAI's clients do) has given up after it: the
    request is dropped then even if the connection stays open, and answered 408."""
    before = endpoint.counters()
    started = time.perf_counter()
    body = endpoint.body("Write a very long story.", 1500, response_format=LONG_JSON)
    response = await endpoint.post(body, **{TIMEOUT_HEADER: "0.5"})
    seconds = time.perf_counter() - started
    assert response.status_code == 408
    assert "went away" in response.json()["error"]["message"]
    done = endpoint.counters().minus(before)
    assert done.cancelled_rows == 1 and done.decoded_tokens < 1500  # dropped before its end
    assert seconds < 30


async def test_a_request_arriving_mid_decode_is_answered_before_the_long_one_ends(
    endpoint,
) -> None:
    before = endpoint.counters()
    long = asyncio.create_task(
        endpoint.post(endpoint.body("Tell a story.", 200, response_format=LONG_JSON))
    )
    while endpoint.counters().minus(before).sampling_passes == 0:  # the long one is decoding
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    short = await endpoint.post(endpoint.body("Say hi.", 4, temperature=0.0))
    assert short.status_code == 200
    assert not long.done()  # answered while the long request still decodes
    reply = (await long).json()["choices"][0]
    assert reply["finish_reason"] == "length" and len(reply["logprobs"]["content"]) == 200
    assert endpoint.counters().minus(before).sampling_passes == 2  # it joined; no second pass


async def test_rows_that_join_a_running_decode_sample_what_a_static_pass_samples(
    endpoint,
) -> None:
    """Greedy requests arriving apart (each joins the rows already decoding, left-padded into
    their cache) give the tokens and log-probabilities of the same rows in one static pass."""
    questions = {
        "Write a poem about rivers.": 160,
        "What is 2+2?": 32,
        "Name a color.": 24,
        "Hi.": 16,
    }
    bodies = [endpoint.body(q, n, temperature=0.0) for q, n in questions.items()]

    async def answered(body: dict) -> tuple[dict, float]:
        response = await endpoint.post(body)
        return response.json()["choices"][0], time.perf_counter() - started

    before = endpoint.counters()
    started = time.perf_counter()
    sent = []
    for i, body in enumerate(bodies):
        sent.append(asyncio.create_task(answered(body)))
        # the next request is sent once this one is admitted (not on a clock a loaded CPU slows)
        while endpoint.counters().minus(before).sampling_passes <= i:
            await asyncio.sleep(0.01)
    answers = await asyncio.gather(*sent)
    # Each was admitted on its own, joined the first while it decoded, and left at its own step.
    assert endpoint.counters().minus(before).sampling_passes == len(bodies)
    assert all(seconds < answers[0][1] for _, seconds in answers[1:])
    decoder = endpoint.backend.engine(endpoint.model).decoder
    rows = [row for body in bodies for row in build_rows(decoder, ChatRequest(**body))[0]]
    static = await asyncio.to_thread(decoder.sample, rows)
    for (choice, _), expected in zip(answers, static, strict=True):
        content = choice["logprobs"]["content"]
        assert [int(t["token"].removeprefix("token_id:")) for t in content] == expected.token_ids
        assert [t["logprob"] for t in content] == pytest.approx(expected.logprobs, abs=1e-3)


async def test_a_fault_in_the_decoding_loop_answers_its_requests_and_the_next_ones_run(
    endpoint, monkeypatch
) -> None:
    """A fault outside any one request (here the step that retires rows) fails every request in
    flight with a 500 instead of leaving them unanswered; the next request decodes as before."""
    from rlvr.engine.decoding import Decoder

    retire = Decoder.retire
    faults = iter([RuntimeError("injected fault")])

    def failing(self, batch):
        fault = next(faults, None)
        if fault is not None:
            raise fault
        return retire(self, batch)

    monkeypatch.setattr(Decoder, "retire", failing)
    body = endpoint.body("Count to ten.", 16, temperature=0.0)
    answered = await asyncio.wait_for(
        asyncio.gather(endpoint.post(body), endpoint.post(body)), timeout=120
    )
    assert [r.status_code for r in answered] == [500, 500]
    assert all("RuntimeError: injected fault" in r.json()["error"]["message"] for r in answered)
    after = await endpoint.post(body)
    assert after.status_code == 200, after.text
    assert after.json()["choices"][0]["message"]["content"]
