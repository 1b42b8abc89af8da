"""One trajectory as a conversation: turns, tool calls, the judge's notes, and its terminal
rendering (`render_conversation`); `frame_table` renders any polars frame for the terminal."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, JsonValue
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlvr.inspection.reader import InspectError, content_text, parse_field
from rlvr.json_types import JsonObject
from rlvr.runs.store import TableRow

# a test keeps them in step, so this module never imports the judges).
RUBRIC_VERDICTS = "rubric_verdicts"
RULER_EXPLANATION = "RULER explanation: "
RUBRIC_LOG = re.compile(r"rubric (PASS|FAIL) (\d+)\. \[([-+0-9.eE]+)\] (.*?) -- (.*)", re.S)
JUDGE_SCORE_PREFIXES = ("ruler_", "rubric_", "reward/", "judge")


# --- one conversation ---------------------------------------------------------------------------


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str
    id: str | None = None


class Turn(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: str
    content: str
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None
    trainable: bool = False  # a sampled turn ART trains on


class Verdict(BaseModel):
    """One rubric criterion as judged for this response."""

    model_config = ConfigDict(frozen=True)

    criterion: int | None = None
    text: str = ""
    points: float | None = None
    met: bool | None = None
    passed: bool | None = None
    rationale: str = ""


class JudgeNotes(BaseModel):
    model_config = ConfigDict(frozen=True)

    scores: dict[str, float] = {}
    explanations: list[str] = []
    verdicts: list[Verdict] = []

    @property
    def empty(self) -> bool:
        return not (self.scores or self.explanations or self.verdicts)


class Conversation(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    split: str
    item_id: str | None
    group: int
    index: int
    reward: float
    independent_reward: float | None
    turns: list[Turn]
    tools: list[str]
    judge: JudgeNotes
    # a trajectory's own metrics and metadata as its table row holds them: JSON, a task's keys
    metrics: JsonObject
    metadata: JsonObject
    logs: list[str]


def _text(value: JsonValue) -> str | None:
    return None if value is None else str(value)


def _call(call: JsonObject) -> ToolCall:  # a tool call as the SDK's JSON holds it
    function = call.get("function")
    named = function if isinstance(function, dict) else {}
    return ToolCall(
        name=str(named.get("name", "?")),
        arguments=str(named.get("arguments", "")),
        id=_text(call.get("id")),
    )


def _turn(message: JsonObject) -> Turn:  # a chat message as the SDK's JSON holds it
    calls = message.get("tool_calls")
    return Turn(
        role=str(message.get("role", "?")),
        content=content_text(message.get("content")),
        tool_calls=[_call(c) for c in calls if isinstance(c, dict)]
        if isinstance(calls, list)
        else [],
        tool_call_id=_text(message.get("tool_call_id")),
        name=_text(message.get("name")),
        trainable=bool(message.get("trainable", False)),
    )


def judge_notes(metrics: JsonObject, metadata: JsonObject, logs: list[str]) -> JudgeNotes:
    """Judge scores (metrics), explanations (RULER's log line, `*explanation*` metadata) and
    per-criterion verdicts (rubric metadata, else the rubric's log lines)."""
    scores = {
        k: float(v)
        for k, v in metrics.items()
        if k.startswith(JUDGE_SCORE_PREFIXES) and isinstance(v, int | float)
    }
    explanations = [
        line.removeprefix(RULER_EXPLANATION) for line in logs if line.startswith(RULER_EXPLANATION)
    ]
    explanations += [str(v) for k, v in metadata.items() if "explanation" in k.lower() and v]
    verdicts: list[Verdict] = []
    raw = metadata.get(RUBRIC_VERDICTS)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raw = None
    if isinstance(raw, list):
        verdicts = [Verdict.model_validate(v) for v in raw if isinstance(v, dict)]
    else:
        verdicts = [
            Verdict(
                criterion=int(m[2]),
                points=float(m[3]),
                text=m[4],
                rationale=m[5],
                passed=m[1] == "PASS",
            )
            for line in logs
            if (m := RUBRIC_LOG.fullmatch(line))
        ]
    return JudgeNotes(scores=scores, explanations=explanations, verdicts=verdicts)


def _json_column(row: TableRow, name: str) -> str | None:
    """A JSON column's text, for reader.parse_field."""
    cell = row.get(name)
    return None if cell is None else str(cell)


def conversation(row: TableRow, source: str = "trajectories") -> Conversation:
    """A trajectory row (e.g. `frame.row(i, named=True)`) as turns plus what judged it."""
    i = int(row.get("index") or 0)
    messages = parse_field(source, i, "messages", _json_column(row, "messages"), list)
    metrics = parse_field(source, i, "metrics", _json_column(row, "metrics"), dict)
    metadata = parse_field(source, i, "metadata", _json_column(row, "metadata"), dict)
    logs = [str(line) for line in parse_field(source, i, "logs", _json_column(row, "logs"), list)]
    tools = parse_field(source, i, "tools", _json_column(row, "tools"), list)
    independent, item_id, reward = row.get("independent_reward"), row.get("item_id"), row["reward"]
    if reward is None:
        raise InspectError(f"{source}: row {i}: reward: missing")
    return Conversation(
        step=int(row.get("step") or 0),
        split=str(row.get("split") or ""),
        item_id=None if item_id is None else str(item_id),
        group=int(row.get("group") or 0),
        index=i,
        reward=float(reward),
        independent_reward=None if independent is None else float(independent),
        turns=[_turn(m) for m in messages if isinstance(m, dict)],
        tools=[
            str(t.get("function", {}).get("name", t.get("name", "?")))
            for t in tools
            if isinstance(t, dict)
        ],
        judge=judge_notes(metrics, metadata, logs),
        metrics=metrics,
        metadata=metadata,
        logs=logs,
    )


def conversations(frame: pl.DataFrame, limit: int | None = None) -> list[Conversation]:
    rows = frame.head(limit) if limit is not None else frame
    return [conversation(r) for r in rows.iter_rows(named=True)]


ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}


def fmt_score(value: float | None) -> str:
    return (
        "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"
    )


def render_conversation(conv: Conversation, reason: str | None = None) -> Panel:
    """A rich panel: every turn (tool calls and results included), then the judge's notes.
    Every text from a run is a `Text`, never a markup string: a rollout's `[/]` or `[link=…]`
    prints as written."""
    parts: list[Any] = []
    for turn in conv.turns:
        title = turn.role + (f" · {turn.name}" if turn.name else "")
        title += f" · result of {turn.tool_call_id}" if turn.tool_call_id else ""
        title += " · trained" if turn.trainable else ""
        body = Text(turn.content or ("" if turn.tool_calls else "(empty)"))
        for call in turn.tool_calls:
            body.append(f"\n→ {call.name}({call.arguments})", style="bold yellow")
        parts.append(
            Panel(
                body,
                title=Text(title),
                title_align="left",
                border_style=ROLE_STYLE.get(turn.role, "white"),
            )
        )
    notes = conv.judge
    if not notes.empty:
        judge = Table(title="judge", show_header=True, expand=True)
        judge.add_column("what", no_wrap=True)
        judge.add_column("verdict", no_wrap=True)
        judge.add_column("detail")
        for key, value in notes.scores.items():
            judge.add_row(Text(key), f"{value:.3f}", "")
        for text in notes.explanations:
            judge.add_row("explanation", "", Text(text))
        for v in notes.verdicts:
            mark = "-" if v.passed is None else ("PASS" if v.passed else "FAIL")
            points = "" if v.points is None else f" [{v.points:+g}]"
            judge.add_row(
                Text(f"criterion {v.criterion}{points}"), mark, Text(f"{v.text} — {v.rationale}")
            )
        parts.append(judge)
    if conv.tools:
        parts.append(Text(f"tools offered: {', '.join(conv.tools)}", style="dim"))
    # validation and test rewards are the ground truth itself (the loop scores them with check)
    scores = (
        f"ground truth {fmt_score(conv.reward)}"
        if conv.split in ("val", "test") and conv.independent_reward is None
        else f"reward {fmt_score(conv.reward)} · ground truth {fmt_score(conv.independent_reward)}"
    )
    header = (
        f"{conv.split} step {conv.step} · group {conv.group} #{conv.index} · item {conv.item_id} · "
        + scores
    )
    if reason:
        parts.insert(0, Text(f"suspicious: {reason}", style="bold red"))
    return Panel(Group(*parts), title=Text(header), title_align="left")


def frame_table(frame: pl.DataFrame, title: str = "", max_width: int = 60) -> Table:
    """A polars frame as a rich table (floats to 3 decimals, long text cut)."""
    table = Table(title=title or None, show_lines=False)
    for name in frame.columns:
        table.add_column(name, overflow="fold")
    for row in frame.iter_rows():
        cells: list[str | Text] = []
        for value in row:
            if isinstance(value, float):
                cells.append(fmt_score(value))
            elif value is None:
                cells.append("-")
            else:
                text = str(value)
                cells.append(Text(text if len(text) <= max_width else text[: max_width - 1] + "…"))
        table.add_row(*cells)
    return table
