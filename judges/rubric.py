"""Rubric pass rate: every criterion of one response judged in one call; the reward is the share
of rubric points earned.

Reward (HealthBench's own rule, which reduces to passed/total when every criterion is worth 1):

    reward = clip( sum(points_i for criteria met) / sum(points_i for points_i > 0), 0, 1 )

A criterion with negative points describes something undesirable ("recommends an unproven
treatment"): the judge says whether the response does it (`met`), and meeting it subtracts its
points. A criterion *passes* when the response is on its good side: positive and met, or negative
and not met. Diagnostics use passes: a criterion that passes for every response of a group, or for
none, cannot tell the group's responses apart and carries no training signal.

The scorer keeps each response's verdicts in the trajectory (`metadata["rubric_verdicts"]`, a JSON
string, and one log line per criterion) so they land in the run's parquet. A group is scored only if
every response in it was judged: one failed call (after retries) skips the whole group (None).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any

import art
from pydantic import BaseModel, ConfigDict, ValidationError, computed_field

from judges.client import (
    BudgetExhausted,
    InvalidOutput,
    JudgeClient,
    JudgeFailure,
)
from judges.rubric_data import Criterion
from rlvr.error_lines import first_error
from rlvr.json_types import JsonObject
from rlvr.metrics import INDEPENDENT_REWARD, RubricMetric
from rlvr.types import Item, completion_text

log = logging.getLogger("rlvr.judges")

# A judge decoding by the whole schema gets each rationale bounded, so a weak one cannot ramble
# through its context.
LOCAL_RATIONALE_CHARS = 100
CRITERIA_KEY = "criteria"  # Item.data key holding [{"text": ..., "points": ...}, ...]
VERDICTS_KEY = "rubric_verdicts"  # trajectory metadata key (JSON string)


SYSTEM_PROMPT = """You are grading one assistant response against a numbered list of criteria.
For each criterion decide whether the response meets it, judging only what the response actually says.
Some criteria describe something undesirable; such a criterion is met when the response does that undesirable thing.
Judge every criterion independently. For each one give a one-sentence rationale, then met (true or false).
Answer with JSON only: {"verdicts": [{"criterion": 1, "rationale": "...", "met": true}, ...]}, one entry per criterion, in order."""


class Verdict(BaseModel):
    """The judge's decision on one criterion for one response."""

    model_config = ConfigDict(frozen=True)

    criterion: int  # 1-based position in the item's criteria
    text: str
    points: float
    met: bool
    rationale: str

    @computed_field
    @property
    def passed(self) -> bool:
        return self.met if self.points > 0 else not self.met


# ---------------------------------------------------------------- pure functions


def criteria_of(item: Item) -> list[Criterion]:
    raw = item.data.get(CRITERIA_KEY)
    if not raw:
        raise ValueError(
            f"scorer=rubric needs items with criteria (item {item.id!r} has none); "
            "use task=rubric_if or a data_path in the rubric recipe format"
        )
    return [Criterion.model_validate(c) for c in raw]


def pass_rate(verdicts: list[Verdict]) -> float:
    earned = sum(v.points for v in verdicts if v.met)
    possible = sum(v.points for v in verdicts if v.points > 0)
    return min(1.0, max(0.0, earned / possible)) if possible > 0 else 0.0


def rubric_schema(n: int, pinned: bool) -> dict:
    """JSON schema for n verdicts. `pinned` (a judge decoding by the whole schema, as the local
    engine does): one entry per position, criterion ids as constants, bounded rationales; hosted
    providers get the portable subset."""
    rationale: JsonObject = {"type": "string"}
    if pinned:
        rationale["maxLength"] = LOCAL_RATIONALE_CHARS

    def verdict(criterion: dict) -> dict:
        return {
            "type": "object",
            "properties": {
                "criterion": criterion,
                "rationale": rationale,
                "met": {"type": "boolean"},
            },
            "required": ["criterion", "rationale", "met"],
            "additionalProperties": False,
        }

    verdicts: JsonObject = {"type": "array", "minItems": n, "maxItems": n}
    if pinned:
        verdicts["prefixItems"] = [verdict({"const": i}) for i in range(1, n + 1)]
    else:
        verdicts["items"] = verdict({"type": "integer", "enum": list(range(1, n + 1))})
    return {
        "type": "object",
        "properties": {"verdicts": verdicts},
        "required": ["verdicts"],
        "additionalProperties": False,
    }


def render_conversation(messages: list[dict]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"[{message.get('role', '?')}]\n{content or ''}")
    return "\n\n".join(parts)


