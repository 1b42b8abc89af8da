"""Training curves of a run: reward and validation with the alarms and the stop, as data
(`curves`) and as a figure (`plot_curves`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rlvr.inspection.reader import Run, alarms_of
from rlvr.inspection.suspects import Reason, Suspect
from rlvr.metrics import M

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
