"""LocalTorchBackend: the ART Backend of `backend=local` with `inference.engine=rlvr`: ART's
`Backend` protocol on rlvr's torch engine (transformers + peft), for a CPU or a single GPU.

Ordinary ART client code runs unchanged:

    model = art.TrainableModel(name="m", project="p", base_model="smollm2-135m")
    await model.register(LocalTorchBackend(path=".art"))
    client = model.openai_client()            # batched, OpenAI-compatible, 127.0.0.1
    ...rollouts put the returned Choices into their trajectories...
    result = await backend.train(model, groups, learning_rate=1e-4)

Training reuses ART's tokenisation (`tokenize_trajectory_groups`), packing
(`packed_tensors_from_tokenized_results`) and loss (`art.loss.loss_fn`). Checkpoints follow ART's
layout, `{path}/{project}/models/{name}/checkpoints/{step:04d}`, so `model.delete_checkpoints()`
works and a new backend on the same path resumes at the stored step. Training runs off the event
loop, and never at the same time as generation (the engine's lock).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, Literal

import art
from art import dev
from art.local.checkpoints import delete_checkpoints
from art.metrics_taxonomy import build_training_summary_metrics, summarize_trajectory_groups
from art.preprocessing.pack import PackedTensors, packed_tensors_from_tokenized_results
from art.preprocessing.tokenize import (
    TokenizedResult,
    tokenize_trajectory,
    tokenize_trajectory_groups,
)
from art.trajectories import History
from art.types import LocalTrainResult, TrainConfig, TrainSFTConfig
from art.utils.get_model_step import get_step_from_dir
from art.utils.output_dirs import get_model_dir

from rlvr.art_private import build_rl_train_configs
from rlvr.engine import types as engine_names
from rlvr.engine.lora_engine import Engine
from rlvr.engine.models import resolve_model
from rlvr.engine.server import ApiError, Route, ServerThread, create_app, parse_model_name
from rlvr.engine.types import (
    EngineCounters,
    LoraSettings,
    OptimSettings,
    Precision,
)
from rlvr.redact import redact_data
from rlvr.runs import atomic

logger = logging.getLogger(__name__)

# Rows are ART's tensors one sequence a row (the trainer computes what the sequences share once:
# rlvr.engine.trainer.TreeForward), as long as the longest sequence rounded up to this.
PACK_ALIGN = 64
TRAINER_TIME = "time/step_trainer_s"
_PEFT_KEYS = ("r", "lora_alpha", "target_modules")
_OPTIM_KEYS = ("adam_beta1", "adam_beta2", "weight_decay", "max_grad_norm")


def settings_from(model: art.TrainableModel[Any, Any]) -> tuple[LoraSettings, OptimSettings]:
    """LoRA and optimiser settings from the model's `_internal_config` (ART's `peft_args` and
    `trainer_args`), over ART's defaults."""
    internal = dict(getattr(model, "_internal_config", None) or {})
    peft = {k: v for k, v in dict(internal.get("peft_args") or {}).items() if k in _PEFT_KEYS}
    if "target_modules" in peft:
        peft["target_modules"] = tuple(peft["target_modules"])
    trainer = {
        k: v for k, v in dict(internal.get("trainer_args") or {}).items() if k in _OPTIM_KEYS
    }
    return LoraSettings(**peft), OptimSettings(**trainer)


