"""Metric names (each defined once), the pure functions that compute per-step statistics, and
what a benchmark reports (`Figures`, with its peak resident memory)."""

from __future__ import annotations

import math
import resource
from enum import StrEnum

import art
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict
from scipy.stats import spearmanr


class JudgeMetric(StrEnum):
    """A judge client's counters per step (deltas since the last pop). The run's total spend,
    what `judge.max_usd` is checked against, is the judge's `spent_usd`."""

    CALLS = "judge/calls"  # judge requests asked for (one per scored group or response)
    FAILURES = "judge/failures"  # requests that failed after their retries
    RETRIES = "judge/retries"  # attempts beyond the first
    CLAMPED = "judge/clamped"  # scores clamped into [0, 1]
    PROMPT_TOKENS = "judge/prompt_tokens"
    COMPLETION_TOKENS = "judge/completion_tokens"
    COST_USD = "judge/cost_usd"
    UNPRICED = "judge/unpriced_calls"  # hosted calls litellm has no price for (counted as 0)


JUDGE_PREFIX = "judge/"


def judge_fault_metric(kind: str) -> str:
    """The counter of one kind of failed judge attempt (judges.client.FaultKind's values)."""
    return f"{JUDGE_PREFIX}{kind}"


class RulerMetric(StrEnum):
    GROUPS_SCORED = "ruler/groups_scored"
    GROUPS_FAILED = "ruler/groups_failed"  # skipped: the judge failed after its retries


class RubricMetric(StrEnum):
    GROUPS_SCORED = "rubric/groups_scored"
    GROUPS_FAILED = "rubric/groups_failed"  # skipped: a judge call failed after its retries
    CRITERIA = "rubric/criteria"  # criteria judged per group, summed over groups
    ALWAYS_PASS = "rubric/criteria_always_pass"  # passed by every response of its group
    NEVER_PASS = "rubric/criteria_never_pass"  # passed by no response of its group
    NO_SIGNAL_RATE = "rubric/no_signal_criteria_rate"  # (always + never) / criteria


class VllmMetric(StrEnum):
    """Keys a step's row gets from the vLLM backend (each a number; rlvr.inference)."""

    STARTUP_S = "vllm/startup_s"  # seconds the started server took to answer /health
    ADAPTER_LOAD_S = "vllm/adapter_load_s"  # this step's adapter into every server
    RSS_GB = "vllm/rss_gb"  # resident memory of the started server's processes, now
    SERVERS = "vllm/servers"  # servers still answering
    RETRIED = "vllm/retried_requests"  # requests re-sent this step after their server died
    # k3 estimate of KL(vLLM's sampling || the trainer) on the sampled tokens, before the update
    MISMATCH_KL = "train/mismatch_kl"


VLLM_PREFIX = "vllm/"


