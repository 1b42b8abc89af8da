"""Every stop rule of a run, as a pure function of its history (so a resumed run re-derives a
decision the killed run took but did not act on). Training reward comes from the scorer; these
rules read held-out ground truth, time and the groups' signal only.

- plateau (once `stopping.min_budget_share` of the budget is spent): validation has not gained more than `min_delta` (and its noise) over its best for
  `patience` evals — and, under the default `trend` rule, its least-squares trend over the last
  `trend_window` evals does not rise by more than `trend_z` standard errors and the latest eval
  is not the highest yet, so a slow steady rise that no single evaluation resolves keeps the run
  going while a flat or falling one stops it;
- reward hacking: the alarm of that name (rlvr.training.alarms) with `on_divergence=stop`;
- time budget: the next evaluation period and the test evaluations still to come would not fit;
- no signal: the first steps scored groups and trained on none (rlvr.runs.records.NoSignal).
The step budget (max_steps) and the judge's spend cap end the loop where they run out.
"""

from __future__ import annotations

from rlvr.config import PlateauRule, RunConfig, StoppingConfig
from rlvr.evaluation.resolution import STOP_MIN_ITEMS
from rlvr.runs.records import AlarmName, EvalRow, NoSignal, Row, StepRow, StopReason
from rlvr.training.state import RunState, Tested, early_tested, tested
from rlvr.training.trends import EvalPoint, best_eval, val_trend


def budget_spent(step: int, max_steps: int, wall_s: float, max_minutes: float | None) -> float:
    """The share of the run's budget spent: of max_minutes where the run has one (time is what
    ends it), else of max_steps. The plateau stop waits for `stopping.min_budget_share` of it."""
    if max_minutes is not None:
        return min(1.0, wall_s / (max_minutes * 60))
    return min(1.0, step / max_steps)


def plateau(
    points: list[EvalPoint],
    patience: int,
    min_delta: float,
    rule: PlateauRule,
    window: int,
    z: float,
) -> bool:
    """The plateau stop: no counted gain for `patience` evaluations and, under the `trend` rule,
    no rising validation trend over the last `window` evaluations and no new high at the latest."""
    if not points or len(points) - 1 - best_eval(points, min_delta) < patience:
        return False
    return rule == "best" or not (val_trend(points, window).rising(z) or at_new_high(points))


def at_new_high(points: list[EvalPoint]) -> bool:
    """Whether the latest validation is above every earlier one. Noise must not move the restored
    checkpoint, but stopping has the opposite risk: a run stopped at its highest validation
    leaves its budget unused where the policy may still be rising (docs/concepts/stopping.md;
    replayed in tests/training/test_alarm_replay.py)."""
    return len(points) >= 2 and points[-1].val > max(p.val for p in points[:-1])


def plateau_stop(points: list[EvalPoint], spent: float, rules: StoppingConfig) -> bool:
    """The plateau stop as the loop applies it after an evaluation: once `spent` (the budget's
    share, `budget_spent`) reaches `rules.min_budget_share`, the plateau rule under `rules`."""
    return spent >= rules.min_budget_share and plateau(
        points, rules.patience, rules.min_delta, rules.rule, rules.trend_window, rules.trend_z
    )


def out_of_time(eval_walls: list[float], test_s: float, budget_s: float) -> bool:
    """Whether one more evaluation period (as long as the last one: its steps and validation)
    plus the test evaluation (`test_s`) would overrun the budget. `eval_walls` are the run's
    wall-clock seconds at each evaluation so far; judged right after one, so a run that stops
    for time stops at a validated checkpoint."""
    if len(eval_walls) < 2:
        return False
    now = eval_walls[-1]
    return now + (now - eval_walls[-2]) + test_s > budget_s


