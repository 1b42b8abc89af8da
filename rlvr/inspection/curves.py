"""Training curves of a run: reward and validation with the alarms and the stop, as data
(`curves`) and as a figure (`plot_curves`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from rlvr.inspection.reader import Run
from rlvr.inspection.suspects import Reason, Suspect
from rlvr.runs.records import EvalRow, StepRow

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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


def _points(values: list[tuple[int, float | None]]) -> list[Point]:
    return [Point(step=step, value=value) for step, value in values if value is not None]


def curves(run: Run) -> Curves:
    train = [r for r in run.metrics if isinstance(r, StepRow)]
    evals = [r for r in run.metrics if isinstance(r, EvalRow)]
    summary = run.summary
    last = max((r.step for r in run.metrics), default=None)
    return Curves(
        reward=_points([(r.step, r.reward_mean) for r in train]),
        reward_std=_points([(r.step, r.reward_std) for r in train]),
        truth=_points([(r.step, r.independent) for r in train]),
        val=_points([(r.step, r.accuracy) for r in evals]),
        alarms=[
            AlarmMark(step=r.step, name=name, message=message)
            for r in run.metrics
            for name, message in r.alarms.items()
        ],
        best_step=summary.best_step if summary else None,
        best_val=summary.best_val if summary else None,
        test_accuracy=summary.test_accuracy if summary else None,
        stop_step=last if summary is not None else None,
        stop_reason=summary.stop_reason if summary else None,
    )


def plot_curves(run: Run, suspects: list[Suspect] | None = None) -> Figure:
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
