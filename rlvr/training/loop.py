"""The hybrid training loop, top to bottom.

    split 80/10/10 -> baseline validation (and the test split of the starting weights, kept for
    the end) -> repeat:
        draw training items from the pool (rlvr.training.pool) -> roll out groups (ART gather)
        -> score (scorer) -> refill groups without signal -> train on the groups with signal
        (backend) -> metrics, hints -> no signal in the first steps? stop ->
        every eval_every steps: validation accuracy from the task's ground truth ->
        plateau (no counted gain, no rising trend)? divergence? -> stop
    restore the best checkpoint -> test split (best, last; beside the start and the model after
    the warm start, tested as they were validated) -> summary.json, report.png

Training reward comes from the scorer; stopping comes only from held-out ground truth.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import art

from rlvr.config import ConfigError, RunConfig
from rlvr.evaluation.paired_gains import TestBlock, test_block
from rlvr.evaluation.passk import SampledEval, sampled_eval
from rlvr.memory import EVALUATION, WARM_START
from rlvr.metrics import M, peak_rss_gb
from rlvr.redact import install_log_redaction
from rlvr.runs import layout, store
from rlvr.runs.checkpoints import saved_steps
from rlvr.runs.records import RunResult, StepRow, StopReason
from rlvr.runs.report import plot_report
from rlvr.task_api.api import Task
from rlvr.training.alarms import judge_alarm
from rlvr.training.checkpoints import checkpoint_path, keep_checkpoints, kept_line, save_best
from rlvr.training.evaluation import rollout_groups
from rlvr.training.failures import RunFailed, require_some
from rlvr.training.hints import decision_hints
from rlvr.training.output import (
    print_alarm,
    print_budget,
    print_finished,
    print_no_signal,
    print_step,
    print_warm_start,
)
from rlvr.training.pool import record
from rlvr.training.progress import Progress, console
from rlvr.training.session import Session, as_test_result, open_finished, open_session
from rlvr.training.state import Tested, TestResult, eval_due, tested, warm_start_row
from rlvr.training.step import train_step
from rlvr.training.stop_rules import (
    no_signal_stop,
    no_signal_verdict,
    remaining_tests,
    stop_after_eval,
)
from rlvr.training.trends import EvalPoint, best_eval
from rlvr.training.warmstart import warm_start
from rlvr.training.work import (
    cut_line,
    estimate_line,
    fits_a_test,
    item_seconds,
    next_step_s,
    step_fits,
    warm_room_s,
)
from rlvr.types import BudgetExhausted, Environment, Sampling, Scorer, derived_seed


async def run_training(
    cfg: RunConfig,
    *,
    task: Environment | Task | None = None,
    scorer: Scorer | str | None = None,
    resume: Path | None = None,
) -> RunResult:
    """Train until validation plateaus (or max_steps, a divergence alarm, the judge budget), then
    evaluate the best checkpoint on the test split once, beside the starting model.

    `task`: a Task, or your own Environment (e.g. from `rlvr.environment(...)`); default: the task
    `cfg.task` names. `scorer`: your own Scorer or a scorer spec; default: `cfg.scorer`.
    `resume` continues a run directory from its last completed step (its config.json wins)."""
    install_log_redaction()  # no credential reaches a log line, whoever logs it
    if resume is not None:
        cfg = store.read_config(resume)
        if (resume / store.SUMMARY).exists():
            raise ValueError(f"{resume}: this run already finished (summary.json exists)")
    async with open_session(cfg, task, scorer, resume) as run:
        stop = await train_until_stop(run)
        evals = run.state.evals
        best = evals[best_eval(evals, cfg.stopping.min_delta)]
        save_best(run.policy, run.state.policy_steps.get(best.step, 0), run.run_dir)
        # Without signal nothing was trained: the test results of the start and of the warm
        # start, kept from their validations, are the whole block, and nothing is evaluated again.
        untested = stop == StopReason.JUDGE_BUDGET
        results = (None, None) if untested else await evaluate_tests(run, best, evals[-1])
        return finish(run, stop, best, *results)


async def train_until_stop(run: Session) -> StopReason:
    """The warm start, the baseline validation, then steps and validations until a stopping rule
    fires; a resumed run picks up where its metrics end."""
    cfg, state = run.cfg, run.state
    test_n, val_n = len(run.split.test), len(run.val_items)
    stop: StopReason | None = None
    try:
        if cfg.sft_steps > 0 and warm_start_row(run.rows) is None:
            await warm(run)
        if not state.evals:  # tested too: the start, or the model after the warm start
            warmed = warm_start_row(run.rows) is not None
            await run.validate(0, Tested.AFTER_WARM_START if warmed else Tested.START)
        elif state.evals[-1].step < state.step and eval_due(cfg, state.step):
            await run.validate(state.step)  # killed between the step's row and its evaluation
        elif state.evals[-1].step == state.step:  # its checkpoints may have been cut short
            await keep_checkpoints(cfg, run.policy, state, run.run_dir, run.rows)
        if no_signal_stop(cfg, run.rows):  # the decision a killed run may have taken
            stop = StopReason.NO_SIGNAL
        elif 0 < state.step == state.evals[-1].step:
            stop = stop_after_eval(cfg, state, run.rows, test_n, val_n)
        while stop is None and state.step < cfg.max_steps:
            if not step_fits_cap(run):  # max_minutes: validate where it stands, and stop
                if state.evals[-1].step < state.step:
                    await run.validate(state.step)
                stop = StopReason.TIME_BUDGET
                break
            row, table = await train_step(run, state.step)
            run.save_trajectories(layout.step_name(state.step + 1), state.step + 1, table)
            row = row.with_values(hints=decision_hints(row, cfg))
            state.step += 1
            state.pool = record(state.pool, row.outcomes)
            row = raise_judge_alarm(run, row)
            run.emit(row)
            print_step(row)
            if sum(isinstance(r, StepRow) for r in run.rows) == 1:  # this run's first step
                print_estimate(run, row)
            if no_signal_stop(cfg, run.rows):
                stop = StopReason.NO_SIGNAL
                print_no_signal(no_signal_verdict(run.rows, cfg))
            elif eval_due(cfg, state.step):
                await run.validate(state.step)
                stop = stop_after_eval(cfg, state, run.rows, test_n, val_n)
    except BudgetExhausted as error:
        print_budget(str(error))
        return StopReason.JUDGE_BUDGET
    return stop or StopReason.MAX_STEPS


def step_fits_cap(run: Session) -> bool:
    """Whether max_minutes holds one more step, its checkpoint's validation and the tests still
    to come, at this run's measured speeds (rlvr.training.work)."""
    cap = run.cap_s()
    if cap is None:
        return True
    item_s = item_seconds(run.item_s)
    tests = remaining_tests(run.state, run.rows, run.cfg.stopping)
    return step_fits(
        cap,
        run.wall_s(),
        next_step_s(run.rows, run.cfg, item_s),
        len(run.val_items) * item_s,
        tests * len(run.split.test) * item_s,
    )


