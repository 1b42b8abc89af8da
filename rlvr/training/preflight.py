"""Preflight (the GRPO template's advice): before training, roll out and score a few training
items and judge whether the reward gives GRPO something to learn from — on what the run will
train on.

A run without a warm start trains from the untrained model: its samples' rewards must vary. A
run with one (`sft_steps`) trains from the model after it, which the untrained model is not: the
demonstrations it will learn from must pass the task's own check, and the training scorer must
tell them from the untrained samples (scored in one group with them, as a judge would see them);
a constant reward on the untrained samples alone is then expected, not a failure. With
`warm_steps` a short warm start is trained first and the reward judged on that model's samples.
The verdict names the model it judged.

Built on the run's own pieces: `resolve` (task, scorer, judge), the split, `open_policy` and the
run's `Session` (its traced rollout, rollout limit and failure log), in a throwaway directory.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter

import art
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from rlvr.config import RunConfig
from rlvr.metrics import M, group_stats
from rlvr.training.evaluation import rollout_groups
from rlvr.training.failures import require_some
from rlvr.training.progress import Progress, console
from rlvr.training.session import open_scratch
from rlvr.training.warmstart import check_can_demonstrate, demonstrated, warm_start
from rlvr.types import Environment, Item, Sampling, Scorer


class Rewards(BaseModel):
    """The training scorer's rewards on sampled groups."""

    model_config = ConfigDict(frozen=True)

    rewards: list[float]
    groups: int
    skipped: int  # groups the scorer could not score
    no_signal: int
    all_zero: int
    all_one: int
    truncated_rate: float

    @property
    def constant(self) -> bool:
        return len(set(self.rewards)) <= 1

    def histogram(self) -> dict[float, int]:
        return dict(sorted(Counter(round(r, 2) for r in self.rewards).items()))


def rewards_of(scored: list[art.TrajectoryGroup | None]) -> Rewards:
    kept = [g for g in scored if g is not None]
    stats = group_stats(kept)
    return Rewards(
        rewards=[t.reward for g in kept for t in g.trajectories],
        groups=len(scored),
        skipped=len(scored) - len(kept),
        no_signal=stats.no_signal,
        all_zero=stats.all_zero,
        all_one=stats.all_one,
        truncated_rate=stats.truncated_rate,
    )


class Demonstrations(BaseModel):
    """The warm start's demonstrations of the sampled items."""

    model_config = ConfigDict(frozen=True)

    made: int
    passed: int  # passed the task's own check (the only ones a warm start trains on)
    rewards: list[float]  # the training scorer's, each scored in its item's group of samples


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    judged: str  # which model (or demonstrations) the verdict is about
    message: str
    warnings: list[str] = []


class PreflightReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    items: int  # training items rolled out
    items_asked: int
    group_size: int
    warm_steps: int  # the run's warm start (sft_steps; 0 = none)
    warm_trained: int | None  # steps of the short warm start sampled from, None: untrained
    samples: Rewards
    demos: Demonstrations | None  # None: no warm start, or judged after one
    clipped: int  # rewards clipped to a verifier contract's [0, 1]
    reward_errors: int
    val_items: int = 0  # items each validation of the run evaluates (0: not known)
    held_out: list[str] = []  # where the labels went and what test and validation can resolve

    @property
    def sampled_from(self) -> str:
        if self.warm_trained is None:
            return f"the untrained model ({self.model})"
        return f"the model after a {self.warm_trained}-step warm start ({self.model})"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def verdict(report: PreflightReport) -> Verdict:
    """Whether GRPO has something to learn from on what the run trains on (module docstring)."""
    if report.warm_steps == 0 or report.demos is None:
        return samples_verdict(report)
    demos, samples = report.demos, report.samples
    judged = (
        f"{plural(demos.passed, 'demonstration')} of the {report.warm_steps}-step warm start the "
        f"run trains from, beside {plural(len(samples.rewards), 'sample')} of "
        f"{report.sampled_from}"
    )
    if demos.passed == 0:
        return Verdict(
            ok=False,
            judged=judged,
            message=f"none of the {demos.made} demonstrations passes the task's own check: the "
            "warm start has nothing to teach; fix demonstrate()",
        )
    if len(set(demos.rewards + samples.rewards)) <= 1:
        value = (demos.rewards or samples.rewards or [0.0])[0]
        return Verdict(
            ok=False,
            judged=judged,
            message=f"the training scorer gives the demonstrations the same reward as the "
            f"untrained samples ({value:.2f}): after the warm start GRPO would still see no "
            "difference; give credit the demonstrations earn",
        )
    shown, base = statistics.mean(demos.rewards or [0.0]), statistics.mean(samples.rewards)
    warnings = []
    if demos.rewards and shown < base:
        warnings.append(
            f"the scorer rewards the untrained samples above the demonstrations ({base:.2f} vs "
            f"{shown:.2f}): check what it rewards (rlvr inspect --suspicious after a few steps)"
        )
    expected = (
        " (constant on the untrained samples, as expected before the warm start teaches the task)"
        if samples.constant
        else ""
    )
    return Verdict(
        ok=True,
        judged=judged,
        message=f"the training scorer gives the demonstrations {shown:.2f} and the untrained "
        f"samples {base:.2f}{expected}: ok to train",
        warnings=warnings,
    )


