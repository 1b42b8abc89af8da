"""RULER on any judge: ART's own `ruler_score_group`, with rlvr's transport underneath.

ART's RULER builds the prompt (common prefix sent once, tools shown, default or custom rubric), asks
litellm for its fixed pydantic `Response` format, and zips the scores back onto the group. We keep
all of that and only replace the wire: RULER is pointed at the model id `rlvr_judge/<client key>`,
a litellm custom provider whose `acompletion`

1. reads the trajectory ids RULER put in its prompt (`<trajectory id="k">` lines),
2. pins ART's schema to them (judges.ruler_schema): exactly that many scores, in order, each in [0, 1] — as `prefixItems`
   with constant ids, bounded explanations and a 0.05 score grid for a judge whose decoding follows
   the whole schema (the local judge, a llama.cpp server: a weak model gets nothing to get
   wrong), as `minItems`/`maxItems`, an id `enum` and `minimum`/`maximum` for hosted providers,
3. sends it through `JudgeClient.complete` (dialect, retries, limits, cost, spend cap), which
   validates the reply (count, ids as a permutation, scores clamped within tolerance) and
4. hands RULER the validated JSON, so ART's strict parse sees only clean replies.

A failed request surfaces from RULER as litellm's wrapper exception; the original (`JudgeFailure` or
`BudgetExhausted`) is found on its exception chain. The scorer skips the group (None) on a failure
and lets BudgetExhausted end the run.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections import Counter
from typing import Any

import art
import litellm
from art.rewards.ruler import DEFAULT_RUBRIC, Response, ruler_score_group
from litellm import CustomLLM
from pydantic import ValidationError

from judges.client import (
    BudgetExhausted,
    FaultKind,
    InvalidOutput,
    JudgeClient,
    JudgeFailure,
    clamp_score,
    redact,
)
from judges.ruler_schema import pin_schema, trajectory_ids
from rlvr.error_lines import first_error
from rlvr.metrics import INDEPENDENT_REWARD, JudgeMetric, RulerMetric, judge_fault_metric
from rlvr.types import Environment, Item

log = logging.getLogger("rlvr.judges")

PROVIDER = "rlvr_judge"
REFERENCE_RUBRIC = """

The correct final answer to this task is: {answer}
A trajectory whose final answer matches it scores far above every trajectory whose answer does
not; among those, prefer the one that states it most plainly."""


# ---------------------------------------------------------------- pure functions


def requested_schema(response_format: Any) -> dict:
    """The JSON schema RULER asked for (litellm has turned its pydantic model into a dict)."""
    if isinstance(response_format, type) and issubclass(response_format, Response):
        return response_format.model_json_schema()
    if isinstance(response_format, dict) and "json_schema" in response_format:
        return response_format["json_schema"]["schema"]
    return Response.model_json_schema()


def _id_key(raw: str) -> str:
    digits = re.search(r"\d+", raw)
    return digits.group(0) if digits else raw.strip()


def parse_scores(data: Any, ids: list[str]) -> tuple[Response, int]:
    """Validate a reply against RULER's Response and the ids asked about. Returns the scores in
    the prompt's order (RULER zips by position) and how many were clamped."""
    try:
        parsed = Response.model_validate(data)
    except ValidationError as error:
        first = first_error(error, "reply")
        raise InvalidOutput(f"{first.where}: {first.message}") from None
    if len(parsed.scores) != len(ids):
        raise InvalidOutput(f"expected {len(ids)} scores, got {len(parsed.scores)}")
    by_id = {_id_key(s.trajectory_id): s for s in parsed.scores}
    if set(by_id) != set(ids):
        raise InvalidOutput(f"trajectory ids {sorted(by_id)} do not match {ids}")
    ordered, clamps = [], 0
    for tid in ids:
        score, clamped = clamp_score(by_id[tid].score)
        clamps += clamped
        ordered.append(by_id[tid].model_copy(update={"trajectory_id": tid, "score": score}))
    return Response(scores=ordered), clamps