def print_estimate(run: Session, row: StepRow) -> None:
    """After the run's first step, its wall time on this machine at the speeds measured so far."""
    warmed = warm_start_row(run.rows)
    line = estimate_line(
        run.cfg,
        run.wall_s(),
        row.step_s or 0.0,
        item_seconds(run.item_s),
        len(run.val_items),
        len(run.split.test),
        remaining_tests(run.state, run.rows, run.cfg.stopping),
        int(warmed.steps or 0) if warmed is not None else 0,
    )
    console.print(line, highlight=False, markup=False)


async def warm(run: Session) -> None:
    """Validation before the warm start (its own gain; the test split's start beside it), then
    the warm start; one row."""
    before = await run.evaluate_with_test("validate before warm start", Tested.START)
    with run.memory.phase(WARM_START):
        done = await warm_start(
            run.cfg,
            run.environment,
            run.policy.model,
            run.labelled_train,
            share=run.cfg.sft_budget_share,
            room_s=warm_room(run),
        )
    saved = await run.policy.model.get_step()  # recorded: a resumed run rewinds the policy to it
    row = done.with_values(
        step=0,
        val_before=before.accuracy,
        policy_step=saved,
        **{
            M.RSS_EVAL: run.memory.take(EVALUATION),
            M.RSS_WARM_START: run.memory.take(WARM_START),
            M.PEAK_RSS: peak_rss_gb(),
        },
    )
    if Tested.START in run.tests:
        row = row.with_values(test_checkpoint=Tested.START.value)
    run.emit(row)
    print_warm_start(row)


