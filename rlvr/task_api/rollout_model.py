"""The model a rollout receives: the run's `art.Model`, carrying the call's sampling settings.

An agent written for ART calls `model.openai_client().chat.completions.create(model=
model.get_inference_name(), messages=...)` and nothing else. Run as written, that would sample at
the endpoint's defaults, without logprobs (so no update could be computed from the tokens), and
validation would not be greedy. `RolloutModel` fills in, for every chat completion request whose
caller did not set them: the run's `temperature` and `top_p`, `max_tokens` (unless the caller
gives `max_tokens` or `max_completion_tokens`), `logprobs=True`, the model name of the call's
checkpoint, and, for a seeded sampling, the call's `seed` (derived from the rollout's seed and the
call's number: the n-th call of a replayed rollout samples what it sampled before, and two
calls of one rollout sample afresh); `get_inference_name()` with no step names that checkpoint too. Whatever the
caller sets is sent as set. Everything else is the wrapped model's (`name`, `get_step()`, ...).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, NotRequired

import art

from rlvr.types import ChatKeywords, Sampling


class CallDefaults(ChatKeywords):
    """What one chat completion of a rollout gets where its caller does not set it: the
    sampling's keywords, the checkpoint's model name and, for a seeded sampling, the call's seed."""

    model: str
    seed: NotRequired[int]


Defaults = Callable[[], CallDefaults]  # the defaults of the next call


class _Completions:
    def __init__(self, completions: Any, defaults: Defaults) -> None:
        self._completions = completions
        self._defaults = defaults

    async def create(self, **request: Any) -> Any:
        return await self._completions.create(**with_defaults(request, self._defaults()))

    @property
    def with_raw_response(self) -> _Completions:
        return _Completions(self._completions.with_raw_response, self._defaults)

    @property
    def with_streaming_response(self) -> _Completions:
        return _Completions(self._completions.with_streaming_response, self._defaults)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._completions, name)


class _Chat:
    def __init__(self, chat: Any, defaults: Defaults) -> None:
        self.completions = _Completions(chat.completions, defaults)
        self._chat = chat

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chat, name)


class _Client:
    """An OpenAI client whose chat completions get the run's defaults (module docstring)."""

    def __init__(self, client: Any, defaults: Defaults) -> None:
        self._client = client
        self._defaults = defaults
        self.chat = _Chat(client.chat, defaults)

    def with_options(self, *args: Any, **kwargs: Any) -> _Client:
        return _Client(self._client.with_options(*args, **kwargs), self._defaults)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


# the caller's keywords as the openai SDK's create(**kwargs) takes them: its own type
def with_defaults(request: dict[str, Any], defaults: CallDefaults) -> dict[str, Any]:
    """`request` with the defaults it does not set; a length limit counts as set when either of
    OpenAI's two names for it is."""
    filled = {k: v for k, v in defaults.items() if k not in request}
    if "max_completion_tokens" in request:
        filled.pop("max_tokens", None)
    return {**filled, **request}


class RolloutModel:
    """`model` for one rollout sampled with `sampling` (module docstring)."""

    def __init__(self, model: art.Model[Any, Any], sampling: Sampling) -> None:
        self._model = model
        self._sampling = sampling
        self._calls = itertools.count()  # shared by every client made from this model

    @property
    def wrapped(self) -> art.Model[Any, Any]:
        return self._model

    def get_inference_name(self, step: int | None = None) -> str:
        return self._model.get_inference_name(self._sampling.step if step is None else step)

    def openai_client(self) -> Any:
        return _Client(self._model.openai_client(), self._next_defaults)

    def _next_defaults(self) -> CallDefaults:
        sampled = self._sampling.request()
        defaults = CallDefaults(
            model=self.get_inference_name(),
            temperature=sampled["temperature"],
            top_p=sampled["top_p"],
            max_tokens=sampled["max_tokens"],
            logprobs=sampled["logprobs"],
        )
        seed = self._sampling.call_seed(next(self._calls))
        if seed is not None:
            defaults["seed"] = seed
        return defaults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)
