"""The typed records of a run directory: the rows of metrics.jsonl (a training step, an
evaluation, the warm start), an alarm, why a run stopped, and the summary (`RunResult`, with the
paired `test` block of rlvr.evaluation.paired_gains).

Each metrics row is parsed once, where it is read (rlvr.runs.store), into its record type; code
elsewhere tells rows apart by type. On disk every key stays what it always was, and each is
declared: a record's fields carry the metric keys of rlvr.metrics as aliases, alarms
(`alarm/<name>`) are its `alarms`, and the numbers a scorer, a judge, a task's rollouts or the
serving backend add under a namespace of their own (`judge/calls`, `rollout/turns`,
`vllm/servers`) are its `figures`; any other key is an error. A new row also says its `kind`. Rows
written before `kind` existed are classified by `row_kind`, the one place that looks at which keys
a row holds, and `parse_row`, the reader of old rows, keeps a key it knows no place for as read.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, model_validator

from rlvr.evaluation.paired_gains import TestBlock
from rlvr.evaluation.resolution import HeldOut
from rlvr.metrics import (
    ALARM_PREFIX,
    HINT_KEY,
    M,
    VllmMetric,
    WarmMetric,
    current_key,
    is_figure_key,
)

KIND_KEY = "kind"
# The fields that hold a row's patterned keys (`alarm/<name>`, figures) rather than one key each.
GATHERED = ("alarms", "figures")


class RowKind(StrEnum):
    """Which record a metrics row is (written as its `kind`)."""

    STEP = "step"  # one training step (rlvr.training.step)
    EVAL = "eval"  # one validation, beside any test of the same weights
    WARM_START = "warm_start"  # the warm start, once, before the baseline
    OTHER = "other"  # none of these (a row a later version may add)


class AlarmName(StrEnum):
    REWARD_HACKING = "reward_hacking"  # reward up, validation down: stop and read the rollouts
    VAL_FALLING = "val_falling"  # reward up, validation down once by 1-`val_z` s.e.: a warning
    CONVERGED = "converged"  # reward up, validation flat: more steps buy nothing
    JUDGE_DISAGREES = "judge_disagrees"  # training reward far from ground truth, same rollouts
    RL_REGRESSION = "rl_regression"  # validation below where RL started, beyond paired noise


class Outcome(BaseModel):
    """What one scored group of an item showed: the mean of its training rewards and whether they
    differed (signal)."""

    model_config = ConfigDict(frozen=True)

    item_id: str
    mean: float
    signal: bool


Figure = int | float | None  # a figure's value: a count or a measure (null: it was not finite)


class Row(BaseModel):
    """A metrics row: its loop step, the policy checkpoint it stands at, the run's wall-clock
    seconds and the process's peak memory when written, the alarms it raised (name -> message;
    `alarm/<name>` on disk) and the figures others named (key -> number; each key on disk as it
    is: rlvr.metrics.is_figure_key).

    Built from its fields, or from its keys as metrics.jsonl holds them (`model_validate`,
    `with_values`); a key that is neither a field's, an alarm's nor a figure's is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    kind: ClassVar[RowKind] = RowKind.OTHER

    step: int = Field(0, alias=M.STEP)
    wall_s: float | None = Field(None, alias=M.WALL_SECONDS)
    policy_step: int | None = Field(None, alias=M.POLICY_STEP)
    peak_rss_gb: float | None = Field(None, alias=M.PEAK_RSS)
    alarms: dict[AlarmName, str] = {}
    figures: dict[str, Figure] = {}
    # Keys an old row holds that no field or pattern declares, kept as read (set by parse_row only).
    _unread: dict[str, JsonValue] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gather(cls, data: object) -> object:
        """A row's `alarm/<name>` keys into its alarms and its figures' keys into its figures
        (beside any alarms and figures given as such); every other key is left for its field, or
        without one for extra="forbid" to name."""
        if not isinstance(data, dict):
            return data
        fields = cls.field_keys()
        out = {k: v for k, v in data.items() if k in fields}
        alarms, figures = out.get("alarms", {}), out.get("figures", {})
        if not isinstance(alarms, dict) or not isinstance(figures, dict):
            return data  # not a mapping: the field's own validation says so
        alarms, figures = dict(alarms), dict(figures)
        for key, value in data.items():
            if key in fields:
                continue
            if isinstance(key, str) and key.startswith(ALARM_PREFIX):
                alarms[key.removeprefix(ALARM_PREFIX)] = value
            elif isinstance(key, str) and is_figure_key(key):
                figures[key] = value
            else:
                out[key] = value
        return {
            **out,
            **({"alarms": alarms} if alarms else {}),
            **({"figures": figures} if figures else {}),
        }

    @classmethod
    def field_keys(cls) -> frozenset[str]:
        """Every name and metric key of this record's fields."""
        return frozenset(
            key for name, f in cls.model_fields.items() for key in (name, f.alias) if key
        )

    @classmethod
    def declares(cls, key: str, value: JsonValue) -> bool:
        """Whether this record has a place for `key` holding `value`: a field, an alarm of a
        known name, or a figure's number."""
        if key in cls.field_keys():
            return True
        if key.startswith(ALARM_PREFIX):
            return key.removeprefix(ALARM_PREFIX) in set(AlarmName) and isinstance(value, str)
        return is_figure_key(key) and (value is None or isinstance(value, int | float))

    def _flat(self, exclude_unset: bool) -> dict[str, JsonValue]:
        """The row's keys as metrics.jsonl holds them, without its kind."""
        values: dict[str, JsonValue] = self.model_dump(
            mode="json", by_alias=True, exclude_unset=exclude_unset, exclude=set(GATHERED)
        )
        alarms = {f"{ALARM_PREFIX}{name}": message for name, message in self.alarms.items()}
        return {**values, **alarms, **self.figures, **self._unread}

    def on_disk(self) -> dict[str, JsonValue]:
        """The row as metrics.jsonl holds it: its kind, then exactly the keys it was given."""
        return {KIND_KEY: self.kind.value, **self._flat(exclude_unset=True)}

    def value(self, key: str) -> JsonValue:
        """The value under metric key `key` as written (None where the row has none)."""
        return self._flat(exclude_unset=False).get(key)

    def number(self, key: str) -> float | None:
        """The number under metric key `key` (None where it is missing or not a number)."""
        found = self.value(key)
        return (
            float(found) if isinstance(found, int | float) and not isinstance(found, bool) else None
        )

    def with_values(self, **values: object) -> Self:
        """This row with more values (by field name or metric key): an alarm, the hints, the time,
        figures. A field's metric key sets that field, so no key is ever written twice."""
        aliases = {name: f.alias for name, f in type(self).model_fields.items() if f.alias}
        given = {aliases.get(k, k): v for k, v in values.items()}
        # validated like the row itself, so a count given as 2.0 is the int field's 2
        row = type(self).model_validate(
            {**self.model_dump(by_alias=True, exclude_unset=True), **given}
        )
        row._unread = {k: v for k, v in self._unread.items() if k not in given}
        return row


