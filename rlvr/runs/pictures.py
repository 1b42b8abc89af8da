"""The pictures of the documentation's results pages: a kept run's report (rlvr.runs.report, the
code that draws each run's report.png, from the curves its record keeps) and the engine's
benchmarks against their bare baselines (from `rlvr bench` JSON lines). Each is a matplotlib
Figure; `png` turns one into the bytes the docs hook puts in the site."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from rlvr.runs import report
from rlvr.runs.results import BenchLine, Gain, RunRecord

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NO_CURVES = (
    "no curves: this record keeps only its test figures, so its paired gains are drawn alone"
)


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed (pyplot holds every open one)."""
    import matplotlib.pyplot as plt

    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def _gain(label: str, gain: Gain | None) -> list[report.Gain]:
    if gain is None:
        return []
    return [report.Gain(label=label, gain=gain.value, low=gain.low, high=gain.high, p=gain.p)]


def record_gains(record: RunRecord) -> list[report.Gain]:
    """A record's own paired gains (RL's, over where RL started: after the warm start, else the
    start) as the report draws gains."""
    return [
        *_gain("RL gain, best - where RL started", record.rl_gain_best),
        *_gain("RL gain, last - where RL started", record.rl_gain_last),
    ]


def record_figure(record: RunRecord) -> Figure:
    """A kept run's report: report.png itself where the record keeps its curves; else the paired
    gains alone, the picture saying that the curves are not in the record."""
    report.headless()
    if record.curves is not None:
        rows, summary = record.curves.parsed()
        return report.report_figure(rows, summary)
    found = record_gains(record)
    items = record.test_items or 0
    lines = [NO_CURVES]
    if record.test_before is not None and record.test_best is not None:
        last = f", last {record.test_last:.3f}" if record.test_last is not None else ""
        lines.append(
            f"test ({items} paired items): where RL started {record.test_before:.3f} -> "
            f"best {record.test_best:.3f}{last}"
        )
    lines += [gain.words(items) for gain in found]
    return report.gains_figure(
        f"{record.task} — stop: {record.stop_reason or 'not recorded'}", found, items, lines
    )


# --- benchmarks ----------------------------------------------------------------------------------


class Baseline(BaseModel):
    """One figure of a benchmark and its bare baseline's: the keys of its JSON line, the unit, and
    whether more is faster (a throughput) or less (a time)."""

    model_config = ConfigDict(frozen=True)

    bench: str
    what: str
    ours: str
    bare: str
    unit: str
    faster: Literal["higher", "lower"]


# The figures of each `rlvr bench` command that have a bare baseline beside them.
BASELINES = (
    Baseline(
        bench="serve",
        what="serve: requests vs batched generate",
        ours="endpoint_concurrent_tok_s",
        bare="bare_generate_tok_s",
        unit="tok/s",
        faster="higher",
    ),
    Baseline(
        bench="eval",
        what="eval: items vs batched generate",
        ours="concurrent_items_s",
        bare="bare_generate_items_s",
        unit="items/s",
        faster="higher",
    ),
    Baseline(
        bench="train",
        what="train: step vs fwd+bwd+AdamW",
        ours="backend_step_s",
        bare="bare_step_s",
        unit="s",
        faster="lower",
    ),
    Baseline(
        bench="turns",
        what="turns: prefix cache vs none",
        ours="prefix_cache_s",
        bare="bare_s",
        unit="s",
        faster="lower",
    ),
    Baseline(
        bench="step",
        what="step: rollouts vs generate",
        ours="rollout_s",
        bare="bare_generate_s",
        unit="s",
        faster="lower",
    ),
    Baseline(
        bench="step",
        what="step: update vs fwd+bwd+AdamW",
        ours="update_s",
        bare="bare_update_s",
        unit="s",
        faster="lower",
    ),
)


class Measured(BaseModel):
    """One benchmark line against its baseline: rlvr's speed as a multiple of the bare one's
    (above 1 is faster), the two figures, and the process's peak memory."""

    model_config = ConfigDict(frozen=True)

    label: str
    speed: float
    ours: float
    bare: float
    unit: str
    peak_rss_gb: float | None


def _label(baseline: Baseline, line: BenchLine) -> str:
    said = dict(line.figures)
    where = [said.get(k) for k in ("precision", "task", "cpu", "date")]
    return baseline.what + "\n" + ", ".join(w for w in where if w)


def measured(lines: Sequence[BenchLine]) -> list[Measured]:
    """Every line that has a figure with a bare baseline (BASELINES), in the order given."""
    found = []
    for baseline in BASELINES:
        for line in lines:
            numbers = dict(line.numbers)
            ours, bare = numbers.get(baseline.ours), numbers.get(baseline.bare)
            if line.bench != baseline.bench or not ours or not bare:
                continue
            found.append(
                Measured(
                    label=_label(baseline, line),
                    speed=ours / bare if baseline.faster == "higher" else bare / ours,
                    ours=ours,
                    bare=bare,
                    unit=baseline.unit,
                    peak_rss_gb=numbers.get("peak_rss_gb"),
                )
            )
    return found


def bench_figure(lines: Sequence[BenchLine]) -> Figure:
    """The engine against its bare baselines: each line's speed as a multiple of bare's (its two
    figures written beside), and the benchmark process's peak memory."""
    report.headless()
    import matplotlib.pyplot as plt

    found = measured(lines)
    rows = list(range(len(found)))[::-1]  # the first line on top
    fig, (speed, memory) = plt.subplots(
        1,
        2,
        figsize=(9.5, 1.4 + 0.5 * max(len(found), 1)),
        dpi=110,
        width_ratios=[2.4, 1],
        sharey=True,
    )
    colors = ["tab:green" if m.speed >= 1 else "tab:orange" for m in found]
    speed.barh(rows, [m.speed for m in found], color=colors)
    speed.axvline(1, color="black", lw=1)
    for row, m in zip(rows, found, strict=True):
        speed.annotate(
            f" {m.speed:.2f}× ({m.ours:g} vs {m.bare:g} {m.unit})",
            (m.speed, row),
            va="center",
            fontsize=7,
        )
    speed.set_yticks(rows, [m.label for m in found], fontsize=7)
    speed.set_xlim(0, max([1.0, *(m.speed for m in found)]) * 1.6)
    speed.set_xlabel("speed ÷ the bare baseline's (above 1 is faster)", fontsize=8)
    speed.set_title(
        "speed against the bare baseline" if found else "no benchmark with a baseline", fontsize=9
    )
    speed.grid(alpha=0.3, axis="x")
    rss = [m.peak_rss_gb or 0.0 for m in found]
    memory.barh(rows, rss, color="tab:blue")
    for row, m in zip(rows, found, strict=True):
        said = f" {m.peak_rss_gb:.2f} GB" if m.peak_rss_gb is not None else " not recorded"
        memory.annotate(said, (m.peak_rss_gb or 0.0, row), va="center", fontsize=7)
    memory.set_xlim(0, max([1.0, *rss]) * 1.35)
    memory.set_xlabel("GB", fontsize=8)
    memory.set_title("peak RSS (one process ran both)", fontsize=9)
    memory.grid(alpha=0.3, axis="x")
    fig.suptitle("rlvr bench: the engine against its bare baselines", fontsize=10)
    fig.tight_layout()
    return fig
