"""The judge client: one async call path to any LLM judge, through litellm.

A judge call sends chat messages plus a JSON schema and gets back a validated Python value. The
client owns everything that makes a weak or flaky judge safe to train on:

- structured output in the dialect the target accepts (`Dialect`): OpenAI-style `json_schema` for
  hosted providers, vLLM and the local judge; llama.cpp's `{"type": "json_object", "schema": ...}`
  for a llama.cpp server (it answers `json_schema` with HTTP 500);
- lenient parsing (code fences, prose around the object, raw newlines in strings) and then the
  caller's validation; anything that fails is `InvalidOutput` and is retried like a 5xx;
- retries with exponential backoff and jitter on 429, 5xx, timeouts, dropped connections and
  invalid output; client errors (400, 401, 404) are not retried;
- a concurrency limit and a requests-per-minute limit;
- tokens and cost per call (litellm's price where it knows the model, 0 for the local judge) and a
  spend cap that raises `rlvr.types.BudgetExhausted` before the call that would exceed it;
- counters for every outcome, read by the scorers' `pop_metrics()` under `judge/...` keys.

Keys come from the environment or a `.env` file (python-dotenv) and are never logged: error text is
passed through `redact` before it is kept anywhere.
"""

from __future__ import annotations

import os

# litellm fetches its price map from the network at import unless told to use the bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio
import itertools
import json
import logging
import math
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx
import litellm
import openai
from dotenv import find_dotenv, load_dotenv
from pydantic import BaseModel, ConfigDict

from rlvr.metrics import JudgeMetric, judge_fault_metric
from rlvr.redact import redact_error
from rlvr.types import BudgetExhausted

if TYPE_CHECKING:
    from rlvr.config import RunConfig

log = logging.getLogger("rlvr.judges")
# litellm prints a help banner on every exception; ours are counted and logged once.
litellm.suppress_debug_info = True

T = TypeVar("T")

LOCAL_JUDGE = "local"
# judge=vllm before the run's vLLM servers are up (JudgeClient.serve_from names the real one).
UNSERVED = "openai/vllm-judge-not-served-yet"
# The name the local judge is addressed by (judges.server.SERVED_NAME, through litellm's openai/).
LOCAL_MODEL_ID = "openai/smollm2-135m-judge"
REMOTE_TIMEOUT_S = 120.0
# A CPU judge batching long rubric answers takes minutes per call, and a call cut short is decoded
# again from scratch (rubric_if's calls at REMOTE_TIMEOUT_S timed out and were retried); the
# engine itself never hangs.
LOCAL_TIMEOUT_S = 600.0
# Scores this far outside [0, 1] are clamped (rounding, over-enthusiasm); further out the judge used
# another scale (0-10, 0-100) and its number means nothing here, so the reply is invalid.
CLAMP_TOLERANCE = 0.1
BACKOFF_CAP_S = 30.0


class Dialect(StrEnum):
    """How a schema is asked for on the wire."""

    JSON_SCHEMA = "json_schema"  # OpenAI-style; hosted providers, vLLM
    JSON_OBJECT = "json_object"  # llama.cpp server: {"type": "json_object", "schema": ...}


class FaultKind(StrEnum):
    """Why a judge attempt failed. Each value is also its counter's name under `judge/`."""

    RATE_LIMITED = "rate_limited"  # HTTP 429
    TIMEOUT = "timeouts"  # no answer within judge.timeout_s (or HTTP 408)
    SERVER_ERROR = "server_errors"  # HTTP 5xx
    CONNECTION = "connection_errors"  # refused / reset before an HTTP status
    INVALID_OUTPUT = "invalid_output"  # reply not JSON, wrong shape, wrong count, out of range
    CLIENT_ERROR = "client_errors"  # HTTP 4xx other than 408/429: bad key, bad request; not retried
    UNEXPECTED = "unexpected_errors"  # anything else; not retried


RETRYABLE = frozenset(
    {
        FaultKind.RATE_LIMITED,
        FaultKind.TIMEOUT,
        FaultKind.SERVER_ERROR,
        FaultKind.CONNECTION,
        FaultKind.INVALID_OUTPUT,
    }
)


class InvalidOutput(ValueError):
    """The judge answered, but not with what was asked for."""


class JudgeFailure(RuntimeError):
    """A judge request failed after its retries (or with an error that is not retried)."""

    def __init__(self, kind: FaultKind, message: str) -> None:
        super().__init__(f"judge {kind.value}: {message}")
        self.kind = kind


