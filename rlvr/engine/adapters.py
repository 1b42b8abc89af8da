"""The engine's LoRA adapters: the live one (trained in place), its checkpoints (atomic, with the
optimizer), the live weights' version, and the merged weights each adapter is sampled with.

`AdapterStore` is the decoder's source of weights (rlvr.engine.decoding.WeightsSource) and the
trainer's store of checkpoints."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from art.utils.output_dirs import get_step_checkpoint_dir

from rlvr.engine.device import release_memory
from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.merged_weights import MERGED_KEPT, MergedSet, merge
from rlvr.engine.types import (
    ADAPTER_WEIGHTS,
    LIVE_ADAPTER,
    OPTIMIZER_FILE,
    LoraSettings,
    UnknownStep,
)
from rlvr.engine.weights import WeightsTag, WeightsView
from rlvr.runs import atomic
from rlvr.runs.damage import RunDamaged, fault_point

ADAPTER_CONFIG = "adapter_config.json"


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
    check_adapter(adapter_dir)
    return adapter_dir


def check_adapter(adapter_dir: Path) -> None:
    """Raise RunDamaged naming the file of the checkpoint `adapter_dir` that cannot be read (a
    torn adapter config, adapter weights cut short or garbled); reads headers only."""
    import json

    from safetensors import safe_open

    config = adapter_dir / ADAPTER_CONFIG
    weights = adapter_dir / ADAPTER_WEIGHTS
    for path in (config, weights):
        if not path.is_file():
            raise RunDamaged(f"{path}: missing from the checkpoint {adapter_dir}")
    try:
        json.loads(config.read_text(errors="replace"))
    except json.JSONDecodeError as error:
        raise damaged(config, "adapter config", error) from None
    try:
        with safe_open(str(weights), framework="pt"):
            pass
    except Exception as error:  # safetensors raises its own error type for every defect
        raise damaged(weights, "adapter weights", error) from None


def damaged(path: Path, what: str, error: BaseException) -> RunDamaged:
    detail = " ".join(str(error).split())[:200]
    return RunDamaged(
        f"{path}: damaged {what} ({detail}; {path.stat().st_size} bytes); this checkpoint cannot "
        "be read: restore the file from a copy of the run"
    )


def load_optimizer_state(adapter_dir: Path, device: Any) -> Any:
    """The optimizer state stored beside a checkpoint's adapter; RunDamaged naming the file
    when it cannot be read."""
    path = adapter_dir / OPTIMIZER_FILE
    try:
        # weights_only: a checkpoint from elsewhere must not run code when it is read.
        return torch.load(path, map_location=device, weights_only=True)
    except (RuntimeError, EOFError, ValueError, OSError) as error:
        raise damaged(path, "optimizer state", error) from None


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
        # Seeded without touching the process's generator: peft draws A from the global one.
        with torch.random.fork_rng():
            torch.manual_seed(lora.seed)
            model = get_peft_model(base, config, adapter_name=LIVE_ADAPTER)
    model.eval()  # no dropout anywhere; gradients still flow in training
    return model


class AdapterStore:
    """The live adapter of `loaded.model` (a PeftModel), its checkpoints under `output_dir` (ART's
    model directory), and the merged weights the decoder computes with (rlvr.engine.merged_weights).

    `version` counts changes of the live weights; `changed()` (every optimizer step) bumps it,
    drops the live adapter's merged set and calls `on_change`, so nothing computed from the old
    weights is reused. Merged sets are kept least-recently-used, at most MERGED_KEPT (one): the
    live adapter's, or an older step's (served for a test evaluation; merged from its checkpoint).
    With `merge=False` the live adapter is sampled through PEFT's LoRA layers instead (to compare
    the two; older steps are always merged)."""

    def __init__(
        self,
        loaded: LoadedModel,
        output_dir: Path,
        live_step: int,
        on_change: Callable[[], None],
        *,
        merge: bool = True,
    ) -> None:
        self.loaded = loaded
        self.output_dir = output_dir
        self.live_step = live_step
        self.version = 0
        self.merge = merge
        self._on_change = on_change
        self._merged: OrderedDict[WeightsTag, MergedSet] = OrderedDict()

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
            fault_point(f"checkpoint:{step}")  # adapter written, optimizer not
            torch.save(optimizer.state_dict(), staging / OPTIMIZER_FILE)
        self.live_step = step
        return target

    def changed(self) -> None:
        """The live weights changed (an optimizer or SFT step; the caller holds the lock)."""
        self.version += 1
        self._drop("live")
        self._on_change()

    def make_room(self) -> None:
        """Drop every merged set and the prefix cache before an update (the caller holds the
        lock): its first optimizer step makes the live set and the cache stale anyway, and kept
        through the update they would sit in memory beside its activations. An older step's set
        is merged again when it is next served."""
        self._merged.clear()
        self._on_change()
        # Handed back now: freed in the sampling thread's malloc arena, the memory would not be
        # reused by the update's allocations in another thread.
        release_memory()

    def forget(self) -> None:
        """Drop what was computed from older checkpoints (their files may be gone)."""
        with self.loaded.lock:
            self._drop("step")
            self._on_change()

    @property
    def merged_bytes(self) -> int:
        """Memory held by the merged sets kept now."""
        return sum(merged.nbytes for merged in self._merged.values())

    def view(self, step: int | None) -> WeightsView:
        """The weights serving `step` (None or the live step: the live adapter; else the step's
        checkpoint), merged unless `merge` is off (the caller holds the lock)."""
        if step is None or step == self.live_step:
            tag = WeightsTag("live", self.version)
            return WeightsView(tag, self._merged_set(tag) if self.merge else None)
        if not (self.checkpoint_dir(step) / ADAPTER_WEIGHTS).is_file():
            raise UnknownStep(f"step {step} has no checkpoint (latest is {self.live_step})")
        tag = WeightsTag("step", step)
        return WeightsView(tag, self._merged_set(tag))

    def _merged_set(self, tag: WeightsTag) -> MergedSet:
        found = self._merged.get(tag)
        if found is None:
            # Evicted before merging, so no more than MERGED_KEPT sets are ever held at once.
            while len(self._merged) >= MERGED_KEPT:
                self._merged.popitem(last=False)
            found = self._merged[tag] = self._merge(tag)
        self._merged.move_to_end(tag)
        return found

    def _merge(self, tag: WeightsTag) -> MergedSet:
        """The live adapter merged, or step `tag.number`'s checkpoint loaded beside it just long
        enough to merge it."""
        model = self.loaded.model
        dtype, packed = self.loaded.products_dtype, self.loaded.packed
        if tag.kind == "live":
            return merge(model, LIVE_ADAPTER, dtype, packed)
        name = f"step{tag.number}"
        check_adapter(self.checkpoint_dir(tag.number))
        model.load_adapter(self.checkpoint_dir(tag.number), adapter_name=name, is_trainable=False)
        try:
            return merge(model, name, dtype, packed)
        finally:
            model.delete_adapter(name)

    def _drop(self, kind: str) -> None:
        for tag in [t for t in self._merged if t.kind == kind]:
            del self._merged[tag]
