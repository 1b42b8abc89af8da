"""LocalVllmBackend: rlvr's LocalTorchBackend training, vLLM serving (`inference=vllm`).

Training stays on rlvr's engine (transformers + peft, ART's loss); rollouts and evaluations sample
from vLLM: a server this backend starts (`make vllm-env`'s environment) or the servers of
`inference.urls`. After each optimizer step the checkpoint the trainer saved is loaded into every
server as a LoRA adapter named `run@step` (rlvr.inference.servers), so the next rollouts, which name
that step, sample the new policy.

Each step's metrics carry the serving figures (`VllmMetric`), and `train/mismatch_kl`: the k3
estimate of KL(vLLM's sampling distribution || the trainer's) on the sampled tokens, measured by
the trainer before its update (two engines, two kernels: they never agree exactly; ART's
`truncated_importance_sampling` caps the ratio weights when they differ much).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import art
from art import dev
from art.types import LocalTrainResult, TrainSFTConfig
from art.utils.output_dirs import get_model_dir

from rlvr.config import InferenceConfig
from rlvr.engine import LocalTorchBackend, Precision, ServerThread, resolve_model
from rlvr.engine import types as engine_names
from rlvr.inference.errors import InferenceError
from rlvr.inference.server import ServerSpec, VllmServer
from rlvr.inference.servers import Endpoint, VllmServers, create_router, served_base_name
from rlvr.metrics import VllmMetric

logger = logging.getLogger(__name__)

GIB = 1024**3
LOG_NAME = "vllm-server.log"


class LocalVllmBackend(LocalTorchBackend):
    """`backend=local`, `inference.engine=vllm`: ART's Backend protocol with LocalTorchBackend's
    training and vLLM's serving (module docstring)."""

    def __init__(
        self,
        path: str,
        inference: InferenceConfig,
        lora_rank: int = 8,
        device: str | None = None,
        precision: Precision | None = None,
    ) -> None:
        super().__init__(path=path, device=device, precision=precision)
        self._inference = inference
        self._lora_rank = lora_rank
        self._servers: dict[str, VllmServers] = {}
        self._retried_seen = 0

    # ------------------------------------------------------------------ ART's Backend protocol

    async def _prepare_backend_for_training(
        self, model: art.TrainableModel[Any, Any], config: dev.OpenAIServerConfig | None = None
    ) -> tuple[str, str]:
        engine = await self._engine(model)
        if model.name not in self._servers:
            endpoints = await asyncio.to_thread(self._open_endpoints, model)
            self._servers[model.name] = VllmServers(
                model.name,
                endpoints,
                checkpoint_dir=engine.adapters.checkpoint_dir,
                live_step=lambda: engine.adapters.live_step,
            )
        if self._server is None:
            server = ServerThread(create_router(self._servers[model.name], self.api_key))
            await asyncio.to_thread(server.start)
            self._server = server
        return self._server.base_url, self.api_key

    async def serve(self, port: int = 0) -> str:
        raise InferenceError("inference=vllm: the run's endpoint routes to vLLM; register a model")

    async def train(
        self,
        model: art.TrainableModel[Any, Any],
        trajectory_groups: Iterable[art.TrajectoryGroup],
        **kwargs: Any,
    ) -> LocalTrainResult:
        """LocalTorchBackend's step, then its checkpoint loaded into every vLLM server."""
        servers = self.servers(model)
        servers.require_one()
        result = await super().train(model, trajectory_groups, **kwargs)
        load_s = await asyncio.to_thread(servers.load_everywhere, result.step)
        metrics = {**result.metrics, VllmMetric.ADAPTER_LOAD_S.value: load_s}
        if engine_names.SAMPLER_KL in result.metrics:
            metrics[VllmMetric.MISMATCH_KL] = result.metrics[engine_names.SAMPLER_KL]
        return dataclasses.replace(result, metrics=metrics)

    async def _train_sft(
        self,
        model: art.TrainableModel[Any, Any],
        trajectories: Iterable[art.Trajectory],
        config: TrainSFTConfig,
        dev_config: dev.TrainSFTConfig,
        verbose: bool = False,
    ) -> AsyncIterator[dict[str, float]]:
        async for metrics in super()._train_sft(model, trajectories, config, dev_config, verbose):
            yield metrics
        servers = self.servers(model)
        await asyncio.to_thread(servers.load_everywhere, await self._get_step(model))

    async def _delete_checkpoint_files(
        self, model: art.TrainableModel[Any, Any], steps_to_keep: list[int]
    ) -> None:
        root = Path(get_model_dir(model=model, art_path=self._path)) / "checkpoints"
        before = {int(p.name) for p in root.glob("[0-9]*") if p.name.isdigit()}
        await super()._delete_checkpoint_files(model, steps_to_keep)
        after = {int(p.name) for p in root.glob("[0-9]*") if p.name.isdigit()}
        if model.name in self._servers:
            await asyncio.to_thread(
                self._servers[model.name].unload_everywhere, sorted(before - after)
            )

    async def close(self) -> None:
        await super().close()  # the router first: no request reaches a stopping server
        every, self._servers = list(self._servers.values()), {}
        for servers in every:
            await asyncio.to_thread(servers.close)

    # ------------------------------------------------------------------ helpers

    def servers(self, model: art.Model[Any, Any]) -> VllmServers:
        """The servers behind a registered model."""
        return self._servers[model.name]

    def serving_metrics(self, model: art.Model[Any, Any]) -> dict[str, float]:
        """Startup seconds, resident memory, live servers and requests re-sent since the last
        call (the step's figures)."""
        servers = self.servers(model)
        started = [e.server for e in servers.endpoints if e.server is not None]
        retried, self._retried_seen = servers.retried - self._retried_seen, servers.retried
        figures = {
            VllmMetric.SERVERS.value: float(len(servers.alive())),
            VllmMetric.RETRIED.value: float(retried),
        }
        if started:
            figures[VllmMetric.STARTUP_S] = sum(s.startup_s for s in started)
            figures[VllmMetric.RSS_GB] = sum(s.sample_rss() for s in started) / GIB
        return figures

    def _open_endpoints(self, model: art.TrainableModel[Any, Any]) -> list[Endpoint]:
        """Connect to inference.urls, or start one server (blocking)."""
        if self._inference.urls:
            key = os.environ.get(self._inference.api_key_env, "")
            if not key:
                raise InferenceError(
                    f"inference.urls: set {self._inference.api_key_env} to the servers' API key "
                    "(inference.api_key_env names another variable)"
                )
            return [
                Endpoint(url, key, served_base_name(url, key), None) for url in self._inference.urls
            ]
        spec = ServerSpec(model_dir=resolve_model(model.base_model), lora_rank=self._lora_rank)
        log = Path(self._path).parent / LOG_NAME
        server = VllmServer.start(spec, log, timeout_s=self._inference.startup_timeout_s)
        logger.info("vLLM server up at %s in %.1f s", server.url, server.startup_s)
        return [Endpoint(server.url, server.key, spec.served_name, server)]