def warm_room(run: Session) -> float | None:
    """What max_minutes leaves the warm start after the validation and test that follow it."""
    after = (len(run.val_items) + len(run.split.test)) * item_seconds(run.item_s)
    return warm_room_s(run.cap_s(), run.cfg.sft_budget_share, run.wall_s(), after)


def raise_judge_alarm(run: Session, row: StepRow) -> StepRow:
    """`row` with alarm/judge_disagrees where it fires at this step (rlvr.training.alarms)."""
    cfg, state = run.cfg, run.state
    if not run.compared_with_truth:
        return row
    steps = [r for r in run.rows if isinstance(r, StepRow)]
    window, gap = cfg.stopping.divergence_window, cfg.stopping.judge_gap
    alarm = judge_alarm([*steps, row], state.alarms, state.step, window, gap)
    if alarm is None:
        return row
    state.alarms.append(alarm)
    print_alarm(alarm)
    return row.with_values(**{alarm.key: alarm.message})


async def evaluate_tests(
    run: Session, best: EvalPoint, last: EvalPoint
) -> tuple[float | None, TestBlock | None]:
    """The test split for the final (best) checkpoint and, on the same items with the same greedy
    sampling, for the starting model, the model after the warm start and the last checkpoint
    (the start and the warm start are tested right after their validations on the same
    weights, `Session.evaluate_with_test`; a result kept there is not evaluated again):
    (final accuracy, the paired `test` block of summary.json, None where the start could not be
    evaluated)."""
    steps = run.state.policy_steps
    checkpoints = tested(run.rows, steps.get(best.step, 0), steps.get(last.step, 0))
    results = {r.policy_step: r for r in run.tests.values()}  # policy step -> its test result
    accuracy_final: float | None = None
    for name, policy_step in checkpoints.items():
        final = name == Tested.FINAL
        kept = results.get(policy_step)
        if kept is not None and not final:
            continue
        if kept is None:
            test_s = len(run.split.test) * item_seconds(run.item_s)
            if not final and not fits_a_test(run.cap_s(), run.wall_s(), test_s):
                run.left_out.append(f"test ({name})")
                continue
            try:
                kept = await checkpoint_on_test(run, name, policy_step, best.step)
            except RunFailed as error:
                if final:
                    raise
                # A backend that keeps no older checkpoint cannot serve the start: the run still
                # ends with its final test accuracy, without the paired gains.
                console.print(f"[yellow]no paired test gain[/]: {error}", highlight=False)
                continue
            results[policy_step] = kept
        if final:
            accuracy_final = kept.accuracy
            rows = [{**r, "step": best.step} for r in kept.rows]
            run.save_trajectories(layout.test_name(), best.step, rows)
        else:
            run.save_trajectories(layout.test_name(name), best.step, kept.rows)
    needed = [checkpoints[Tested.START], checkpoints.get(Tested.AFTER_WARM_START, 0)]
    if any(step not in results for step in needed):
        return accuracy_final, None
    warm = checkpoints.get(Tested.AFTER_WARM_START)
    last_step = checkpoints.get(Tested.LAST, checkpoints[Tested.FINAL])
    return accuracy_final, test_block(
        results[0].scores,
        results[warm].scores if warm is not None else None,
        results[checkpoints[Tested.FINAL]].scores,
        results[last_step].scores if last_step in results else None,
    )


async def checkpoint_on_test(run: Session, name: Tested, policy_step: int, step: int) -> TestResult:
    """The test split evaluated on checkpoint `policy_step` (named `name`; `step`: the loop step
    its rows are filed under)."""
    began = time.monotonic()
    evaluated = await run.evaluate(run.split.test, "test", f"test ({name})", step=policy_step)
    run.item_s.append((time.monotonic() - began) / max(1, len(run.split.test)))
    return as_test_result(policy_step, evaluated, step)