class JudgeSettings(BaseModel):
    """Everything the client needs, resolved from RunConfig."""

    model_config = ConfigDict(frozen=True)

    model: str  # litellm model id sent on the wire
    api_base: str | None = None  # None: the provider's own, or the local judge's once started
    dialect: Dialect = Dialect.JSON_SCHEMA
    # The target decodes by the whole schema (the local judge; a llama.cpp server): schemas pin
    # every position (ids as constants, bounded strings) so a weak judge has nothing to get wrong.
    pinned: bool = False
    free: bool = False  # local judge: cost 0, never priced
    temperature: float = 0.0
    max_retries: int = 3
    timeout_s: float = REMOTE_TIMEOUT_S
    max_usd: float | None = None
    concurrency: int = 4
    rpm: int | None = None
    backoff_s: float = 1.0

    @classmethod
    def from_config(cls, cfg: RunConfig) -> JudgeSettings:
        from rlvr.config import VLLM_JUDGE

        served = cfg.judge.model == VLLM_JUDGE  # the run's vLLM servers, named by serve_from
        # Both are servers on this machine: free, slow on a CPU, decoding by the whole schema.
        local = cfg.judge.model == LOCAL_JUDGE or served
        dialect = {
            "auto": Dialect.JSON_SCHEMA,
            "json_schema": Dialect.JSON_SCHEMA,
            "json_object": Dialect.JSON_OBJECT,
        }[cfg.judge.response_format]
        default_timeout_s = LOCAL_TIMEOUT_S if local else REMOTE_TIMEOUT_S
        timeout_s = default_timeout_s if cfg.judge.timeout_s is None else cfg.judge.timeout_s
        return cls(
            model=UNSERVED if served else LOCAL_MODEL_ID if local else cfg.judge.model,
            api_base=cfg.judge.base_url,
            dialect=dialect,
            pinned=local or dialect is Dialect.JSON_OBJECT,
            free=local,
            temperature=cfg.judge.temperature,
            max_retries=cfg.judge.max_retries,
            timeout_s=timeout_s,
            max_usd=cfg.judge.max_usd,
            concurrency=cfg.judge.concurrency,
            rpm=cfg.judge.rpm,
            backoff_s=cfg.judge.backoff_s,
        )


class JudgeReply(BaseModel, Generic[T]):
    """A validated judge answer and what it cost."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    value: T
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    attempts: int


# ---------------------------------------------------------------- pure helpers


_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)


def lenient_json(text: str | None) -> Any:
    """Parse a judge reply: tolerate code fences, prose around one JSON object, and raw control
    characters inside strings (`strict=False`). Raises InvalidOutput."""
    if text is None or not text.strip():
        raise InvalidOutput("empty reply")
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    try:
        return json.loads(body, strict=False)
    except json.JSONDecodeError as error:
        start, end = body.find("{"), body.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(body[start : end + 1], strict=False)
            except json.JSONDecodeError:
                pass
        raise InvalidOutput(f"reply is not JSON ({error.msg} at char {error.pos})") from None


def clamp_score(value: Any) -> tuple[float, bool]:
    """(score in [0, 1], whether it was clamped). Raises InvalidOutput for non-numbers and for
    values beyond CLAMP_TOLERANCE outside the range."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidOutput(f"score {value!r} is not a finite number")
    if not -CLAMP_TOLERANCE <= value <= 1 + CLAMP_TOLERANCE:
        raise InvalidOutput(f"score {value!r} is outside [0, 1]")
    clamped = min(1.0, max(0.0, float(value)))
    return clamped, clamped != value


def classify(error: BaseException) -> FaultKind:
    """Map an exception from one attempt to a fault kind."""
    if isinstance(error, InvalidOutput):
        return FaultKind.INVALID_OUTPUT
    if isinstance(error, asyncio.TimeoutError | litellm.Timeout):
        return FaultKind.TIMEOUT
    if isinstance(error, litellm.APIConnectionError) or _refused(error):
        return FaultKind.CONNECTION  # (litellm reports some of these as a 500)
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        if status == 429:
            return FaultKind.RATE_LIMITED
        if status == 408:
            return FaultKind.TIMEOUT
        if status >= 500:
            return FaultKind.SERVER_ERROR
        if 400 <= status < 500:
            return FaultKind.CLIENT_ERROR
    return FaultKind.UNEXPECTED


