"""A run's session: everything a run opens before its first step, shared by training
(`run_training`), evaluation of a finished run (`evaluate_run`) and preflight.

`open_finished` opens a finished run the same way, read only, to evaluate it again (`rlvr eval`),
and `open_scratch` the run a config describes in a temporary directory (preflight, benchmarks).

`open_session` resolves what the caller gave into the run's parts (`rlvr.task_api.plugins.resolve_run`:
the built Environment, the Scorer, the judge), runs the checks that can still reject the config and
splits the items, all before a run directory is written; it then claims the run directory (one
writer: rlvr.runs.runlock), recovers a killed run, opens the tracker and the policy, and yields a
`Session`, whose methods are the run's only writers of metrics, trajectory tables and validations.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Literal

import art

from rlvr.config import VLLM_JUDGE, RunConfig
from rlvr.engine import check_environment, model_must_resolve
from rlvr.evaluation.resolution import HeldOut
from rlvr.integrations import Tracker, open_tracker
from rlvr.lifetime import run_lifetime
from rlvr.memory import EVALUATION, RUN_INTERVAL_S, RssWatch
from rlvr.metrics import M, peak_rss_gb
from rlvr.runs import layout, runlock, store
from rlvr.runs.records import EvalRow, Row, StepRow, last_policy_step
from rlvr.task_api.api import Task
from rlvr.task_api.plugins import RunParts, resolve_run
from rlvr.training.alarms import Thresholds, validation_alarms
from rlvr.training.backends import ART_DIR, Policy, open_policy
from rlvr.training.checkpoints import (
    keep_checkpoints,
    keep_optimizer_newest,
    optimizer_restart_line,
)
from rlvr.training.evaluation import Evaluated, RolloutFn, Validated, evaluate
from rlvr.training.failures import FailureLog, RunFailed
from rlvr.training.labels import held_out, labelled_split
from rlvr.training.output import print_alarm, print_validation, settings_line
from rlvr.training.progress import console
from rlvr.training.split import Split
from rlvr.training.state import (
    RunState,
    Tested,
    TestResult,
    read_early_tests,
    restore_state,
    warm_start_row,
    window_reward,
    window_truth,
)
from rlvr.training.trends import EvalPoint, val_trend
from rlvr.training.warmstart import check_can_demonstrate
from rlvr.training.work import fixed_items, item_seconds, refuse_small_cap
from rlvr.types import Environment, Item, Judge, Sampling, Scorer, ServedJudge

# A scorer's `score`, as the run's tracker traces it.
ScoreFn = Callable[[art.TrajectoryGroup, Item], Awaitable[art.TrajectoryGroup | None]]


class Session:
    """One open run: its config, task, scorer, policy, directory and state, and the writers of
    its metrics rows, trajectory tables and validations. Its opener hands it what it worked out
    already: what the split holds out (`held`), and the environment's rollout and the scorer's
    score as the tracker traces them."""

    def __init__(
        self,
        cfg: RunConfig,
        environment: Environment,
        scorer: Scorer,
        run_dir: Path,
        rows: list[Row],
        split: Split[Item],
        tracker: Tracker,
        policy: Policy,
        compared_with_truth: bool,
        memory: RssWatch,
        *,
        held: HeldOut,
        rollout: RolloutFn,
        score: ScoreFn,
        opened: float | None = None,
    ) -> None:
        self.cfg, self.environment, self.scorer, self.run_dir = cfg, environment, scorer, run_dir
        self.memory = memory  # each phase's peak resident memory, for the rows
        self.compared_with_truth = compared_with_truth  # alarm/judge_disagrees applies
        self.rows, self.split, self.tracker, self.policy = rows, split, tracker, policy
        self.state: RunState = restore_state(rows)
        # The test results of the start and the warm start, evaluated beside their validations.
        self.tests: dict[Tested, TestResult] = read_early_tests(run_dir, rows)
        # A fresh run's clock starts where it opened (the model's load counts against max_minutes).
        self.started = (opened or time.monotonic()) - self.state.wall_s
        # Seconds per item of each evaluation so far: what max_minutes keeps back (work.py).
        self.item_s: list[float] = [
            r.eval_item_s for r in rows if isinstance(r, EvalRow) and r.eval_item_s
        ]
        self.left_out: list[str] = []  # tests the cap left out (rlvr.training.work.cut_line)
        self.val_items: list[Item] = (
            split.val[: cfg.max_val_items] if cfg.max_val_items else split.val
        )
        # Where the labels went and what test and validation can resolve (rlvr.training.labels).
        self.held_out = held
        # Training items with a label: the only ones a check (or a demonstration's) may read.
        self.labelled_train = [i for i in split.train if i.id not in split.unlabelled]
        self.rollout, self.score = rollout, score
        self.limit = asyncio.Semaphore(cfg.rollout_concurrency)
        self.failure_log = FailureLog(console)  # each distinct rollout exception printed once
        self.thresholds = Thresholds(
            window=cfg.stopping.divergence_window,
            reward_rise=cfg.stopping.divergence_reward_rise,
            val_drop=cfg.stopping.divergence_val_drop,
            val_z=cfg.stopping.divergence_z,
        )

    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def emit(self, row: Row) -> None:
        """Append a metrics row (fsynced, stamped with the run's time), to the run's rows and to
        the tracker; older checkpoints than the one it records give up their optimizer state."""
        stamped = row.with_values(wall_s=self.wall_s())
        store.append_metrics(self.run_dir, stamped)
        self.rows.append(stamped)
        self.tracker.log_step(stamped.on_disk())
        keep_optimizer_newest(self.cfg, self.run_dir, last_policy_step(self.rows))

    def save_trajectories(self, name: str, step: int, table: list[store.TableRow]) -> None:
        store.write_trajectories(self.run_dir, name, table)
        self.tracker.log_trajectories(step, table)

    async def evaluate(
        self, items: list[Item], split: Literal["val", "test"], desc: str, step: int | None = None
    ) -> Evaluated:
        """One greedy rollout per item under the split's sampling (checkpoint `step`, else the
        live one), scored by the environment's ground truth (rlvr.training.evaluation.evaluate)."""
        return await evaluate(
            self.rollout,
            self.environment.check,
            self.policy,
            items,
            Sampling.from_config(self.cfg, split, step=step),
            self.limit,
            desc,
            self.failure_log,
        )

    async def evaluate_with_test(self, desc: str, test: Tested | None) -> Validated:
        """The validation items on the live weights, then, as checkpoint `test`'s result (unless
        it is kept already), the test split on the same weights, alone as at the end of a run
        (so `rlvr eval` repeats it): no older checkpoint is loaded for it later. The test result
        is written to its table and kept. Returns the validation and its seconds."""
        with self.memory.phase(EVALUATION):
            return await self._evaluate_with_test(desc, test)

    async def _evaluate_with_test(self, desc: str, test: Tested | None) -> Validated:
        t0 = time.monotonic()
        validated = await self.evaluate(self.val_items, "val", desc)
        seconds = time.monotonic() - t0
        self.item_s.append(seconds / max(1, len(self.val_items)))
        if not self.state.evals and warm_start_row(self.rows) is None:  # the run's first
            self.refuse_small_cap(start_tested=test is None or test in self.tests)
        if test is not None and test not in self.tests and self.split.test:
            policy_step = await self.policy.model.get_step()
            try:
                t1 = time.monotonic()
                evaluated = await self.evaluate(self.split.test, "test", f"test ({test})")
                self.item_s.append((time.monotonic() - t1) / len(self.split.test))
            except RunFailed as error:  # evaluated again at the end, which says what failed
                console.print(
                    f"[yellow]test ({test}) left for the end[/]: {error}", highlight=False
                )
            else:
                result = as_test_result(policy_step, evaluated, step=self.state.step)
                self.save_trajectories(layout.test_name(test), self.state.step, result.rows)
                self.tests[test] = result
        return Validated(**dict(validated), seconds=seconds)

    def refuse_small_cap(self, start_tested: bool) -> None:
        """After the run's first validation: a cap that cannot hold the evaluations still fixed
        (rlvr.training.work.fixed_items) is refused, before any training."""
        items = fixed_items(
            len(self.val_items), len(self.split.test), self.cfg.sft_steps > 0, start_tested
        )
        refuse_small_cap(
            self.cfg, self.wall_s(), items, item_seconds(self.item_s), len(self.val_items)
        )

    def cap_s(self) -> float | None:
        return None if self.cfg.max_minutes is None else self.cfg.max_minutes * 60

    async def validate(self, step: int, test: Tested | None = None) -> None:
        """Validation accuracy at `step` on ground truth (and the test split beside it as
        checkpoint `test`, see `evaluate_with_test`); the divergence alarm; checkpoints."""
        validated = await self.evaluate_with_test(f"validate @{step}", test)
        policy_step = await self.policy.model.get_step()
        done = validated.items
        rows = store.trajectory_rows(validated.groups, [i.id for i in done], step=step, split="val")
        self.save_trajectories(layout.val_name(step), step, rows)
        scores = validated.scores()
        values = list(scores.values())
        point = EvalPoint(
            step=step,
            val=validated.accuracy,
            reward=window_reward(self.rows, step, self.cfg.eval_every),
            truth=window_truth(self.rows, step, self.cfg.eval_every),
            val_items=len(done),
            # The spread matters only for a check that is not an accuracy (rlvr.training.trends).
            val_std=statistics.pstdev(values) if any(not 0 <= v <= 1 for v in values) else None,
            scores=scores,
        )
        self.state.evals.append(point)
        self.state.policy_steps[step] = policy_step
        trend = val_trend(self.state.evals, self.cfg.stopping.trend_window)
        row = EvalRow(
            step=step,
            accuracy=validated.accuracy,
            policy_step=policy_step,
            train_reward=point.reward,
            train_truth=point.truth,
            items=len(done),
            std=point.val_std,
            scores=point.scores,
            errors=len(self.val_items) - len(done),
            eval_s=validated.seconds,
            eval_item_s=validated.seconds / max(1, len(self.val_items)),
            trend=trend.slope if trend.points >= 2 else None,
            trend_se=trend.se if trend.points >= 2 and trend.se < float("inf") else None,
        ).with_values(**{M.RSS_EVAL: self.memory.take(EVALUATION), M.PEAK_RSS: peak_rss_gb()})
        if test is not None and test in self.tests:
            row = row.with_values(test_checkpoint=test.value)
        for alarm in validation_alarms(self.state.evals, self.state.alarms, self.thresholds):
            self.state.alarms.append(alarm)
            row = row.with_values(**{alarm.key: alarm.message})
            print_alarm(alarm)
        self.emit(row)
        print_validation(step, validated.accuracy, policy_step, row.trend, row.trend_se)
        await keep_checkpoints(self.cfg, self.policy, self.state, self.run_dir, self.rows)