class StepRow(Row):
    """One training step: the scorer's reward over its groups, what the groups showed, and the
    ground truth's mean on the same rollouts (rlvr.metrics.M has every key)."""

    kind: ClassVar[RowKind] = RowKind.STEP

    reward_mean: float = Field(alias=M.REWARD_MEAN)
    reward_std: float | None = Field(None, alias=M.REWARD_STD)
    groups: int | None = Field(None, alias=M.GROUPS)
    trained_groups: int | None = Field(None, alias=M.TRAINED_GROUPS)
    no_signal_rate: float | None = Field(None, alias=M.NO_SIGNAL_RATE)
    all_zero: int | None = Field(None, alias=M.ALL_ZERO)
    all_one: int | None = Field(None, alias=M.ALL_ONE)
    truncated_rate: float | None = Field(None, alias=M.TRUNCATED_RATE)
    looping_rate: float | None = Field(None, alias=M.LOOPING_RATE)
    skipped: int | None = Field(None, alias=M.SKIPPED)
    reward_errors: int | None = Field(None, alias=M.REWARD_ERRORS)
    reward_clipped: int | None = Field(None, alias=M.REWARD_CLIPPED)
    no_logprob_turns: int | None = Field(None, alias=M.NO_LOGPROB_TURNS)
    rollout_errors: int | None = Field(None, alias=M.ROLLOUT_ERRORS)
    completion_tokens: float | None = Field(None, alias=M.COMPLETION_TOKENS)
    prompt_tokens: int | None = Field(None, alias=M.PROMPT_TOKENS)
    cached_prompt_tokens: int | None = Field(None, alias=M.CACHED_PROMPT_TOKENS)
    prefilled_tokens: int | None = Field(None, alias=M.PREFILLED_TOKENS)
    sequence_tokens: int | None = Field(None, alias=M.SEQUENCE_TOKENS)
    forwarded_tokens: int | None = Field(None, alias=M.FORWARDED_TOKENS)
    learning_rate: float | None = Field(None, alias=M.LEARNING_RATE)
    loss: float | None = Field(None, alias=M.LOSS)
    signal_groups: int | None = Field(None, alias=M.SIGNAL_GROUPS)
    refilled: int | None = Field(None, alias=M.REFILLED)
    extra_rollouts: int | None = Field(None, alias=M.EXTRA_ROLLOUTS)
    pool_mixed: int | None = Field(None, alias=M.POOL_MIXED)
    pool_equal: int | None = Field(None, alias=M.POOL_EQUAL)
    pool_untried: int | None = Field(None, alias=M.POOL_UNTRIED)
    rollout_s: float | None = Field(None, alias=M.ROLLOUT_SECONDS)
    score_s: float | None = Field(None, alias=M.SCORE_SECONDS)
    score_hidden: float | None = Field(None, alias=M.SCORE_HIDDEN)
    update_s: float | None = Field(None, alias=M.UPDATE_SECONDS)
    decoded_tokens: int | None = Field(None, alias=M.DECODED_TOKENS)
    rss_rollouts_gb: float | None = Field(None, alias=M.RSS_ROLLOUTS)
    rss_update_gb: float | None = Field(None, alias=M.RSS_UPDATE)
    update_kl: float | None = Field(None, alias=M.UPDATE_KL)
    sampler_kl: float | None = Field(None, alias=M.SAMPLER_KL)
    mismatch_kl: float | None = Field(None, alias=VllmMetric.MISMATCH_KL)
    trained_tokens: float | None = Field(None, alias=M.TRAINED_TOKENS)
    judge_agreement: float | None = Field(None, alias=M.JUDGE_AGREEMENT)
    step_s: float | None = Field(None, alias=M.STEP_SECONDS)
    independent: float | None = Field(None, alias=M.INDEPENDENT)
    truth_rollouts: int | None = Field(None, alias=M.TRUTH_ROLLOUTS)
    judge_cost_usd: float | None = Field(None, alias=M.JUDGE_COST)
    outcomes: list[Outcome] = Field([], alias=M.OUTCOMES)
    reward_counts: dict[str, int] | None = Field(None, alias=M.REWARD_COUNTS)
    hints: list[str] = Field([], alias=HINT_KEY)