def _refused(error: BaseException) -> bool:
    """Whether a connection failure (nothing listening, reset) is on the exception's chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | httpx.ConnectError | openai.APIConnectionError):
            return not isinstance(current, openai.APITimeoutError)
        current = current.__cause__ or current.__context__
    return False


def backoff_delay(
    retry: int, base_s: float, rng: random.Random, retry_after_s: float | None = None
) -> float:
    """Seconds to wait before retry number `retry` (1-based): base * 2^(retry-1), capped, with
    jitter in [50%, 100%] so concurrent callers spread out; never sooner than Retry-After."""
    delay = min(BACKOFF_CAP_S, base_s * 2 ** (retry - 1)) * (0.5 + 0.5 * rng.random())
    if retry_after_s is not None:
        delay = max(delay, min(BACKOFF_CAP_S, retry_after_s))
    return delay


def retry_after(error: BaseException) -> float | None:
    """The server's Retry-After (seconds) on a 429, where it sent one."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def redact(text: str) -> str:
    """Remove anything that looks like a credential: values of *_KEY / *_TOKEN / *_SECRET
    environment variables (a `.env` file's included, once loaded), URL passwords and
    key-shaped strings (`rlvr.redact`)."""
    return redact_error(text)


def response_format(dialect: Dialect, name: str, schema: dict) -> dict:
    """The `response_format` argument for a schema, in the target's dialect."""
    if dialect is Dialect.JSON_OBJECT:
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def _provider_key_present(model: str) -> bool:
    provider = model.partition("/")[0].upper().replace("-", "_")
    return bool(os.environ.get(f"{provider}_API_KEY"))


# ---------------------------------------------------------------- limits


class RequestRateLimiter:
    """Spaces request starts at least 60/rpm seconds apart (None: no limit). Strict spacing, no
    bursts: over any window of a minute at most `rpm` requests start."""

    def __init__(self, rpm: int | None) -> None:
        self._interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if not self._interval:
            return
        async with self._lock:
            wait = self._next - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._next = time.monotonic() + self._interval


# ---------------------------------------------------------------- the client

_client_ids = itertools.count(1)