class M(StrEnum):
    """Keys written to metrics.jsonl."""

    STEP = "step"
    REWARD_MEAN = "train/reward_mean"
    REWARD_STD = "train/reward_std"
    NO_SIGNAL_RATE = "train/no_signal_rate"
    ALL_ZERO = "train/all_zero_groups"
    ALL_ONE = "train/all_one_groups"
    TRUNCATED_RATE = "train/truncated_rate"
    # Rollouts with a turn cut at max_tokens while it repeated itself (rlvr.metrics.is_looping).
    LOOPING_RATE = "train/looping_rate"
    # KL(sampler || trainer) on the sampled tokens, before the update: the two engines' gap.
    SAMPLER_KL = "train/sampler_kl"
    # KL(before || after) on the trained tokens: how far the update moved the policy.
    UPDATE_KL = "train/update_kl"
    # The step's learning rate (lower than learning_rate during lr_warmup_steps).
    LEARNING_RATE = "train/learning_rate"
    LOSS = "train/loss"
    SKIPPED = "train/skipped_groups"
    GROUPS = "train/groups"
    TRAINED_GROUPS = "train/trained_groups"
    REWARD_ERRORS = "train/reward_errors"
    ROLLOUT_ERRORS = "train/rollout_errors"
    # Sampled turns (Choices) that came without logprobs: trained with the sampling adapter's
    # logprobs recomputed (ART's allow_training_without_logprobs), never skipped.
    NO_LOGPROB_TURNS = "train/turns_without_logprobs"
    INDEPENDENT = "train/independent_reward_mean"
    TRUTH_ROLLOUTS = "train/truth_rollouts"  # scored rollouts the ground truth was measured on
    COMPLETION_TOKENS = "train/completion_tokens_mean"
    POLICY_STEP = "train/policy_step"
    JUDGE_CALLS = JudgeMetric.CALLS.value
    JUDGE_FAILURES = JudgeMetric.FAILURES.value
    JUDGE_COST = JudgeMetric.COST_USD.value
    JUDGE_AGREEMENT = "judge/agreement"
    VAL_ACCURACY = "val/accuracy"
    VAL_TRAIN_REWARD = "val/train_reward"  # mean training reward since the previous evaluation
    VAL_TRAIN_TRUTH = "val/train_truth"  # mean ground truth of those same training rollouts
    VAL_ITEMS = "val/items"  # items the accuracy is measured on (its noise)
    VAL_SCORES = "val/scores"  # item id -> score: the paired noise of trends and gains
    VAL_STD = "val/std"  # standard deviation of the per-item scores (noise of a non-[0,1] check)
    VAL_ERRORS = (
        "val/errors"  # validation rollouts that raised (not scored; accuracy is over the rest)
    )
    WALL_SECONDS = "time/wall_s"  # the run's wall-clock time when the row was written
    STEP_SECONDS = "time/step_s"
    ROLLOUT_SECONDS = "time/rollout_s"  # rollouts of the step's rounds (first draw and refills)
    SCORE_SECONDS = "time/score_s"  # scoring (truth + reward) summed over the step's groups
    SCORE_HIDDEN = "time/score_hidden"  # share of the scoring span that overlapped rollouts
    UPDATE_SECONDS = "time/update_s"  # the backend's policy update
    # Where a step's tokens go: prompts sent to sampling (and the part the prefix cache served),
    # tokens decoded, tokens trained (the update's trained positions).
    PROMPT_TOKENS = "tokens/prompt"
    CACHED_PROMPT_TOKENS = "tokens/prompt_cached"
    PREFILLED_TOKENS = "tokens/prefilled"  # prompt tokens fed through the model (shared: once)
    DECODED_TOKENS = "tokens/decoded"
    TRAINED_TOKENS = "tokens/trained"
    SEQUENCE_TOKENS = "tokens/sequences"  # tokens of the trained sequences, each in full
    FORWARDED_TOKENS = "tokens/forwarded"  # of those, computed (shared ones once: their tree)
    PEAK_RSS = "sys/peak_rss_gb"  # the process's resident-memory high-water mark so far
    # The highest resident memory of each phase since the row before (rlvr.memory.RssWatch):
    # a step's rollouts and update, an evaluation (with the test split beside it), the warm start.
    RSS_ROLLOUTS = "sys/rss_gb/rollouts"
    RSS_UPDATE = "sys/rss_gb/update"
    RSS_EVAL = "sys/rss_gb/eval"
    RSS_WARM_START = "sys/rss_gb/warm_start"
    EVAL_SECONDS = "time/eval_s"
    EVAL_ITEM_SECONDS = "time/eval_s_per_item"  # an evaluation's wall time over its items
    # The checkpoint whose test split was evaluated right after this row's validation, on the
    # same weights ("start", "after-warm-start": rlvr.training.state.Tested): test-<name>.parquet.
    TEST_CHECKPOINT = "test/checkpoint"
    VAL_TREND = "val/trend"  # least-squares validation slope per evaluation over the trend window
    VAL_TREND_SE = "val/trend_se"  # its standard error from the items' sampling noise
    # Which items a step drew (the item draw: rlvr.training.pool) and what their groups showed.
    OUTCOMES = "draw/outcomes"  # per scored group: item id, mean training reward, signal
    SIGNAL_GROUPS = "draw/signal_groups"  # groups with reward spread (the ones trained on)
    REFILLED = "draw/refilled_groups"  # groups drawn to replace groups without signal
    EXTRA_ROLLOUTS = "draw/extra_rollouts"  # rollouts those refills cost
    POOL_MIXED = "pool/mixed"  # training items whose last group had signal
    POOL_EQUAL = "pool/all_equal"  # ... whose last group was all equal (solved or hopeless)
    POOL_UNTRIED = "pool/untried"  # ... never drawn yet
    REWARD_COUNTS = "train/reward_counts"  # training rewards (rounded to 0.01) -> how many
    # Rewards a verifier-contract function returned outside [0, 1], clipped to it (and said once).
    REWARD_CLIPPED = "train/reward_clipped"


