"""Which ART backend trains the policy, chosen by `cfg.backend`; everything else is ART's client.

- local       rlvr's LocalTorchBackend: transformers + peft on this machine's CPU or GPU
              (LocalVllmBackend with inference.engine=vllm: the same training, vLLM's serving)
- art-local   ART's LocalBackend (vLLM + Unsloth on a CUDA GPU; `pip install rlvr[gpu]`)
- tinker      ART's TinkerBackend (remote; TINKER_API_KEY in the environment)
- serverless  ART's ServerlessBackend (W&B Serverless; WANDB_API_KEY in the environment)
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import art
from pydantic import BaseModel, ConfigDict, SkipValidation

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import atomic, layout

if TYPE_CHECKING:
    from rlvr.engine import EngineCounters

ART_DIR = layout.ART_DIR  # ART's own layout (checkpoints per policy step) in the run directory


class Policy(BaseModel):
    """The trainable model and the backend it is registered with."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    # Held as given: a parametrised model class would copy the model, and ART's Backend is a
    # Protocol that isinstance cannot check.
    model: SkipValidation[art.TrainableModel[Any, Any]]
    backend: SkipValidation[art.Backend]


def _make_backend(cfg: RunConfig, art_path: Path) -> tuple[art.Backend, str]:
    """(backend, base_model) for the configured backend."""
    if cfg.backend == "local" and cfg.inference.engine == "vllm":
        from rlvr.engine import resolve_model
        from rlvr.inference.backend import LocalVllmBackend

        # Trains like LocalTorchBackend; rollouts sample from vLLM (rlvr.inference).
        vllm = LocalVllmBackend(
            path=str(art_path), inference=cfg.inference, lora_rank=cfg.lora_rank
        )
        return cast("art.Backend", vllm), str(resolve_model(cfg.model))
    if cfg.backend == "local":
        from rlvr.engine import LocalTorchBackend, resolve_model

        # LocalTorchBackend implements ART's Backend; its train() names the keyword arguments it takes
        # where the protocol declares **kwargs, so a type checker cannot match the two.
        backend = cast("art.Backend", LocalTorchBackend(path=str(art_path)))
        return backend, str(resolve_model(cfg.model))
    if cfg.backend == "art-local":
        from art.local import LocalBackend

        return LocalBackend(path=str(art_path)), cfg.model
    if cfg.backend == "tinker":
        from art.tinker import TinkerBackend

        return TinkerBackend(path=str(art_path)), cfg.model
    from art.serverless import ServerlessBackend

    return ServerlessBackend(), cfg.model


def rewind_policy(cfg: RunConfig, run_dir: Path, policy_step: int) -> list[int]:
    """Make the stored policy agree with metrics.jsonl before a resumed run loads it; returns
    the checkpoint steps removed.

    A step writes its checkpoint before its metrics row, so a kill in between leaves a
    checkpoint newer than `policy_step` (the last one a row records). That step is redone, so
    its checkpoint (weights and optimizer state) is removed: the backend resumes from
    `policy_step`'s. Checkpoints are written atomically, so any digit-named one is complete;
    interrupted temporaries are removed. Remote backends (tinker, serverless) keep their own
    checkpoints: nothing here to rewind."""
    if cfg.backend not in ("local", "art-local"):
        return []
    root = layout.policy_dir(run_dir, cfg.project) / "checkpoints"  # ART's
    atomic.remove_leftovers(root)
    dirs = {int(p.name): p for p in root.glob("[0-9]*") if p.name.isdigit() and p.is_dir()}
    newer = sorted(s for s in dirs if s > policy_step)
    for step in newer:
        shutil.rmtree(dirs[step])
    if policy_step > 0 and policy_step not in dirs:
        raise FileNotFoundError(
            f"{root}: no checkpoint of policy step {policy_step}, the last one metrics.jsonl "
            "records; this run cannot resume exactly"
        )
    return newer


# Backends whose train() takes ART's allow_training_without_logprobs (rlvr's LocalTorchBackend, ART's
# LocalBackend); the others train sampled turns with logprobs only.
TRAINS_WITHOUT_LOGPROBS = ("local", "art-local")