class JudgeClient:
    """Asks a judge for validated JSON. Shared by every scorer and check of a run.

    `endpoint`, when given, is awaited before each request and returns the API base URL: that is
    how the local judge starts lazily (a run that never calls the judge never starts it). After a
    refused connection it is awaited with `verify=True`, which replaces a local judge that died.
    """

    def __init__(
        self,
        settings: JudgeSettings,
        endpoint: Callable[[bool], Awaitable[str]] | None = None,
        *,
        seed: int = 0,
        endpoint_key: str | None = None,
    ) -> None:
        """`endpoint_key`: the bearer key of a local judge (its own per-run key), sent instead
        of any provider key."""
        load_dotenv(find_dotenv(usecwd=True), override=False)
        self.settings = settings
        self._endpoint_key = endpoint_key
        self.key = f"judge{next(_client_ids)}"
        self._endpoint = endpoint
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._limiter = RequestRateLimiter(settings.rpm)
        self._rng = random.Random(seed)
        self._counts: Counter[str] = Counter()
        self.spent_usd = 0.0

    @property
    def endpoint_key(self) -> str:
        """The key requests to this judge's own endpoint carry (the local judge's, or a
        placeholder for keyless servers): for callers sending it other requests, as the bench."""
        return self._endpoint_key or "not-needed"

    @property
    def max_usd(self) -> float | None:
        return self.settings.max_usd

    @property
    def budget_exhausted(self) -> bool:
        return self.max_usd is not None and self.spent_usd >= self.max_usd

    def pop_metrics(self) -> dict[str, float]:
        """Counters since the last pop, every key present (zeros included). Composed scorers that
        share one client can sum their pops: the first takes the counts, the rest get zeros."""
        counts, self._counts = self._counts, Counter()
        keys = [m.value for m in JudgeMetric] + [judge_fault_metric(kind) for kind in FaultKind]
        return {key: float(counts.get(key, 0)) for key in keys}

    def serve_from(self, base_url: str, api_key: str, model: str) -> None:
        """Ask `model` at `base_url` (OpenAI-compatible, bearer `api_key`) from now on: the run's
        own vLLM servers for judge=vllm, which decode the reply by its JSON schema (vLLM's
        structured outputs)."""
        self.settings = self.settings.model_copy(
            update={"model": f"openai/{model}", "api_base": base_url}
        )
        self._endpoint_key = api_key

    async def api_base(self, verify: bool = False) -> str | None:
        """Where requests go; for the local judge this starts it (once) and waits until it
        answers. `verify` replaces a local judge that no longer answers."""
        return await self._endpoint(verify) if self._endpoint else self.settings.api_base

    def count(self, key: str, amount: float = 1) -> None:
        self._counts[key] += amount

    async def complete(
        self,
        messages: list[dict],
        *,
        name: str,
        schema: dict,
        parse: Callable[[Any], tuple[T, int]],
    ) -> JudgeReply[T]:
        """One judge request: send, parse, validate with `parse` (returns the value and how many
        scores it clamped; raises InvalidOutput), retrying what is worth retrying.

        Raises JudgeFailure after the retries, BudgetExhausted at the spend cap."""
        if self.settings.model == UNSERVED:
            raise JudgeFailure(
                FaultKind.CONNECTION,
                "judge=vllm: asked before the run's vLLM servers were up (the judge answers from "
                "the run's policy servers once the policy is open)",
            )
        # Outside the retry loop: a local judge that cannot start is a setup error, not a fault
        # to retry. One that died is started again here, by the next request.
        api_base = await self.api_base()
        self.count(JudgeMetric.CALLS)
        retries = 0
        while True:
            if self.budget_exhausted:
                raise BudgetExhausted(
                    f"judge spend ${self.spent_usd:.4f} reached judge.max_usd=${self.settings.max_usd:g}"
                )
            try:
                return await self._attempt(api_base, messages, name, schema, parse, retries + 1)
            except (BudgetExhausted, asyncio.CancelledError):
                raise
            except Exception as error:
                kind = classify(error)
                self.count(judge_fault_metric(kind))
                message = redact(f"{type(error).__name__}: {error}")[:300]
                if kind not in RETRYABLE or retries >= self.settings.max_retries:
                    self.count(JudgeMetric.FAILURES)
                    log.warning(
                        "judge request failed after %d attempt(s): %s", retries + 1, message
                    )
                    # Not chained: the original error's text may quote the key (a 401 does).
                    raise JudgeFailure(kind, message) from None
                if kind is FaultKind.CONNECTION:
                    # Nothing listening: a local judge that died is started again (new port).
                    api_base = await self.api_base(verify=True)
                retries += 1
                self.count(JudgeMetric.RETRIES)
                delay = backoff_delay(
                    retries, self.settings.backoff_s, self._rng, retry_after(error)
                )
                log.info("judge %s, retry %d in %.1fs: %s", kind.value, retries, delay, message)
                await asyncio.sleep(delay)

    async def _attempt(
        self,
        api_base: str | None,
        messages: list[dict],
        name: str,
        schema: dict,
        parse: Callable[[Any], tuple[T, int]],
        attempts: int,
    ) -> JudgeReply[T]:
        # The local judge and keyless self-hosted servers still need a non-empty key on the wire.
        needs_placeholder_key = self.settings.free or (
            api_base is not None and not _provider_key_present(self.settings.model)
        )
        async with self._semaphore:
            await self._limiter.acquire()
            response = await asyncio.wait_for(
                litellm.acompletion(
                    model=self.settings.model,
                    messages=messages,
                    response_format=response_format(self.settings.dialect, name, schema),
                    temperature=self.settings.temperature,
                    timeout=self.settings.timeout_s,
                    api_base=api_base,
                    api_key=self._endpoint_key or ("not-needed" if needs_placeholder_key else None),
                    max_retries=0,  # retries are ours: counted, backed off, budget-checked
                    caching=False,
                ),
                timeout=self.settings.timeout_s + 5,
            )
        prompt_tokens, completion_tokens = _usage(response)
        cost = self._cost(response)
        self.spent_usd += cost
        self.count(JudgeMetric.PROMPT_TOKENS, prompt_tokens)
        self.count(JudgeMetric.COMPLETION_TOKENS, completion_tokens)
        self.count(JudgeMetric.COST_USD, cost)
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise InvalidOutput("reply has no choices")
        value, clamps = parse(lenient_json(choices[0].message.content))
        self.count(JudgeMetric.CLAMPED, clamps)
        return JudgeReply(
            value=value,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost,
            attempts=attempts,
        )

    def _cost(self, response: Any) -> float:
        if self.settings.free:
            return 0.0
        try:
            return float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # litellm has no price for this model: count it, charge 0
            self.count(JudgeMetric.UNPRICED)
            return 0.0


def _usage(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    return (
        int(getattr(usage, "prompt_tokens", 0) or 0),
        int(getattr(usage, "completion_tokens", 0) or 0),
    )
