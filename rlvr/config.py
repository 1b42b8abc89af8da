"""RunConfig: every knob of a run in one immutable pydantic model.

The names follow the Tinker RLVR recipe (group_size, groups_per_batch, learning_rate, ...) so a
recipe's command line translates one to one. `parse_overrides` turns `key=value` strings from the
CLI into a validated config, or a `ConfigError` whose message is one line naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from rlvr.error_lines import did_you_mean, first_error, means_none
from rlvr.json_types import JsonObject
from rlvr.redact import redact_data, redact_error

Backend = Literal["local", "art-local", "tinker", "serverless"]
OnDivergence = Literal["stop", "warn"]


class ConfigError(ValueError):
    """A bad config key or value; the message is one line meant for the user (credentials in
    it are redacted: it may quote the value that was given)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_error(message))


# judge=vllm: the judge asks the run's own vLLM servers (the policy's base weights).
VLLM_JUDGE = "vllm"


class JudgeConfig(BaseModel):
    """The judge a judged scorer calls (`judge.KEY=value`; read by the judges package only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(
        "local",
        description="'local' (rlvr's engine on 127.0.0.1), 'vllm' (the run's own vLLM servers, "
        "base weights; needs inference=vllm), 'none', or a litellm model id",
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="the judge's sampling temperature")
    max_retries: int = Field(
        3, ge=0, description="retries of a failed judge call before its group is skipped"
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="seconds per judge call; default 120, or 600 for the local judge (its batched "
        "CPU answers to long rubrics take minutes: a call cut at 120 s is decoded again from scratch)",
    )
    max_usd: float | None = Field(None, ge=0, description="spend cap; the run stops at it")
    concurrency: int = Field(4, ge=1, description="judge calls in flight at once")
    rpm: int | None = Field(None, ge=1, description="judge requests per minute limit")
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible base URL for the judge (e.g. a running `rlvr judge serve`)",
    )
    response_format: Literal["auto", "json_schema", "json_object"] = Field(
        "auto",
        description="structured-output dialect; auto = json_schema (json_object: a llama.cpp server)",
    )
    backoff_s: float = Field(
        1.0, gt=0, description="first retry delay; doubles per retry, with jitter"
    )
    threads: int | None = Field(
        None, ge=1, description="local judge CPU threads (default: half the cores)"
    )
    local_model: str | None = Field(
        None,
        description="the model the local judge serves: an rlvr model name or a model directory "
        "(default: smollm2-135m)",
    )


PlateauRule = Literal["trend", "best"]  # how the plateau stop reads the validation history


class StoppingConfig(BaseModel):
    """When a run stops or raises an alarm (`stopping.KEY=value`; rlvr.training.stop_rules)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    patience: int = Field(3, ge=1, description="evaluations without gain before stopping")
    # 0 by default: every run's evaluations carry per-item scores, so the paired standard error
    # sizes what counts, on any scale; a fixed floor sized for accuracies pinned the best
    # checkpoint at the start of a fractional check whose rises were resolved but smaller
    # (docs/concepts/stopping.md).
    min_delta: float = Field(
        0.0,
        ge=0,
        description="validation gain that counts as progress, as a floor above its paired "
        "standard error (0: the noise alone decides)",
    )

    on_divergence: OnDivergence = Field(
        "stop", description="what alarm/reward_hacking does: stop the run, or warn and train on"
    )
    divergence_window: int = Field(3, ge=2, description="evaluations the trends are measured over")
    divergence_reward_rise: float = Field(
        0.1, ge=0, description="reward rise that counts as rising"
    )
    divergence_val_drop: float = Field(
        0.05, ge=0, description="validation fall that counts as falling"
    )
    divergence_z: float = Field(
        2.0,
        ge=1,
        description="standard errors of a validation fall that stop the run as reward hacking at "
        "once (a fall of 1 to this many warns, and stops it when repeated at the next evaluation)",
    )
    judge_gap: float = Field(
        0.3,
        ge=0,
        le=1,
        description="alarm judge_disagrees: mean gap between the training reward and ground truth "
        "on the same rollouts over divergence_window steps (above the sampling noise too)",
    )
    rule: PlateauRule = Field(
        "trend",
        description="plateau stop: trend = no counted gain for `patience` evaluations, no rising "
        "trend over the last trend_window, and the latest evaluation not the highest yet; best = "
        "no counted gain for `patience` evaluations",
    )
    trend_window: int = Field(
        6, ge=3, description="evaluations the validation trend of the plateau stop is fitted on"
    )
    trend_z: float = Field(
        1.0,
        ge=0,
        description="a trend keeps the run going while its slope exceeds this many standard errors",
    )
    min_budget_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="share of the run's budget (max_minutes, else max_steps) spent before the "
        "plateau stop may end it: a slow learner gets its chance (0 = the plateau rule alone)",
    )