def step_learning_rate(cfg: RunConfig, step: int) -> float:
    """The learning rate of RL step `step` (from 1): `learning_rate`, times step / lr_warmup_steps
    over the first `lr_warmup_steps` steps."""
    if step >= cfg.lr_warmup_steps:
        return cfg.learning_rate
    return cfg.learning_rate * step / cfg.lr_warmup_steps


class TrainKwargs(TypedDict, total=False):
    """Keyword arguments of a backend's `train`, each in the name that backend's signature uses
    (ART's LocalBackend and TinkerBackend, rlvr's LocalTorchBackend: `loss_fn`; ServerlessBackend:
    `ppo`); the loss options of RunConfig."""

    learning_rate: float
    importance_sampling_level: str
    epsilon: float | None
    epsilon_high: float | None
    scale_rewards: bool
    ppo: bool  # ServerlessBackend's name for loss_fn=ppo
    loss_fn: str
    kl_penalty_coef: float
    truncated_importance_sampling: float | None
    num_substeps: int  # rlvr's own backend
    rollout_temperature: float  # rlvr's own backend
    allow_training_without_logprobs: bool  # ART's, for turns sampled without logprobs


def train_kwargs(cfg: RunConfig, step: int) -> TrainKwargs:
    """Keyword arguments of RL step `step`'s `backend.train` (TrainKwargs). Options a backend
    cannot honour were refused when the config was validated."""
    kwargs = TrainKwargs(
        learning_rate=step_learning_rate(cfg, step),
        importance_sampling_level=cfg.importance_sampling_level,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        scale_rewards=cfg.scale_rewards,
    )
    if cfg.backend == "serverless":
        return {**kwargs, "ppo": cfg.loss_fn == "ppo"}
    kwargs |= {
        "loss_fn": cfg.loss_fn,
        "kl_penalty_coef": cfg.kl_penalty_coef,
        "truncated_importance_sampling": cfg.truncated_importance_sampling,
    }
    if cfg.backend == "local":
        kwargs["num_substeps"] = cfg.num_substeps
        # rlvr's backend trains the tempered policy the rollouts sampled from (ART's train at 1;
        # greedy rollouts have no tempered policy, so they are trained as ART does).
        kwargs["rollout_temperature"] = cfg.temperature if cfg.temperature > 0 else 1.0
    return kwargs


@asynccontextmanager
async def open_policy(
    cfg: RunConfig, run_dir: Path, rewind_to: int | None = None
) -> AsyncIterator[Policy]:
    """Register the run's trainable model (named once, when the run was created:
    `layout.policy_name`), rewound first to policy step `rewind_to` for a resumed run
    (`rewind_policy`); the backend is closed on exit, errors and Ctrl-C included, so no server
    outlives the run."""
    if rewind_to is not None:
        rewind_policy(cfg, run_dir, rewind_to)
    art_path = run_dir / ART_DIR
    backend, base_model = _make_backend(cfg, art_path)
    # LoRA rank travels the way ART's own backends read it (peft_args of the internal config).
    internal = (
        art.dev.InternalModelConfig(peft_args={"r": cfg.lora_rank})
        if cfg.backend in ("local", "art-local")
        else None
    )
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name=layout.policy_name(run_dir, cfg.project),
        project=cfg.project,
        base_model=base_model,
        base_path=str(art_path),
        _internal_config=internal,
    )
    try:
        await model.register(backend)
        yield Policy(model=model, backend=backend)
    finally:
        await backend.close()


def engine_counters(policy: Policy) -> EngineCounters | None:
    """The running totals of rlvr's own engine behind `policy` (tokens prompted, cached,
    prefilled, decoded, trained); None for ART's backends, which report no such figures."""
    from rlvr.engine import LocalTorchBackend

    if not isinstance(policy.backend, LocalTorchBackend):
        return None
    return policy.backend.counters(policy.model)


def token_metrics(before: EngineCounters | None, after: EngineCounters | None) -> dict[str, int]:
    """A step's token figures from two snapshots of the engine's counters (none without them)."""
    if before is None or after is None:
        return {}
    done = after.minus(before)
    return {
        M.PROMPT_TOKENS: done.prompt_tokens,
        M.CACHED_PROMPT_TOKENS: done.cached_prompt_tokens,
        M.PREFILLED_TOKENS: done.prefilled_tokens,
        M.SEQUENCE_TOKENS: done.sequence_tokens,
        M.FORWARDED_TOKENS: done.forwarded_tokens,
    }
