"""report.png: the whole story of a run in one picture, and the same story in words.

The picture: training reward and validation over integer steps, with alarms, the best step and
the stop; where a warm start ran, a position before step 0 holds what came before it (validation,
the test accuracy of the starting model), so its gain is seen apart from RL's; the test accuracy
of the start, after the warm start, of the best and of the last checkpoint at their steps; and
beside it the paired test gains with their 95% intervals. `story_lines` says the same in words
for `rlvr inspect`, the notebook and the end of a run. It reads the run's records
(rlvr.runs.records): its metrics rows and its summary. A results record keeps the rows cut to
what is drawn from them (`drawn`), so the documentation draws a kept run with this same code
(rlvr.runs.pictures).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, JsonValue

from rlvr.evaluation.paired_gains import Compared, TestBlock
from rlvr.metrics import ALARM_PREFIX, M, WarmMetric
from rlvr.runs import atomic
from rlvr.runs.records import KIND_KEY, EvalRow, Row, RunResult, StepRow, WarmStartRow

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BEFORE_WARM = -1  # the step position of what came before the warm start
MARGIN = 0.05  # around the plotted values


class CheckpointScore(BaseModel):
    """One checkpoint's test accuracy, placed at its step."""

    model_config = ConfigDict(frozen=True)

    name: str
    step: int
    accuracy: float


class Gain(BaseModel):
    """A paired test gain with its 95% interval and p-value."""

    model_config = ConfigDict(frozen=True)

    label: str
    gain: float
    low: float
    high: float
    p: float | None = None  # None where a transcribed record kept no p-value

    def words(self, items: int) -> str:
        said = f"{self.label}: {self.gain:+.3f} [{self.low:+.3f}, {self.high:+.3f}] on {items} "
        return said + ("test items" if self.p is None else f"test items (p={self.p:.3g})")


# The metric keys the picture and the story read from a row, beside its kind, its step and its
# alarms: what a results record keeps of each row, so a kept run is drawn without its run directory.
DRAWN_KEYS = frozenset(
    {
        KIND_KEY,
        M.STEP,
        M.REWARD_MEAN,
        M.REWARD_STD,
        M.INDEPENDENT,
        M.VAL_ACCURACY,
        M.VAL_ITEMS,
        WarmMetric.SECONDS,
        WarmMetric.VAL_BEFORE,
        WarmMetric.CUT,
        WarmMetric.STEPS,
        WarmMetric.STEPS_PLANNED,
        WarmMetric.TOKENS,
        WarmMetric.TOKENS_PLANNED,
    }
)


def drawn(row: Row) -> dict[str, JsonValue]:
    """The row as metrics.jsonl holds it, cut to the keys the report draws and tells from it."""
    return {
        key: value
        for key, value in row.on_disk().items()
        if key in DRAWN_KEYS or key.startswith(ALARM_PREFIX)
    }


def warm_start_of(rows: list[Row]) -> WarmStartRow | None:
    """The warm start's row (None without a warm start)."""
    return next((r for r in rows if isinstance(r, WarmStartRow)), None)


def last_eval_step(rows: list[Row]) -> int | None:
    return max((r.step for r in rows if isinstance(r, EvalRow)), default=None)


def checkpoints_tested(rows: list[Row], summary: RunResult) -> list[CheckpointScore]:
    """The test accuracies of the checkpoints summary.json's `test` block holds, at their steps:
    the start (before the warm start, where one ran), after the warm start (step 0), the best
    and the last checkpoint."""
    block = summary.test
    if block is None or not block.items:
        return []
    warmed = block.after_warm_start is not None
    places = [
        ("start", BEFORE_WARM if warmed else 0, block.start),
        ("after the warm start", 0, block.after_warm_start),
        ("best", summary.best_step, block.final),
        ("last", last_eval_step(rows), block.last),
    ]
    return [
        CheckpointScore(name=name, step=step, accuracy=value)
        for name, step, value in places
        if value is not None and step is not None
    ]


GAINS = (
    (Compared.GAIN, "gain, best - start"),
    (Compared.RL_GAIN, "RL gain, best - after the warm start"),
    (Compared.GAIN_LAST, "gain, last - start"),
    (Compared.RL_GAIN_LAST, "RL gain, last - after the warm start"),
)
RL_GAINS = (Compared.RL_GAIN, Compared.RL_GAIN_LAST)