class WarmMetric:
    """Keys of the warm-start row in metrics.jsonl (written once, before the baseline)."""

    PREFIX = "warm/"
    DEMONSTRATIONS = "warm/demonstrations"  # demonstrations trained on (correct ones only)
    REJECTED = "warm/rejected"  # demonstrations the ground truth failed (left out)
    LOSS_FIRST = "warm/loss_first"  # cross-entropy per assistant token, first batch
    LOSS_LAST = "warm/loss_last"  # ... last batch (measured before its update)
    VAL_BEFORE = "warm/val_before"  # validation accuracy before the warm start
    SECONDS = "warm/seconds"
    STEPS = "warm/steps"  # SFT steps trained
    STEPS_PLANNED = "warm/steps_planned"  # ... the steps its demonstrations made
    TOKENS = "warm/tokens"  # tokens of the demonstrations trained on (prompts and replies)
    TOKENS_PLANNED = "warm/tokens_planned"  # ... of all the demonstrations made
    BUDGET_S = "warm/budget_s"  # the seconds it could take (share of max_minutes; None: no cap)
    CUT = "warm/cut"  # 1 when the budget cut it short, else 0


ALARM_PREFIX = "alarm/"
HINT_KEY = "hints"
INDEPENDENT_REWARD = "independent_reward"

# The namespaces of the loop's own keys (M, WarmMetric): each key in one is a field of a row's
# record (rlvr.runs.records). judge/ is not one: the judge clients count there too.
LOOP_PREFIXES = ("train/", "val/", "time/", "tokens/", "sys/", "test/", "draw/", "pool/", "warm/")
ROLLOUT_PREFIX = "rollout/"
SCORER_PREFIX = "scorer/"
# The loop's keys a scorer counts itself (rlvr.scoring.scorers).
SCORER_KEYS = frozenset({M.REWARD_ERRORS, M.REWARD_CLIPPED})


def is_figure_key(key: str) -> bool:
    """Whether `key` names a figure, a number a row carries beside its fields: one a scorer, a
    judge, a task's rollouts or the serving backend named under a namespace of its own
    (`judge/calls`, `reward/<part>`, `rollout/turns`, `vllm/servers`), so neither an alarm's nor
    in the loop's namespaces."""
    return "/" in key and not key.startswith((*LOOP_PREFIXES, ALARM_PREFIX))


def scorer_figures(counters: dict[str, float]) -> dict[str, float]:
    """A scorer's counters (Scorer.pop_metrics) as a step's row carries them: the loop's keys it
    counts and its figures as they are, any other name under `scorer/`, so that a counter never
    takes a name of the loop's."""
    return {
        key if key in SCORER_KEYS or is_figure_key(key) else SCORER_PREFIX + key: value
        for key, value in counters.items()
    }


# Key prefixes rows written before a rename carry -> the current ones (the item draw's metrics
# were sampling/*); rows are read through `current_key` once, where they are parsed.
RENAMED_PREFIXES = {"sampling/": "draw/"}


def current_key(key: str) -> str:
    """A metric key as rows are written now (an old row's `sampling/outcomes` is `draw/outcomes`)."""
    for old, new in RENAMED_PREFIXES.items():
        if key.startswith(old):
            return new + key.removeprefix(old)
    return key


class GroupStats(BaseModel):
    """What one step's scored groups say about the learning signal."""

    model_config = ConfigDict(frozen=True)

    reward_mean: float
    reward_std: float
    groups: int
    no_signal: int
    all_zero: int
    all_one: int
    truncated_rate: float
    looping_rate: float
    completion_tokens_mean: float

    @property
    def no_signal_rate(self) -> float:
        return self.no_signal / self.groups if self.groups else 0.0


def reward_counts(rewards: list[float]) -> dict[str, int]:
    """How often each training reward (rounded to 0.01) occurred: the distribution a no-signal
    verdict quotes."""
    rounded = sorted(round(r, 2) + 0.0 for r in rewards if math.isfinite(r))
    return {f"{value:g}": rounded.count(value) for value in dict.fromkeys(rounded)}


def has_signal(group: art.TrajectoryGroup, tolerance: float = 1e-9) -> bool:
    """A group teaches GRPO something only if its rewards differ."""
    rewards = [t.reward for t in group.trajectories]
    return len(rewards) > 1 and max(rewards) - min(rewards) > tolerance


def finish_reasons(trajectory: art.Trajectory) -> list[str]:
    return [c.finish_reason for c in trajectory.messages_and_choices if isinstance(c, Choice)]


def is_truncated(trajectory: art.Trajectory) -> bool:
    """Any sampled turn stopped by max_tokens."""
    return "length" in finish_reasons(trajectory)