class LocalTorchBackend:
    """`backend=local`, `inference.engine=rlvr`: serves and trains `art.TrainableModel`s in this
    process with rlvr's torch engine."""

    def __init__(
        self, path: str = ".art", device: str | None = None, precision: Precision | None = None
    ) -> None:
        self._path = path
        self._device = device
        self._precision = precision
        # The endpoint's bearer token, new for each backend (each run); ART's model client gets it.
        self.api_key = secrets.token_urlsafe(32)
        self._engines: dict[str, Engine] = {}
        self._server: ServerThread | None = None

    # ------------------------------------------------------------------ ART's Backend protocol

    async def register(self, model: art.Model[Any, Any]) -> None:
        model.base_path = self._path
        output_dir = get_model_dir(model=model, art_path=self._path)
        os.makedirs(output_dir, exist_ok=True)
        info = redact_data(model.model_dump())  # its inference_api_key included
        atomic.write_text(Path(output_dir) / "model.json", json.dumps(info))

    async def _prepare_backend_for_training(
        self, model: art.TrainableModel[Any, Any], config: dev.OpenAIServerConfig | None = None
    ) -> tuple[str, str]:
        await self._engine(model)
        port = (config or {}).get("server_args", {}).get("port")
        return await self.serve(int(port or 0)), self.api_key

    async def serve(self, port: int = 0) -> str:
        """Start the endpoint (once) on 127.0.0.1 and return its base URL."""
        if self._server is None:
            server = ServerThread(
                create_app(self._route, self._model_names, self.api_key), port=port
            )
            await asyncio.to_thread(server.start)
            self._server = server
        return self._server.base_url

    def _model_inference_name(self, model: art.Model[Any, Any], step: int | None = None) -> str:
        if step is None:
            engine = self._engines.get(model.name)
            step = engine.adapters.live_step if engine else self._stored_step(model)
        return f"{model.name}@{step}"

    async def _get_step(self, model: art.TrainableModel[Any, Any]) -> int:
        engine = self._engines.get(model.name)
        return engine.adapters.live_step if engine else self._stored_step(model)

    async def _delete_checkpoint_files(
        self, model: art.TrainableModel[Any, Any], steps_to_keep: list[int]
    ) -> None:
        keep = [*steps_to_keep, await self._get_step(model)]  # never the one being served
        delete_checkpoints(get_model_dir(model=model, art_path=self._path), keep)
        if engine := self._engines.get(model.name):
            engine.adapters.forget()

    async def train(
        self,
        model: art.TrainableModel[Any, Any],
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float = 5e-6,
        kl_penalty_coef: float = 0.0,
        num_substeps: int = 1,
        loss_fn: Literal["cispo", "ppo"] = "cispo",
        epsilon: float | None = None,
        epsilon_high: float | None = None,
        advantage_balance: float = 0.0,
        scale_rewards: bool = True,
        normalize_advantages: bool = True,
        importance_sampling_level: Literal[
            "token", "sequence", "average", "geometric_average"
        ] = "token",
        max_negative_advantage_importance_sampling_weight: float | None = None,
        mask_prob_ratio: bool = False,
        truncated_importance_sampling: float | None = None,
        allow_training_without_logprobs: bool = False,
        verbose: bool = False,
        rollout_temperature: float = 1.0,
    ) -> LocalTrainResult:
        """One training step on `trajectory_groups` with ART's GRPO loss; the step counter
        advances (also when no group carries a learning signal, as ART's LocalBackend does).
        `rollout_temperature` (rlvr's own keyword; ART's backends train at 1) is the temperature
        the rollouts were sampled at: the update trains that tempered policy, the one the
        trajectories came from, not the untempered one."""
        if num_substeps < 1:
            raise ValueError(f"num_substeps must be >= 1, got {num_substeps}")
        if loss_fn not in ("cispo", "ppo"):
            raise ValueError(f"loss_fn must be 'cispo' or 'ppo', got {loss_fn!r}")
        groups = list(trajectory_groups)
        engine = await self._engine(model)
        config, dev_config = build_rl_train_configs(
            learning_rate=learning_rate,
            advantage_balance=advantage_balance,
            scale_rewards=scale_rewards and normalize_advantages,
            importance_sampling_level=importance_sampling_level,
            mask_prob_ratio=mask_prob_ratio,
            ppo=loss_fn == "ppo",
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            max_negative_advantage_importance_sampling_weight=max_negative_advantage_importance_sampling_weight,
            kl_penalty_coef=kl_penalty_coef,
            allow_training_without_logprobs=allow_training_without_logprobs,
            truncated_importance_sampling=truncated_importance_sampling,
        )
        started = time.monotonic()
        step = engine.adapters.live_step + 1
        if rollout_temperature <= 0:
            raise ValueError(f"rollout_temperature must be > 0, got {rollout_temperature}")
        metrics = await asyncio.to_thread(
            _tokenize_pack_train,
            engine,
            groups,
            config,
            dev_config,
            step,
            num_substeps,
            rollout_temperature,
        )
        summary = build_training_summary_metrics(
            summarize_trajectory_groups(groups), include_trainable_groups=True
        )
        metrics = {**summary, **metrics, TRAINER_TIME: time.monotonic() - started}
        if verbose:
            logger.info("step %d: %s", step, metrics)
        return LocalTrainResult(
            step=step, metrics=metrics, checkpoint_path=str(engine.adapters.checkpoint_dir(step))
        )

    async def _train_sft(
        self,
        model: art.TrainableModel[Any, Any],
        trajectories: Iterable[art.Trajectory],
        config: TrainSFTConfig,
        dev_config: dev.TrainSFTConfig,
        verbose: bool = False,
    ) -> AsyncIterator[dict[str, float]]:
        """Supervised fine-tuning (ART's `model.train_sft`): cross-entropy on the assistant turns
        of `trajectories` (plain dict messages, no logprobs needed), tokenised by ART, one AdamW
        step per batch; the result is saved as the next checkpoint and served from then on.
        Yields each batch's metrics (loss measured before that batch's update)."""
        engine = await self._engine(model)
        demos = list(trajectories)
        size = len(demos) if config.batch_size == "auto" else max(1, int(config.batch_size))
        batches = [demos[i : i + size] for i in range(0, len(demos), size)]
        rates = config.learning_rate
        for number, batch in enumerate(batches):
            rate = rates[min(number, len(rates) - 1)] if isinstance(rates, list) else rates
            packed = await asyncio.to_thread(pack_demonstrations, engine.loaded.tokenizer, batch)
            if packed is None:
                continue
            metrics = await asyncio.to_thread(engine.trainer.sft_batch, packed, rate)
            if verbose:
                logger.info("sft batch %d/%d: %s", number + 1, len(batches), metrics)
            yield metrics
        await asyncio.to_thread(engine.trainer.save_step, engine.adapters.live_step + 1)

    async def close(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.stop)
            self._server = None
        self._engines.clear()
        gc.collect()

    # ------------------------------------------------------------------ helpers

    def engine(self, model: art.Model[Any, Any]) -> Engine:
        """The loaded engine of a registered model (for benchmarks and tests)."""
        return self._engines[model.name]

    def counters(self, model: art.Model[Any, Any]) -> EngineCounters:
        """Running totals of the work of `model`'s engine (zero before it is loaded): take one
        before and one after a step and `minus` them."""
        engine = self._engines.get(model.name)
        return engine.counters() if engine is not None else EngineCounters()

    def _stored_step(self, model: art.Model[Any, Any]) -> int:
        return get_step_from_dir(get_model_dir(model=model, art_path=self._path))

    async def _engine(self, model: art.TrainableModel[Any, Any]) -> Engine:
        if model.name not in self._engines:
            lora, optim = settings_from(model)
            output_dir = Path(get_model_dir(model=model, art_path=self._path))
            self._engines[model.name] = await asyncio.to_thread(
                lambda: Engine(
                    resolve_model(model.base_model),
                    output_dir,
                    device=self._device,
                    lora=lora,
                    optim=optim,
                    precision=self._precision,
                )
            )
        return self._engines[model.name]

    def _route(self, name: str) -> Route:
        base, step = parse_model_name(name)
        engine = self._engines.get(base)
        if engine is None:
            known = ", ".join(self._engines) or "none"
            raise ApiError(
                404, f"model: '{name}' is not served here (models: {known})", "not_found_error"
            )
        if step is not None and not engine.adapters.has_step(step):
            raise ApiError(
                404,
                f"model: '{name}': step {step} has no checkpoint (latest is {engine.adapters.live_step})",
                "not_found_error",
            )
        return Route(engine=engine.decoder, step=step)

    def _model_names(self) -> list[str]:
        names = []
        for name, engine in self._engines.items():
            root = engine.adapters.checkpoint_dir(0).parent
            steps = (
                sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())
                if root.is_dir()
                else []
            )
            names += [name, *(f"{name}@{s}" for s in steps)]
        return names


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """Tokens that end an assistant turn: the chat template's `<|im_end|>` first, if the
    vocabulary has it, then the tokenizer's end of sequence."""
    ids = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    return list(dict.fromkeys(i for i in ids if i is not None and i != tokenizer.unk_token_id))