def gains(block: TestBlock | None) -> list[Gain]:
    """The paired gains of a run's test block that are there (an RL gain only after a warm start,
    the last checkpoint's only where it is not the best)."""
    if block is None:
        return []
    warmed = block.after_warm_start is not None
    found = [(label, block.compared(which), which) for which, label in GAINS]
    return [
        Gain(label=label, gain=c.gain, low=c.ci95[0], high=c.ci95[1], p=c.p)
        for label, c, which in found
        if c is not None and (warmed or which not in RL_GAINS)
    ]


def story_lines(rows: list[Row], summary: RunResult | None) -> list[str]:
    """The run's story in words: validation before and after the warm start, at its best and at
    its last evaluation; the test accuracies and their paired gains (`summary`: None while the
    run is still going)."""
    evals = [r for r in rows if isinstance(r, EvalRow)]
    lines: list[str] = []
    warm = warm_start_of(rows)
    if evals:
        first, last = evals[0], evals[-1]
        items = (summary.val_items if summary else None) or first.items
        head = f"validation ({items} items): " if items else "validation: "
        steps = [
            f"{warm.val_before:.3f} before the warm start"
            if warm and warm.val_before is not None
            else None,
            f"{first.accuracy:.3f} {'after it' if warm else 'at the start'}",
            f"best {summary.best_val:.3f} at step {summary.best_step}" if summary else None,
            f"{last.accuracy:.3f} at the last evaluation (step {last.step})"
            if last is not first
            else None,
        ]
        lines.append(head + " -> ".join(s for s in steps if s))
    if warm and warm.cut:
        lines.append(
            f"warm start cut by its budget: {warm.steps or 0:.0f} of "
            f"{warm.steps_planned or 0:.0f} steps, {warm.tokens or 0:,.0f} of "
            f"{warm.tokens_planned or 0:,.0f} tokens"
        )
    block = summary.test if summary else None
    if block is None or summary is None:
        return lines
    points = checkpoints_tested(rows, summary)
    if not block.items:
        lines.append("test: no item completed in every evaluation")
    if points:
        shown = [
            f"{p.name}{f' (step {p.step})' if p.name in ('best', 'last') else ''} {p.accuracy:.3f}"
            for p in points
        ]
        lines.append(f"test ({block.items} paired items): " + " -> ".join(shown))
        lines += [gain.words(block.items) for gain in gains(block)]
        # a block written with the last checkpoint's keys empty: the last one was the best
        if block.last is None and "gain_last" in block.model_fields_set:
            lines.append("the last checkpoint is the best one")
    return lines


def plot_report(rows: list[Row], summary: RunResult, path: Path) -> Path:
    """Write report.png (or the format `path`'s suffix names) of the run's story."""
    headless()
    import matplotlib.pyplot as plt

    fig = report_figure(rows, summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.writing(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def headless() -> None:
    """matplotlib without a display: runs, CI and the docs build have none."""
    import matplotlib

    matplotlib.use("Agg")


def report_figure(rows: list[Row], summary: RunResult) -> Figure:
    """The report as a matplotlib Figure: the curves, and the paired test gains beside them."""
    import matplotlib.pyplot as plt

    lines = story_lines(rows, summary)
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(12, 5.2 + 0.16 * len(lines)), dpi=110, width_ratios=[3, 1.25]
    )
    plot_curves(ax, rows, summary)
    plot_gains(side, gains(summary.test), summary.test.items if summary.test else 0)
    fig.suptitle(f"{summary.task} — stop: {summary.stop_reason}", fontsize=10)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=8, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0.03 + 0.026 * len(lines), 1, 0.96))
    return fig