def val_size(cfg: RunConfig, split: Split[Item]) -> int:
    """The validation items each evaluation uses (max_val_items caps them)."""
    return min(len(split.val), cfg.max_val_items or len(split.val))


def as_test_result(policy_step: int, evaluated: Evaluated, step: int) -> TestResult:
    """The test split's result at checkpoint `policy_step` from its evaluation, its rows filed
    under loop `step`."""
    ids = [i.id for i in evaluated.items]
    return TestResult(
        policy_step=policy_step,
        accuracy=evaluated.accuracy,
        scores=evaluated.scores(),
        rows=store.trajectory_rows(evaluated.groups, ids, step=step, split="test"),
    )


@asynccontextmanager
async def open_session(
    cfg: RunConfig,
    environment: Environment | Task | None,
    scorer: Scorer | str | None,
    resume: Path | None,
) -> AsyncIterator[Session]:
    """The run's session (module docstring); the judge, tracker, lock and policy are closed on
    exit, errors and Ctrl-C included."""
    opened = time.monotonic()
    async with AsyncExitStack() as stack:
        stack.enter_context(run_lifetime())  # what the task opens closes with the run
        parts = await resolve_run(cfg, stack, environment, scorer, resume is not None)
        cfg, built, judge = parts.cfg, parts.environment, parts.judge
        # Split first: a label budget that cannot work is one line, before any other output.
        split = labelled_split(cfg, built.load(), parts.scorer)
        if resume is None:  # a fresh run says where its settings came from
            console.print(settings_line(cfg, parts.defaults), highlight=False, markup=False)
        check_can_demonstrate(cfg, built)
        if cfg.backend == "local":  # rlvr's own engine: a bad environment knob or model is one line
            check_environment()
            model_must_resolve("model", cfg.model)
        if judge is not None and cfg.judge.local_model is not None:  # not every group skipped later
            model_must_resolve("judge.local_model", cfg.judge.local_model)
        run_dir = resume if resume is not None else store.new_run_dir(cfg, name=built.name)
        # One writer per run directory, held until summary.json is written; then a fresh run
        # refuses a directory that holds a run (the backend would silently resume its weights).
        stack.enter_context(runlock.hold(run_dir))
        if resume is None:
            runlock.refuse_existing_run(run_dir, (store.METRICS, store.CHECKPOINTS, ART_DIR))
        # A killed run is made consistent first: torn metrics line and temporaries removed (a
        # fresh directory has neither); its policy is rewound when opened (rlvr.training.backends).
        rows = store.recover(run_dir)
        if resume is None:
            store.write_config(run_dir, cfg)
        elif judge is not None:  # the spend cap spans the killed run and this one
            judge.spent_usd = sum(r.judge_cost_usd or 0.0 for r in rows if isinstance(r, StepRow))
        # Optional W&B / Weave (imported only when switched on; failures only warn).
        tracker = stack.enter_context(open_tracker(cfg, run_dir))
        # The rollout and the score as Weave ops (each the function itself with weave off).
        rollout = tracker.traced(built.rollout, name="rollout")
        score = tracker.traced(parts.scorer.score, name="score")
        console.print(
            f"[bold]{cfg.task}[/]: {len(split.train)} train / {len(split.val)} val / "
            f"{len(split.test)} test items; scorer {parts.scorer.name}; run dir {run_dir}",
            highlight=False,
        )
        held = held_out(split, val_size(cfg, split), parts.scorer)
        if resume is None:
            for line in held.lines(cfg):
                console.print(line, highlight=False, markup=False)
        rewind_to = last_policy_step(rows) if resume is not None else None
        policy = await stack.enter_async_context(open_policy(cfg, run_dir, rewind_to))
        if rewind_to is not None and (restarts := optimizer_restart_line(cfg, run_dir, rewind_to)):
            console.print(restarts, highlight=False, markup=False)
        await serve_judge(cfg, judge, policy)
        memory = stack.enter_context(RssWatch(RUN_INTERVAL_S))
        yield Session(
            cfg,
            built,
            parts.scorer,
            run_dir,
            rows,
            split,
            tracker,
            policy,
            parts.compared_with_truth,
            memory,
            held=held,
            rollout=rollout,
            score=score,
            opened=opened,
        )


