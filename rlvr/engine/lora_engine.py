"""The policy engine: one causal LM with a LoRA adapter, on one device, made of parts that each
take what they use:

- `LoadedModel` (rlvr.engine.loaded_model): the model, tokenizer, device, precisions and the lock that
  keeps sampling and training apart;
- `AdapterStore` (rlvr.engine.adapters): the live adapter, its checkpoints, older steps served
  beside it, and the live weights' version;
- `Decoder` (rlvr.engine.decoding): batched, KV-cached decoding of many rows at once, returning the
  sampled token ids and their log-probabilities, so ART can train on exactly what was sampled;
- `Trainer` (rlvr.engine.trainer): GRPO updates with ART's own `loss_fn`, and supervised steps.

Callers run both off the event loop (`asyncio.to_thread`). Checkpoints are PEFT adapter directories
(plus `optimizer.pt`). A model served as it is (the local judge) is a decoder alone
(rlvr.engine.frozen).
"""

from __future__ import annotations

from pathlib import Path

from art.utils.get_model_step import get_step_from_dir

from rlvr.engine.adapters import (
    AdapterStore,
    attach_adapter,
    load_optimizer_state,
    resume_dir,
)
from rlvr.engine.autocast_copies import lower_frozen
from rlvr.engine.decoding import Decoder
from rlvr.engine.loaded_model import LoadedModel, load_model
from rlvr.engine.prefix import PrefixCache
from rlvr.engine.trainer import Trainer
from rlvr.engine.types import (
    OPTIMIZER_FILE,
    EngineCounters,
    LoraSettings,
    OptimSettings,
    Precision,
)


class Engine:
    """A causal LM plus its live LoRA adapter: `loaded`, `adapters`, `decoder` and `trainer`,
    wired together here and nowhere else."""

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
        live_step = get_step_from_dir(str(output_dir))
        adapter_dir = resume_dir(output_dir, live_step)
        base = load_model(model_dir, device, precision)
        self.loaded: LoadedModel = base.wrapped(
            attach_adapter(base.model, adapter_dir, lora or LoraSettings())
        )
        if self.loaded.train_dtype is not None:
            lower_frozen(self.loaded.model, self.loaded.train_dtype)
        self.prefixes = PrefixCache()
        self.adapters = AdapterStore(
            self.loaded, output_dir, live_step, on_change=self.prefixes.clear
        )
        self.decoder = Decoder(self.loaded, self.adapters, self.prefixes)
        state = None
        if adapter_dir is not None and (adapter_dir / OPTIMIZER_FILE).is_file():
            state = load_optimizer_state(adapter_dir, self.loaded.device)
        self.trainer = Trainer(self.loaded, self.adapters, optim or OptimSettings(), state)
        if adapter_dir is None:
            self.trainer.save_step(self.adapters.live_step)

    def counters(self) -> EngineCounters:
        """Running totals of this engine's sampling and training (rlvr.engine.types)."""
        return self.decoder.counters().plus(self.trainer.counters())
