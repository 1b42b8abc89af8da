"""`rlvr bench judge`: what judging costs, measured with real calls on the configured judge (the
local judge by default).

- `ruler_tokens_ratio`: RULER prompt tokens per trajectory when a group of 8 is ranked in one call,
  divided by the prompt tokens of judging each trajectory alone (RULER on a group of one: the
  whole trajectory and the rubric in every call). Goal <= 0.5. The trajectories are what a default
  run produces: the SmolLM2 policy's answers to a HealthBench prompt at the configured max_tokens.
  `ruler_tokens_ratio_long_answers` repeats it on HealthBench's own long reference answers (group of
  5: the ideal completion and 4 references), where the shared prefix matters less.
- `rubric_calls_per_trajectory`: judge requests the rubric scorer makes per response (must be 1:
  every criterion in one call). Retries are reported apart.
- `ruler_group_seconds`, `rubric_group_seconds` and `*_completion_tok_s`: the wall time of scoring
  one group and the judge's completion tokens per second over it (the rubric's calls run
  concurrently, so its figure includes the engine's batching). Point `judge.base_url` at another
  server to compare engines on the same calls.

Tokens are the judge server's own count (`usage.prompt_tokens`: the model's tokenizer with its chat
template applied), per attempt, so a retry does not inflate them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import art
import litellm
from pydantic import BaseModel, ConfigDict

from judges import open_judge
from judges.client import JudgeClient
from judges.rubric import RubricScorer
from judges.rubric_data import Criterion, healthbench_path
from judges.ruler import RulerScorer
from rlvr.config import RunConfig
from rlvr.metrics import Figures, JudgeMetric
from rlvr.types import Item

GOAL_RULER_TOKENS_RATIO = 0.5
MIN_CRITERIA, MAX_CRITERIA = 5, 8  # a rubric item small enough for the local judge


def pick_item() -> tuple[Item, list[str]]:
    """The first single-turn HealthBench example with 5-8 criteria and 4 reference answers:
    (item, [ideal answer, 4 reference answers])."""
    with healthbench_path().open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            ideal = record.get("ideal_completions_data") or {}
            references = ideal.get("ideal_completions_ref_completions") or []
            if (
                len(record["prompt"]) == 1
                and MIN_CRITERIA <= len(record["rubrics"]) <= MAX_CRITERIA
                and len(references) == 4
                and any(r["points"] > 0 for r in record["rubrics"])
            ):
                criteria = [
                    Criterion(text=r["criterion"], points=r["points"]).model_dump()
                    for r in record["rubrics"]
                ]
                item = Item(
                    id=record["prompt_id"],
                    prompt=record["prompt"][0]["content"],
                    data={"criteria": criteria},
                )
                return item, [ideal["ideal_completion"], *references]
    raise RuntimeError("no HealthBench example fits the bench")


def trajectory(prompt: str, answer: str) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ],
        reward=0.0,
    )


async def policy_answers(judge: JudgeClient, prompt: str, n: int, max_tokens: int) -> list[str]:
    """n answers sampled at T=1 from the local SmolLM2 (the default policy) served by the engine."""
    api_base = await judge.api_base()
    answers = []
    for seed in range(n):
        response = await litellm.acompletion(
            model=judge.settings.model,
            api_base=api_base,
            api_key=judge.endpoint_key,
            messages=[{"role": "user", "content": prompt}],
            temperature=1.0,
            max_tokens=max_tokens,
            seed=seed,
        )
        answers.append(response.choices[0].message.content or "")
    return answers


def _prompt_tokens_per_attempt(metrics: dict[str, float]) -> float:
    attempts = metrics[JudgeMetric.CALLS] + metrics[JudgeMetric.RETRIES]
    return metrics[JudgeMetric.PROMPT_TOKENS] / attempts if attempts else 0.0


class RulerRatio(BaseModel):
    """RULER's prompt tokens on a whole group against each trajectory alone."""

    model_config = ConfigDict(frozen=True)

    group_size: int
    prompt_tokens_group: float
    prompt_tokens_per_trajectory_in_group: float
    prompt_tokens_alone_mean: float
    ratio: float
    group_seconds: float
    completion_tok_s: float
    scores: list[float]


class JudgeFigures(Figures):
    """`rlvr-judges bench`: RULER's tokens per trajectory and the rubric's calls, real calls."""

    bench: str = "judge"
    judge: str
    token_source: str
    item: str
    policy_max_tokens: int
    ruler_group_size: int
    ruler_prompt_tokens_group: float
    ruler_prompt_tokens_per_trajectory_in_group: float
    ruler_prompt_tokens_alone_mean: float
    ruler_group_seconds: float
    ruler_completion_tok_s: float
    ruler_scores: list[float]
    ruler_tokens_ratio_long_answers: float
    long_answers_group_size: int
    ruler_prompt_tokens_alone_mean_long_answers: float
    rubric_criteria: int
    rubric_trajectories: int
    rubric_judge_calls: float
    rubric_judge_retries: float
    rubric_group_seconds: float
    rubric_completion_tok_s: float
    rubric_pass_rates: list[float]
    goal_ruler_tokens_ratio: float
    ruler_tokens_ratio: float
    rubric_calls_per_trajectory: float