def with_end_of_turn(mask: list[int], token_ids: list[int], ends: list[int]) -> list[int]:
    """`mask` with the end-of-turn token after each assistant span trained too.

    ART masks a dict assistant message's content tokens only (a sampled choice carries its own
    end token): supervised on that, a model never learns to stop, and every warm-started reply
    ran to max_tokens."""
    return [
        1 if flag or (i > 0 and mask[i - 1] and token_ids[i] in ends) else 0
        for i, flag in enumerate(mask)
    ]


def one_a_row(
    results: list[TokenizedResult], pad_token_id: int, advantage_balance: float = 0.0
) -> PackedTensors:
    """ART's tensors of `results`, one sequence a row (its prompt included), with ART's
    normalised advantages and weights."""
    longest = max(len(r.token_ids) for r in results)
    return packed_tensors_from_tokenized_results(
        results,
        math.ceil(longest / PACK_ALIGN) * PACK_ALIGN,
        pad_token_id=pad_token_id,
        truncate_long_results=False,
        advantage_balance=advantage_balance,
        verbosity=0,
        pack_results=False,
    )


def pack_demonstrations(tokenizer: Any, trajectories: list[art.Trajectory]) -> PackedTensors | None:
    """ART's tokenisation of demonstrations (assistant turns as dict messages), one sequence a
    row; None when no turn is trainable."""
    results = [
        result
        for t in trajectories
        if (
            result := tokenize_trajectory(
                tokenizer,
                None,
                History(messages_and_choices=t.messages_and_choices, tools=t.tools),
                1.0,
                True,  # allow_training_without_logprobs: demonstrations have none
                t,
            )
        )
        is not None
    ]
    if not results:
        return None
    ends = end_of_turn_ids(tokenizer)
    for result in results:
        if result.assistant_mask and result.assistant_mask[-1]:
            # ART renders the last message with continue_final_message: no end token after it.
            result.token_ids.append(ends[0])
            result.input_pos.append(result.input_pos[-1] + 1)
            result.logprobs.append(float("nan"))
            result.assistant_mask.append(0)
        result.assistant_mask = with_end_of_turn(result.assistant_mask, result.token_ids, ends)
    return one_a_row(results, tokenizer.eos_token_id)