async def serve_judge(cfg: RunConfig, judge: Judge | None, policy: Policy) -> None:
    """judge=vllm: the judge asks the policy's vLLM servers for the base weights (the run's
    model at step 0, through the router the rollouts use, so it shares their fail-over)."""
    model = policy.model
    if cfg.judge.model != VLLM_JUDGE or not isinstance(judge, ServedJudge):
        return
    if model.inference_base_url is None or model.inference_api_key is None:
        raise RunFailed("judge=vllm: the policy registered no endpoint for the judge to ask")
    judge.serve_from(model.inference_base_url, model.inference_api_key, f"{model.name}@0")


async def quiet_session(
    stack: AsyncExitStack, parts: RunParts, run_dir: Path, rows: list[Row]
) -> Session:
    """A session on `run_dir` that writes nothing a run keeps: no tracker, the policy opened in
    place (for a finished run: its checkpoints; for a scratch directory: a fresh adapter)."""
    cfg, built, scorer = parts.cfg, parts.environment, parts.scorer
    split = labelled_split(cfg, built.load(), scorer)
    quiet = cfg.model_copy(update={"wandb_project": None, "weave": False})
    tracker = stack.enter_context(open_tracker(quiet, run_dir))
    rollout = tracker.traced(built.rollout, name="rollout")
    score = tracker.traced(scorer.score, name="score")
    policy = await stack.enter_async_context(open_policy(cfg, run_dir))
    memory = stack.enter_context(RssWatch(RUN_INTERVAL_S))
    return Session(
        cfg,
        built,
        scorer,
        run_dir,
        rows,
        split,
        tracker,
        policy,
        False,
        memory,
        held=held_out(split, val_size(cfg, split), scorer),
        rollout=rollout,
        score=score,
    )


