"""A model served as it is: the engine's batched decoder over the base weights, without adapters,
optimizer or checkpoints (what the local judge serves, judges.server).

It imports neither ART nor PEFT, so a process serving it starts in the time torch and transformers
take to import (about half of what the trained engine's imports take).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.engine.decoding import Decoder
from rlvr.engine.loaded_model import load_model
from rlvr.engine.merged_weights import pack_frozen
from rlvr.engine.types import Precision
from rlvr.engine.weights import BaseWeights


def frozen_decoder(
    model_dir: Path, *, device: str | None = None, precision: Precision | None = None
) -> Decoder:
    """A decoder of `model_dir`'s model as it is (step 0 only); on a CPU its projections are
    packed for the kernel once (rlvr.engine.packed_weights), since nothing trains them."""
    loaded = load_model(model_dir, device, precision)
    if loaded.packed:
        pack_frozen(loaded.model, loaded.products_dtype)
    return Decoder(loaded, BaseWeights())