class ItemDraw(BaseModel):
    """Which training items a step draws (`draw.KEY=value`, or `draw=uniform`;
    rlvr.training.pool). Not the rollouts' temperature: that is `temperature`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["signal", "uniform"] = Field(
        "signal",
        description="signal: prefer items whose groups had reward spread and refill groups without "
        "it; uniform: groups_per_batch items at random",
    )
    max_refill: int | None = Field(
        None,
        ge=0,
        description="extra groups a step may roll out to replace groups without signal "
        "(default: groups_per_batch)",
    )
    prefer: float = Field(
        2.0, gt=0, description="draw weight of an item whose last group had signal (untried: 1)"
    )
    revisit: float = Field(
        0.1, gt=0, description="draw weight of an item whose last group was all equal"
    )
    decay: float = Field(
        0.5, gt=0, le=1, description="revisit weight factor per further all-equal group in a row"
    )


InferenceEngine = Literal["rlvr", "vllm"]
# The environment variable holding the bearer key of servers rlvr did not start (inference.urls).
INFERENCE_KEY_ENV = "RLVR_INFERENCE_API_KEY"


def _url_list(value: Any) -> Any:
    """`[http://a:8000,http://b:8000]` (the CLI's spelling) or a JSON list -> a list of URLs."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("[") and '"' in text:
        return json.loads(text)
    return [part.strip().strip("'\"") for part in text.strip("[]").split(",") if part.strip()]


class InferenceConfig(BaseModel):
    """Which engine serves the policy's rollouts and evaluations (`inference=vllm`,
    `inference.KEY=value`; rlvr.inference). Training always runs on rlvr's engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: InferenceEngine = Field(
        "rlvr",
        description="rlvr (its own engine, in this process) or vllm (a vLLM server from "
        "`make vllm-env`, or the servers in inference.urls); vllm needs backend=local",
    )
    urls: tuple[str, ...] = Field(
        (),
        description="vLLM servers rlvr did not start ([http://host:port,...]): they must read "
        "the run directory's checkpoints at the same path; implies engine=vllm",
    )
    api_key_env: str = Field(
        INFERENCE_KEY_ENV, description="environment variable with the bearer key of inference.urls"
    )
    startup_timeout_s: float = Field(
        600.0, gt=0, description="seconds a started vLLM server has to answer /health"
    )

    @model_validator(mode="before")
    @classmethod
    def _urls_mean_vllm(cls, values: Any) -> Any:
        """Servers named imply the vLLM engine."""
        if isinstance(values, dict) and _url_list(values.get("urls")):
            values = {"engine": "vllm", **values}
        return values

    @field_validator("urls", mode="before")
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        return _url_list(value)

    @field_validator("urls")
    @classmethod
    def _http(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return urls


# Keys that were flat in RunConfig before `judge` and `stopping` were nested: each is refused
# with its new dotted name, so an old command or config.json says what to write instead.
FLAT_JUDGE_PREFIX = "judge_"
FLAT_STOPPING = (
    "patience",
    "min_delta",
    "on_divergence",
    "divergence_window",
    "divergence_reward_rise",
    "divergence_val_drop",
    "judge_gap",
)
# Groups with a new name, so that "sampling" means only the rollouts' token sampling (rlvr.Sampling):
# new input naming the old one is refused with the new key, and a saved run's config.json is read
# with it renamed (`saved_values`), so that a run written before still resumes.
RENAMED_GROUPS = {"sampling": "draw"}
# The validation context a saved run's config.json is read with (rlvr.runs.store.read_config).
SAVED_RUN = "saved_run"
NESTED: dict[str, type[BaseModel]] = {
    "judge": JudgeConfig,
    "stopping": StoppingConfig,
    "draw": ItemDraw,
    "inference": InferenceConfig,
}
# A nested group set by one value: `judge=ID` is the judge's model, `draw=uniform` the strategy.
SHORTHAND = {"judge": "model", "draw": "strategy", "inference": "engine"}


def dotted_name(key: str) -> str | None:
    """The key that replaced an old one (`patience` -> `stopping.patience`, `sampling.max_refill`
    -> `draw.max_refill`), or None."""
    if key in RunConfig.model_fields:
        return None
    group, dot, leaf = key.partition(".")
    if group in RENAMED_GROUPS:
        return RENAMED_GROUPS[group] + dot + leaf
    if key in FLAT_STOPPING:
        return f"stopping.{key}"
    leaf = key.removeprefix(FLAT_JUDGE_PREFIX)
    if key.startswith(FLAT_JUDGE_PREFIX) and leaf in JudgeConfig.model_fields:
        return f"judge.{leaf}"
    return None


def renamed_message(key: str, new: str) -> str:
    return f"config: '{key}' is no longer a key; use '{new}'"


def saved_values(values: JsonObject) -> JsonObject:
    """A saved run's config.json values with each renamed group under its new name (a run written
    before `draw` holds `sampling`; new input naming the old group is refused instead), and the
    data seed of a run written before `data_seed`: its `seed`, which then seeded the data too."""
    out = dict(values)
    for old, new in RENAMED_GROUPS.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    if "data_seed" not in out and "seed" in out:
        out["data_seed"] = out["seed"]  # a run written before data_seed drew its data by its seed
    return out


# raw settings (text from key=value, values from code) before RunConfig validates them
def nested(values: Mapping[str, object]) -> dict[str, object]:
    """`values` with dotted keys (`judge.model`) and shorthands (`judge=ID`) put into the nested
    groups' dicts. Pure; an old flat key is a ValueError naming its dotted name."""
    out: dict[str, object] = {}
    parts: dict[str, dict[str, object]] = {group: {} for group in NESTED}
    for key, value in values.items():
        group, dot, leaf = key.partition(".")
        if dot and group in NESTED:
            parts[group][leaf] = value
        elif key in SHORTHAND and not isinstance(value, dict | BaseModel):
            parts[key][SHORTHAND[key]] = value
        elif key in NESTED:
            if isinstance(value, BaseModel):
                given = value.model_dump()
            elif isinstance(value, Mapping):
                given = dict(value)
            else:
                raise ValueError(f"{key}: expected its settings as a mapping, got {value!r}")
            parts[key] = {**parts[key], **given}  # in order: a later key wins
        elif (new := dotted_name(key)) is not None:
            raise ValueError(renamed_message(key, new))
        else:
            out[key] = value
    return {**out, **{k: v for k, v in parts.items() if v}}


