"""The policy endpoint's request handling and the engine's pure helpers, without loading a model.

The server here is the real one (LocalTorchBackend.serve: FastAPI + uvicorn on 127.0.0.1, real HTTP),
with no model registered yet; requests that need a model are in test_policy_backend.py.
"""

from typing import Any

import httpx
import pytest
import pytest_asyncio
import torch

from rlvr.engine.backend import LocalTorchBackend
from rlvr.engine.server import ApiError, parse_model_name
from rlvr.engine.token_sampling import sample_tokens, top_p_filter

GOOD = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
ADD_TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory):
    """One real endpoint for the module (its server thread answers every test's requests)."""
    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")))
    url = await backend.serve()
    yield url, {"Authorization": f"Bearer {backend.api_key}"}
    await backend.close()


@pytest.fixture
def base_url(served) -> str:
    return served[0]


@pytest.fixture
def auth(served) -> dict[str, str]:
    return served[1]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong-key"}, 401),
        ({"Authorization": "Basic c2VjcmV0"}, 401),
        (None, 200),  # the backend's own key
    ],
)
@pytest.mark.parametrize("path", ["/models", "/chat/completions"])
async def test_every_request_needs_the_runs_bearer_key(
    served, headers: dict[str, str] | None, status: int, path: str
) -> None:
    base_url, auth = served
    async with httpx.AsyncClient(headers=auth if headers is None else headers) as client:
        if path == "/models":
            response = await client.get(f"{base_url}{path}")
        else:
            response = await client.post(f"{base_url}{path}", json={**GOOD, "max_tokens": 1})
    expected = status if status == 401 or path == "/models" else 404  # no model registered
    assert response.status_code == expected
    if expected == 401:
        assert "api key" in response.json()["error"]["message"].lower()


async def test_two_backends_have_different_keys(tmp_path) -> None:
    first, second = LocalTorchBackend(path=str(tmp_path)), LocalTorchBackend(path=str(tmp_path))
    assert first.api_key != second.api_key and len(first.api_key) >= 32


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ("{not json", 400, ["json"]),
        ({"model": "policy"}, 400, ["messages", "required"]),
        ({**GOOD, "messages": []}, 400, ["messages"]),
        ({**GOOD, "temperature": -1}, 400, ["temperature"]),
        ({**GOOD, "messages": [{"role": "wizard", "content": "x"}]}, 400, ["role"]),
        ({**GOOD, "n": 0}, 400, ["n"]),
        ({**GOOD, "tool_choice": {"type": "function"}}, 400, ["tool_choice"]),
        ({**GOOD, "stream": True}, 400, ["stream"]),
        (
            {**GOOD, "tools": [ADD_TOOL], "tool_choice": {"function": {"name": "sub"}}},
            400,
            ["tool_choice", "'sub'", "'add'"],
        ),
        ({**GOOD, "tool_choice": {"function": {"name": "add"}}}, 400, ["tool_choice", "'add'"]),
        (GOOD, 404, ["policy", "not served"]),
        ({**GOOD, "model": "policy@3"}, 404, ["policy@3"]),
    ],
)
async def test_bad_requests_get_a_clear_error(
    base_url: str, auth: dict[str, str], body, status: int, words: list[str]
) -> None:
    async with httpx.AsyncClient(headers=auth) as client:
        if isinstance(body, str):
            response = await client.post(
                f"{base_url}/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
        else:
            response = await client.post(f"{base_url}/chat/completions", json=body)
    assert response.status_code == status
    message = response.json()["error"]["message"]
    assert "\n" not in message
    assert all(w.lower() in message.lower() for w in words), message


async def test_models_lists_nothing_before_registration(
    base_url: str, auth: dict[str, str]
) -> None:
    async with httpx.AsyncClient(headers=auth) as client:
        response = await client.get(f"{base_url}/models")
    assert response.status_code == 200
    assert response.json() == {"object": "list", "data": []}


@pytest.mark.parametrize(
    ("name", "expected"),
    [("m", ("m", None)), ("m@0", ("m", 0)), ("m@12", ("m", 12)), ("a@b@3", ("a@b", 3))],
)
def test_model_names_carry_an_optional_step(name: str, expected) -> None:
    assert parse_model_name(name) == expected


@pytest.mark.parametrize("name", ["m@", "m@x", "m@-1"])
def test_a_bad_step_is_not_found(name: str) -> None:
    with pytest.raises(ApiError) as error:
        parse_model_name(name)
    assert error.value.status == 404


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (1.0, [True, True, True, True]),
        (0.5, [True, False, False, False]),
        (0.75, [True, True, False, False]),
    ],
)
def test_top_p_keeps_the_nucleus(top_p: float, kept: list[bool]) -> None:
    probs = torch.tensor([[0.1, 0.6, 0.05, 0.25]])
    filtered = top_p_filter(probs, torch.tensor([top_p]))[0]
    order = [1, 3, 0, 2]  # tokens by falling probability
    assert [bool(filtered[i] > 0) for i in order] == kept
    assert torch.equal(filtered[filtered > 0], probs[0][filtered > 0])


def test_sample_tokens_follows_each_rows_distribution_and_never_samples_a_zero() -> None:
    probs = torch.tensor([[0.1, 0.6, 0.0, 0.3], [0.0, 0.0, 1.0, 0.0]])
    generators = [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)]
    samples = torch.stack([sample_tokens(probs, generators) for _ in range(4000)])
    first = torch.bincount(samples[:, 0], minlength=4) / len(samples)
    assert first.tolist() == pytest.approx([0.1, 0.6, 0.0, 0.3], abs=0.03)
    assert bool((samples[:, 1] == 2).all())
    again = [torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)]
    assert torch.equal(sample_tokens(probs, again), samples[0])  # each row's own seeded stream


class _Owner:
    """Stands for a run's engines: what a stopped server must not keep alive."""

    def names(self) -> list[str]:
        return ["policy"]

    def route(self, name: str) -> Any:
        raise ApiError(404, f"model: {name!r} is not among {self.names()}", "not_found_error")


def _serve_once(owner: _Owner) -> None:
    from fastapi.testclient import TestClient

    from rlvr.engine.server import create_app

    with TestClient(create_app(owner.route, owner.names)) as client:
        assert client.get("/v1/models").json()["data"][0]["id"] == "policy"
        missing = {"model": "other", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=missing).status_code == 404


def test_a_stopped_servers_app_keeps_no_engine_alive() -> None:
    import gc
    import weakref

    owner = _Owner()
    gone = weakref.ref(owner)
    _serve_once(owner)
    del owner
    gc.collect()
    # FastAPI caches endpoint functions process-wide: a closure over the engines would leak a
    # whole run's models each time a notebook trains again.
    assert gone() is None


def test_the_server_starts_where_asyncio_run_refuses_a_loop_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On Python 3.12+ uvicorn's `Server.run` is `asyncio.run(..., loop_factory=...)`, and
    `nest_asyncio.apply()` (run on import by ART's dependencies) replaces `asyncio.run` with one
    that takes no `loop_factory`: the server thread must not go through it."""
    import uvicorn.server

    from rlvr.engine.server import ServerThread, create_app

    def nested_run(main: Any, *, debug: bool | None = None) -> Any:
        main.close()
        raise TypeError("run() got an unexpected keyword argument 'loop_factory'")

    monkeypatch.setattr(uvicorn.server, "asyncio_run", nested_run)
    owner = _Owner()
    server = ServerThread(create_app(owner.route, owner.names))
    server.start(timeout_s=10)
    try:
        models = httpx.get(f"{server.base_url}/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["policy"]
    finally:
        server.stop()
