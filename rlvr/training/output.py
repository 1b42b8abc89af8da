"""What a training run prints: the step line with its hints, alarms, validations, the warm start
and the finished panel (the progress of long phases: rlvr.training.progress). Everything else of
a run goes to its directory (rlvr.runs.store)."""

from __future__ import annotations

from typing import Any

from rich.panel import Panel

from rlvr.agent.episode import EpisodeMetric
from rlvr.metrics import HINT_KEY, ROLLOUT_PREFIX, M
from rlvr.runs.report import story_lines
from rlvr.training.progress import console
from rlvr.training.state import NoSignal
from rlvr.training.stopping import Alarm, AlarmName
from rlvr.training.warmstart import WarmMetric


def print_step(row: dict[str, Any]) -> None:
    moved = row.get(M.UPDATE_KL)
    console.print(
        f"[bold]step {row[M.STEP]}[/] reward {row[M.REWARD_MEAN]:.3f}±{row[M.REWARD_STD]:.3f}  "
        f"no-signal {row[M.NO_SIGNAL_RATE]:.0%} (all-0 {row[M.ALL_ZERO]}, all-1 {row[M.ALL_ONE]})  "
        f"trunc {row[M.TRUNCATED_RATE]:.0%}{truncation_detail(row)}  update-kl {'-' if moved is None else f'{moved:.4f}'}  "
        f"skipped {row[M.SKIPPED]}{tool_timeouts(row)}  {row[M.STEP_SECONDS]:.0f}s",
        highlight=False,
    )
    for hint in row.get(HINT_KEY, []):
        console.print(f"  [yellow]hint:[/] {hint}", highlight=False)


CUT_CALLS = f"{ROLLOUT_PREFIX}{EpisodeMetric.CUT_CALL}"
TOOL_TIMEOUTS = f"{ROLLOUT_PREFIX}{EpisodeMetric.TOOL_TIMEOUTS}"


def tool_timeouts(row: dict[str, Any]) -> str:
    """The tool calls abandoned at their timeout, per rollout, where there were any."""
    rate = row.get(TOOL_TIMEOUTS)
    return f"  tool timeouts {rate:.2f}/rollout" if rate else ""


def truncation_detail(row: dict[str, Any]) -> str:
    """What the step's truncated rollouts were, where it is known: loops (the hint's cue to keep
    max_tokens) and tool episodes ended at a cut call whose call was not run."""
    parts = [
        f"{label} {row[key]:.0%}"
        for key, label in ((M.LOOPING_RATE, "loops"), (CUT_CALLS, "ended at a cut call"))
        if row.get(key)
    ]
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


def print_warm_start(row: dict[str, Any], before: float) -> None:
    steps = row.get(WarmMetric.STEPS)
    trained = (
        "" if steps is None else f" in {steps:.0f} steps ({row[WarmMetric.TOKENS]:,.0f} tokens)"
    )
    rejected = row.get(WarmMetric.REJECTED) or 0
    left_out = f", {rejected:.0f} failing their check left out" if rejected else ""
    console.print(
        f"[green]warm start[/]: {row[WarmMetric.DEMONSTRATIONS]:.0f} demonstrations{trained}"
        f"{left_out}, loss {row[WarmMetric.LOSS_FIRST]:.3f} -> {row[WarmMetric.LOSS_LAST]:.3f}; "
        f"validation before it {before:.3f} ({row[WarmMetric.SECONDS]:.0f}s)",
        highlight=False,
    )


def print_no_signal(verdict: NoSignal) -> None:
    """The no-signal stop: what the first steps' groups looked like and what to do."""
    console.print(Panel(verdict.message(), title="no signal: stopping", style="bold yellow"))


def print_budget(message: str) -> None:
    console.print(Panel(message, title="judge budget reached", style="bold yellow"))


def print_finished(summary: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> None:
    """The last lines of a run: how it stopped, then its story as report.png tells it
    (validation before and after the warm start, the test of each checkpoint, the paired gains;
    `rows`: the run's metrics rows, for the validation line and the last checkpoint's step)."""
    test = summary.get("test_accuracy")
    console.print(
        Panel(
            f"stop: {summary['stop_reason']}  steps: {summary['steps']}  baseline val "
            f"{summary['baseline_val']:.3f} -> best {summary['best_val']:.3f} "
            f"(step {summary['best_step']})  test {test if test is None else f'{test:.3f}'}  "
            f"alarms: {len(summary['alarms'])}  {summary['wall_s']:.0f}s\n{summary['run_dir']}",
            title="run finished",
            style="bold",
        )
    )
    for line in story_lines(rows or [], summary):
        console.print(line, highlight=False, markup=False)