def finish(
    run: Session,
    stop: StopReason,
    best: EvalPoint,
    test_accuracy: float | None,
    test: TestBlock | None,
) -> RunResult:
    """summary.json (written last: a run with one is complete), report.png, the last lines."""
    baseline = run.state.evals[0].val
    warmed = warm_start_row(run.rows)
    cut = cut_line(run.cfg, run.rows, stop == StopReason.TIME_BUDGET, run.state.step, run.left_out)
    result = RunResult(
        run_dir=run.run_dir,
        task=run.cfg.task,
        scorer=run.scorer.name,
        stop_reason=stop,
        steps=run.state.step,
        baseline_val=baseline,
        best_val=best.val,
        best_step=best.step,
        test_accuracy=test_accuracy,
        alarms=run.state.alarms,
        wall_s=run.wall_s(),
        gain=best.val - baseline,
        last_step=run.state.evals[-1].step,
        val_items=len(run.val_items),
        test=test,
        held_out=run.held_out,
        # why it found nothing to learn from; the warm start's own gain, apart from RL's
        no_signal=no_signal_verdict(run.rows, run.cfg) if stop == StopReason.NO_SIGNAL else None,
        warm_start=warmed.summary() if warmed is not None else None,
        **({"cut": cut} if cut else {}),
    )
    plot_report(run.rows, result, run.run_dir / store.REPORT)
    store.write_summary(run.run_dir, result)
    print_finished(result, run.rows)
    evaluated = [e.step for e in run.state.evals]
    if kept := kept_line(evaluated, saved_steps(run.run_dir), run.cfg.save_every):
        console.print(kept, highlight=False, markup=False)
    if cut:
        console.print(f"[yellow]{cut}[/]", highlight=False)
    return result


async def evaluate_run(
    run_dir: Path,
    split_name: Literal["val", "test"] = "test",
    task: Environment | Task | None = None,
) -> float:
    """Evaluate a finished run's best checkpoint on its validation or test split again
    (`task`: the object it was trained with, where config.json names no installed task)."""
    best_step = store.read_summary(run_dir).best_step
    async with open_finished(run_dir, task) as run:
        items = {"test": run.split.test, "val": run.split.val}[split_name]
        policy_step = run.state.policy_steps.get(best_step, 0)
        stored = checkpoint_path(run.policy, policy_step)
        if stored is not None:  # a damaged file is named here, not in every rollout's error
            from rlvr.engine import check_adapter

            check_adapter(stored)
        evaluated = await run.evaluate(items, split_name, f"eval {split_name}", step=policy_step)
        rows = store.trajectory_rows(
            evaluated.groups, [i.id for i in evaluated.items], step=best_step, split=split_name
        )
        store.write_trajectories(run_dir, f"eval-{split_name}", rows)
    return evaluated.accuracy


async def evaluate_samples(
    run_dir: Path,
    samples: int,
    temperature: float,
    split_name: Literal["val", "test"] = "test",
    task: Environment | Task | None = None,
) -> SampledEval:
    """`samples` answers per item of a finished run's split from its best checkpoint, sampled at
    `temperature` and scored by the task's ground truth: pass@k, pass^k and avg@k
    (rlvr.evaluation.passk). The rollouts go to trajectories/eval-<split>-samples.parquet."""
    if samples < 1:
        raise ConfigError(f"--samples {samples}: expected at least 1")
    best_step = store.read_summary(run_dir).best_step
    async with open_finished(run_dir, task) as run:
        items = {"test": run.split.test, "val": run.split.val}[split_name]
        policy_step = run.state.policy_steps.get(best_step, 0)
        sampling = Sampling(
            temperature=temperature,
            top_p=run.cfg.top_p,
            max_tokens=run.cfg.max_tokens,
            step=policy_step,
            # the k-th sample of an item draws the same tokens when this is run again
            seed=derived_seed(run.cfg.seed, "samples", split_name),
        )
        by_id = {item.id: item for item in items}

        async def checked(group: art.TrajectoryGroup) -> art.TrajectoryGroup:
            item = by_id[str(group.metadata["item_id"])]
            for trajectory in group.trajectories:
                trajectory.reward = await run.environment.check(item, trajectory)
            return group

        desc = f"eval {split_name} x{samples} at T={temperature:g}"
        with Progress(desc, len(items), "item") as progress:
            groups, done, _, failures = await rollout_groups(
                run.rollout, run.policy, items, samples, sampling, run.limit, progress, checked
            )
        run.failure_log.report(failures, desc)
        complete = [
            (item, group)
            for item, group in zip(done, groups, strict=True)
            if len(group.trajectories) == samples
        ]
        require_some(len(complete), failures, desc)
        rows = store.trajectory_rows(
            [g for _, g in complete], [i.id for i, _ in complete], step=best_step, split=split_name
        )
        store.write_trajectories(run_dir, f"eval-{split_name}-samples", rows)
    return sampled_eval(
        {item.id: [t.reward for t in group.trajectories] for item, group in complete}, temperature
    )
