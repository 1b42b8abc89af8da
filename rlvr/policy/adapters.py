"""The engine's LoRA adapters: the live one (trained in place), its checkpoints (atomic, with the
optimizer), older steps loaded beside it to serve them, and the live weights' version.

`AdapterStore` is the sampler's source of weights (rlvr.policy.sampler.WeightsSource) and the
trainer's store of checkpoints."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from art.utils.output_dirs import get_step_checkpoint_dir

from rlvr import faults
from rlvr.policy.common import (
    ADAPTER_WEIGHTS,
    LIVE_ADAPTER,
    OLD_ADAPTERS_KEPT,
    OPTIMIZER_FILE,
    LoraSettings,
    UnknownStep,
)
from rlvr.policy.loaded import LoadedModel
from rlvr.runs import atomic


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    """Where step's checkpoint lives in ART's model directory `output_dir`."""
    return Path(get_step_checkpoint_dir(str(output_dir), step))


def resume_dir(output_dir: Path, step: int) -> Path | None:
    """The checkpoint of the stored `step` to resume from, None for a fresh model."""
    adapter_dir = checkpoint_dir(output_dir, step)
    if not adapter_dir.exists():
        return None
    if not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise FileNotFoundError(f"checkpoint {adapter_dir} has no {ADAPTER_WEIGHTS} to resume from")
    return adapter_dir


def attach_adapter(base: Any, adapter_dir: Path | None, lora: LoraSettings) -> Any:
    """`base` wrapped in a PeftModel whose live adapter is read from `adapter_dir` (trainable), or
    is a fresh one of `lora`'s shape when there is none."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        model = PeftModel.from_pretrained(
            base, adapter_dir, adapter_name=LIVE_ADAPTER, is_trainable=True
        )
    else:
        config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.lora_alpha,
            target_modules=list(lora.target_modules),
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(base, config, adapter_name=LIVE_ADAPTER)
    model.eval()  # no dropout anywhere; gradients still flow in training
    # Active only in train mode, which the trainer switches on for long rows (dropout is 0).
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


class AdapterStore:
    """The live adapter of `loaded.model` (a PeftModel), its checkpoints under `output_dir` (ART's
    model directory) and up to OLD_ADAPTERS_KEPT older steps loaded to serve them.

    `version` counts changes of the live weights; `changed()` (every optimizer step) bumps it and
    calls `on_change`, so whatever was computed from the old weights is dropped."""

    def __init__(
        self,
        loaded: LoadedModel,
        output_dir: Path,
        live_step: int,
        on_change: Callable[[], None],
    ) -> None:
        self.loaded = loaded
        self.output_dir = output_dir
        self.live_step = live_step
        self.version = 0
        self._on_change = on_change
        self._old: OrderedDict[Path, str] = OrderedDict()  # checkpoint dir -> adapter name

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for n, p in self.loaded.model.named_parameters() if f".{LIVE_ADAPTER}." in n]

    def checkpoint_dir(self, step: int) -> Path:
        return checkpoint_dir(self.output_dir, step)

    def has_step(self, step: int) -> bool:
        return step == self.live_step or (self.checkpoint_dir(step) / ADAPTER_WEIGHTS).is_file()

    def save(self, step: int, optimizer: torch.optim.Optimizer) -> Path:
        """Write the live adapter and `optimizer`'s state as checkpoint `step` and serve it as the
        latest (the caller holds the lock). Written into a temporary dir, fsynced and renamed: a
        kill never leaves a half checkpoint that a restart would resume from."""
        target = self.checkpoint_dir(step)
        with atomic.writing_dir(target) as staging:
            self.loaded.model.save_pretrained(staging, selected_adapters=[LIVE_ADAPTER])
            faults.maybe_crash(faults.FaultPoint.CHECKPOINT, step)
            torch.save(optimizer.state_dict(), staging / OPTIMIZER_FILE)
        self.live_step = step
        return target

    def changed(self) -> None:
        """The live weights changed (an optimizer step): nothing computed from them is reused."""
        self.version += 1
        self._on_change()

    def forget(self) -> None:
        """Drop the older adapters loaded to serve them (their checkpoint files may be gone)."""
        with self.loaded.lock:
            for name in self._old.values():
                self.loaded.model.delete_adapter(name)
            self._old.clear()
            self._on_change()

    def tag(self, step: int | None) -> Hashable:
        """Which weights serve `step`: the live adapter at its version, or a checkpoint."""
        if step is None or step == self.live_step:
            return ("live", self.version)
        if not (self.checkpoint_dir(step) / ADAPTER_WEIGHTS).is_file():
            raise UnknownStep(f"step {step} has no checkpoint (latest is {self.live_step})")
        return ("step", step)

    @contextmanager
    def serving(self, step: int | None) -> Iterator[Hashable]:
        """Sample from the live adapter (None or the live step) or from step's checkpoint, loaded
        beside it (the caller holds the lock); yields the weights' tag."""
        tag = self.tag(step)
        if step is None or step == self.live_step:
            yield tag
            return
        model = self.loaded.model
        model.set_adapter(self._loaded_name(step), inference_mode=True)
        try:
            yield tag
        finally:
            model.set_adapter(LIVE_ADAPTER)

    def _loaded_name(self, step: int) -> str:
        """The PEFT name of step's adapter, loaded now if it is not (least recently used out)."""
        adapter_dir = self.checkpoint_dir(step)
        name = self._old.get(adapter_dir)
        if name is None:
            name = f"step{step}"
            self.loaded.model.load_adapter(adapter_dir, adapter_name=name, is_trainable=False)
            self._old[adapter_dir] = name
            while len(self._old) > OLD_ADAPTERS_KEPT:
                _, evicted = self._old.popitem(last=False)
                self.loaded.model.delete_adapter(evicted)
        self._old.move_to_end(adapter_dir)
        return name
