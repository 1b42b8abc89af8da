"""A model served as it is: the engine's batched sampler without adapters, optimizer or
checkpoints (what the local judge serves, judges.server).

It imports neither ART nor PEFT, so a process serving it starts in the time torch and transformers
take to import (about 4 s here, half of what the trained engine's imports take).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from rlvr.policy.common import Precision, UnknownStep
from rlvr.policy.sampler import Sampler


class FrozenEngine(Sampler):
    """One model, sampled only; its one step is 0."""

    def __init__(
        self, model_dir: Path, *, device: str | None = None, precision: Precision | None = None
    ) -> None:
        self.live_step = 0
        self.model = self._load(model_dir, device, precision)
        self.stop_ids = self._stop_ids()

    @contextmanager
    def _adapter(self, step: int | None):
        if step not in (None, self.live_step):
            raise UnknownStep(f"step {step}: this model is served as it is (step 0 only)")
        yield