LOOP_NGRAM = 4
# A cut turn whose 4-grams are at least half repeats is a loop: normal prose and tool calls of
# any length repeat few 4-grams, a policy stuck on a phrase repeats nearly all of them.
LOOP_SHARE = 0.5


def repeat_share(tokens: list[str], n: int = LOOP_NGRAM) -> float:
    """The share of a sequence's n-grams that occurred earlier in it (0.0: none repeats), the
    seq-rep-n measure of degenerate text."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def choice_tokens(choice: Choice) -> list[str]:
    """A sampled turn's tokens as sampled, or its words where it came without logprobs."""
    if choice.logprobs is not None and choice.logprobs.content:
        return [t.token for t in choice.logprobs.content]
    return (choice.message.content or "").split()


def is_looping(trajectory: art.Trajectory) -> bool:
    """Any sampled turn cut at max_tokens while repeating itself: a loop, which more max_tokens
    would only lengthen, not an answer cut short."""
    return any(
        c.finish_reason == "length" and repeat_share(choice_tokens(c)) >= LOOP_SHARE
        for c in trajectory.messages_and_choices
        if isinstance(c, Choice)
    )


def completion_tokens(trajectory: art.Trajectory) -> int:
    return sum(
        len(c.logprobs.content or [])
        for c in trajectory.messages_and_choices
        if isinstance(c, Choice) and c.logprobs is not None
    )


def group_stats(groups: list[art.TrajectoryGroup]) -> GroupStats:
    rewards = [t.reward for g in groups for t in g.trajectories]
    trajectories = [t for g in groups for t in g.trajectories]
    uniform = [g for g in groups if g.trajectories and not has_signal(g)]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0
    return GroupStats(
        reward_mean=mean,
        reward_std=std,
        groups=len(groups),
        no_signal=len(uniform),
        all_zero=sum(g.trajectories[0].reward <= 0.0 for g in uniform),
        all_one=sum(g.trajectories[0].reward >= 1.0 for g in uniform),
        truncated_rate=(
            sum(is_truncated(t) for t in trajectories) / len(trajectories) if trajectories else 0.0
        ),
        looping_rate=(
            sum(is_looping(t) for t in trajectories) / len(trajectories) if trajectories else 0.0
        ),
        completion_tokens_mean=(
            sum(completion_tokens(t) for t in trajectories) / len(trajectories)
            if trajectories
            else 0.0
        ),
    )


def agreement(judge_rewards: list[float], truths: list[float]) -> float | None:
    """Spearman rank correlation between judge rewards and ground truth; None when either side
    is constant (no ranking to agree with) or there are fewer than three pairs."""
    if len(judge_rewards) < 3 or len(set(judge_rewards)) < 2 or len(set(truths)) < 2:
        return None
    value = float(spearmanr(judge_rewards, truths).statistic)
    return value if math.isfinite(value) else None


# Per-trajectory metrics that already have a step-level key of their own.
_SUMMARISED = frozenset({INDEPENDENT_REWARD, "truncated", "reward_error"})


def trajectory_metric_means(groups: list[art.TrajectoryGroup]) -> dict[str, float]:
    """Step means of the numeric metrics rollouts and scorers put on trajectories (a task's
    `retrieval/recall`, a composite's `reward/<part>`). A key that is not a figure's (one without
    a '/', or in the loop's namespaces) is put under `rollout/`, so a task's metric names never
    collide with the loop's."""
    values: dict[str, list[float]] = {}
    for group in groups:
        for trajectory in group.trajectories:
            for key, value in trajectory.metrics.items():
                if (
                    key in _SUMMARISED
                    or isinstance(value, bool)
                    or not isinstance(value, int | float)
                ):
                    continue
                if math.isfinite(value):
                    name = key if is_figure_key(key) else ROLLOUT_PREFIX + key
                    values.setdefault(name, []).append(value)
    return {key: sum(v) / len(v) for key, v in sorted(values.items())}


def peak_rss_gb() -> float:
    """This process's peak resident memory so far, in GB (the policy trains in-process)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


class Figures(BaseModel):
    """What a benchmark returns: one typed model per `rlvr bench ...` command, printed as its one
    JSON line (rlvr.runs.results.BenchLine reads such lines back into the results tables);
    `bench` names the benchmark (the results table it goes in)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bench: str

    def line(self) -> str:
        """The JSON line a benchmark prints last: every figure it has (one it has none of, e.g. a
        vLLM-only figure on rlvr's engine, is left out)."""
        return self.model_dump_json(exclude_none=True)
