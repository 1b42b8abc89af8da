"""Decision hints: what to do after a step, from its metrics (the GRPO template's decision policy).

A pure function of one step's row (rlvr.runs.records.StepRow) and the config; the loop prints the
hints and stores them on the row.
"""

from __future__ import annotations

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs.records import StepRow
from rlvr.scoring.scorers import CLIP_FIX
from rlvr.training.backends import TRAINS_WITHOUT_LOGPROBS

MOSTLY = 0.5  # "mostly" in the decision policy
TRUNCATION_HIGH = 0.3
# An update's size, KL(before || after) per trained token (train/update_kl): above HIGH one step
# rewrites much of what the policy says, below LOW the weights barely moved its tokens.
UPDATE_KL_HIGH = 0.05
UPDATE_KL_LOW = 1e-5
# The sampler's and the trainer's logprobs for the same weights (train/sampler_kl) should agree
# to rounding; above this the importance ratios are no longer about the update.
SAMPLER_KL_HIGH = 0.02
LENIENT_GAP = (
    0.4  # reward above ground truth on the same rollouts that means "rewards wrong answers"
)


def decision_hints(row: StepRow, cfg: RunConfig) -> list[str]:
    return [*_reward_hints(row, cfg), *_update_hints(row, cfg)]


def _reward_hints(row: StepRow, cfg: RunConfig) -> list[str]:
    """What the rewards say: clipped or failed rewards, no-signal groups, truncation."""
    groups = row.groups or 0
    all_zero = (row.all_zero or 0) / groups if groups else 0.0
    truncated = row.truncated_rate or 0.0
    clipped = row.reward_clipped or 0
    hints: list[str] = []
    if clipped:
        hints.append(
            f"{clipped:.0f} rewards were outside the verifier contract's [0, 1] and clipped "
            f"(counted in {M.REWARD_CLIPPED}): {CLIP_FIX}"
        )
    if row.reward_errors:
        hints.append(
            f"{row.reward_errors:.0f} reward errors: fix the reward function before "
            "training on (errors count as 0.0)"
        )
    cut = truncation(truncated, row.looping_rate or 0.0, cfg)
    if all_zero >= MOSTLY:
        causes = (
            f" after {clipped:.0f} rewards were clipped to [0, 1] (above)"
            if clipped
            else f" and {cut}"
            if truncated >= TRUNCATION_HIGH
            else ": simplify the data, add partial credit, or raise temperature"
        )
        hints.append(f"{all_zero:.0%} of groups all-0{causes}")
    elif truncated >= TRUNCATION_HIGH:
        hints.append(cut)
    return hints


def truncation(truncated: float, looping: float, cfg: RunConfig) -> str:
    """What to do about truncated completions: more room for answers cut short, but not for
    loops (most of the cut ones repeating themselves), which more max_tokens only lengthens."""
    if truncated and looping >= truncated * MOSTLY:
        return (
            f"{truncated:.0%} of completions truncated, {looping:.0%} in a loop (a cut turn "
            f"repeating itself): keep max_tokens (now {cfg.max_tokens}), read them (rlvr inspect "
            f"RUN --step N), and if the share grows lower learning_rate (now {cfg.learning_rate:g})"
        )
    return (
        f"{truncated:.0%} of completions truncated: raise max_tokens (now {cfg.max_tokens}) "
        "or ask for shorter answers"
    )


def _update_hints(row: StepRow, cfg: RunConfig) -> list[str]:
    """What the scorer, the update and the judge say: a lenient scorer, converged groups,
    untrainable turns, an update too large or too small, engines that disagree, skipped groups, a
    judge that does not agree with truth."""
    groups = row.groups or 0
    all_one = (row.all_one or 0) / groups if groups else 0.0
    hints: list[str] = []
    reward, truth = row.reward_mean, row.independent
    lenient = truth is not None and reward - truth >= LENIENT_GAP
    if lenient:
        hints.append(
            f"the scorer gives {reward:.2f} where ground truth gives {truth:.2f} on the same "
            "rollouts: it rewards wrong answers; read them (rlvr inspect --suspicious), then use "
            "a stronger judge, a stricter rubric or scorer=verifier"
        )
    if all_one >= MOSTLY and not lenient:
        hints.append(
            f"{all_one:.0%} of groups all-1: converged or data too easy; check validation and "
            "samples, then stop or raise difficulty"
        )
    untrained = row.no_logprob_turns or 0
    if untrained and cfg.backend not in TRAINS_WITHOUT_LOGPROBS:
        hints.append(
            f"{untrained:.0f} sampled turns came without logprobs and backend={cfg.backend} "
            "cannot train them: leave logprobs to the rollout's client (it asks for them unless "
            "the request says logprobs=False)"
        )
    hints += _size_hints(row, cfg)
    if row.skipped:
        hints.append(
            f"{row.skipped:.0f} groups skipped because the judge failed: see judge/* "
            "metrics; check the judge endpoint, rate limits and timeout"
        )
    agreement = row.judge_agreement
    if agreement is not None and abs(agreement) < 0.1:
        hints.append(
            f"judge agreement with ground truth is {agreement:+.2f}: the judge may be too weak "
            "for this task; use a stronger judge or scorer=verifier"
        )
    return hints


def _size_hints(row: StepRow, cfg: RunConfig) -> list[str]:
    """What the update's size says (None on a step with nothing to train)."""
    hints: list[str] = []
    moved = row.update_kl
    if moved is not None and moved > UPDATE_KL_HIGH:
        hints.append(
            f"the update moved the policy by KL {moved:.3f} a token (train/update_kl): lower "
            f"learning_rate (now {cfg.learning_rate:g}) or add groups_per_batch"
        )
    elif moved is not None and (row.trained_tokens or 0) and moved < UPDATE_KL_LOW:
        hints.append(
            f"the update barely moved the policy (KL {moved:.1e} a token, train/update_kl): "
            f"raise learning_rate (now {cfg.learning_rate:g})"
        )
    gap = row.sampler_kl
    if gap is not None and gap > SAMPLER_KL_HIGH:
        hints.append(
            f"the sampler's logprobs are KL {gap:.3f} a token from the trainer's for the same "
            "weights (train/sampler_kl): check the precision (RLVR_PRECISION) or set "
            "truncated_importance_sampling"
        )
    return hints
