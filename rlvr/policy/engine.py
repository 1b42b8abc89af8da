"""The policy engine: one causal LM with a LoRA adapter, on one device.

It does two things, never at the same time (one lock):
- `sample`: batched decoding with a KV cache for many rows at once (left padding, per-row
  temperature / top_p / max_tokens / stop strings / seed), returning the sampled token ids and their
  log-probabilities under the model (temperature 1, like vLLM's default), so ART can train on
  exactly what was sampled;
- `train`: one GRPO update on ART's packed tensors with ART's own `loss_fn`.

Callers run both off the event loop (`asyncio.to_thread`). Checkpoints are PEFT adapter directories
(plus `optimizer.pt`); the engine can serve an older step by loading its adapter next to the live one.
"""

from __future__ import annotations

from pathlib import Path

import torch
from art.utils.get_model_step import get_step_from_dir

from rlvr.policy.adapters import Adapters
from rlvr.policy.common import (  # the engine's names, as before the split
    ADAPTER_WEIGHTS,
    CHECKPOINT_FROM_TOKENS,
    LIVE_ADAPTER,
    OPTIMIZER_FILE,
    PRECISION_ENV,
    THREADS_ENV,
    FinishReason,
    LoraSettings,
    OptimSettings,
    Precision,
    Sampled,
    SampleRow,
    UnknownStep,
)
from rlvr.policy.sampler import Sampler, group_attention_mask, top_p_filter
from rlvr.policy.trainer import Trainer


class Engine(Adapters, Sampler, Trainer):
    """A causal LM plus its live LoRA adapter, optimizer, and a few older adapters for serving:
    the adapters, sampling and training live in their mixins (rlvr.policy.adapters, .sampler,
    .trainer); one lock keeps sampling and training apart."""

    def __init__(
        self,
        model_dir: Path,
        output_dir: Path,
        *,
        device: str | None = None,
        lora: LoraSettings | None = None,
        optim: OptimSettings | None = None,
        precision: Precision | None = None,
    ) -> None:
        """Load `model_dir` and resume from the latest checkpoint under `output_dir` (ART's model
        directory), or start a fresh adapter and save it as step 0. `precision`: see
        `choose_autocast` (None: automatic)."""
        from peft import LoraConfig, PeftModel, get_peft_model

        self.output_dir = output_dir
        self.live_step = get_step_from_dir(str(output_dir))
        adapter_dir: Path | None = self.checkpoint_dir(self.live_step)
        if not adapter_dir.exists():
            adapter_dir = None
        elif not (adapter_dir / ADAPTER_WEIGHTS).is_file():
            raise FileNotFoundError(
                f"checkpoint {adapter_dir} has no {ADAPTER_WEIGHTS} to resume from"
            )
        base = self._load(model_dir, device, precision)
        self.optim = optim or OptimSettings()
        if adapter_dir is not None:
            self.model = PeftModel.from_pretrained(
                base, adapter_dir, adapter_name=LIVE_ADAPTER, is_trainable=True
            )
        else:
            settings = lora or LoraSettings()
            config = LoraConfig(
                r=settings.r,
                lora_alpha=settings.lora_alpha,
                target_modules=list(settings.target_modules),
                lora_dropout=0.0,
                task_type="CAUSAL_LM",
            )
            self.model = get_peft_model(base, config, adapter_name=LIVE_ADAPTER)
        self.model.eval()  # no dropout anywhere; gradients still flow in train()
        # Active only in train mode, which `_recomputing` switches on for long rows (dropout is 0).
        self.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(),
            lr=1e-5,  # set per call from ART's TrainConfig
            betas=(self.optim.adam_beta1, self.optim.adam_beta2),
            weight_decay=self.optim.weight_decay,
        )
        if adapter_dir is not None and (adapter_dir / OPTIMIZER_FILE).is_file():
            # weights_only: a checkpoint from elsewhere must not run code when it is read.
            state = torch.load(
                adapter_dir / OPTIMIZER_FILE, map_location=self.device, weights_only=True
            )
            self.optimizer.load_state_dict(state)
        self.stop_ids = self._stop_ids()
        if adapter_dir is None:
            self._save(self.live_step)


__all__ = [
    "ADAPTER_WEIGHTS",
    "CHECKPOINT_FROM_TOKENS",
    "LIVE_ADAPTER",
    "OPTIMIZER_FILE",
    "PRECISION_ENV",
    "THREADS_ENV",
    "Engine",
    "FinishReason",
    "LoraSettings",
    "OptimSettings",
    "Precision",
    "SampleRow",
    "Sampled",
    "UnknownStep",
    "group_attention_mask",
    "top_p_filter",
]
