"""The terminal views of `rlvr inspect`: the run's overview, one step's groups and
conversations, and the suspicious rollouts."""

from __future__ import annotations

import polars as pl
from rich.console import RenderableType
from rich.panel import Panel
from rich.text import Text

from rlvr.inspection.conversations import conversations, fmt_score, frame_table, render_conversation
from rlvr.inspection.curves import curves
from rlvr.inspection.reader import (
    Run,
    available,
    groups,
    no_signal_groups,
    step_table,
    trajectories,
)
from rlvr.inspection.suspects import (
    JUMP,
    THRESHOLD,
    suspect_conversations,
    suspects_frame,
    suspicious,
)
from rlvr.metrics import M
from rlvr.runs.records import StepRow
from rlvr.runs.report import story_lines

# --- terminal views (rlvr inspect) --------------------------------------------------------------

OVERVIEW_COLUMNS = {  # step-table column -> short terminal header
    M.STEP: "step",
    M.REWARD_MEAN: "reward",
    M.REWARD_STD: "±std",
    M.INDEPENDENT: "truth",
    M.VAL_ACCURACY: "val",
    M.NO_SIGNAL_RATE: "no-signal",
    M.TRUNCATED_RATE: "truncated",
    M.UPDATE_KL: "update-kl",
    M.SKIPPED: "skipped",
    M.JUDGE_AGREEMENT: "agreement",
    "alarms": "alarms",
}


def story(run: Run) -> list[str]:
    """The run's story in words, as report.png tells it: validation before and after the warm
    start, at its best and at the last evaluation; the test accuracy of the start, after the
    warm start, of the best and the last checkpoint, and the paired gains with their intervals."""
    return story_lines(run.metrics, run.summary)


def summary_line(run: Run) -> str:
    cfg, s = run.config, run.summary
    scorer = s.scorer if s else cfg.get("scorer", "?")
    head = f"{cfg.get('task', '?')} · scorer {scorer} · {run.run_dir}"
    if s is None:
        return head + " · still running (no summary.json)"
    return head + (
        f"\nstop: {s.stop_reason} after {s.steps} steps · baseline val "
        f"{fmt_score(s.baseline_val)} → best {fmt_score(s.best_val)} (step {s.best_step})"
        f" · test {fmt_score(s.test_accuracy)}" + "".join(f"\n{line}" for line in story(run))
    )


def overview_view(run: Run) -> list[RenderableType]:
    """The run at a glance: summary, the step table, alarms and the last step's hints."""
    table = step_table(run)
    shown = {str(k): v for k, v in OVERVIEW_COLUMNS.items() if str(k) in table.columns}
    parts: list[RenderableType] = [Panel(Text(summary_line(run)), title="run", title_align="left")]
    parts.append(frame_table(table.select(list(shown)).rename(shown), title="steps", max_width=40))
    for alarm in curves(run).alarms:
        parts.append(
            Panel(Text(alarm.message), title=f"ALARM {alarm.name} @ step {alarm.step}", style="red")
        )
    hinted = [r for r in run.metrics if isinstance(r, StepRow) and r.hints]
    if hinted:
        hints = "\n".join(f"· {h}" for h in hinted[-1].hints)
        parts.append(Panel(Text(hints), title=f"hints @ step {hinted[-1].step}", style="yellow"))
    found = available(run)
    parts.append(
        Text(
            "trajectories: "
            + " · ".join(f"{k} {', '.join(map(str, v)) or '-'}" for k, v in found.items())
            + "\nlook closer: rlvr inspect RUN_DIR --step N [--split val]  |  --suspicious",
            style="dim",
        )
    )
    return parts


def step_view(
    run: Run, step: int | None, split: str = "train", limit: int = 4
) -> list[RenderableType]:
    """A step's groups, its no-signal groups, and up to `limit` conversations: per group, the
    best- and worst-rewarded rollouts first."""
    frame = trajectories(run, step, split)
    shown = int(frame["step"][0]) if frame.height else step
    table = groups(frame)
    parts: list[RenderableType] = [
        frame_table(
            table.select("group", "item_id", "n", "rewards", "reward_mean", "truth_mean", "signal"),
            title=f"{split} step {shown}: {table.height} groups, {frame.height} trajectories",
        )
    ]
    silent = no_signal_groups(frame)
    parts.append(
        Text(
            f"no-signal groups: {silent.height}/{table.height}"
            + (
                f" (groups {', '.join(map(str, silent['group'].to_list()))})"
                if silent.height
                else ""
            ),
            style="yellow" if silent.height else "green",
        )
    )
    ranked = (
        pl.concat(
            [
                frame.sort("reward", descending=True)
                .group_by("group", maintain_order=True)
                .first(),
                frame.sort("reward").group_by("group", maintain_order=True).first(),
            ]
        )
        .unique(subset=["group", "index"], maintain_order=True)
        .sort("group", maintain_order=True)
    )
    parts += [render_conversation(c) for c in conversations(ranked, limit)]
    return parts


def suspicious_view(
    run: Run,
    threshold: float = THRESHOLD,
    jump: float = JUMP,
    step: int | None = None,
    limit: int = 4,
) -> list[RenderableType]:
    """The hacking candidates and the conversations behind the first `limit` of them."""
    found = suspicious(run, threshold, jump, step)
    if not found:
        return [
            Text(
                f"no hacking candidates (reward ≥ {threshold} failing ground truth, identical "
                f"rewarded completions, reward jumps ≥ {jump})",
                style="green",
            )
        ]
    parts: list[RenderableType] = [
        frame_table(
            suspects_frame(found).drop("item_id"),
            title=f"{len(found)} hacking candidates",
            max_width=80,
        )
    ]
    seen: set[tuple[int, int, int]] = set()
    for suspect, conv in suspect_conversations(run, found):
        key = (conv.step, conv.group, conv.index)
        if key in seen or len(seen) >= limit:
            continue
        seen.add(key)
        parts.append(render_conversation(conv, reason=f"{suspect.reason}: {suspect.detail}"))
    return parts
