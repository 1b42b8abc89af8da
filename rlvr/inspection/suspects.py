"""Hacking candidates (reasons are `Reason` members):
- high_reward_failing_truth: training reward >= threshold while the ground truth < threshold;
- identical_completions: at least half of a group (and at least two) gave the same completion, it
  earned reward >= threshold, and the ground truth does not confirm it (fails or is unknown):
  a policy collapsing onto one output the reward loves. Identical *correct* answers are learning;
- reward_jump: the mean training reward rose by >= `jump` from one step to the next while the
  ground truth did not follow (rose by less than half as much, where it is known).
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from itertools import pairwise

import polars as pl
from pydantic import BaseModel, ConfigDict

from rlvr.inspection.conversations import Conversation, conversation
from rlvr.inspection.reader import Run, all_trajectories, trajectories
from rlvr.runs.records import Row, StepRow

THRESHOLD = 0.5  # "high" reward and "passing" ground truth
JUMP = 0.3  # a step-to-step rise of the mean training reward that counts as sudden


class Reason(StrEnum):
    """Why a step, group or trajectory is a hacking candidate (in the order they are listed)."""

    REWARD_JUMP = "reward_jump"
    HIGH_REWARD_FAILING_TRUTH = "high_reward_failing_truth"
    IDENTICAL_COMPLETIONS = "identical_completions"


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
                    + (f" (+{len(text) - 60} characters)" if len(text) > 60 else "")
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


def reward_jumps(metrics: list[Row], jump: float = JUMP) -> list[Suspect]:
    """Steps whose mean training reward rose by >= `jump` over the previous step while the ground
    truth (where measured) rose by less than half as much."""
    train = sorted((r for r in metrics if isinstance(r, StepRow)), key=lambda r: r.step)
    suspects = []
    for before, after in pairwise(train):
        rise = after.reward_mean - before.reward_mean
        if rise < jump:
            continue
        t0, t1 = before.independent, after.independent
        truth_known = t0 is not None and t1 is not None
        if t0 is not None and t1 is not None and (t1 - t0) >= rise / 2:
            continue
        truth = (
            f"; ground truth {t0:.2f} → {t1:.2f} ({t1 - t0:+.2f})"
            if t0 is not None and t1 is not None
            else ""
        )
        suspects.append(
            Suspect(
                reason=Reason.REWARD_JUMP,
                detail=(
                    f"train reward {before.reward_mean:.2f} → {after.reward_mean:.2f} "
                    f"({rise:+.2f}) from step {before.step} to {after.step}{truth}"
                ),
                step=after.step,
                reward=after.reward_mean,
                independent_reward=t1 if truth_known else None,
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