def _on_chain(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        stack += [current.__cause__, current.__context__]
    return None


# ---------------------------------------------------------------- the transport

_ROUTES: weakref.WeakValueDictionary[str, JudgeClient] = weakref.WeakValueDictionary()


class _RulerTransport(CustomLLM):
    """litellm custom provider: RULER's request -> JudgeClient -> RULER's Response JSON."""

    async def acompletion(  # litellm's CustomLLM signature
        self,
        model: str,
        messages: list,
        api_base: str,
        custom_prompt_dict: dict,
        model_response: litellm.ModelResponse,
        print_verbose: Any,
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict,
        acompletion: Any = None,
        litellm_params: Any = None,
        logger_fn: Any = None,
        headers: Any = None,
        timeout: Any = None,
        client: Any = None,
    ) -> litellm.ModelResponse:
        judge = _ROUTES.get(model)
        if judge is None:
            raise RuntimeError(f"no judge client is routed as {PROVIDER}/{model}")
        ids = trajectory_ids(messages)
        schema = pin_schema(
            requested_schema(optional_params.get("response_format")), ids, judge.settings.pinned
        )
        reply = await judge.complete(
            messages,
            name="ruler_scores",
            schema=schema,
            parse=lambda data: parse_scores(data, ids),
        )
        model_response.choices[0].message.content = reply.value.model_dump_json()  # type: ignore[union-attr]
        model_response.model = judge.settings.model
        model_response.usage = litellm.Usage(  # type: ignore[attr-defined]
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            total_tokens=reply.prompt_tokens + reply.completion_tokens,
        )
        return model_response


_TRANSPORT = _RulerTransport()


def route(judge: JudgeClient) -> str:
    """Register the transport with litellm (once) and return the model id that reaches `judge`."""
    if not any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": _TRANSPORT})
    _ROUTES[judge.key] = judge
    return f"{PROVIDER}/{judge.key}"


# ---------------------------------------------------------------- the scorer


class RulerScorer:
    """scorer=ruler: ART's RULER ranks each group in one judge call. The rubric is ART's default,
    or the environment's `ruler_rubric(item)` where it has one; tools on the trajectories are
    shown."""

    def __init__(
        self, judge: JudgeClient, environment: Environment | None = None, reference: bool = False
    ) -> None:
        self.judge = judge
        self.model = route(judge)
        self._environment = environment
        self.reference = reference
        self.name = "ruler_ref" if reference else "ruler"
        self._counts: Counter[str] = Counter()

    def rubric_for(self, item: Item) -> str:
        custom = self._environment.ruler_rubric if self._environment is not None else None
        text = custom(item) if callable(custom) else custom
        rubric = text or DEFAULT_RUBRIC
        # Reference-guided: a small judge cannot solve the task, but it can compare with the
        # label. Only training items ever reach a scorer, so held-out labels never do.
        if self.reference and item.answer:
            rubric += REFERENCE_RUBRIC.format(answer=item.answer)
        return rubric

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        try:
            scored = await ruler_score_group(
                group,
                judge_model=self.model,
                rubric=self.rubric_for(item),
                swallow_exceptions=False,
            )
        except Exception as error:
            if (budget := _on_chain(error, BudgetExhausted)) is not None:
                raise budget from None
            failure = _on_chain(error, JudgeFailure)
            if failure is None:
                # Not a judge answer at all (e.g. a group RULER cannot serialise): still a judge
                # request that produced no scores, so it is counted and the group skipped.
                self.judge.count(JudgeMetric.FAILURES)
                self.judge.count(judge_fault_metric(FaultKind.UNEXPECTED))
            self._counts[RulerMetric.GROUPS_FAILED] += 1
            reason = failure or redact(f"{type(error).__name__}: {str(error).splitlines()[0]}")
            log.warning("ruler: group for item %s skipped: %s", item.id, str(reason)[:300])
            return None
        self._counts[RulerMetric.GROUPS_SCORED] += 1
        # ART records the incoming reward as `independent_reward`; where the loop had already put
        # the ground truth there, that is what must stay, and where it had none (an unlabelled
        # item) the rollout's placeholder reward is no truth and must not be read as one.
        for before, after in zip(group.trajectories, scored.trajectories, strict=True):
            if INDEPENDENT_REWARD in before.metrics:
                after.metrics[INDEPENDENT_REWARD] = before.metrics[INDEPENDENT_REWARD]
            else:
                after.metrics.pop(INDEPENDENT_REWARD, None)
        return scored

    def pop_metrics(self) -> dict[str, float]:
        counts, self._counts = self._counts, Counter()
        return {
            **self.judge.pop_metrics(),
            **{m.value: float(counts.get(m.value, 0)) for m in RulerMetric},
        }
