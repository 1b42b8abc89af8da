"""report.png: the whole story of a run in one picture, and the same story in words.

The picture: training reward and validation over integer steps, with alarms, the best step and
the stop; where a warm start ran, a position before step 0 holds what came before it (validation,
the test accuracy of the starting model), so its gain is seen apart from RL's; the test accuracy
of the start, after the warm start, of the best and of the last checkpoint at their steps; and
beside it the paired test gains with their 95% intervals. `story_lines` says the same in words
for `rlvr inspect`, the notebook and the end of a run. Keys a reader does not know are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rlvr.metrics import ALARM_PREFIX, M
from rlvr.runs import atomic

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
    p: float

    def words(self, items: int) -> str:
        return (
            f"{self.label}: {self.gain:+.3f} [{self.low:+.3f}, {self.high:+.3f}] on {items} "
            f"test items (p={self.p:.3g})"
        )


def warm_start_of(summary: dict[str, Any]) -> dict[str, Any] | None:
    """summary.json's warm-start block (None without a warm start)."""
    warm = summary.get("warm_start")
    return warm if isinstance(warm, dict) else None


def last_eval_step(rows: list[dict[str, Any]]) -> int | None:
    return max((int(r[M.STEP]) for r in rows if r.get(M.VAL_ACCURACY) is not None), default=None)


def checkpoints_tested(
    rows: list[dict[str, Any]], summary: dict[str, Any]
) -> list[CheckpointScore]:
    """The test accuracies of the checkpoints summary.json's `test` block holds, at their steps:
    the start (before the warm start, where one ran), after the warm start (step 0), the best
    and the last checkpoint."""
    block = summary.get("test") or {}
    if not block.get("items"):
        return []
    warmed = block.get("after_warm_start") is not None
    places = [
        ("start", BEFORE_WARM if warmed else 0, block.get("start")),
        ("after the warm start", 0, block.get("after_warm_start")),
        ("best", summary.get("best_step"), block.get("final")),
        ("last", last_eval_step(rows), block.get("last")),
    ]
    return [
        CheckpointScore(name=name, step=int(step), accuracy=float(value))
        for name, step, value in places
        if value is not None and step is not None
    ]


GAINS = (
    ("gain", "gain, best - start"),
    ("rl_gain", "RL gain, best - after the warm start"),
    ("gain_last", "gain, last - start"),
    ("rl_gain_last", "RL gain, last - after the warm start"),
)


def gains(summary: dict[str, Any]) -> list[Gain]:
    """The paired gains of the `test` block that are there (an RL gain only after a warm start,
    the last checkpoint's only where it is not the best)."""
    block = summary.get("test") or {}
    warmed = block.get("after_warm_start") is not None
    return [
        Gain(
            label=label,
            gain=block[key],
            low=block[f"{key}_ci95"][0],
            high=block[f"{key}_ci95"][1],
            p=block[f"{key}_p"],
        )
        for key, label in GAINS
        if block.get(key) is not None
        and block.get(f"{key}_ci95") is not None
        and (warmed or not key.startswith("rl_"))
    ]