class EvalRow(Row):
    """One validation on ground truth, and the checkpoint whose test split was evaluated beside
    it on the same weights (`test_checkpoint`, rlvr.training.state.Tested)."""

    kind: ClassVar[RowKind] = RowKind.EVAL

    accuracy: float = Field(alias=M.VAL_ACCURACY)
    train_reward: float | None = Field(None, alias=M.VAL_TRAIN_REWARD)
    train_truth: float | None = Field(None, alias=M.VAL_TRAIN_TRUTH)
    items: int | None = Field(None, alias=M.VAL_ITEMS)
    std: float | None = Field(None, alias=M.VAL_STD)
    scores: dict[str, float] | None = Field(None, alias=M.VAL_SCORES)
    errors: int | None = Field(None, alias=M.VAL_ERRORS)
    eval_s: float | None = Field(None, alias=M.EVAL_SECONDS)
    eval_item_s: float | None = Field(None, alias=M.EVAL_ITEM_SECONDS)
    trend: float | None = Field(None, alias=M.VAL_TREND)
    trend_se: float | None = Field(None, alias=M.VAL_TREND_SE)
    rss_eval_gb: float | None = Field(None, alias=M.RSS_EVAL)
    test_checkpoint: str | None = Field(None, alias=M.TEST_CHECKPOINT)

    def item_seconds(self, val_items: int) -> float:
        """Seconds per item evaluated (validation and any test items beside); rows written before
        the per-item time existed divide their evaluation time by `val_items`."""
        if self.eval_item_s is not None:
            return self.eval_item_s
        return (self.eval_s or 0.0) / max(1, val_items)