def plot_curves(ax: Axes, rows: list[Row], summary: RunResult) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    train = [r for r in rows if isinstance(r, StepRow)]
    evals = [r for r in rows if isinstance(r, EvalRow)]
    warm = warm_start_of(rows)
    before = warm.val_before if warm else None
    shown: list[float] = []  # every plotted value, for the limits
    if train:
        steps = [r.step for r in train]
        mean = [r.reward_mean for r in train]
        std = [r.reward_std or 0.0 for r in train]
        ax.plot(steps, mean, color="tab:blue", marker=".", label="train reward (mean ± std)")
        low = [m - s for m, s in zip(mean, std, strict=True)]
        high = [m + s for m, s in zip(mean, std, strict=True)]
        ax.fill_between(steps, low, high, color="tab:blue", alpha=0.12)
        shown += low + high
        truth = [(r.step, r.independent) for r in train if r.independent is not None]
        if truth and summary.scorer != "verifier":
            ax.plot(*zip(*truth, strict=True), color="tab:gray", ls=":", label="train ground truth")
            shown += [t for _, t in truth]
    if evals:
        val = [(r.step, r.accuracy) for r in evals]
        ax.plot(*zip(*val, strict=True), color="tab:green", marker="o", label="validation")
        shown += [v for _, v in val]
    if warm is not None:
        ax.axvspan(BEFORE_WARM, 0, color="tab:olive", alpha=0.12, label="warm start")
    if before is not None and evals:
        ax.plot(
            [BEFORE_WARM, 0],
            [before, evals[0].accuracy],
            color="tab:green",
            ls="--",
            marker="o",
            mfc="white",
            label=f"validation before the warm start ({before:.3f})",
        )
        shown.append(before)
    plot_marks(ax, rows, summary)
    shown += plot_tests(ax, rows, summary)
    last = max((r.step for r in rows), default=0)
    located = MaxNLocator(integer=True).tick_values(0, max(last, 1))
    ticks = sorted({int(t) for t in located if 0 <= t <= max(last, 1)})
    ax.set_xticks([BEFORE_WARM, *ticks] if warm is not None else ticks)
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda x, _: "before\nwarm start" if x == BEFORE_WARM else f"{x:.0f}")
    )
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(min([0.0, *shown]) - MARGIN, max([1.0, *shown]) + MARGIN)
    ax.legend(loc="upper left", fontsize=7)
    ax.grid(alpha=0.3)


def plot_tests(ax: Axes, rows: list[Row], summary: RunResult) -> list[float]:
    """Each tested checkpoint's accuracy at its step; returns the values plotted."""
    points = checkpoints_tested(rows, summary)
    for point in points:
        filled = point.name in ("best", "last")
        ax.plot(
            [point.step],
            [point.accuracy],
            marker="D" if point.name != "last" else "s",
            color="tab:purple",
            mfc="tab:purple" if filled else "white",
            ls="none",
            label=f"test, {point.name} ({point.accuracy:.3f})",
        )
    return [p.accuracy for p in points]


def plot_marks(ax: Axes, rows: list[Row], summary: RunResult) -> None:
    """The alarms, the best validation and the stop."""
    alarms = [(r.step, name) for r in rows for name in r.alarms]
    for step, name in alarms:
        # Labels run down inside the plot, beside their line, clear of the title and legend.
        ax.axvline(step, color="tab:red", ls="--", lw=1)
        ax.annotate(
            name,
            (step, 0.97),
            color="tab:red",
            fontsize=8,
            ha="right",
            va="top",
            rotation=90,
            xycoords=("data", "axes fraction"),
        )
    ax.plot(
        [summary.best_step],
        [summary.best_val],
        marker="*",
        ms=14,
        color="gold",
        markeredgecolor="black",
        ls="none",
        label=f"best validation ({summary.best_val:.3f})",
    )
    last = max((r.step for r in rows), default=0)
    ax.axvline(last, color="black", lw=1.5)
    ax.annotate(
        f"stop: {summary.stop_reason}",
        (last, 0.02),
        xycoords=("data", "axes fraction"),
        fontsize=8,
        ha="right",
        rotation=90,
        va="bottom",
    )


def gains_figure(title: str, found: list[Gain], items: int, lines: list[str]) -> Figure:
    """The paired test gains alone, as report.png draws them beside the curves, with `lines` of
    words below: the picture of a run whose curves were not kept."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2 + 0.16 * len(lines)), dpi=110)
    plot_gains(ax, found, items)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=8, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0.03 + 0.05 * len(lines), 1, 0.94))
    return fig


def plot_gains(ax: Axes, found: list[Gain], items: int) -> None:
    """The paired test gains, each a point with its 95% interval, against zero."""
    ax.set_title(
        f"paired test gains, 95% intervals ({items} items)" if found else "no paired test gain",
        fontsize=9,
    )
    ax.axvline(0, color="black", lw=1)
    for row, gain in enumerate(reversed(found)):
        ax.errorbar(
            [gain.gain],
            [row],
            xerr=[[gain.gain - gain.low], [gain.high - gain.gain]],
            fmt="o",
            color="tab:purple",
            capsize=4,
        )
    ax.set_yticks(range(len(found)), [g.label.replace(", ", "\n") for g in reversed(found)])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylim(-0.6, max(len(found), 1) - 0.4)
    ax.set_xlabel("test accuracy difference")
    ax.grid(alpha=0.3, axis="x")