def known_key(key: str) -> bool:
    """A RunConfig key: a field or a dotted key of a nested group."""
    if key in RunConfig.model_fields:
        return True
    group, dot, leaf = key.partition(".")
    return bool(dot) and group in NESTED and leaf in NESTED[group].model_fields


def all_keys() -> list[str]:
    """Every key a run can be configured with, dotted where nested."""
    flat = [k for k in RunConfig.model_fields if k not in NESTED]
    return flat + [f"{g}.{k}" for g, model in NESTED.items() for k in model.model_fields]


class RunConfig(BaseModel):
    """A training run, fully specified. Every field can be set as `key=value` on the CLI."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # What to train on: an installed task name or a reference to your own (rlvr.task_api.plugins), and
    # that task's own options (validated by the task's options model; see `rlvr tasks`).
    task: str = Field(
        "math",
        description="task name (see `rlvr tasks`), path/to/file.py:factory or module:factory",
    )
    task_options: JsonObject = Field(
        default_factory=dict, description="the task's own options (key=value on the CLI)"
    )

    # Policy.
    model: str = Field("smollm2-135m", description="model alias, local HF dir, or hub id")
    backend: Backend = Field(
        "local", description="local (rlvr CPU/GPU torch), art-local, tinker, serverless"
    )
    lora_rank: int = Field(8, ge=1, description="rank of the LoRA adapter trained on the policy")
    inference: InferenceConfig = Field(
        default_factory=lambda: InferenceConfig(),
        description="the engine rollouts sample from (inference=vllm, inference.urls=[...])",
    )
    project: str = Field("rlvr", description="ART project name")

    # Reward.
    scorer: str = Field(
        "default", description="'default' (the task's), verifier, ruler, rubric, or a+b"
    )
    judge: JudgeConfig = Field(
        default_factory=lambda: JudgeConfig(),
        description="the judge (judge.model=..., judge.max_usd=...; judge=ID sets judge.model)",
    )

    # Sampling.
    group_size: int = Field(8, ge=2, description="rollouts of each item, compared with each other")
    groups_per_batch: int = Field(4, ge=1, description="items (groups) a step trains on")
    max_tokens: int = Field(48, ge=1, description="completion tokens a turn may sample")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="training rollouts' temperature")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="training rollouts' nucleus sampling")
    rollout_concurrency: int = Field(32, ge=1, description="rollouts in flight at once")

    # Optimisation (ART's loss on the configured backend).
    # A rank-8 LoRA on a small policy moves within a CPU budget at this rate: at 1e-4 two steps left
    # 2048's greedy play unchanged on 37 of 40 validation boards.
    learning_rate: float = Field(3e-4, gt=0, description="the RL update's learning rate")
    # AdamW's moments start afresh for RL (rlvr.engine.trainer), and its first steps, normalised by
    # the moments of one or two gradients, move every weight by about the whole rate: without a
    # warm-up a run's largest updates are its first, before any evidence has accumulated.
    lr_warmup_steps: int = Field(
        0, ge=0, description="RL steps over which the learning rate rises linearly to it"
    )
    kl_penalty_coef: float = Field(0.0, ge=0, description="KL penalty towards the base policy")
    num_substeps: int = Field(1, ge=1, description="optimizer steps per batch of groups")
    # ART's loss options (art.dev.TrainConfig), forwarded to backends that honour them; a backend
    # that does not refuses a non-default value (`LOSS_OPTIONS_UNSUPPORTED`).
    loss_fn: Literal["cispo", "ppo"] = Field("cispo", description="ART's policy loss")
    importance_sampling_level: Literal["token", "sequence", "average", "geometric_average"] = Field(
        "token", description="ratio per token, or per sequence (GSPO)"
    )
    epsilon: float | None = Field(None, gt=0, description="ratio clip (ART's default if unset)")
    epsilon_high: float | None = Field(None, gt=0, description="upper clip (default: epsilon)")
    truncated_importance_sampling: float | None = Field(
        None, gt=0, description="cap on the sampler/trainer ratio weight (off if unset)"
    )
    scale_rewards: bool = Field(True, description="divide advantages by the group's std")

    # Warm start: supervised fine-tuning on the environment's demonstrations of training items
    # (`environment.demonstrate(item)`) before RL; validation is measured before and after it, so
    # the RL gain is reported from the warmed-up baseline.
    sft_steps: int = Field(0, ge=0, description="warm-start optimizer steps (0 = no warm start)")
    sft_batch_size: int = Field(16, ge=1, description="demonstrations per warm-start step")
    sft_learning_rate: float = Field(1e-3, gt=0, description="warm-start peak learning rate")
    sft_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="the warm start's learning rate over its steps (ART's create_lr_schedule: "
        "linear and cosine decay from sft_learning_rate to 0 one step past the last)",
    )
    sft_budget_share: float = Field(
        0.4,
        gt=0,
        le=1,
        description="the warm start's share of max_minutes at most (its steps are cut to fit)",
    )

    # Data split and determinism.
    train_ratio: float = Field(0.8, gt=0, lt=1, description="share of items trained on")
    val_ratio: float = Field(0.1, gt=0, lt=1, description="share of items held out to validate")
    test_ratio: float = Field(0.1, gt=0, lt=1, description="share of items held out to test")
    holdout: Literal["auto", "labelled", "ratios"] = Field(
        "auto",
        description="where labelled items go beside unlabelled ones: labelled = all to validation "
        "and test; ratios = the ratios of the labelled items, the rest train; auto = labelled "
        "under a scorer that reads no label, else ratios",
    )
    seed: int = Field(
        0,
        description="seeds training: which demonstrations the warm start takes and in what order, "
        "the items each step draws, and sampling",
    )
    data_seed: int = Field(
        0,
        description="seeds the data: a task's generated items and the split; apart from seed so "
        "that runs of several seeds train, validate and test on the same items",
    )

    # Schedule and stopping.
    max_steps: int = Field(40, ge=1, description="RL steps at most")
    max_minutes: float | None = Field(
        None,
        gt=0,
        description="wall-clock budget: stop at the evaluation after which the next one would not "
        "fit, keeping time for the test split",
    )
    eval_every: int = Field(2, ge=1, description="validate every N steps")
    save_every: int | None = Field(
        None,
        ge=1,
        description="also keep every Nth step's checkpoint (none: only the start of RL, the best "
        "and the newest)",
    )
    val_temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 = greedy validation")
    max_val_items: int | None = Field(None, ge=1, description="cap on validation items per eval")
    stopping: StoppingConfig = Field(
        default_factory=lambda: StoppingConfig(),
        description="plateau, divergence and judge-disagreement rules (stopping.patience=...)",
    )
    draw: ItemDraw = Field(
        default_factory=lambda: ItemDraw(),
        description="which training items a step draws (draw=uniform, draw.max_refill=...)",
    )
    preflight: bool = Field(
        True,
        description="stop with stop_reason=no_signal when the first steps find no group with "
        "reward spread, even after refills",
    )

    # Output and integrations.
    runs_root: Path = Field(Path("runs"), description="where new run directories are made")
    run_dir: Path | None = Field(None, description="defaults to runs_root/<task>-<timestamp>")
    wandb_project: str | None = Field(None, description="log metrics to this W&B project")
    weave: bool = Field(False, description="trace rollouts with Weave")

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, values: Any, info: ValidationInfo) -> Any:
        """Dotted keys and shorthands into their nested settings (`nested`); a saved run's
        renamed groups under their new names (`saved_values`)."""
        if not isinstance(values, dict):
            return values
        if info.context and info.context.get(SAVED_RUN):
            values = saved_values(values)
        return nested(values)

    @model_validator(mode="after")
    def _backend_honours_the_loss_options(self) -> RunConfig:
        unsupported = [
            name
            for name in LOSS_OPTIONS_UNSUPPORTED.get(self.backend, ())
            if getattr(self, name) != RunConfig.model_fields[name].default
        ]
        if unsupported:
            name = unsupported[0]
            raise ValueError(
                f"{name}={getattr(self, name)!r} is not supported by backend={self.backend} "
                "(its train() has no such option); leave it at its default"
            )
        return self

    @model_validator(mode="after")
    def _vllm_serves_rlvr_adapters(self) -> RunConfig:
        # vLLM serves the LoRA checkpoints rlvr's own trainer writes; ART's backends serve theirs.
        if self.inference.urls and self.inference.engine != "vllm":
            raise ValueError("inference.urls names vLLM servers: it needs inference.engine=vllm")
        if self.inference.engine == "vllm" and self.backend != "local":
            raise ValueError(
                f"inference=vllm serves rlvr's trainer's adapters: it needs backend=local, "
                f"not backend={self.backend}"
            )
        if self.judge.model == VLLM_JUDGE and self.inference.engine != "vllm":
            raise ValueError(
                "judge=vllm asks the run's own vLLM servers: it needs inference=vllm "
                f"(inference is {self.inference.engine})"
            )
        return self

    @model_validator(mode="after")
    def _ratios_sum_to_one(self) -> RunConfig:
        total = self.train_ratio + self.val_ratio + self.test_ratio
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train_ratio + val_ratio + test_ratio must be 1.0, got {total:g}")
        return self

    def public_dict(self) -> JsonObject:
        """The config as written to config.json and W&B: JSON types, credentials redacted (an
        api_key-like task option, a URL's password, any value of a *_API_KEY / *_TOKEN variable).
        Keys belong in the environment: a resumed run reads them from there, not from here."""
        public: JsonObject = redact_data(json.loads(self.model_dump_json()))
        return public


# Options of RunConfig that a backend's `train()` cannot honour (read from ART 0.5.18's
# ServerlessBackend.train: no KL penalty, no truncated importance sampling, no substeps).
LOSS_OPTIONS_UNSUPPORTED: dict[str, tuple[str, ...]] = {
    "serverless": ("kl_penalty_coef", "truncated_importance_sampling", "num_substeps"),
    "art-local": ("num_substeps",),
    "tinker": ("num_substeps",),
}


def _describe(info: FieldInfo) -> str:
    annotation = info.annotation
    if get_origin(annotation) is Literal:
        allowed = "one of " + ", ".join(map(str, get_args(annotation)))
    else:
        allowed = getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
    return allowed + (f" ({info.description})" if info.description else "")


def _one_line(error: ValidationError) -> str:
    first = first_error(error, "config")
    info = field_info(first.where)
    if info is not None:
        return f"config: {first.where}={first.value!r}: {first.message}; expected {_describe(info)}"
    return f"config: {first.message.removeprefix('Value error, ')}"


def build_config(values: Mapping[str, object]) -> RunConfig:
    """Validate a dict of (possibly string) values into a RunConfig, or raise ConfigError."""
    for key in values:
        if (new := dotted_name(key)) is not None:
            raise ConfigError(renamed_message(key, new))
        if not known_key(key):
            hint = did_you_mean(key, all_keys())
            raise ConfigError(
                f"config: unknown key '{key}'{hint}; allowed: {', '.join(all_keys())}"
            )
    try:
        return RunConfig.model_validate(values)
    except ValidationError as error:
        raise ConfigError(_one_line(error)) from None


def field_info(key: str) -> FieldInfo | None:
    """The pydantic field behind a key (dotted or plain), or None."""
    group, dot, leaf = key.partition(".")
    if dot and group in NESTED:
        return NESTED[group].model_fields.get(leaf)
    return RunConfig.model_fields.get(key)


def accepts_none(key: str) -> bool:
    info = field_info(key)
    return info is not None and type(None) in get_args(info.annotation)


def pairs_to_dict(pairs: list[str]) -> dict[str, str]:
    """`["group_size=4", "scorer=ruler"]` -> {"group_size": "4", "scorer": "ruler"}."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"config: '{pair}' is not key=value")
        values[key.strip()] = raw.strip()
    return values


def parse_overrides(pairs: list[str], base: Mapping[str, object] | None = None) -> RunConfig:
    """`["group_size=4", "scorer=ruler"]` -> RunConfig (RunConfig keys only; a task's options
    go through `rlvr.task_config`). For optional keys, an empty value, `none` or `null` means
    None."""
    values = dict(base or {})
    for key, raw in pairs_to_dict(pairs).items():
        unset = means_none(raw) and accepts_none(key)
        values[key] = None if unset else raw
    return build_config(values)
