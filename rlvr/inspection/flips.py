"""Which held-out items RL won and lost: the test split's per-item scores at two checkpoints.

A run evaluates the same test items at the start, after the warm start, at the best checkpoint
and at the last one (each its own table under trajectories/). A paired gain says how much the
mean moved; the items that changed say what moved it, and are the ones worth reading.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from rlvr.evaluation.paired_gains import PairedGain, paired_gain
from rlvr.inspection.reader import InspectError, Run, _read, last_text, parse_field
from rlvr.runs import layout

# The checkpoints the test split is evaluated at, by the names a person types; `best` is the
# run's result (trajectories/test.parquet), the others have tables of their own.
CHECKPOINTS = ("start", "after-warm-start", "best", "last")
CHANGED = 1e-9  # score differences below this are the same score


class ItemScore(BaseModel):
    """One test item at one checkpoint: its ground-truth score, prompt and final answer."""

    model_config = ConfigDict(frozen=True)

    item_id: str
    score: float
    prompt: str
    answer: str


class Flip(BaseModel):
    """A test item whose score changed between two checkpoints."""

    model_config = ConfigDict(frozen=True)

    item_id: str
    prompt: str
    before: float
    after: float
    before_answer: str
    after_answer: str


class Flips(BaseModel):
    """The items won (score rose) and lost (score fell) from `before` to `after`, and the paired
    gain over all the items both evaluated."""

    model_config = ConfigDict(frozen=True)

    before: str
    after: str
    gain: PairedGain
    won: list[Flip]
    lost: list[Flip]


def table_path(run: Run, checkpoint: str) -> Path:
    """The test table of `checkpoint` (one of CHECKPOINTS). `last` is the best checkpoint's
    table when the run kept no other (the last checkpoint was the best one)."""
    if checkpoint not in CHECKPOINTS:
        raise InspectError(f"checkpoint '{checkpoint}': expected one of {', '.join(CHECKPOINTS)}")
    named = None if checkpoint == "best" else checkpoint
    path = layout.table(run.run_dir, layout.test_name(named))
    if checkpoint == "last" and not path.is_file():
        path = layout.table(run.run_dir, layout.test_name())
    if not path.is_file():
        raise InspectError(
            f"{path}: no test rollouts of the {checkpoint} checkpoint (has the run finished? "
            "`start` and `after-warm-start` exist only where the run evaluated them)"
        )
    return path


def item_scores(run: Run, checkpoint: str) -> dict[str, ItemScore]:
    """item id -> its score, prompt and answer at `checkpoint` (greedy: one rollout an item)."""
    path = table_path(run, checkpoint)
    frame = _read(path)
    if "item_id" not in frame.columns:
        raise InspectError(f"{path}: missing column item_id; not a test table")
    scores: dict[str, ItemScore] = {}
    for i, row in enumerate(frame.select("item_id", "reward", "messages").iter_rows()):
        item_id, reward, raw = row
        messages = parse_field(path, i, "messages", raw, list)
        scores[str(item_id)] = ItemScore(
            item_id=str(item_id),
            score=float(reward),
            prompt=last_text(messages, "user"),
            answer=last_text(messages, "assistant"),
        )
    return scores


def default_before(run: Run) -> str:
    """RL's own starting point: after the warm start where the run had one, else the start."""
    warm = layout.table(run.run_dir, layout.test_name("after-warm-start"))
    return "after-warm-start" if warm.is_file() else "start"


def flips(run: Run, before: str | None = None, after: str = "last") -> Flips:
    """The test items whose score changed from `before` (default: default_before) to `after`,
    largest change first, with the paired gain over the items both checkpoints evaluated."""
    before = before or default_before(run)
    old, new = item_scores(run, before), item_scores(run, after)
    shared = sorted(set(old) & set(new))
    if not shared:
        raise InspectError(
            f"{run.run_dir}: the {before} and {after} test tables share no item; "
            "were they written by the same run?"
        )
    changed = [
        Flip(
            item_id=i,
            prompt=new[i].prompt,
            before=old[i].score,
            after=new[i].score,
            before_answer=old[i].answer,
            after_answer=new[i].answer,
        )
        for i in shared
        if abs(new[i].score - old[i].score) > CHANGED
    ]
    changed.sort(key=lambda f: (-abs(f.after - f.before), f.item_id))
    return Flips(
        before=before,
        after=after,
        gain=paired_gain([old[i].score for i in shared], [new[i].score for i in shared]),
        won=[f for f in changed if f.after > f.before],
        lost=[f for f in changed if f.after < f.before],
    )


def flips_frame(found: Flips) -> pl.DataFrame:
    """The changed items as a table (notebooks): one row each, won first."""
    rows = [
        {"outcome": outcome, **flip.model_dump()}
        for outcome, group in (("won", found.won), ("lost", found.lost))
        for flip in group
    ]
    schema = {
        "outcome": pl.Utf8,
        "item_id": pl.Utf8,
        "prompt": pl.Utf8,
        "before": pl.Float64,
        "after": pl.Float64,
        "before_answer": pl.Utf8,
        "after_answer": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)


def _short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def flips_view(found: Flips, limit: int) -> list[RenderableType]:
    """`rlvr inspect RUN --flips`: the gain, then up to `limit` won and `limit` lost items."""
    head = Text(
        f"test, {found.before} -> {found.after}: {found.gain.describe()}; "
        f"{len(found.won)} won, {len(found.lost)} lost, "
        f"{found.gain.items - len(found.won) - len(found.lost)} unchanged"
    )
    parts: list[RenderableType] = [head]
    for title, group in (("won", found.won), ("lost", found.lost)):
        if not group:
            continue
        table = Table(title=f"{title} ({len(group)}, first {min(limit, len(group))})")
        for column in ("item", "score", "prompt", f"answer ({found.before})", "answer (after)"):
            table.add_column(column, overflow="fold")
        for flip in group[:limit]:
            table.add_row(
                flip.item_id,
                f"{flip.before:.2f} -> {flip.after:.2f}",
                _short(flip.prompt, 80),
                _short(flip.before_answer, 60),
                _short(flip.after_answer, 60),
            )
        parts.append(table)
    return parts