def pack_groups(
    tokenizer: Any,
    groups: list[art.TrajectoryGroup],
    *,
    allow_training_without_logprobs: bool = False,
    scale_rewards: bool = True,
    advantage_balance: float = 0.0,
) -> PackedTensors | None:
    """ART's tokenisation of `groups` into `PackedTensors` (one sequence a row), or None when there is
    nothing to train on (no group with differing rewards, or no sampled logprobs)."""
    results = list(
        tokenize_trajectory_groups(
            tokenizer, groups, allow_training_without_logprobs, scale_rewards
        )
    )
    if not results:
        return None
    packed = one_a_row(results, tokenizer.eos_token_id, advantage_balance)
    if not allow_training_without_logprobs and bool(packed["logprobs"].isnan().all()):
        logger.warning(
            "no sampled logprobs in the trajectories: put the Choice objects returned with "
            "logprobs=True into messages_and_choices; this step makes no update"
        )
        return None
    return packed


def _tokenize_pack_train(
    engine: Engine,
    groups: list[art.TrajectoryGroup],
    config: TrainConfig,
    dev_config: dev.TrainConfig,
    step: int,
    num_substeps: int,
    temperature: float,
) -> dict[str, float]:
    """Pack `groups` and run one engine update saved as `step` (blocking; run in a thread)."""
    packed = pack_groups(
        engine.loaded.tokenizer,
        groups,
        allow_training_without_logprobs=bool(
            dev_config.get("allow_training_without_logprobs", False)
        ),
        scale_rewards=bool(dev_config.get("scale_rewards", True)),
        advantage_balance=float(dev_config.get("advantage_balance", 0.0)),
    )
    if packed is None:  # nothing to learn from: the step still advances, as in ART
        engine.trainer.save_step(step)
        return {
            engine_names.LOSS: 0.0,
            engine_names.SAMPLER_KL: 0.0,
            engine_names.UPDATE_KL: 0.0,
            engine_names.GRAD_NORM: 0.0,
            engine_names.NUM_TOKENS: 0.0,
            engine_names.GRADIENT_STEPS: 0.0,
        }
    return engine.trainer.train(
        packed,
        config,
        dev_config,
        step=step,
        num_substeps=num_substeps,
        temperature=temperature,
    )
