"""What a training run prints: the step line with its hints, alarms, validations, the warm start
and the finished panel (the progress of long phases: rlvr.training.progress). Everything else of
a run goes to its directory (rlvr.runs.store)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.panel import Panel

from rlvr.agent.episode import EpisodeMetric
from rlvr.config import RunConfig
from rlvr.metrics import ROLLOUT_PREFIX
from rlvr.runs.records import Alarm, AlarmName, NoSignal, Row, RunResult, StepRow, WarmStartRow
from rlvr.runs.report import story_lines
from rlvr.training.progress import console


def print_step(row: StepRow) -> None:
    moved = row.update_kl
    console.print(
        f"[bold]step {row.step}[/] reward {row.reward_mean:.3f}±{row.reward_std or 0.0:.3f}  "
        f"no-signal {row.no_signal_rate or 0.0:.0%} (all-0 {row.all_zero}, all-1 {row.all_one})  "
        f"trunc {row.truncated_rate or 0.0:.0%}{truncation_detail(row)}  update-kl {'-' if moved is None else f'{moved:.4f}'}  "
        f"skipped {row.skipped}{tool_timeouts(row)}  {row.step_s or 0.0:.0f}s",
        highlight=False,
    )
    for hint in row.hints:
        console.print(f"  [yellow]hint:[/] {hint}", highlight=False)


CUT_CALLS = f"{ROLLOUT_PREFIX}{EpisodeMetric.CUT_CALL}"
TOOL_TIMEOUTS = f"{ROLLOUT_PREFIX}{EpisodeMetric.TOOL_TIMEOUTS}"


def tool_timeouts(row: StepRow) -> str:
    """The tool calls abandoned at their timeout, per rollout, where there were any."""
    rate = row.number(TOOL_TIMEOUTS)
    return f"  tool timeouts {rate:.2f}/rollout" if rate else ""


def truncation_detail(row: StepRow) -> str:
    """What the step's truncated rollouts were, where it is known: loops (the hint's cue to keep
    max_tokens) and tool episodes ended at a cut call whose call was not run."""
    found = ((row.looping_rate, "loops"), (row.number(CUT_CALLS), "ended at a cut call"))
    parts = [f"{label} {rate:.0%}" for rate, label in found if rate]
    return f" ({', '.join(parts)})" if parts else ""


def print_alarm(alarm: Alarm) -> None:
    style = "red" if alarm.name == AlarmName.REWARD_HACKING else "yellow"
    console.print(Panel(alarm.message, title=f"ALARM: {alarm.name}", style=f"bold {style}"))


def print_validation(
    step: int, accuracy: float, policy_step: int, trend: float | None, se: float | None
) -> None:
    slope = (
        ""
        if trend is None
        else f"; trend {trend:+.3f}/eval" + ("" if se is None else f" ± {se:.3f}")
    )
    console.print(
        f"[green]validation @ step {step}: {accuracy:.3f}[/] (policy step {policy_step}{slope})",
        highlight=False,
    )


def print_warm_start(row: WarmStartRow) -> None:
    steps = row.steps
    trained = "" if steps is None else f" in {steps:.0f} steps ({row.tokens or 0:,.0f} tokens)"
    rejected = row.rejected or 0
    left_out = f", {rejected:.0f} failing their check left out" if rejected else ""
    loss_first, loss_last = row.loss_first or float("nan"), row.loss_last or float("nan")
    console.print(
        f"[green]warm start[/]: {row.demonstrations or 0:.0f} demonstrations{trained}"
        f"{left_out}, loss {loss_first:.3f} -> {loss_last:.3f}; "
        f"validation before it {row.val_before or 0.0:.3f} ({row.seconds:.0f}s)",
        highlight=False,
    )


def print_no_signal(verdict: NoSignal) -> None:
    """The no-signal stop: what the first steps' groups looked like and what to do."""
    console.print(Panel(verdict.message(), title="no signal: stopping", style="bold yellow"))


def print_budget(message: str) -> None:
    console.print(Panel(message, title="judge budget reached", style="bold yellow"))


def print_finished(summary: RunResult, rows: list[Row] | None = None) -> None:
    """The last lines of a run: how it stopped, then its story as report.png tells it
    (validation before and after the warm start, the test of each checkpoint, the paired gains;
    `rows`: the run's metrics rows, for the validation line and the last checkpoint's step)."""
    test = summary.test_accuracy
    console.print(
        Panel(
            f"stop: {summary.stop_reason}  steps: {summary.steps}  baseline val "
            f"{summary.baseline_val:.3f} -> best {summary.best_val:.3f} "
            f"(step {summary.best_step})  test {test if test is None else f'{test:.3f}'}  "
            f"alarms: {len(summary.alarms)}  {summary.wall_s:.0f}s\n{summary.run_dir}",
            title="run finished",
            style="bold",
        )
    )
    for line in story_lines(rows or [], summary):
        console.print(line, highlight=False, markup=False)


# The settings that decide how a run learns, named in the line a fresh run starts with.
LEARNING_SETTINGS = (
    "sft_steps",
    "group_size",
    "groups_per_batch",
    "learning_rate",
    "temperature",
    "max_tokens",
    "eval_every",
    "max_steps",
    "max_minutes",
)


def _shown(cfg: RunConfig, keys: list[str]) -> str:
    return ", ".join(
        f"{k}={getattr(cfg, k):g}"
        if isinstance(getattr(cfg, k), float)
        else f"{k}={getattr(cfg, k)}"
        for k in keys
    )


def settings_line(cfg: RunConfig, defaults: Mapping[str, Any]) -> str:
    """Where the settings that decide how a run learns came from (the task's defaults, the
    person's own keys, rlvr's generic defaults), and how long the plateau stop waits."""
    given = cfg.model_fields_set
    yours = [
        k
        for k in LEARNING_SETTINGS
        if k in given and (k not in defaults or getattr(cfg, k) != defaults[k])
    ]
    task = [k for k in LEARNING_SETTINGS if k in defaults and k not in yours]
    generic = [k for k in LEARNING_SETTINGS if k not in yours and k not in task]
    parts = [f"the task's defaults {_shown(cfg, task)}" if task else "the task sets no defaults"]
    if yours:
        parts.append(f"yours {_shown(cfg, yours)}")
    if generic:
        parts.append(f"rlvr's defaults {_shown(cfg, generic)}")
    budget = f"max_minutes={cfg.max_minutes:g}" if cfg.max_minutes else f"max_steps={cfg.max_steps}"
    share = cfg.stopping.min_budget_share
    parts.append(
        f"the plateau stop waits until {share:.0%} of {budget} is spent (stopping.min_budget_share)"
        if share
        else "the plateau stop may end the run at any evaluation (stopping.min_budget_share=0)"
    )
    return "settings: " + "; ".join(parts)
