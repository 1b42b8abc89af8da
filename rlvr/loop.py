"""The hybrid training loop, top to bottom.

    split 80/10/10 -> baseline validation -> repeat:
        sample training items -> roll out groups (ART gather) -> score (scorer) ->
        drop no-signal groups (counted) -> train (backend) -> metrics, hints ->
        every eval_every steps: validation accuracy from the scenario's ground truth ->
        plateau? divergence? -> stop
    restore the best checkpoint -> test split once -> summary.json, report.png

Training reward comes from the scorer; stopping comes only from held-out ground truth.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, nullcontext
from enum import StrEnum
from pathlib import Path
from typing import Any

import art
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.panel import Panel

from rlvr import faults, runlock, store
from rlvr.backends import (
    ART_DIR,
    TRAINS_WITHOUT_LOGPROBS,
    Policy,
    open_policy,
    rewind_policy,
    train_kwargs,
)
from rlvr.config import TrainConfig
from rlvr.failures import Failure, FailureLog, RunFailed, failures_of, require_some
from rlvr.hints import decision_hints
from rlvr.integrations import open_tracker
from rlvr.metrics import (
    ALARM_PREFIX,
    HINT_KEY,
    INDEPENDENT_REWARD,
    M,
    agreement,
    group_stats,
    has_signal,
    peak_rss_gb,
    trajectory_metric_means,
)
from rlvr.paired import describe_block, test_block
from rlvr.plugins import resolve_task
from rlvr.redact import install_log_redaction
from rlvr.report import plot_report
from rlvr.rollout_model import RolloutModel
from rlvr.scoring import make_scorer
from rlvr.split import Split, split_items
from rlvr.stopping import (
    Alarm,
    AlarmName,
    EvalPoint,
    StepPoint,
    Thresholds,
    best_index,
    divergence,
    gain_threshold,
    judge_disagrees,
    out_of_time,
    plateaued,
)
from rlvr.tasks import Task
from rlvr.types import BudgetExhausted, Item, Sampling, Scenario, Scorer
from rlvr.warmstart import WarmMetric, check_can_demonstrate, warm_start

RolloutFn = Callable[[art.Model, Item, Sampling], Awaitable[art.Trajectory]]
CheckFn = Callable[[Item, art.Trajectory], Awaitable[float]]
ScoreFn = Callable[[art.TrajectoryGroup, Item], Awaitable[art.TrajectoryGroup | None]]

console = Console()


class StopReason(StrEnum):
    PLATEAU = "plateau"  # validation stopped improving for `patience` evaluations
    MAX_STEPS = "max_steps"  # the step budget ran out first
    TIME_BUDGET = "time_budget"  # the next evaluation period would not fit in max_minutes
    REWARD_HACKING = "reward_hacking"  # divergence alarm with on_divergence=stop
    JUDGE_BUDGET = "judge_budget"  # the judge spend cap was reached


class RunResult(BaseModel):
    """What a run ended with; the same facts as summary.json."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path
    task: str
    scorer: str
    stop_reason: StopReason
    steps: int
    baseline_val: float
    best_val: float
    best_step: int
    test_accuracy: float | None
    alarms: list[Alarm]
    wall_s: float


class _State(BaseModel):
    """Where a run stands; rebuilt from metrics.jsonl on resume."""

    step: int = 0
    evals: list[EvalPoint] = []
    policy_steps: dict[int, int] = {}  # loop step of an evaluation -> policy checkpoint step
    alarms: list[Alarm] = []
    wall_s: float = 0.0


# --- rollouts ---------------------------------------------------------------------------------


async def rollout_groups(
    rollout: RolloutFn,
    policy: Policy,
    items: list[Item],
    n: int,
    sampling: Sampling,
    limit: asyncio.Semaphore,
    desc: str,
    after_each: Callable[[art.TrajectoryGroup], Awaitable[art.TrajectoryGroup]] | None = None,
) -> tuple[list[art.TrajectoryGroup], list[Item], int, list[Failure]]:
    """n rollouts per item through ART's gather. Returns (groups with trajectories, their items,
    rollout errors, the failures behind them). A rollout that raises is dropped from its group
    and counted, never retried silently.
    `after_each` runs on each group as soon as its own rollouts are done (ART's hook), so scoring
    one group overlaps the rollouts of the others."""

    async def one(item: Item) -> art.Trajectory:
        async with limit:
            trajectory = await rollout(RolloutModel(policy.model, sampling), item, sampling)
        trajectory.metadata["item_id"] = item.id
        return trajectory

    by_id = {item.id: item for item in items}
    groups = await art.gather_trajectory_groups(
        (
            art.TrajectoryGroup((one(item) for _ in range(n)), metadata={"item_id": item.id})
            for item in items
        ),
        pbar_desc=desc,
        max_exceptions=len(items) * n,
        after_each=(lambda g: after_each(g) if g.trajectories else _same(g))
        if after_each
        else None,
    )
    errors = sum(len(g.exceptions) for g in groups) + n * (len(items) - len(groups))
    kept = [g for g in groups if g.trajectories]
    return kept, [by_id[str(g.metadata["item_id"])] for g in kept], errors, failures_of(groups)


