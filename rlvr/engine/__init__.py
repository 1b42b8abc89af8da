"""rlvr's engine: one causal LM on one device that serves, samples, trains a step, merges and
benches, behind the interfaces ART and OpenAI clients speak (an `art.Backend` and an
OpenAI-compatible endpoint). It imports nothing of the RL side
(tests/engine/test_engine_boundary.py).

The names below are what the rest of rlvr uses. They resolve on first use (PEP 562), so that
importing one light part (the frozen decoder a judge process serves) does not pay for ART and PEFT.

- serve: `create_app`, `serve`, `serve_frozen`, `ServerThread`, `Route`, `ApiError`, and
  `ServerProcess` for a model server in a child process;
- decode: `Decoder`, `frozen_decoder`, `load_model`, `BaseWeights`, `pack_frozen`;
- train a step: `LocalTorchBackend` (an `art.Backend`), `Engine`, `pack_groups`;
- merge: `pack_frozen` over a merged model, `check_adapter` for a checkpoint's adapter;
- models: `resolve_model`, `model_must_resolve`, `ModelError`, `ALIASES`;
- bench: `run_serve_bench`, `run_train_bench`, `run_turns_bench`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module that defines it
_EXPORTS = {
    "ALIASES": "rlvr.engine.models",
    "ApiError": "rlvr.engine.server",
    "BaseWeights": "rlvr.engine.weights",
    "ChatRequest": "rlvr.engine.server",
    "Decoder": "rlvr.engine.decoding",
    "Engine": "rlvr.engine.lora_engine",
    "GrammarError": "rlvr.engine.grammar",
    "EngineCounters": "rlvr.engine.types",
    "ServerProcessError": "rlvr.engine.process",
    "ServerProcess": "rlvr.engine.process",
    "ModelError": "rlvr.engine.models",
    "Precision": "rlvr.engine.types",
    "Route": "rlvr.engine.server",
    "ServerThread": "rlvr.engine.server",
    "THREADS_ENV": "rlvr.engine.types",
    "LocalTorchBackend": "rlvr.engine.backend",
    "check_adapter": "rlvr.engine.adapters",
    "check_environment": "rlvr.engine.loaded_model",
    "create_app": "rlvr.engine.server",
    "frozen_decoder": "rlvr.engine.frozen",
    "load_model": "rlvr.engine.loaded_model",
    "model_must_resolve": "rlvr.engine.models",
    "pack_frozen": "rlvr.engine.merged_weights",
    "pack_groups": "rlvr.engine.backend",
    "release_memory": "rlvr.engine.device",
    "resolve_model": "rlvr.engine.models",
    "run_serve_bench": "rlvr.engine.bench",
    "schema_of": "rlvr.engine.grammar",
    "run_train_bench": "rlvr.engine.bench",
    "run_turns_bench": "rlvr.engine.bench",
    "serve": "rlvr.engine.server",
    "serve_frozen": "rlvr.engine.server",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


# For type checkers and editors (`name as name` re-exports it);
# tests/engine/test_engine_boundary.py holds this block to _EXPORTS.
if TYPE_CHECKING:
    from rlvr.engine.adapters import check_adapter as check_adapter
    from rlvr.engine.backend import LocalTorchBackend as LocalTorchBackend
    from rlvr.engine.backend import pack_groups as pack_groups
    from rlvr.engine.bench import run_serve_bench as run_serve_bench
    from rlvr.engine.bench import run_train_bench as run_train_bench
    from rlvr.engine.bench import run_turns_bench as run_turns_bench
    from rlvr.engine.decoding import Decoder as Decoder
    from rlvr.engine.device import release_memory as release_memory
    from rlvr.engine.frozen import frozen_decoder as frozen_decoder
    from rlvr.engine.grammar import GrammarError as GrammarError
    from rlvr.engine.grammar import schema_of as schema_of
    from rlvr.engine.loaded_model import check_environment as check_environment
    from rlvr.engine.loaded_model import load_model as load_model
    from rlvr.engine.lora_engine import Engine as Engine
    from rlvr.engine.merged_weights import pack_frozen as pack_frozen
    from rlvr.engine.models import ALIASES as ALIASES
    from rlvr.engine.models import ModelError as ModelError
    from rlvr.engine.models import model_must_resolve as model_must_resolve
    from rlvr.engine.models import resolve_model as resolve_model
    from rlvr.engine.process import ServerProcess as ServerProcess
    from rlvr.engine.process import ServerProcessError as ServerProcessError
    from rlvr.engine.server import ApiError as ApiError
    from rlvr.engine.server import ChatRequest as ChatRequest
    from rlvr.engine.server import Route as Route
    from rlvr.engine.server import ServerThread as ServerThread
    from rlvr.engine.server import create_app as create_app
    from rlvr.engine.server import serve as serve
    from rlvr.engine.server import serve_frozen as serve_frozen
    from rlvr.engine.types import THREADS_ENV as THREADS_ENV
    from rlvr.engine.types import EngineCounters as EngineCounters
    from rlvr.engine.types import Precision as Precision
    from rlvr.engine.weights import BaseWeights as BaseWeights