class WarmStartRow(Row):
    """The warm start (rlvr.metrics.WarmMetric): validation before it, what it trained on, its
    losses and time; `test_checkpoint` where the start's test split was evaluated beside."""

    kind: ClassVar[RowKind] = RowKind.WARM_START

    seconds: float = Field(alias=WarmMetric.SECONDS)
    val_before: float | None = Field(None, alias=WarmMetric.VAL_BEFORE)
    demonstrations: float | None = Field(None, alias=WarmMetric.DEMONSTRATIONS)
    rejected: float | None = Field(None, alias=WarmMetric.REJECTED)
    loss_first: float | None = Field(None, alias=WarmMetric.LOSS_FIRST)
    loss_last: float | None = Field(None, alias=WarmMetric.LOSS_LAST)
    steps: float | None = Field(None, alias=WarmMetric.STEPS)
    steps_planned: float | None = Field(None, alias=WarmMetric.STEPS_PLANNED)
    tokens: float | None = Field(None, alias=WarmMetric.TOKENS)
    tokens_planned: float | None = Field(None, alias=WarmMetric.TOKENS_PLANNED)
    cut: float | None = Field(None, alias=WarmMetric.CUT)  # 1 when its budget cut it short
    budget_s: float | None = Field(None, alias=WarmMetric.BUDGET_S)
    rss_eval_gb: float | None = Field(None, alias=M.RSS_EVAL)  # the validation before it
    rss_warm_start_gb: float | None = Field(None, alias=M.RSS_WARM_START)
    test_checkpoint: str | None = Field(None, alias=M.TEST_CHECKPOINT)

    def summary(self) -> dict[str, JsonValue]:
        """summary.json's `warm_start`: this row's values without the `warm/` prefix."""
        return {
            key.removeprefix(WarmMetric.PREFIX): value
            for key, value in self.on_disk().items()
            if key not in (M.STEP, KIND_KEY)
        }


ROW_TYPES: dict[RowKind, type[Row]] = {
    RowKind.STEP: StepRow,
    RowKind.EVAL: EvalRow,
    RowKind.WARM_START: WarmStartRow,
    RowKind.OTHER: Row,
}


def row_kind(raw: dict[str, JsonValue]) -> RowKind:
    """Which record a row read from disk is: its `kind`, or for a row written before rows said
    it, the key only that record writes."""
    written = raw.get(KIND_KEY)
    if isinstance(written, str) and written in set(RowKind):
        return RowKind(written)
    if WarmMetric.SECONDS in raw:
        return RowKind.WARM_START
    if M.REWARD_MEAN in raw:
        return RowKind.STEP
    if M.VAL_ACCURACY in raw:
        return RowKind.EVAL
    return RowKind.OTHER