async def _same(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
    return group


async def evaluate(
    rollout: RolloutFn,
    check: CheckFn,
    policy: Policy,
    items: list[Item],
    sampling: Sampling,
    limit: asyncio.Semaphore,
    desc: str,
    failure_log: FailureLog | None = None,
) -> tuple[float, list[art.TrajectoryGroup], list[Item], list[Failure]]:
    """Accuracy on held-out items: one rollout each, scored by the scenario's ground truth.
    A rollout that raised is an error of the code, not an answer of the policy: it is reported
    (`failure_log`) and counted, and the accuracy is over the completed items; when every
    rollout raised, RunFailed."""
    groups, done, _, failures = await rollout_groups(
        rollout, policy, items, 1, sampling, limit, desc
    )
    if failure_log is not None:
        failure_log.report(failures, desc)
    require_some(len(done), failures, desc)
    checks = await asyncio.gather(
        *(check(item, g.trajectories[0]) for g, item in zip(groups, done, strict=True))
    )
    for group, value in zip(groups, checks, strict=True):
        group.trajectories[0].reward = value
    return sum(checks) / len(done) if done else 0.0, groups, done, failures


# --- one training step ------------------------------------------------------------------------


_SKIPPED = "rlvr_skipped"  # group metadata: the scorer returned None


class _ScoreTiming:
    """When each group's scoring ran, to tell how much of it hid behind other groups' rollouts."""

    def __init__(self) -> None:
        self.first_start: float | None = None
        self.last_start: float | None = None  # the last group's rollouts ended here
        self.busy_s = 0.0

    def begin(self) -> float:
        now = time.monotonic()
        self.first_start = self.first_start or now
        self.last_start = now
        return now

    def end(self, began: float) -> None:
        self.busy_s += time.monotonic() - began

    def metrics(self, gathered: float) -> dict[str, float]:
        """`time/score_s`: summed scoring time of the groups; `time/score_hidden`: the share of
        the span in which scoring ran that overlapped rollouts (the rest is waited for)."""
        if self.first_start is None or self.last_start is None:
            return {}
        span = gathered - self.first_start
        exposed = gathered - self.last_start
        hidden = 1.0 - exposed / span if span > 0 else 0.0
        return {M.SCORE_SECONDS: self.busy_s, M.SCORE_HIDDEN: hidden}


async def train_step(
    cfg: TrainConfig,
    step: int,
    split: Split,
    scenario: Scenario,
    scorer: Scorer,
    policy: Policy,
    limit: asyncio.Semaphore,
    rollout: RolloutFn | None = None,
    score: ScoreFn | None = None,
    failure_log: FailureLog | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One step; returns its metrics row and its scored trajectories as table rows. `rollout`
    and `score` default to the scenario's and scorer's own (the loop passes traced ones)."""
    rollout = rollout or scenario.rollout
    score = score or scorer.score
    started = time.monotonic()
    rng = random.Random(
        f"{cfg.seed}-{step}"
    )  # the batch of a step is reproducible, resume included
    batch = rng.sample(split.train, min(cfg.groups_per_batch, len(split.train)))
    sampling = Sampling(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens)
    by_id = {item.id: item for item in batch}
    # Ground truth of training trajectories, for judge agreement and the reward-hacking view;
    # skipped where the truth itself is a judge (that would double the judge's bill).
    truth_known = not scenario.judged_check
    timing = _ScoreTiming()

    async def check_and_score(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
        """Truth and training reward of one group, as soon as its rollouts are done."""
        t0 = timing.begin()
        item = by_id[str(group.metadata["item_id"])]
        if truth_known:
            truths = await asyncio.gather(*(scenario.check(item, t) for t in group.trajectories))
            for t, truth in zip(group.trajectories, truths, strict=True):
                t.metrics[INDEPENDENT_REWARD] = truth
        scored = await score(group, item)
        timing.end(t0)
        # The loop's bookkeeping (item id, rollout exceptions) survives any scorer; a skipped
        # group (None) is kept with a mark, since ART's gather would drop it uncounted.
        kept = art.TrajectoryGroup(
            (scored or group).trajectories, metadata={**group.metadata, _SKIPPED: scored is None}
        )
        kept.exceptions = list(group.exceptions)  # already ART's records: not re-wrapped
        return kept

    groups, items, rollout_errors, failures = await rollout_groups(
        rollout,
        policy,
        batch,
        cfg.group_size,
        sampling,
        limit,
        f"step {step} rollouts",
        after_each=check_and_score,
    )
    (failure_log or FailureLog(console)).report(failures, f"step {step + 1}")
    require_some(len(groups), failures, f"step {step + 1}")
    faults.maybe_crash(faults.FaultPoint.ROLLOUTS, step + 1)  # test-only hook (rlvr.faults)
    gathered = time.monotonic()
    rollout_s = (timing.last_start or gathered) - started
    scored = [None if g.metadata.get(_SKIPPED) else g for g in groups]
    kept = [(g, i) for g, i in zip(scored, items, strict=True) if g is not None]
    scored_groups = [g for g, _ in kept]
    trainable = [g for g in scored_groups if has_signal(g)]

    train_started = time.monotonic()
    result_metrics: dict[str, float] = {}
    without_logprobs = turns_without_logprobs(trainable)
    if trainable:
        kwargs = train_kwargs(cfg)
        if without_logprobs and cfg.backend in TRAINS_WITHOUT_LOGPROBS:
            kwargs["allow_training_without_logprobs"] = True
            trainable = [as_messages_without_logprobs(g) for g in trainable]
        result = await policy.backend.train(policy.model, trainable, **kwargs)
        result_metrics = dict(result.metrics)
    train_s = time.monotonic() - train_started

    stats = group_stats(scored_groups)
    judged = [
        t.reward for g in scored_groups for t in g.trajectories if INDEPENDENT_REWARD in t.metrics
    ]
    truths_kept = [
        float(t.metrics[INDEPENDENT_REWARD])
        for g in scored_groups
        for t in g.trajectories
        if INDEPENDENT_REWARD in t.metrics
    ]
    row: dict[str, Any] = {
        M.STEP: step + 1,
        M.REWARD_MEAN: stats.reward_mean,
        M.REWARD_STD: stats.reward_std,
        M.GROUPS: stats.groups,
        M.TRAINED_GROUPS: len(trainable),
        M.NO_SIGNAL_RATE: stats.no_signal_rate,
        M.ALL_ZERO: stats.all_zero,
        M.ALL_ONE: stats.all_one,
        M.TRUNCATED_RATE: stats.truncated_rate,
        M.COMPLETION_TOKENS: stats.completion_tokens_mean,
        M.SKIPPED: len(groups) - len(kept),
        M.ROLLOUT_ERRORS: rollout_errors,
        M.NO_LOGPROB_TURNS: without_logprobs,
        M.KL: result_metrics.get("kl"),
        M.LOSS: result_metrics.get("loss"),
        M.INDEPENDENT: sum(truths_kept) / len(truths_kept) if truths_kept else None,
        M.TRUTH_ROLLOUTS: len(truths_kept),
        M.POLICY_STEP: await policy.model.get_step(),
        M.ROLLOUT_SECONDS: rollout_s,
        **timing.metrics(gathered),
        M.TRAIN_SECONDS: train_s,
        M.STEP_SECONDS: time.monotonic() - started,
        M.PEAK_RSS: peak_rss_gb(),
        **scorer.pop_metrics(),
        **trajectory_metric_means(scored_groups),
    }
    if truths_kept:  # how far the training reward agrees with ground truth (judge or not)
        row[M.JUDGE_AGREEMENT] = agreement(judged, truths_kept)
    table = store.trajectory_rows(
        scored_groups, [i.id for _, i in kept], step=step + 1, split="train"
    )
    return row, table


def turns_without_logprobs(groups: list[art.TrajectoryGroup]) -> int:
    """Sampled turns (Choices) that came back without logprobs (a rollout that asked for none)."""
    return sum(
        isinstance(m, Choice) and m.logprobs is None
        for g in groups
        for t in g.trajectories
        for m in t.messages_and_choices
    )


def as_messages_without_logprobs(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
    """`group` with each Choice that has no logprobs replaced by its assistant message as ART
    renders it. ART trains such messages under allow_training_without_logprobs, its loss taking
    the current (= sampling) adapter's logprobs for the missing ones; a Choice without logprobs
    it cannot tokenise (ART 0.5.18, preprocessing/tokenize.py: no sentinel for it)."""

    def converted(t: art.Trajectory) -> art.Trajectory:
        rendered = t.messages()
        parts = [
            rendered[i] if isinstance(m, Choice) and m.logprobs is None else m
            for i, m in enumerate(t.messages_and_choices)
        ]
        return t.model_copy(update={"messages_and_choices": parts})

    return art.TrajectoryGroup(
        [converted(t) for t in group.trajectories], metadata=dict(group.metadata), exceptions=[]
    )


# --- the run ----------------------------------------------------------------------------------


def _restore_state(rows: list[dict[str, Any]]) -> _State:
    state = _State()
    for row in rows:
        step = int(row.get(M.STEP, 0))
        if M.REWARD_MEAN in row:
            state.step = max(state.step, step)
        if M.VAL_ACCURACY in row:
            state.evals.append(
                EvalPoint(
                    step=step,
                    val=row[M.VAL_ACCURACY],
                    reward=row.get(M.VAL_TRAIN_REWARD),
                    val_items=row.get(M.VAL_ITEMS),
                    val_std=row.get(M.VAL_STD),
                )
            )
            state.policy_steps[step] = int(row.get(M.POLICY_STEP, 0))
        for key, message in row.items():
            if key.startswith(ALARM_PREFIX):
                state.alarms.append(
                    Alarm(
                        name=AlarmName(key.removeprefix(ALARM_PREFIX)), step=step, message=message
                    )
                )
        state.wall_s = max(state.wall_s, float(row.get("time/wall_s", 0.0)))
    return state


async def _warm(
    cfg: TrainConfig,
    scenario: Scenario,
    policy: Policy,
    train: list[Item],
    val_items: list[Item],
    emit: Callable[[dict[str, Any]], None],
    limit: asyncio.Semaphore,
    rollout: RolloutFn,
) -> None:
    """Validation before the warm start (its own gain), then the warm start; one row."""
    sampling = Sampling(temperature=cfg.val_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens)
    before, _, _, _ = await evaluate(
        rollout,
        scenario.check,
        policy,
        val_items,
        sampling,
        limit,
        "validate before warm start",
        FailureLog(console),
    )
    row = await warm_start(cfg, scenario, policy.model, train)
    saved = await policy.model.get_step()  # recorded: a resumed run rewinds the policy to it
    emit({M.STEP: 0, WarmMetric.VAL_BEFORE: before, **row, M.POLICY_STEP: saved})
    console.print(
        f"[green]warm start[/]: {row[WarmMetric.DEMONSTRATIONS]:.0f} demonstrations, loss "
        f"{row[WarmMetric.LOSS_FIRST]:.3f} -> {row[WarmMetric.LOSS_LAST]:.3f}; validation before "
        f"it {before:.3f} ({row[WarmMetric.SECONDS]:.0f}s)",
        highlight=False,
    )


def _judge_alarm(
    cfg: TrainConfig, state: _State, rows: list[dict[str, Any]], row: dict[str, Any]
) -> None:
    """alarm/judge_disagrees on this step's row, unless it already fired within the window."""
    points = [
        StepPoint(
            step=int(r[M.STEP]),
            reward=r[M.REWARD_MEAN],
            truth=r[M.INDEPENDENT],
            n=int(r.get(M.TRUTH_ROLLOUTS) or 0),
        )
        for r in rows
        if r.get(M.INDEPENDENT) is not None and r.get(M.REWARD_MEAN) is not None
    ]
    alarm = judge_disagrees(points, cfg.divergence_window, cfg.judge_gap)
    recent = [
        a
        for a in state.alarms
        if a.name == AlarmName.JUDGE_DISAGREES and a.step > state.step - cfg.divergence_window
    ]
    if alarm is None or recent or alarm.step != state.step:
        return
    state.alarms.append(alarm)
    row[f"{ALARM_PREFIX}{alarm.name}"] = alarm.message
    console.print(Panel(alarm.message, title=f"ALARM: {alarm.name}", style="bold yellow"))


def _last_policy_step(rows: list[dict[str, Any]]) -> int:
    return max((int(r[M.POLICY_STEP]) for r in rows if r.get(M.POLICY_STEP) is not None), default=0)


def _eval_due(cfg: TrainConfig, step: int) -> bool:
    return step % cfg.eval_every == 0 or step == cfg.max_steps


def _stop_after_eval(
    cfg: TrainConfig, state: _State, rows: list[dict[str, Any]], test_items: int, val_items: int
) -> StopReason | None:
    """The stopping rules after the evaluation at `state.step`. A pure function of the history,
    so a resumed run re-derives a decision the killed run took but did not act on."""
    vals = [p.val for p in state.evals]
    hacking = [
        a for a in state.alarms if a.name == AlarmName.REWARD_HACKING and a.step == state.step
    ]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    if hacking and cfg.on_divergence == "stop":
        return StopReason.REWARD_HACKING
    if plateaued(vals, cfg.patience, gain_threshold(state.evals, cfg.min_delta)):
        return StopReason.PLATEAU
    if cfg.max_minutes is not None and out_of_time(
        [r["time/wall_s"] for r in evals],
        # the test split is evaluated for the final, the starting and the warm-started model
        test_s=evals[-1][M.EVAL_SECONDS]
        * test_items
        / val_items
        * len(_test_checkpoints(rows, -1)),
        budget_s=cfg.max_minutes * 60,
    ):
        return StopReason.TIME_BUDGET
    return None


def _window_reward(rows: list[dict[str, Any]], step: int, eval_every: int) -> float | None:
    recent = [
        r[M.REWARD_MEAN]
        for r in rows
        if M.REWARD_MEAN in r and step - eval_every < r[M.STEP] <= step
    ]
    return sum(recent) / len(recent) if recent else None


def _print_step(row: dict[str, Any]) -> None:
    kl = row.get(M.KL)
    console.print(
        f"[bold]step {row[M.STEP]}[/] reward {row[M.REWARD_MEAN]:.3f}±{row[M.REWARD_STD]:.3f}  "
        f"no-signal {row[M.NO_SIGNAL_RATE]:.0%} (all-0 {row[M.ALL_ZERO]}, all-1 {row[M.ALL_ONE]})  "
        f"trunc {row[M.TRUNCATED_RATE]:.0%}  kl {'-' if kl is None else f'{kl:.4f}'}  "
        f"skipped {row[M.SKIPPED]}  {row[M.STEP_SECONDS]:.0f}s",
        highlight=False,
    )
    for hint in row.get(HINT_KEY, []):
        console.print(f"  [yellow]hint:[/] {hint}", highlight=False)


async def run_training(
    cfg: TrainConfig,
    *,
    scenario: Scenario | Task | None = None,
    scorer: Scorer | str | None = None,
    resume: Path | None = None,
) -> RunResult:
    """Train until validation plateaus (or max_steps, a divergence alarm, the judge budget), then
    evaluate the best checkpoint on the test split once.

    `scenario`: your own Scenario (e.g. from `rlvr.scenario(...)`) or Task; default: the task
    `cfg.task` names. `scorer`: your own Scorer or a scorer spec; default: `cfg.scorer`.
    `resume` continues a run directory from its last completed step (its config.json wins)."""
    install_log_redaction()  # no credential reaches a log line, whoever logs it
    if resume is not None:
        cfg = store.read_config(resume)
        if (resume / store.SUMMARY).exists():
            raise ValueError(f"{resume}: this run already finished (summary.json exists)")
    task = scenario if isinstance(scenario, Task) else None
    if scenario is None:
        task = resolve_task(cfg.task)
    elif resume is None:  # config.json names the object that was trained
        cfg = cfg.model_copy(update={"task": scenario.name})

    async with AsyncExitStack() as stack:
        # Everything that can reject the config happens before the run directory is written.
        judge = await stack.enter_async_context(_open_judge(cfg))
        scenario = task.build(cfg, judge) if task is not None else scenario
        assert scenario is not None
        if isinstance(scorer, str):
            cfg = cfg.model_copy(update={"scorer": scorer})
        if scorer is None or isinstance(scorer, str):
            scorer = make_scorer(cfg, scenario, judge)
        elif resume is None:  # config.json names the scorer object that was used
            cfg = cfg.model_copy(update={"scorer": scorer.name})
        check_can_demonstrate(cfg, scenario)
        items = scenario.load()
        run_dir = resume if resume is not None else store.new_run_dir(cfg, name=scenario.name)
        # One writer per run directory, held until summary.json is written; then a fresh run
        # refuses a directory that holds a run (the backend would silently resume its weights).
        stack.enter_context(runlock.hold(run_dir))
        if resume is None:
            runlock.refuse_existing_run(run_dir, (store.METRICS, store.CHECKPOINTS, ART_DIR))
        # A killed run is made consistent first: torn metrics line and temporaries removed, the
        # policy rewound to the checkpoint its last metrics row records (rlvr.backends).
        rows = store.recover(run_dir) if resume is not None else store.read_metrics(run_dir)
        if resume is not None:
            rewind_policy(cfg, run_dir, _last_policy_step(rows))
            if hasattr(judge, "spent_usd"):  # the spend cap spans the killed run and this one
                judge.spent_usd = sum(float(r.get(M.JUDGE_COST) or 0.0) for r in rows)
        state = _restore_state(rows)
        started = time.monotonic() - state.wall_s
        split = split_items(
            items, val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.seed
        )
        val_items = split.val[: cfg.max_val_items] if cfg.max_val_items else split.val
        if resume is None:
            store.write_config(run_dir, cfg)
        # Optional W&B / Weave (imported only when switched on; failures only warn).
        tracker = stack.enter_context(open_tracker(cfg, run_dir))
        rollout = tracker.traced(scenario.rollout, name="rollout")
        score = tracker.traced(scorer.score, name="score")
        console.print(
            f"[bold]{cfg.task}[/]: {len(split.train)} train / {len(split.val)} val / "
            f"{len(split.test)} test items; scorer {scorer.name}; run dir {run_dir}",
            highlight=False,
        )
        policy = await stack.enter_async_context(open_policy(cfg, run_dir))
        limit = asyncio.Semaphore(cfg.rollout_concurrency)
        failure_log = FailureLog(console)  # each distinct rollout exception printed once
        val_sampling = Sampling(
            temperature=cfg.val_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens
        )
        thresholds = Thresholds(
            window=cfg.divergence_window,
            reward_rise=cfg.divergence_reward_rise,
            val_drop=cfg.divergence_val_drop,
            val_flat=cfg.min_delta,
        )

        def emit(row: dict[str, Any]) -> None:
            row["time/wall_s"] = time.monotonic() - started
            store.append_metrics(run_dir, row)
            rows.append(row)
            tracker.log_step(row)

        def save_trajectories(name: str, step: int, table: list[dict[str, Any]]) -> None:
            store.write_trajectories(run_dir, name, table)
            tracker.log_trajectories(step, table)

        async def validate(step: int) -> None:
            t0 = time.monotonic()
            accuracy, groups, done, _ = await evaluate(
                rollout,
                scenario.check,
                policy,
                val_items,
                val_sampling,
                limit,
                f"validate @{step}",
                failure_log,
            )
            policy_step = await policy.model.get_step()
            save_trajectories(
                f"val-{step:04d}",
                step,
                store.trajectory_rows(groups, [i.id for i in done], step=step, split="val"),
            )
            values = [g.trajectories[0].reward for g in groups]
            point = EvalPoint(
                step=step,
                val=accuracy,
                reward=_window_reward(rows, step, cfg.eval_every),
                val_items=len(done),
                val_std=statistics.pstdev(values) if values else None,
            )
            state.evals.append(point)
            state.policy_steps[step] = policy_step
            row = {
                M.STEP: step,
                M.VAL_ACCURACY: accuracy,
                M.POLICY_STEP: policy_step,
                M.VAL_TRAIN_REWARD: point.reward,
                M.VAL_ITEMS: len(done),
                M.VAL_STD: point.val_std,
                M.VAL_ERRORS: len(val_items) - len(done),
                M.EVAL_SECONDS: time.monotonic() - t0,
            }
            alarm = divergence(state.evals, thresholds)
            if alarm is not None and all(a.step != alarm.step for a in state.alarms):
                state.alarms.append(alarm)
                row[f"{ALARM_PREFIX}{alarm.name}"] = alarm.message
                style = "red" if alarm.name == AlarmName.REWARD_HACKING else "yellow"
                console.print(
                    Panel(alarm.message, title=f"ALARM: {alarm.name}", style=f"bold {style}")
                )
            emit(row)
            console.print(
                f"[green]validation @ step {step}: {accuracy:.3f}[/] (policy step {policy_step})",
                highlight=False,
            )
            await _keep_checkpoints(cfg, policy, state, run_dir, rows)

        stop: StopReason | None = None
        try:
            if cfg.sft_steps > 0 and not any(WarmMetric.SECONDS in r for r in rows):
                await _warm(cfg, scenario, policy, split.train, val_items, emit, limit, rollout)
            if not state.evals:
                await validate(0)
            elif state.evals[-1].step < state.step and _eval_due(cfg, state.step):
                await validate(state.step)  # killed between the step's row and its evaluation
            elif state.evals[-1].step == state.step:
                await _keep_checkpoints(
                    cfg, policy, state, run_dir, rows
                )  # may have been cut short
            if 0 < state.step == state.evals[-1].step:  # the decision a killed run may have taken
                stop = _stop_after_eval(cfg, state, rows, len(split.test), len(val_items))
            while stop is None and state.step < cfg.max_steps:
                row, table = await train_step(
                    cfg,
                    state.step,
                    split,
                    scenario,
                    scorer,
                    policy,
                    limit,
                    rollout,
                    score,
                    failure_log,
                )
                save_trajectories(f"step-{state.step + 1:04d}", state.step + 1, table)
                row[HINT_KEY] = decision_hints(row, cfg)
                state.step += 1
                _judge_alarm(cfg, state, [*rows, row], row)
                emit(row)
                _print_step(row)
                if _eval_due(cfg, state.step):
                    await validate(state.step)
                    stop = _stop_after_eval(cfg, state, rows, len(split.test), len(val_items))
        except BudgetExhausted as error:
            console.print(Panel(str(error), title="judge budget reached", style="bold yellow"))
            stop = StopReason.JUDGE_BUDGET
        stop = stop or StopReason.MAX_STEPS

        # Restore the best checkpoint; evaluate the test split for it and, on the same items,
        # for the starting model and the model after the warm start (the paired gains).
        vals = [p.val for p in state.evals]
        best = state.evals[best_index(vals, gain_threshold(state.evals, cfg.min_delta))]
        best_policy_step = state.policy_steps.get(best.step, 0)
        _save_best(policy, best_policy_step, run_dir)
        test_accuracy: float | None = None
        test: dict[str, Any] | None = None
        if stop != StopReason.JUDGE_BUDGET:
            scores: dict[int, dict[str, float]] = {}  # policy step -> item id -> score
            for name, policy_step in _test_checkpoints(rows, best_policy_step):
                if policy_step in scores:
                    continue
                try:
                    accuracy, groups, done, _ = await evaluate(
                        rollout,
                        scenario.check,
                        policy,
                        split.test,
                        val_sampling.model_copy(update={"step": policy_step}),
                        limit,
                        f"test ({name})",
                        failure_log,
                    )
                except RunFailed as error:
                    if name == "final":
                        raise
                    # A backend that keeps no older checkpoint cannot serve the start: the run
                    # still ends with its final test accuracy, without the paired gains.
                    console.print(f"[yellow]no paired test gain[/]: {error}", highlight=False)
                    continue
                scores[policy_step] = {
                    i.id: float(g.trajectories[0].reward) for g, i in zip(groups, done, strict=True)
                }
                if policy_step == best_policy_step:
                    test_accuracy = accuracy
                save_trajectories(
                    "test" if policy_step == best_policy_step else f"test-{name}",
                    best.step,
                    store.trajectory_rows(
                        groups, [i.id for i in done], step=best.step, split="test"
                    ),
                )
            warm_step = _warm_policy_step(rows)
            if 0 in scores and (warm_step is None or warm_step in scores):
                test = test_block(
                    scores[0],
                    scores[warm_step] if warm_step is not None else None,
                    scores[best_policy_step],
                )

        result = RunResult(
            run_dir=run_dir,
            task=cfg.task,
            scorer=scorer.name,
            stop_reason=stop,
            steps=state.step,
            baseline_val=state.evals[0].val,
            best_val=best.val,
            best_step=best.step,
            test_accuracy=test_accuracy,
            alarms=state.alarms,
            wall_s=time.monotonic() - started,
        )
        summary = {
            **result.model_dump(mode="json"),
            "gain": result.best_val - result.baseline_val,
            "val_items": len(val_items),
            "test": test,
        }
        warm = next((r for r in rows if WarmMetric.SECONDS in r), None)
        if warm is not None:  # the warm start's own gain, apart from RL's
            summary["warm_start"] = {
                k.removeprefix("warm/"): v for k, v in warm.items() if k != M.STEP
            }
        plot_report(rows, summary, run_dir / store.REPORT)
        store.write_summary(run_dir, summary)  # last: a run with summary.json is complete
        console.print(
            Panel(
                f"stop: {stop}  steps: {state.step}  baseline val {result.baseline_val:.3f} -> best {result.best_val:.3f} "
                f"(step {result.best_step})  test {test_accuracy if test_accuracy is None else f'{test_accuracy:.3f}'}  "
                f"alarms: {len(state.alarms)}  {result.wall_s:.0f}s\n{run_dir}",
                title="run finished",
                style="bold",
            )
        )
        for line in describe_block(test) if test else []:
            console.print(line, highlight=False)
    return result


def _open_judge(cfg: TrainConfig) -> Any:
    """The judge client (its local engine starts lazily on first use); no judge for judge=none."""
    if cfg.judge == "none":
        return nullcontext(None)
    from judges import open_judge

    return open_judge(cfg)


def _checkpoint_path(policy: Policy, policy_step: int) -> Path | None:
    from art.utils.output_dirs import get_model_dir, get_step_checkpoint_dir

    path = Path(
        get_step_checkpoint_dir(
            get_model_dir(model=policy.model, art_path=policy.model.base_path), policy_step
        )
    )
    return path if path.is_dir() else None


def _warm_policy_step(rows: list[dict[str, Any]]) -> int | None:
    """The policy checkpoint the warm start saved (None without a warm start)."""
    warm = next((r for r in rows if WarmMetric.SECONDS in r), None)
    return int(warm[M.POLICY_STEP]) if warm is not None and M.POLICY_STEP in warm else None


def _test_checkpoints(rows: list[dict[str, Any]], final: int) -> list[tuple[str, int]]:
    """(name, policy step) of the checkpoints the test split is evaluated for: the final (best)
    one, the start (policy step 0, before any training) and the one after the warm start."""
    warm = _warm_policy_step(rows)
    return [
        ("final", final),
        ("start", 0),
        *([("after-warm-start", warm)] if warm is not None else []),
    ]


async def _keep_checkpoints(
    cfg: TrainConfig, policy: Policy, state: _State, run_dir: Path, rows: list[dict[str, Any]]
) -> None:
    """Copy this evaluation's adapter into checkpoints/ every save_every steps; the backend keeps
    only its latest and best adapters (ART's own checkpoint directory would grow every step)."""
    step = state.evals[-1].step
    source = _checkpoint_path(policy, state.policy_steps[step])
    if source is not None and step % cfg.save_every == 0:
        store.save_checkpoint(run_dir, source, f"step-{step:04d}")
    best = state.evals[
        best_index([p.val for p in state.evals], gain_threshold(state.evals, cfg.min_delta))
    ]
    # The start and the warm start stay too: the test split is evaluated for them at the end.
    warm = _warm_policy_step(rows)
    keep = sorted(
        {await policy.model.get_step(), state.policy_steps[best.step], 0}
        | ({warm} if warm is not None else set())
    )
    await policy.backend._delete_checkpoint_files(policy.model, keep)


def _save_best(policy: Policy, policy_step: int, run_dir: Path) -> None:
    source = _checkpoint_path(policy, policy_step)
    if source is not None:
        store.save_checkpoint(run_dir, source, "best")


async def evaluate_run(
    run_dir: Path, split_name: str = "test", scenario: Scenario | Task | None = None
) -> float:
    """Evaluate a finished run's best checkpoint on its validation or test split again
    (`scenario`: the object it was trained with, where config.json names no installed task)."""
    cfg = store.read_config(run_dir)
    task = scenario if isinstance(scenario, Task) else None
    if scenario is None:
        task = resolve_task(cfg.task)
    summary = store.read_summary(run_dir)
    policy_step = {
        int(r[M.STEP]): int(r.get(M.POLICY_STEP, 0))
        for r in store.read_metrics(run_dir)
        if M.VAL_ACCURACY in r
    }
    best_policy_step = policy_step.get(int(summary["best_step"]), 0)
    async with AsyncExitStack() as stack:
        stack.enter_context(runlock.hold(run_dir))
        judge = await stack.enter_async_context(_open_judge(cfg))
        scenario = task.build(cfg, judge) if task is not None else scenario
        assert scenario is not None
        split = split_items(
            scenario.load(), val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.seed
        )
        items = {"test": split.test, "val": split.val}[split_name]
        policy = await stack.enter_async_context(open_policy(cfg, run_dir))
        sampling = Sampling(
            temperature=cfg.val_temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_tokens,
            step=best_policy_step,
        )
        accuracy, groups, done, _ = await evaluate(
            scenario.rollout,
            scenario.check,
            policy,
            items,
            sampling,
            asyncio.Semaphore(cfg.rollout_concurrency),
            f"eval {split_name}",
            FailureLog(console),
        )
        store.write_trajectories(
            run_dir,
            f"eval-{split_name}",
            store.trajectory_rows(
                groups, [i.id for i in done], step=int(summary["best_step"]), split=split_name
            ),
        )
    return accuracy
