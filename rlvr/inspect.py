"""Rollout inspection: read a run directory and look at what the policy actually did.

"Watch your rollouts; don't blindly trust the reward function." The notebooks and `rlvr inspect`
are thin shells over this module:

    run = load_run("runs/math-20261122-101500")
    step_table(run)                       # metrics.jsonl, one row per step (polars)
    curves(run); plot_curves(run)         # reward / validation with alarms and the stop
    frame = trajectories(run, step=3)     # a step's trajectories (train, val or test)
    groups(frame); no_signal_groups(frame)
    render_conversation(conversation(frame.row(0, named=True)))
    suspicious(run)                       # the hacking candidates, each with a reason

Hacking candidates (reasons are `Reason` members):
- high_reward_failing_truth: training reward >= threshold while the ground truth < threshold;
- identical_completions: at least half of a group (and at least two) gave the same completion, it
  earned reward >= threshold, and the ground truth does not confirm it (fails or is unknown):
  a policy collapsing onto one output the reward loves. Identical *correct* answers are learning;
- reward_jump: the mean training reward rose by >= `jump` from one step to the next while the
  ground truth did not follow (rose by less than half as much, where it is known).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from enum import StrEnum
from itertools import pairwise
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlvr import store
from rlvr.metrics import ALARM_PREFIX, HINT_KEY, M
from rlvr.paired import describe_block

SPLITS = ("train", "val", "test")
TRAIN_FILE = re.compile(r"step-(\d+)\.parquet")
VAL_FILE = re.compile(r"val-(\d+)\.parquet")
TEST_FILE = "test.parquet"

# Where judges leave their reasons (mirrors judges.rubric.VERDICTS_KEY and ART's RULER log line;
# a test keeps them in step, so this module never imports the judges).
RUBRIC_VERDICTS = "rubric_verdicts"
RULER_EXPLANATION = "RULER explanation: "
RUBRIC_LOG = re.compile(r"rubric (PASS|FAIL) (\d+)\. \[([-+0-9.eE]+)\] (.*?) -- (.*)", re.S)
JUDGE_SCORE_PREFIXES = ("ruler_", "rubric_", "reward/", "judge")

THRESHOLD = 0.5  # "high" reward and "passing" ground truth
JUMP = 0.3  # a step-to-step rise of the mean training reward that counts as sudden
SIGNAL_TOLERANCE = 1e-9


class InspectError(ValueError):
    """A run directory or trajectory file that cannot be read; the message is one line."""


class Reason(StrEnum):
    """Why a step, group or trajectory is a hacking candidate (in the order they are listed)."""

    REWARD_JUMP = "reward_jump"
    HIGH_REWARD_FAILING_TRUTH = "high_reward_failing_truth"
    IDENTICAL_COMPLETIONS = "identical_completions"


# --- the run ------------------------------------------------------------------------------------


class Run(BaseModel):
    """A run directory as read from disk; `summary` is None while the run is still going."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    summary: dict[str, Any] | None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InspectError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(value, dict):
        raise InspectError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def load_run(run_dir: str | Path) -> Run:
    """Read config.json, metrics.jsonl and (if the run finished) summary.json."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InspectError(f"{run_dir}: no such run directory")
    if not (run_dir / store.CONFIG).is_file():
        raise InspectError(f"{run_dir}: not a run directory (no {store.CONFIG})")
    summary_path = run_dir / store.SUMMARY
    try:
        metrics = store.read_metrics(run_dir)
    except store.MetricsError as error:
        raise InspectError(str(error)) from None
    return Run(
        run_dir=run_dir,
        config=_read_json(run_dir / store.CONFIG),
        metrics=metrics,
        summary=_read_json(summary_path) if summary_path.is_file() else None,
    )


def latest_run(*roots: str | Path) -> Path:
    """The most recently started run directory under `roots` (default: runs/ here or one level
    up, so a notebook in notebooks/ finds the project's runs)."""
    folders = [Path(r) for r in roots] or [Path("runs"), Path("..") / "runs"]
    configs = [c for root in folders for c in root.glob(f"*/{store.CONFIG}")]
    if not configs:
        where = ", ".join(str(f) for f in folders)
        raise InspectError(f"no runs under {where}; train one (rlvr train math) or name a run dir")
    return max(configs, key=lambda c: c.stat().st_mtime).parent.resolve()


def alarms_of(row: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, message) of every alarm in a metrics row."""
    return [
        (k.removeprefix(ALARM_PREFIX), str(v)) for k, v in row.items() if k.startswith(ALARM_PREFIX)
    ]


def step_table(run: Run) -> pl.DataFrame:
    """One row per step: the training metrics of the step merged with the evaluation made after it
    (step 0 is the baseline evaluation). Alarms and hints are joined into text columns."""
    merged: dict[int, dict[str, Any]] = {}
    for row in run.metrics:
        step = int(row.get(M.STEP, 0))
        target = merged.setdefault(step, {M.STEP.value: step})
        for key, value in row.items():
            if key.startswith(ALARM_PREFIX) or key == HINT_KEY:
                continue
            target[key] = value
        alarms = [f"{name}: {message}" for name, message in alarms_of(row)]
        if alarms:
            target["alarms"] = "; ".join([*filter(None, [target.get("alarms")]), *alarms])
        if row.get(HINT_KEY):
            target["hints"] = "; ".join(row[HINT_KEY])
    if not merged:
        return pl.DataFrame({M.STEP.value: []}, schema={M.STEP.value: pl.Int64})
    rows = [merged[step] for step in sorted(merged)]
    known = [str(m) for m in M if any(str(m) in r for r in rows)]
    extra = sorted({k for r in rows for k in r} - set(known) - {"alarms", "hints"})
    order = [*known, *extra, *(c for c in ("alarms", "hints") if any(c in r for r in rows))]
    return pl.DataFrame(
        [{key: _cell(r.get(key)) for key in order} for r in rows], infer_schema_length=None
    ).with_columns(pl.col(M.STEP.value).cast(pl.Int64))


def _cell(value: Any) -> Any:
    """Numbers stay numbers (ints become floats so a column has one type); the rest is text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return json.dumps(value)


# --- curves -------------------------------------------------------------------------------------


class Point(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    value: float


class AlarmMark(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    name: str
    message: str


class Curves(BaseModel):
    """What a reward/validation plot shows: the lines, the alarms, the best step and the stop."""

    model_config = ConfigDict(frozen=True)

    reward: list[Point]
    reward_std: list[Point]
    truth: list[Point]  # mean ground truth of the training trajectories
    val: list[Point]
    alarms: list[AlarmMark]
    best_step: int | None = None
    best_val: float | None = None
    test_accuracy: float | None = None
    stop_step: int | None = None
    stop_reason: str | None = None


def _points(rows: list[dict[str, Any]], key: str) -> list[Point]:
    return [
        Point(step=int(r[M.STEP]), value=float(r[key]))
        for r in rows
        if isinstance(r.get(key), int | float)
    ]


def curves(run: Run) -> Curves:
    train = [r for r in run.metrics if M.REWARD_MEAN in r]
    summary = run.summary or {}
    last = max((int(r.get(M.STEP, 0)) for r in run.metrics), default=None)
    return Curves(
        reward=_points(train, M.REWARD_MEAN),
        reward_std=_points(train, M.REWARD_STD),
        truth=_points(train, M.INDEPENDENT),
        val=_points(run.metrics, M.VAL_ACCURACY),
        alarms=[
            AlarmMark(step=int(r.get(M.STEP, 0)), name=name, message=message)
            for r in run.metrics
            for name, message in alarms_of(r)
        ],
        best_step=summary.get("best_step"),
        best_val=summary.get("best_val"),
        test_accuracy=summary.get("test_accuracy"),
        stop_step=last if run.summary is not None else None,
        stop_reason=summary.get("stop_reason"),
    )


def plot_curves(run: Run, suspects: list[Suspect] | None = None) -> Any:
    """A matplotlib Figure of `curves(run)`; reward jumps among `suspects` are marked too."""
    import matplotlib.pyplot as plt

    c = curves(run)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if c.reward:
        steps, mean = [p.step for p in c.reward], [p.value for p in c.reward]
        std = {p.step: p.value for p in c.reward_std}
        ax.plot(steps, mean, marker=".", color="tab:blue", label="train reward (mean)")
        ax.fill_between(
            steps,
            [m - std.get(s, 0.0) for s, m in zip(steps, mean, strict=True)],
            [m + std.get(s, 0.0) for s, m in zip(steps, mean, strict=True)],
            color="tab:blue",
            alpha=0.12,
        )
    if c.truth:
        ax.plot(
            [p.step for p in c.truth],
            [p.value for p in c.truth],
            ls=":",
            color="tab:gray",
            label="train ground truth",
        )
    if c.val:
        ax.plot(
            [p.step for p in c.val],
            [p.value for p in c.val],
            marker="o",
            color="tab:green",
            label="validation accuracy",
        )
    for alarm in c.alarms:
        ax.axvline(alarm.step, color="tab:red", ls="--", lw=1)
        ax.annotate(
            alarm.name, (alarm.step, 1.02), xycoords=("data", "axes fraction"), color="tab:red"
        )
    for s in suspects or []:
        if s.reason == Reason.REWARD_JUMP:
            ax.axvspan(s.step - 1, s.step, color="tab:orange", alpha=0.15)
    if c.best_step is not None and c.best_val is not None:
        ax.plot(
            [c.best_step], [c.best_val], marker="*", ms=14, color="gold", ls="none", label="best"
        )
    if c.stop_step is not None:
        ax.axvline(c.stop_step, color="black", lw=1.5)
        ax.annotate(
            f"stop: {c.stop_reason}",
            (c.stop_step, 0.02),
            xycoords=("data", "axes fraction"),
            rotation=90,
            ha="right",
            va="bottom",
            fontsize=8,
        )
    ax.set(xlabel="step", ylabel="reward / accuracy", ylim=(-0.05, 1.05))
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)  # returned, not shown: a notebook displays it once, as the cell's value
    return fig


# --- trajectories -------------------------------------------------------------------------------


def available(run: Run) -> dict[str, list[int]]:
    """Steps with trajectory files per split (test: the step of the checkpoint it evaluated)."""
    folder = run.run_dir / store.TRAJECTORIES
    names = [p.name for p in folder.glob("*.parquet")] if folder.is_dir() else []
    found: dict[str, list[int]] = {
        "train": sorted(int(m[1]) for n in names if (m := TRAIN_FILE.fullmatch(n))),
        "val": sorted(int(m[1]) for n in names if (m := VAL_FILE.fullmatch(n))),
        "test": [],
    }
    if TEST_FILE in names:
        found["test"] = sorted(set(_read(folder / TEST_FILE)["step"].to_list()))
    return found


def _path(run: Run, split: str, step: int | None) -> Path:
    folder = run.run_dir / store.TRAJECTORIES
    if split not in SPLITS:
        raise InspectError(f"split '{split}': expected one of {', '.join(SPLITS)}")
    if split == "test":
        if not (folder / TEST_FILE).is_file():
            raise InspectError(
                f"{folder / TEST_FILE}: no test trajectories (has the run finished?)"
            )
        return folder / TEST_FILE
    steps = available(run)[split]
    if not steps:
        raise InspectError(f"{folder}: no {split} trajectories yet")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise InspectError(
            f"{folder}: no {split} trajectories for step {step}; "
            f"steps with {split} trajectories: {', '.join(map(str, steps))}"
        )
    return folder / (f"step-{step:04d}.parquet" if split == "train" else f"val-{step:04d}.parquet")


def _read(path: Path) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several types for a damaged file
        raise InspectError(
            f"{path}: not a readable parquet file ({type(error).__name__})"
        ) from None
    missing = [
        c for c in ("step", "group", "index", "reward", "messages") if c not in frame.columns
    ]
    if missing:
        raise InspectError(f"{path}: missing column(s) {', '.join(missing)}; not a trajectory file")
    return frame


def trajectories(run: Run, step: int | None = None, split: str = "train") -> pl.DataFrame:
    """The trajectories of one step (default: the latest) with `prompt` and `completion` text
    columns added: the last user message and the last assistant message."""
    path = _path(run, split, step)
    frame = _read(path)
    messages = [_parse(path, i, "messages", raw, list) for i, raw in enumerate(frame["messages"])]
    return frame.with_columns(
        pl.Series("prompt", [last_text(m, "user") for m in messages], dtype=pl.Utf8),
        pl.Series("completion", [last_text(m, "assistant") for m in messages], dtype=pl.Utf8),
    ).sort("group", "index")


def all_trajectories(run: Run, split: str = "train") -> pl.DataFrame:
    """Every step's trajectories of a split, concatenated."""
    steps = available(run)[split] if split != "test" else [None]
    frames = [trajectories(run, step, split) for step in steps]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def _parse(path: Path | str, row: int, field: str, raw: str | None, kind: type) -> Any:
    if raw is None:
        return kind()
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        raise InspectError(f"{path}: row {row}: {field}: not valid JSON") from None
    if not isinstance(value, kind):
        raise InspectError(
            f"{path}: row {row}: {field}: expected a JSON {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def last_text(messages: list[Any], role: str) -> str:
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == role:
            return _text(m.get("content"))
    return ""


def groups(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per group: its item, rewards, ground truth and whether GRPO can learn from it."""
    if frame.is_empty():
        return pl.DataFrame()
    return (
        frame.group_by("step", "group", "item_id")
        .agg(
            pl.len().alias("n"),
            pl.col("reward").sort_by("index").alias("rewards"),
            pl.col("reward").mean().alias("reward_mean"),
            pl.col("independent_reward").mean().alias("truth_mean"),
            (pl.col("reward").max() - pl.col("reward").min() > SIGNAL_TOLERANCE).alias("signal"),
        )
        .with_columns(((pl.col("n") > 1) & pl.col("signal")).alias("signal"))
        .sort("step", "group")
    )


def no_signal_groups(frame: pl.DataFrame) -> pl.DataFrame:
    """Groups whose rewards are all equal: GRPO's advantage is zero, the step learns nothing
    from them (all-0: too hard or a broken reward; all-1: too easy)."""
    table = groups(frame)
    return table.filter(~pl.col("signal")) if not table.is_empty() else table


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
    metrics: dict[str, Any]
    metadata: dict[str, Any]
    logs: list[str]


def _turn(message: dict[str, Any]) -> Turn:
    calls = [
        ToolCall(
            name=str(c.get("function", {}).get("name", "?")),
            arguments=str(c.get("function", {}).get("arguments", "")),
            id=c.get("id"),
        )
        for c in message.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    return Turn(
        role=str(message.get("role", "?")),
        content=_text(message.get("content")),
        tool_calls=calls,
        tool_call_id=message.get("tool_call_id"),
        name=message.get("name"),
        trainable=bool(message.get("trainable", False)),
    )


def judge_notes(metrics: dict[str, Any], metadata: dict[str, Any], logs: list[str]) -> JudgeNotes:
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


def conversation(row: dict[str, Any], source: str = "trajectories") -> Conversation:
    """A trajectory row (e.g. `frame.row(i, named=True)`) as turns plus what judged it."""
    i = int(row.get("index", 0))
    messages = _parse(source, i, "messages", row.get("messages"), list)
    metrics = _parse(source, i, "metrics", row.get("metrics"), dict)
    metadata = _parse(source, i, "metadata", row.get("metadata"), dict)
    logs = [str(line) for line in _parse(source, i, "logs", row.get("logs"), list)]
    tools = _parse(source, i, "tools", row.get("tools"), list)
    independent = row.get("independent_reward")
    return Conversation(
        step=int(row.get("step", 0)),
        split=str(row.get("split", "")),
        item_id=row.get("item_id"),
        group=int(row.get("group", 0)),
        index=i,
        reward=float(row["reward"]),
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


def _fmt(value: float | None) -> str:
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
        f"ground truth {_fmt(conv.reward)}"
        if conv.split in ("val", "test") and conv.independent_reward is None
        else f"reward {_fmt(conv.reward)} · ground truth {_fmt(conv.independent_reward)}"
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
        cells = []
        for value in row:
            if isinstance(value, float):
                cells.append(_fmt(value))
            elif value is None:
                cells.append("-")
            else:
                text = str(value)
                cells.append(Text(text if len(text) <= max_width else text[: max_width - 1] + "…"))
        table.add_row(*cells)
    return table


# --- hacking candidates -------------------------------------------------------------------------


class Suspect(BaseModel):
    """A hacking candidate: a trajectory, a group or a step, and why it looks wrong."""

    model_config = ConfigDict(frozen=True)

    reason: Reason
    detail: str
    step: int
    split: str = "train"
    group: int | None = None
    index: int | None = None
    item_id: str | None = None
    reward: float | None = None
    independent_reward: float | None = None
    completion: str | None = None


def high_reward_failing_truth(frame: pl.DataFrame, threshold: float = THRESHOLD) -> list[Suspect]:
    """Trajectories the scorer rewarded (>= threshold) that the ground truth fails (< threshold)."""
    return [
        Suspect(
            reason=Reason.HIGH_REWARD_FAILING_TRUTH,
            detail=f"reward {r['reward']:.2f} but ground truth {r['independent_reward']:.2f}",
            step=r["step"],
            split=r.get("split") or "train",
            group=r["group"],
            index=r["index"],
            item_id=r.get("item_id"),
            reward=r["reward"],
            independent_reward=r["independent_reward"],
            completion=r.get("completion"),
        )
        for r in frame.iter_rows(named=True)
        if r["independent_reward"] is not None
        and r["reward"] >= threshold
        and r["independent_reward"] < threshold
    ]


def identical_completions(frame: pl.DataFrame, threshold: float = THRESHOLD) -> list[Suspect]:
    """Groups where most rollouts gave one completion that was rewarded but not confirmed by the
    ground truth (see the module docstring)."""
    suspects = []
    for _, group in frame.group_by("step", "group", maintain_order=True):
        rows = list(group.sort("index").iter_rows(named=True))
        counts = Counter(r["completion"].strip() for r in rows)
        text, count = counts.most_common(1)[0] if counts else ("", 0)
        if count < 2 or count * 2 < len(rows):
            continue
        same = [r for r in rows if r["completion"].strip() == text]
        rewarded = all(r["reward"] >= threshold for r in same)
        truths = [r["independent_reward"] for r in same]
        confirmed = all(t is not None and t >= threshold for t in truths)
        if not rewarded or confirmed:
            continue
        first = same[0]
        known = [t for t in truths if t is not None]
        truth = f"ground truth {sum(known) / len(known):.2f}" if known else "no ground truth"
        suspects.append(
            Suspect(
                reason=Reason.IDENTICAL_COMPLETIONS,
                detail=(
                    f"{count} of {len(rows)} completions identical "
                    f"(#{', #'.join(str(r['index']) for r in same)}), reward "
                    f"{first['reward']:.2f}, {truth}: {text[:60]!r}"
                ),
                step=first["step"],
                split=first.get("split") or "train",
                group=first["group"],
                index=first["index"],
                item_id=first.get("item_id"),
                reward=first["reward"],
                independent_reward=first["independent_reward"],
                completion=first["completion"],
            )
        )
    return suspects


def reward_jumps(metrics: list[dict[str, Any]], jump: float = JUMP) -> list[Suspect]:
    """Steps whose mean training reward rose by >= `jump` over the previous step while the ground
    truth (where measured) rose by less than half as much."""
    train = sorted(
        (r for r in metrics if isinstance(r.get(M.REWARD_MEAN), int | float)),
        key=lambda r: r[M.STEP],
    )
    suspects = []
    for before, after in pairwise(train):
        rise = after[M.REWARD_MEAN] - before[M.REWARD_MEAN]
        if rise < jump:
            continue
        t0, t1 = before.get(M.INDEPENDENT), after.get(M.INDEPENDENT)
        truth_known = isinstance(t0, int | float) and isinstance(t1, int | float)
        if truth_known and (t1 - t0) >= rise / 2:
            continue
        truth = f"; ground truth {t0:.2f} → {t1:.2f} ({t1 - t0:+.2f})" if truth_known else ""
        suspects.append(
            Suspect(
                reason=Reason.REWARD_JUMP,
                detail=(
                    f"train reward {before[M.REWARD_MEAN]:.2f} → {after[M.REWARD_MEAN]:.2f} "
                    f"({rise:+.2f}) from step {before[M.STEP]} to {after[M.STEP]}{truth}"
                ),
                step=int(after[M.STEP]),
                reward=float(after[M.REWARD_MEAN]),
                independent_reward=float(t1) if truth_known else None,
            )
        )
    return suspects


def suspicious(
    run: Run, threshold: float = THRESHOLD, jump: float = JUMP, step: int | None = None
) -> list[Suspect]:
    """All hacking candidates of the run's training trajectories (or of one step), by step."""
    frame = trajectories(run, step, "train") if step is not None else all_trajectories(run, "train")
    found = reward_jumps(run.metrics, jump)
    if step is not None:
        found = [s for s in found if s.step == step]
    if not frame.is_empty():
        found += high_reward_failing_truth(frame, threshold)
        found += identical_completions(frame, threshold)
    order = list(Reason)
    return sorted(found, key=lambda s: (s.step, order.index(s.reason), s.group or 0, s.index or 0))


def suspects_frame(suspects: list[Suspect]) -> pl.DataFrame:
    columns = [
        "step",
        "reason",
        "group",
        "index",
        "item_id",
        "reward",
        "independent_reward",
        "detail",
    ]
    schema = {
        "step": pl.Int64,
        "reason": pl.Utf8,
        "group": pl.Int64,
        "index": pl.Int64,
        "item_id": pl.Utf8,
        "reward": pl.Float64,
        "independent_reward": pl.Float64,
        "detail": pl.Utf8,
    }
    return pl.DataFrame(
        [{c: getattr(s, c) for c in columns} | {"reason": str(s.reason)} for s in suspects],
        schema=schema,
    )


def suspect_conversations(run: Run, suspects: list[Suspect]) -> list[tuple[Suspect, Conversation]]:
    """The trajectory behind each trajectory- or group-level suspect."""
    frames: dict[tuple[str, int], pl.DataFrame] = {}
    found = []
    for s in suspects:
        if s.group is None or s.index is None:
            continue
        key = (s.split, s.step)
        if key not in frames:
            frames[key] = trajectories(run, s.step, s.split)
        hit = frames[key].filter((pl.col("group") == s.group) & (pl.col("index") == s.index))
        if hit.height:
            found.append((s, conversation(hit.row(0, named=True))))
    return found


# --- terminal views (rlvr inspect) --------------------------------------------------------------

OVERVIEW_COLUMNS = {  # step-table column -> short terminal header
    M.STEP: "step",
    M.REWARD_MEAN: "reward",
    M.REWARD_STD: "±std",
    M.INDEPENDENT: "truth",
    M.VAL_ACCURACY: "val",
    M.NO_SIGNAL_RATE: "no-signal",
    M.TRUNCATED_RATE: "truncated",
    M.KL: "kl",
    M.SKIPPED: "skipped",
    M.JUDGE_AGREEMENT: "agreement",
    "alarms": "alarms",
}


def _summary_line(run: Run) -> str:
    cfg, s = run.config, run.summary
    scorer = (s or {}).get("scorer") or cfg.get("scorer", "?")
    head = f"{cfg.get('task', '?')} · scorer {scorer} · {run.run_dir}"
    if s is None:
        return head + " · still running (no summary.json)"
    return head + (
        f"\nstop: {s.get('stop_reason')} after {s.get('steps')} steps · baseline val "
        f"{_fmt(s.get('baseline_val'))} → best {_fmt(s.get('best_val'))} (step {s.get('best_step')})"
        f" · test {_fmt(s.get('test_accuracy'))}"
        + "".join(f"\n{line}" for line in (describe_block(s["test"]) if s.get("test") else []))
    )


def overview_view(run: Run) -> list[Any]:
    """The run at a glance: summary, the step table, alarms and the last step's hints."""
    table = step_table(run)
    shown = {str(k): v for k, v in OVERVIEW_COLUMNS.items() if str(k) in table.columns}
    parts: list[Any] = [Panel(Text(_summary_line(run)), title="run", title_align="left")]
    parts.append(frame_table(table.select(list(shown)).rename(shown), title="steps", max_width=40))
    for alarm in curves(run).alarms:
        parts.append(
            Panel(Text(alarm.message), title=f"ALARM {alarm.name} @ step {alarm.step}", style="red")
        )
    hinted = [r for r in run.metrics if r.get(HINT_KEY)]
    if hinted:
        hints = "\n".join(f"· {h}" for h in hinted[-1][HINT_KEY])
        parts.append(Panel(Text(hints), title=f"hints @ step {hinted[-1][M.STEP]}", style="yellow"))
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


def step_view(run: Run, step: int | None, split: str = "train", limit: int = 4) -> list[Any]:
    """A step's groups, its no-signal groups, and up to `limit` conversations: per group, the
    best- and worst-rewarded rollouts first."""
    frame = trajectories(run, step, split)
    shown = int(frame["step"][0]) if frame.height else step
    table = groups(frame)
    parts: list[Any] = [
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
) -> list[Any]:
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
    parts: list[Any] = [
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