def parse_row(raw: dict[str, JsonValue]) -> Row:
    """A metrics row as its record (pydantic's ValidationError where a value is not one); keys
    renamed since the row was written read as their current names (rlvr.metrics.current_key),
    and a key an older or newer rlvr wrote that this one has no place for is kept as read."""
    values = {current_key(key): value for key, value in raw.items() if key != KIND_KEY}
    record = ROW_TYPES[row_kind(raw)]
    row = record.model_validate({k: v for k, v in values.items() if record.declares(k, v)})
    row._unread = {k: v for k, v in values.items() if not record.declares(k, v)}
    return row


def last_policy_step(rows: list[Row]) -> int:
    """The latest policy checkpoint any of `rows` names (0: none names one); a resumed run
    rewinds its policy to it."""
    return max((r.policy_step for r in rows if r.policy_step is not None), default=0)


class Alarm(BaseModel):
    """An alarm raised at a loop step (rlvr.training.alarms), with the message a person reads."""

    model_config = ConfigDict(frozen=True)

    name: AlarmName
    step: int
    message: str

    @property
    def key(self) -> str:
        """Its metric key on the row that raised it."""
        return f"{ALARM_PREFIX}{self.name}"


class StopReason(StrEnum):
    PLATEAU = "plateau"  # validation stopped improving for `patience` evaluations
    MAX_STEPS = "max_steps"  # the step budget ran out first
    TIME_BUDGET = "time_budget"  # the next evaluation period would not fit in max_minutes
    REWARD_HACKING = "reward_hacking"  # divergence alarm with on_divergence=stop
    JUDGE_BUDGET = "judge_budget"  # the judge spend cap was reached
    NO_SIGNAL = "no_signal"  # the first steps found no group with reward spread, refills included


class NoSignal(BaseModel):
    """Why a run found nothing to learn from in its first steps, and what the GRPO template
    advises for it."""

    model_config = ConfigDict(frozen=True)

    steps: int
    groups: int
    all_zero: int
    all_one: int
    reward_counts: dict[str, int]
    truncated_rate: float
    remedies: list[str]

    def message(self) -> str:
        counts = ", ".join(f"{value}: {n}" for value, n in self.reward_counts.items())
        return (
            f"no group with reward spread in the first {self.steps} steps ({self.groups} groups, "
            f"refills included; {self.all_zero} all-0, {self.all_one} all-1); rewards seen: "
            f"{counts}. GRPO has nothing to learn from. " + " ".join(self.remedies)
        )


class RunResult(BaseModel):
    """What a run ended with: the facts of summary.json, which is this record on disk.

    `test` is the paired test block (rlvr.evaluation.paired_gains.TestBlock): test accuracy at the start, after
    the warm start, at the best and the last checkpoint, each checkpoint's gain over the start
    and RL's own gain over the warm start, with 95% intervals and p-values (None where the run
    stopped before testing or the start could not be evaluated). Keys a person added to a
    summary.json are kept as they are."""

    model_config = ConfigDict(frozen=True, extra="allow")

    run_dir: Path
    task: str
    scorer: str
    stop_reason: StopReason
    steps: int
    baseline_val: float
    best_val: float
    best_step: int
    test_accuracy: float | None
    alarms: list[Alarm]
    wall_s: float
    gain: float | None = None  # best_val - baseline_val (validation)
    last_step: int | None = None  # the loop step of the last evaluation
    val_items: int | None = None
    test: TestBlock | None = None
    no_signal: NoSignal | None = None  # why a no-signal stop stopped
    warm_start: dict[str, JsonValue] | None = None  # the warm start's row (WarmStartRow.summary)
    cut: str | None = None  # what max_minutes cut, in one line (rlvr.training.work.cut_line)
    # where the labels went, what test and validation could resolve (rlvr.evaluation.resolution)
    held_out: HeldOut | None = None

    def on_disk(self) -> dict[str, JsonValue]:
        """summary.json: the keys this result was given (an old summary keeps its own); the
        no-signal verdict and the warm start only where there is one."""
        values: dict[str, JsonValue] = self.model_dump(mode="json", exclude_unset=True)
        return {
            key: value
            for key, value in values.items()
            if value is not None or key not in ("no_signal", "warm_start")
        }
