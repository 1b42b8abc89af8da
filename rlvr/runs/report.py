"""report.png: training reward and validation accuracy over steps, alarms and the stop marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: runs and CI have no display
import matplotlib.pyplot as plt

from rlvr.runs import atomic
from rlvr.metrics import ALARM_PREFIX, M
from rlvr.paired import describe_block


def plot_report(rows: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> Path:
    train = [r for r in rows if M.REWARD_MEAN in r]
    evals = [r for r in rows if M.VAL_ACCURACY in r]
    alarms = [
        (r[M.STEP], k.removeprefix(ALARM_PREFIX))
        for r in rows
        for k in r
        if k.startswith(ALARM_PREFIX)
    ]

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    if train:
        steps = [r[M.STEP] for r in train]
        mean = [r[M.REWARD_MEAN] for r in train]
        std = [r.get(M.REWARD_STD, 0.0) or 0.0 for r in train]
        ax.plot(steps, mean, color="tab:blue", marker=".", label="train reward (mean)")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(mean, std, strict=True)],
            [m + s for m, s in zip(mean, std, strict=True)],
            color="tab:blue",
            alpha=0.12,
        )
        indep = [(r[M.STEP], r[M.INDEPENDENT]) for r in train if r.get(M.INDEPENDENT) is not None]
        if indep and summary.get("scorer") != "verifier":
            ax.plot(*zip(*indep, strict=True), color="tab:gray", ls=":", label="train ground truth")
    if evals:
        ax.plot(
            [r[M.STEP] for r in evals],
            [r[M.VAL_ACCURACY] for r in evals],
            color="tab:green",
            marker="o",
            label="validation accuracy",
        )
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
            label=f"best (val {summary['best_val']:.2f})",
        )
    if summary.get("test_accuracy") is not None and summary.get("best_step") is not None:
        ax.plot(
            [summary["best_step"]],
            [summary["test_accuracy"]],
            marker="D",
            color="tab:purple",
            ls="none",
            label=f"test {summary['test_accuracy']:.2f}",
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
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(-0.05, 1.05)
    title = f"{summary.get('task', '')} — {summary.get('stop_reason', '')}"
    if summary.get("test"):  # the paired test gains, in words
        title += "\n" + "\n".join(describe_block(summary["test"]))
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.writing(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path