def story_lines(rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    """The run's story in words: validation before and after the warm start, at its best and at
    its last evaluation; the test accuracies and their paired gains."""
    evals = [r for r in rows if r.get(M.VAL_ACCURACY) is not None]
    lines: list[str] = []
    warm = warm_start_of(summary)
    if evals:
        first, last = evals[0], evals[-1]
        items = summary.get("val_items") or first.get(M.VAL_ITEMS)
        head = f"validation ({items} items): " if items else "validation: "
        steps = [
            f"{warm['val_before']:.3f} before the warm start"
            if warm and warm.get("val_before") is not None
            else None,
            f"{first[M.VAL_ACCURACY]:.3f} {'after it' if warm else 'at the start'}",
            f"best {summary['best_val']:.3f} at step {summary['best_step']}"
            if summary.get("best_val") is not None
            else None,
            f"{last[M.VAL_ACCURACY]:.3f} at the last evaluation (step {last[M.STEP]})"
            if last is not first
            else None,
        ]
        lines.append(head + " -> ".join(s for s in steps if s))
    if warm and warm.get("cut"):
        lines.append(
            f"warm start cut by its budget: {warm.get('steps') or 0:.0f} of "
            f"{warm.get('steps_planned') or 0:.0f} steps, {warm.get('tokens') or 0:,.0f} of "
            f"{warm.get('tokens_planned') or 0:,.0f} tokens"
        )
    block = summary.get("test") or {}
    points = checkpoints_tested(rows, summary)
    if block and not block.get("items"):
        lines.append("test: no item completed in every evaluation")
    if points:
        shown = [
            f"{p.name}{f' (step {p.step})' if p.name in ('best', 'last') else ''} {p.accuracy:.3f}"
            for p in points
        ]
        lines.append(f"test ({block['items']} paired items): " + " -> ".join(shown))
        lines += [gain.words(block["items"]) for gain in gains(summary)]
        if block.get("last") is None and "gain_last" in block:
            lines.append("the last checkpoint is the best one")
    return lines


def plot_report(rows: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> Path:
    """Write report.png (or the format `path`'s suffix names) of the run's story."""
    import matplotlib

    matplotlib.use("Agg")  # headless: runs and CI have no display
    import matplotlib.pyplot as plt

    fig = report_figure(rows, summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.writing(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def report_figure(rows: list[dict[str, Any]], summary: dict[str, Any]) -> Figure:
    """The report as a matplotlib Figure: the curves, and the paired test gains beside them."""
    import matplotlib.pyplot as plt

    lines = story_lines(rows, summary)
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(12, 5.2 + 0.16 * len(lines)), dpi=110, width_ratios=[3, 1.25]
    )
    draw_curves(ax, rows, summary)
    draw_gains(side, summary)
    fig.suptitle(
        f"{summary.get('task', '')} — stop: {summary.get('stop_reason', '?')}", fontsize=10
    )
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=8, va="bottom", family="monospace")
    fig.tight_layout(rect=(0, 0.03 + 0.026 * len(lines), 1, 0.96))
    return fig


def draw_curves(ax: Axes, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    train = [r for r in rows if r.get(M.REWARD_MEAN) is not None]
    evals = [r for r in rows if r.get(M.VAL_ACCURACY) is not None]
    warm = warm_start_of(summary)
    before = warm.get("val_before") if warm else None
    shown: list[float] = []  # every plotted value, for the limits
    if train:
        steps = [r[M.STEP] for r in train]
        mean = [r[M.REWARD_MEAN] for r in train]
        std = [r.get(M.REWARD_STD) or 0.0 for r in train]
        ax.plot(steps, mean, color="tab:blue", marker=".", label="train reward (mean ± std)")
        low = [m - s for m, s in zip(mean, std, strict=True)]
        high = [m + s for m, s in zip(mean, std, strict=True)]
        ax.fill_between(steps, low, high, color="tab:blue", alpha=0.12)
        shown += low + high
        truth = [(r[M.STEP], r[M.INDEPENDENT]) for r in train if r.get(M.INDEPENDENT) is not None]
        if truth and summary.get("scorer") != "verifier":
            ax.plot(*zip(*truth, strict=True), color="tab:gray", ls=":", label="train ground truth")
            shown += [t for _, t in truth]
    if evals:
        val = [(r[M.STEP], r[M.VAL_ACCURACY]) for r in evals]
        ax.plot(*zip(*val, strict=True), color="tab:green", marker="o", label="validation")
        shown += [v for _, v in val]
    if warm is not None:
        ax.axvspan(BEFORE_WARM, 0, color="tab:olive", alpha=0.12, label="warm start")
    if before is not None and evals:
        ax.plot(
            [BEFORE_WARM, 0],
            [before, evals[0][M.VAL_ACCURACY]],
            color="tab:green",
            ls="--",
            marker="o",
            mfc="white",
            label=f"validation before the warm start ({before:.3f})",
        )
        shown.append(before)
    draw_marks(ax, rows, summary)
    shown += draw_tests(ax, rows, summary)
    last = max((int(r[M.STEP]) for r in rows if M.STEP in r), default=0)
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


def draw_tests(ax: Axes, rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[float]:
    """Each tested checkpoint's accuracy at its step; returns the values drawn."""
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


def draw_marks(ax: Axes, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The alarms, the best validation and the stop."""
    alarms = [
        (r[M.STEP], k.removeprefix(ALARM_PREFIX))
        for r in rows
        for k in r
        if k.startswith(ALARM_PREFIX)
    ]
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
    if summary.get("best_step") is not None and summary.get("best_val") is not None:
        ax.plot(
            [summary["best_step"]],
            [summary["best_val"]],
            marker="*",
            ms=14,
            color="gold",
            markeredgecolor="black",
            ls="none",
            label=f"best validation ({summary['best_val']:.3f})",
        )
    last = max((r[M.STEP] for r in rows if M.STEP in r), default=0)
    ax.axvline(last, color="black", lw=1.5)
    ax.annotate(
        f"stop: {summary.get('stop_reason', '?')}",
        (last, 0.02),
        xycoords=("data", "axes fraction"),
        fontsize=8,
        ha="right",
        rotation=90,
        va="bottom",
    )


def draw_gains(ax: Axes, summary: dict[str, Any]) -> None:
    """The paired test gains, each a point with its 95% interval, against zero."""
    found = gains(summary)
    block = summary.get("test") or {}
    ax.set_title(
        f"paired test gains, 95% intervals ({block.get('items', 0)} items)"
        if found
        else "no paired test gain",
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