@asynccontextmanager
async def open_finished(
    run_dir: Path, environment: Environment | Task | None
) -> AsyncIterator[Session]:
    """A finished run opened read only (its lock held, nothing recovered or rewound, no tracker):
    its config, task, split, history and policy, to evaluate a checkpoint again. `environment`: the
    object it was trained with, where config.json names no installed task."""
    async with AsyncExitStack() as stack:
        stack.enter_context(run_lifetime())
        stack.enter_context(runlock.hold(run_dir))
        parts = await resolve_run(
            store.read_config(run_dir), stack, environment, None, resuming=True
        )
        rows = store.read_metrics(run_dir)
        yield await quiet_session(stack, parts, run_dir, rows)


@asynccontextmanager
async def open_scratch(cfg: RunConfig) -> AsyncIterator[Session]:
    """The run `cfg` describes, opened in a temporary directory removed on exit: its task,
    scorer, split and a fresh policy, for a look before training (preflight, benchmarks)."""
    async with AsyncExitStack() as stack:
        stack.enter_context(run_lifetime())
        parts = await resolve_run(cfg, stack, None, None, resuming=True)
        check_can_demonstrate(parts.cfg, parts.environment)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlvr-scratch-")))
        yield await quiet_session(stack, parts, tmp / "run", [])