def rubric_messages(
    conversation: list[dict], response: str, criteria: list[Criterion]
) -> list[dict]:
    numbered = "\n".join(f"{i}. {c.text}" for i, c in enumerate(criteria, start=1))
    user = (
        f"<conversation>\n{render_conversation(conversation)}\n</conversation>\n\n"
        f"<response>\n{response}\n</response>\n\n"
        f"<criteria>\n{numbered}\n</criteria>"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


class _RawVerdict(BaseModel):
    criterion: int
    rationale: str = ""
    met: bool


class _RawVerdicts(BaseModel):
    verdicts: list[_RawVerdict]


def parse_verdicts(data: Any, criteria: list[Criterion]) -> tuple[list[Verdict], int]:
    """Validate a reply: exactly one verdict per criterion, ids 1..n in any order. Returns the
    verdicts in criterion order (and 0 clamps: verdicts are booleans)."""
    try:
        raw = _RawVerdicts.model_validate(data)
    except ValidationError as error:
        first = first_error(error, "reply")
        raise InvalidOutput(f"{first.where}: {first.message}") from None
    n = len(criteria)
    if len(raw.verdicts) != n:
        raise InvalidOutput(f"expected {n} verdicts, got {len(raw.verdicts)}")
    by_id = {v.criterion: v for v in raw.verdicts}
    if sorted(by_id) != list(range(1, n + 1)):
        raise InvalidOutput(f"criterion ids {sorted(by_id)} are not 1..{n}")
    verdicts = [
        Verdict(
            criterion=i,
            text=c.text,
            points=c.points,
            met=by_id[i].met,
            rationale=by_id[i].rationale.strip(),
        )
        for i, c in enumerate(criteria, start=1)
    ]
    return verdicts, 0


async def grade(
    judge: JudgeClient, trajectory: art.Trajectory, criteria: list[Criterion]
) -> list[Verdict]:
    """All criteria of one response, one judge call. Raises JudgeFailure / BudgetExhausted."""
    messages = trajectory.messages()
    last_assistant = max(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=len(messages)
    )
    reply = await judge.complete(
        rubric_messages(messages[:last_assistant], completion_text(trajectory), criteria),
        name="rubric_verdicts",
        schema=rubric_schema(len(criteria), judge.settings.pinned),
        parse=lambda data: parse_verdicts(data, criteria),
    )
    return reply.value


def with_verdicts(trajectory: art.Trajectory, verdicts: list[Verdict]) -> art.Trajectory:
    """A scored copy: reward = pass rate; the verdicts in metadata (JSON) and logs."""
    rate = pass_rate(verdicts)
    passed = sum(v.passed for v in verdicts)
    lines = [
        f"rubric {'PASS' if v.passed else 'FAIL'} {v.criterion}. [{v.points:+g}] {v.text} -- {v.rationale}"
        for v in verdicts
    ]
    return trajectory.model_copy(
        update={
            "messages_and_choices": list(trajectory.messages_and_choices),
            "reward": rate,
            "metrics": {
                **trajectory.metrics,
                INDEPENDENT_REWARD: trajectory.metrics.get(INDEPENDENT_REWARD, trajectory.reward),
                "rubric_pass_rate": rate,
                "rubric_criteria_passed": passed,
                "rubric_criteria": len(verdicts),
            },
            "metadata": {
                **trajectory.metadata,
                VERDICTS_KEY: json.dumps([v.model_dump() for v in verdicts]),
            },
            "logs": [*trajectory.logs, *lines],
        }
    )


def signal_counts(verdict_table: list[list[Verdict]]) -> tuple[int, int]:
    """(criteria passed by every response, criteria passed by none) over one group."""
    columns = list(zip(*verdict_table, strict=True))
    always = sum(all(v.passed for v in column) for column in columns)
    never = sum(not any(v.passed for v in column) for column in columns)
    return always, never


def _find(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
        return None
    return error if isinstance(error, kind) else None


# ---------------------------------------------------------------- the scorer


class RubricScorer:
    """scorer=rubric: reward = rubric pass rate of each response (one judge call each)."""

    name = "rubric"

    def __init__(self, judge: JudgeClient) -> None:
        self.judge = judge
        self._counts: Counter[str] = Counter()

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        criteria = criteria_of(item)
        try:
            # A TaskGroup cancels the other calls as soon as one fails: no spend on a lost group.
            async with asyncio.TaskGroup() as tasks:
                pending = [
                    tasks.create_task(grade(self.judge, t, criteria)) for t in group.trajectories
                ]
        except BaseExceptionGroup as errors:
            if (budget := _find(errors, BudgetExhausted)) is not None:
                raise budget from None
            if (failure := _find(errors, JudgeFailure)) is None:
                raise
            self._counts[RubricMetric.GROUPS_FAILED] += 1
            log.warning("rubric: group for item %s skipped: %s", item.id, failure)
            return None
        table = [task.result() for task in pending]
        always, never = signal_counts(table)
        self._counts[RubricMetric.GROUPS_SCORED] += 1
        self._counts[RubricMetric.CRITERIA] += len(criteria)
        self._counts[RubricMetric.ALWAYS_PASS] += always
        self._counts[RubricMetric.NEVER_PASS] += never
        return art.TrajectoryGroup(
            [with_verdicts(t, v) for t, v in zip(group.trajectories, table, strict=True)],
            exceptions=list(group.exceptions),
            metadata=dict(group.metadata),
            metrics=dict(group.metrics),
            logs=list(group.logs),
        )

    def pop_metrics(self) -> dict[str, float]:
        counts, self._counts = self._counts, Counter()
        metrics = {m.value: float(counts.get(m.value, 0)) for m in RubricMetric}
        judged = counts.get(RubricMetric.CRITERIA, 0)
        no_signal = counts.get(RubricMetric.ALWAYS_PASS, 0) + counts.get(RubricMetric.NEVER_PASS, 0)
        metrics[RubricMetric.NO_SIGNAL_RATE.value] = no_signal / judged if judged else 0.0
        return {**self.judge.pop_metrics(), **metrics}