async def ruler_ratio(scorer: RulerScorer, item: Item, answers: list[str]) -> RulerRatio:
    """RULER on the whole group, then on each trajectory alone; prompt tokens of each."""
    group = art.TrajectoryGroup([trajectory(item.prompt, a) for a in answers])
    scorer.pop_metrics()
    started = time.monotonic()
    scored = await scorer.score(group, item)
    group_seconds = time.monotonic() - started
    group_metrics = scorer.pop_metrics()
    if scored is None:
        raise RuntimeError("the judge failed on the group (see the log)")
    alone: list[float] = []
    for answer in answers:
        single = art.TrajectoryGroup([trajectory(item.prompt, answer)])
        if await scorer.score(single, item) is None:
            raise RuntimeError("the judge failed on a single trajectory (see the log)")
        alone.append(_prompt_tokens_per_attempt(scorer.pop_metrics()))
    group_tokens = _prompt_tokens_per_attempt(group_metrics)
    alone_mean = sum(alone) / len(alone)
    return RulerRatio(
        group_size=len(answers),
        prompt_tokens_group=group_tokens,
        prompt_tokens_per_trajectory_in_group=group_tokens / len(answers),
        prompt_tokens_alone_mean=alone_mean,
        ratio=group_tokens / len(answers) / alone_mean,
        group_seconds=round(group_seconds, 2),
        completion_tok_s=round(group_metrics[JudgeMetric.COMPLETION_TOKENS] / group_seconds, 1),
        scores=[t.reward for t in scored.trajectories],
    )


async def run_bench(cfg: RunConfig, group_size: int = 8, log: Any = None) -> JudgeFigures:
    say = log or (lambda text: print(text, file=sys.stderr, flush=True))
    item, references = pick_item()
    async with open_judge(cfg) as judge:
        say(f"judge {cfg.judge.model}: starting / checking {await judge.api_base() or 'provider'}")
        say(f"sampling {group_size} policy answers (max_tokens={cfg.max_tokens}) for {item.id}")
        answers = await policy_answers(judge, item.prompt, group_size, cfg.max_tokens)
        ruler = RulerScorer(judge)
        say(f"RULER: group of {group_size} vs each alone")
        short = await ruler_ratio(ruler, item, answers)
        say(f"RULER: HealthBench reference answers, group of {len(references)} vs each alone")
        long = await ruler_ratio(ruler, item, references)
        say(f"rubric: {len(item.data['criteria'])} criteria x {group_size} responses")
        rubric = RubricScorer(judge)
        rubric.pop_metrics()
        started = time.monotonic()
        scored = await rubric.score(
            art.TrajectoryGroup([trajectory(item.prompt, a) for a in answers]), item
        )
        rubric_seconds = time.monotonic() - started
        metrics = rubric.pop_metrics()
    if scored is None:
        raise RuntimeError("the judge failed on the rubric group (see the log)")
    return JudgeFigures(
        judge=cfg.judge.model,
        token_source="judge server usage.prompt_tokens per attempt (real calls)",
        item=item.id,
        policy_max_tokens=cfg.max_tokens,
        ruler_group_size=short.group_size,
        ruler_prompt_tokens_group=short.prompt_tokens_group,
        ruler_prompt_tokens_per_trajectory_in_group=short.prompt_tokens_per_trajectory_in_group,
        ruler_prompt_tokens_alone_mean=short.prompt_tokens_alone_mean,
        ruler_group_seconds=short.group_seconds,
        ruler_completion_tok_s=short.completion_tok_s,
        ruler_scores=short.scores,
        ruler_tokens_ratio_long_answers=round(long.ratio, 4),
        long_answers_group_size=long.group_size,
        ruler_prompt_tokens_alone_mean_long_answers=long.prompt_tokens_alone_mean,
        rubric_criteria=len(item.data["criteria"]),
        rubric_trajectories=len(scored.trajectories),
        rubric_judge_calls=metrics[JudgeMetric.CALLS],
        rubric_judge_retries=metrics[JudgeMetric.RETRIES],
        rubric_group_seconds=round(rubric_seconds, 2),
        rubric_completion_tok_s=round(metrics[JudgeMetric.COMPLETION_TOKENS] / rubric_seconds, 1),
        rubric_pass_rates=[round(t.reward, 3) for t in scored.trajectories],
        goal_ruler_tokens_ratio=GOAL_RULER_TOKENS_RATIO,
        ruler_tokens_ratio=round(short.ratio, 4),
        rubric_calls_per_trajectory=metrics[JudgeMetric.CALLS] / len(scored.trajectories),
    )
