"""The engine's LoRA adapters: the live one and its checkpoints (atomic, with the optimizer), and
older steps loaded beside it to serve them."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from art.utils.output_dirs import get_step_checkpoint_dir

from rlvr import faults
from rlvr.policy.common import (
    ADAPTER_WEIGHTS,
    LIVE_ADAPTER,
    OLD_ADAPTERS_KEPT,
    OPTIMIZER_FILE,
    UnknownStep,
)
from rlvr.policy.state import EngineState
from rlvr.runs import atomic


class Adapters(EngineState):
    """Checkpoints of the live adapter and older adapters served beside it (mixed into Engine)."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for n, p in self.model.named_parameters() if f".{LIVE_ADAPTER}." in n]

    def checkpoint_dir(self, step: int) -> Path:
        return Path(get_step_checkpoint_dir(str(self.output_dir), step))

    def has_step(self, step: int) -> bool:
        return step == self.live_step or (self.checkpoint_dir(step) / ADAPTER_WEIGHTS).is_file()

    def save_step(self, step: int) -> Path:
        """Save the live adapter (unchanged) as checkpoint `step` and serve it as the latest."""
        with self.lock:
            return self._save(step)

    def _save(self, step: int) -> Path:
        """Write adapter + optimizer into a temporary dir, fsync it and rename it to the step's
        checkpoint: a kill never leaves a half checkpoint that a restart would resume from."""
        target = self.checkpoint_dir(step)
        with atomic.writing_dir(target) as staging:
            self.model.save_pretrained(staging, selected_adapters=[LIVE_ADAPTER])
            faults.maybe_crash(faults.FaultPoint.CHECKPOINT, step)
            torch.save(self.optimizer.state_dict(), staging / OPTIMIZER_FILE)
        self.live_step = step
        return target

    @contextmanager
    def _adapter(self, step: int | None):
        """Serve from the live adapter (None or the live step) or from step's checkpoint."""
        if step is None or step == self.live_step:
            yield
            return
        adapter_dir = self.checkpoint_dir(step)
        name = self._old_adapters.get(adapter_dir)
        if name is None:
            if not (adapter_dir / ADAPTER_WEIGHTS).is_file():
                raise UnknownStep(f"step {step} has no checkpoint (latest is {self.live_step})")
            name = f"step{step}"
            self.model.load_adapter(adapter_dir, adapter_name=name, is_trainable=False)
            self._old_adapters[adapter_dir] = name
            while len(self._old_adapters) > OLD_ADAPTERS_KEPT:
                _, evicted = self._old_adapters.popitem(last=False)
                self.model.delete_adapter(evicted)
        self._old_adapters.move_to_end(adapter_dir)
        self.model.set_adapter(name, inference_mode=True)
        try:
            yield
        finally:
            self.model.set_adapter(LIVE_ADAPTER)

    def forget_adapters(self) -> None:
        """Drop cached older adapters (their checkpoint files may be gone)."""
        with self.lock:
            for name in self._old_adapters.values():
                self.model.delete_adapter(name)
            self._old_adapters.clear()
            self._weights_changed()