def remaining_tests(state: RunState, rows: list[Row], rules: StoppingConfig) -> int:
    """How many test evaluations the end still runs if the run goes one more period: the start
    and the warm start unless their validations tested them already; the next checkpoint, which
    will be the last; and the best one, unless it is the start or the warm start (counted
    already). Whether the best stays or becomes the next checkpoint, that is all: counting the
    best and the last apart would count one test too many and stop a run with budget unused."""
    early = early_tested(rows)
    steps = tested(rows, -1, -2)
    missing = [t for t in (Tested.START, Tested.AFTER_WARM_START) if t in steps and t not in early]
    best = state.evals[best_eval(state.evals, rules.min_delta)].step if state.evals else 0
    counted = {steps[t] for t in (Tested.START, Tested.AFTER_WARM_START) if t in steps}
    return len(missing) + 1 + (state.policy_steps.get(best, 0) not in counted)


def stop_after_eval(
    cfg: RunConfig, state: RunState, rows: list[Row], test_items: int, val_items: int
) -> StopReason | None:
    """The stopping rules after the evaluation at `state.step`: reward hacking (when set to
    stop), plateau, then the time budget. Validation under STOP_MIN_ITEMS items reads noise:
    the hacking and plateau stops are off, and the run stops by work (said at its start,
    rlvr.evaluation.resolution.HeldOut)."""
    rules = cfg.stopping
    hacking = [
        a for a in state.alarms if a.name == AlarmName.REWARD_HACKING and a.step == state.step
    ]
    evals = [r for r in rows if isinstance(r, EvalRow)]
    stops = val_items >= STOP_MIN_ITEMS
    if stops and hacking and rules.on_divergence == "stop":
        return StopReason.REWARD_HACKING
    spent = budget_spent(state.step, cfg.max_steps, evals[-1].wall_s or 0.0, cfg.max_minutes)
    if stops and plateau_stop(state.evals, spent, rules):
        return StopReason.PLATEAU
    if cfg.max_minutes is not None and out_of_time(
        [r.wall_s or 0.0 for r in evals],
        test_s=evals[-1].item_seconds(val_items) * test_items * remaining_tests(state, rows, rules),
        budget_s=cfg.max_minutes * 60,
    ):
        return StopReason.TIME_BUDGET
    return None


NO_SIGNAL_STEPS = 2  # steps without any group with signal after which a run says so and stops


def no_signal_stop(cfg: RunConfig, rows: list[Row]) -> bool:
    """The template's preflight as the run's first act: the first NO_SIGNAL_STEPS steps scored
    groups and trained on none (every scored group all equal, refills included). A step whose
    groups were all skipped (the judge failed) says nothing about the data: it never stops a run
    for no signal."""
    steps = [r for r in rows if isinstance(r, StepRow)]
    return (
        cfg.preflight
        and len(steps) == NO_SIGNAL_STEPS
        and all(r.groups and not r.trained_groups for r in steps)
    )


def no_signal_verdict(rows: list[Row], cfg: RunConfig) -> NoSignal:
    """What the first steps' groups looked like and the template's remedies for that case."""
    steps = [r for r in rows if isinstance(r, StepRow)]
    counts: dict[str, int] = {}
    for row in steps:
        for value, n in (row.reward_counts or {}).items():
            counts[value] = counts.get(value, 0) + n
    all_zero = sum(r.all_zero or 0 for r in steps)
    all_one = sum(r.all_one or 0 for r in steps)
    truncated = sum(r.truncated_rate or 0.0 for r in steps) / max(len(steps), 1)
    remedies = []
    if all_zero or not all_one:
        cut = f" ({truncated:.0%} of replies were cut at max_tokens={cfg.max_tokens})"
        remedies.append(
            "All-0 groups (too hard, or the reward too strict): give partial credit, raise "
            f"max_tokens{cut if truncated else ''}, raise temperature (now {cfg.temperature:g}), "
            "use easier items, or add a warm start (sft_steps=) from demonstrations."
        )
    if all_one:
        remedies.append("All-1 groups (too easy): use harder items.")
    remedies.append("preflight=false trains anyway.")
    return NoSignal(
        steps=len(steps),
        groups=sum(r.groups or 0 for r in steps),
        all_zero=all_zero,
        all_one=all_one,
        reward_counts=dict(sorted(counts.items(), key=lambda kv: float(kv[0]))),
        truncated_rate=truncated,
        remedies=remedies,
    )