def samples_verdict(report: PreflightReport) -> Verdict:
    judged = f"{plural(len(report.samples.rewards), 'sample')} of {report.sampled_from}"
    if not report.samples.constant:
        return Verdict(ok=True, judged=judged, message="the reward varies: ok to train")
    value = (report.samples.rewards or [0.0])[0]
    clipped = f" ({report.clipped} of them clipped to [0, 1])" if report.clipped else ""
    advice = "give partial credit, change difficulty, max_tokens or temperature"
    if report.warm_steps == 0:
        advice += ", or warm-start it on demonstrations (sft_steps= and a demonstrate())"
    return Verdict(
        ok=False,
        judged=judged,
        message=f"the reward is constant ({value:.2f}) on every sampled trajectory{clipped}: "
        f"GRPO cannot learn from it; {advice}",
    )


class Suggestion(BaseModel):
    """A setting preflight's measurements argue for, and the measurement."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: str
    why: str

    def line(self) -> str:
        return f"{self.key}={self.value}: {self.why}"


CUT_SHARE = 0.1  # samples cut at max_tokens above this share: the replies need room
SPREAD_WANTED = 0.5  # a group should show reward spread at least this often
GROUP_SIZES = (4, 8, 16, 32)
# A validation should resolve a change of this size: two standard errors of one evaluation's mean.
RESOLVED_CHANGE = 0.1


def no_spread_chance(mean: float, group_size: int) -> float:
    """The chance that a group of pass/fail rewards with success rate `mean` is all equal."""
    return float(mean**group_size + (1 - mean) ** group_size)


def suggestions(report: PreflightReport, cfg: RunConfig) -> list[Suggestion]:
    """Settings the measured rewards argue for: room for replies that were cut, groups large
    enough to show reward spread, and validations large enough to see a change of
    RESOLVED_CHANGE (pure: the report and the config alone)."""
    s, found = report.samples, []
    if s.truncated_rate > CUT_SHARE:
        found.append(
            Suggestion(
                key="max_tokens",
                value=str(cfg.max_tokens * 2),
                why=f"{s.truncated_rate:.0%} of the samples were cut at max_tokens={cfg.max_tokens}",
            )
        )
    mean = statistics.mean(s.rewards) if s.rewards else 0.0
    if 0 < mean < 1 and no_spread_chance(mean, cfg.group_size) > SPREAD_WANTED:
        size = next(
            (g for g in GROUP_SIZES if no_spread_chance(mean, g) <= SPREAD_WANTED), GROUP_SIZES[-1]
        )
        if size > cfg.group_size:
            found.append(
                Suggestion(
                    key="group_size",
                    value=str(size),
                    why=f"at a mean reward of {mean:.2f}, a group of {cfg.group_size} is all "
                    f"equal {no_spread_chance(mean, cfg.group_size):.0%} of the time and "
                    f"teaches nothing; a group of {size}, "
                    f"{no_spread_chance(mean, size):.0%}",
                )
            )
    spread = min(max(mean, 0.05), 0.95)  # an accuracy near the samples' mean reward
    needed = math.ceil(spread * (1 - spread) * (2 / RESOLVED_CHANGE) ** 2)
    if report.val_items and report.val_items < needed:
        noise = 2 * math.sqrt(spread * (1 - spread) / report.val_items)
        found.append(
            Suggestion(
                key="validation items",
                value=f"{needed} or more (max_val_items, val_ratio, or the task's item count)",
                why=f"a validation of {report.val_items} items at about {spread:.2f} moves by "
                f"±{noise:.2f} on noise alone; {needed} items resolve a change of "
                f"{RESOLVED_CHANGE:g}",
            )
        )
    return found


def describe(report: PreflightReport) -> list[str]:
    """The report in the lines `rlvr preflight` prints before its verdict."""
    s = report.samples
    asked = (
        f" (asked for {report.items_asked}: the split holds no more)"
        if report.items < report.items_asked
        else ""
    )
    lines = [
        *report.held_out,
        f"rewards of {report.sampled_from}: {report.items} training items{asked} × "
        f"{report.group_size} samples ({len(s.rewards)} trajectories, {s.groups} groups):",
        *(f"  {value:5.2f} {'█' * count} {count}" for value, count in s.histogram().items()),
        f"no-signal groups: {s.no_signal}/{s.groups} (all-0 {s.all_zero}, all-1 {s.all_one}); "
        f"skipped {s.skipped}; truncated {s.truncated_rate:.0%}; clipped {report.clipped}; "
        f"reward errors {report.reward_errors}",
    ]
    if report.warm_steps:
        lines.append(
            f"warm start: the run trains {report.warm_steps} steps on demonstrations before RL"
            + (
                f"; {report.demos.passed} of {report.demos.made} demonstrations pass the task's "
                f"own check, training reward {', '.join(f'{r:.2f}' for r in report.demos.rewards)}"
                if report.demos is not None
                else ""
            )
        )
    return lines


async def preflight(
    cfg: RunConfig, items: int = 4, warm_steps: int = 0, out: Console = console
) -> PreflightReport:
    """Roll out `items` training items `group_size` times each and score them as the run would
    (after a short warm start of `warm_steps` steps, if given); with the run's warm start ahead
    and none trained here, also the demonstrations of the same items."""
    async with open_scratch(cfg) as run:
        cfg, environment, scorer, policy, split = (
            run.cfg,
            run.environment,
            run.scorer,
            run.policy,
            run.split,
        )
        batch = random.Random(cfg.seed).sample(split.train, min(items, len(split.train)))
        val_items = len(run.val_items)
        held_out_lines = run.held_out.lines(cfg)
        trained = None
        if warm_steps > 0:
            short = cfg.model_copy(update={"sft_steps": warm_steps})
            check_can_demonstrate(short, environment)
            row = await warm_start(short, environment, policy.model, run.labelled_train, out=out)
            trained = int(row.steps or 0)
        with Progress("preflight rollouts", len(batch), "group") as progress:
            groups, done, _, failures = await rollout_groups(
                run.rollout,
                policy,
                batch,
                cfg.group_size,
                Sampling.from_config(cfg, "train"),
                run.limit,
                progress,
            )
        run.failure_log.report(failures, "preflight")
        require_some(len(done), failures, "preflight")
        scored = [await run.score(g, i) for g, i in zip(groups, done, strict=True)]
        counts = scorer.pop_metrics()  # the samples' own: clipped rewards, reward errors
        demos = None
        if cfg.sft_steps > 0 and trained is None:
            demos = await judged_demonstrations(environment, run.scorer, groups, done)
    return PreflightReport(
        model=cfg.model,
        items=len(batch),
        items_asked=items,
        group_size=cfg.group_size,
        warm_steps=cfg.sft_steps,
        warm_trained=trained,
        samples=rewards_of(scored),
        demos=demos,
        clipped=int(counts.get(M.REWARD_CLIPPED, 0)),
        reward_errors=int(counts.get(M.REWARD_ERRORS, 0)),
        val_items=val_items,
        held_out=held_out_lines,
    )


async def judged_demonstrations(
    environment: Environment, scorer: Scorer, groups: list[art.TrajectoryGroup], items: list[Item]
) -> Demonstrations:
    """Each item's demonstration, checked by the task, and scored by the training scorer in one
    group with that item's untrained samples (a group-relative judge ranks it among them)."""
    made = await demonstrated(environment, items)
    rewards: list[float] = []
    for demo, group, item in zip(made, groups, items, strict=True):
        if demo is None:
            continue
        mixed = art.TrajectoryGroup([demo, *group.trajectories], exceptions=[])
        scored = await scorer.score(mixed, item)
        if scored is not None:
            rewards.append(scored.trajectories[0].reward)
    return Demonstrations(made=len(made), passed=sum(d is not None for d in made), rewards=rewards)
