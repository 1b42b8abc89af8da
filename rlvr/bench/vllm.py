"""`rlvr bench serve --inference vllm`: vLLM's CPU server against rlvr's engine, same process.

The same chat requests (the serve benchmark's prompts, T=1, logprobs on, `max_tokens` each) go at
each concurrency to four targets, alternating, medians reported in completion tokens/s:

- rlvr / lora: rlvr's policy endpoint with the run's LoRA adapter (merged, as rollouts sample);
- rlvr / base: the base weights on rlvr's engine (the local judge's way);
- vllm / lora: a vLLM server started here, the same adapter loaded at runtime, sampled through
  vLLM's LoRA kernels;
- vllm / base: that server's base model.

Also: the vLLM server's startup seconds, adapter-load seconds, and the peak resident memory of
both processes (rlvr's own; vLLM's server and engine-core processes together).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import openai
import torch

from rlvr.engine import resolve_model
from rlvr.engine.bench import Target, _endpoint, _prompts, _registered, _side_server, log
from rlvr.inference.server import ServerSpec, VllmServer, server_threads
from rlvr.metrics import Figures, peak_rss_gb

GIB = 1024**3
ADAPTER_NAME = "bench-lora"
LOG_NAME = "vllm-bench.log"


class VllmServeFigures(Figures):
    """`rlvr bench serve --inference vllm`: tokens/s of each target at each concurrency."""

    bench: str = "serve-vllm"
    threads_rlvr: int
    threads_vllm: int
    max_tokens: int
    repeats: int
    tok_s: dict[str, dict[str, float]]  # concurrency -> target -> median tokens/s
    vllm_startup_s: float
    vllm_adapter_load_s: float
    vllm_peak_rss_gb: float
    peak_rss_gb: float


async def run_vllm_serve_bench(
    model_name: str = "smollm2-135m",
    concurrency: tuple[int, ...] = (8, 32),
    max_tokens: int = 64,
    repeats: int = 3,
    threads: int | None = None,
) -> VllmServeFigures:
    """Tokens/s of rlvr's engine and vLLM, LoRA and base, at each concurrency (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-vllm-") as path:
        backend, model = await _registered(path, model_name, threads)
        engine = backend.engine(model)
        adapter = engine.adapters.checkpoint_dir(engine.adapters.live_step)
        side, side_targets = await asyncio.to_thread(_side_server, engine, model_name)
        policy = openai.AsyncOpenAI(base_url=await backend.serve(), api_key=backend.api_key)
        spec = ServerSpec(model_dir=resolve_model(model_name))
        log("starting the vLLM server ...")
        server = await asyncio.to_thread(VllmServer.start, spec, Path(path) / LOG_NAME)
        log(f"vLLM server up in {server.startup_s:.1f} s")
        try:
            load_s = await asyncio.to_thread(_load_adapter, server, adapter)
            vllm = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=server.key)
            targets = {
                "rlvr_lora": Target(client=policy, name=model.get_inference_name()),
                "rlvr_base": side_targets["base"],
                "vllm_lora": Target(client=vllm, name=ADAPTER_NAME),
                "vllm_base": Target(client=vllm, name=spec.served_name),
            }
            for target in targets.values():  # warm-up: first requests load and allocate
                await _endpoint(target, _prompts(2), 4, True, 0)
            table = {
                str(n): await _rates(targets, _prompts(n), max_tokens, repeats, server)
                for n in concurrency
            }
        finally:
            await asyncio.to_thread(server.stop)
            await asyncio.to_thread(side.stop)
            await backend.close()
    return VllmServeFigures(
        threads_rlvr=torch.get_num_threads(),
        threads_vllm=server_threads(dict(os.environ)),
        max_tokens=max_tokens,
        repeats=repeats,
        tok_s=table,
        vllm_startup_s=round(server.startup_s, 1),
        vllm_adapter_load_s=round(load_s, 2),
        vllm_peak_rss_gb=round(server.peak_rss_bytes / GIB, 2),
        peak_rss_gb=round(peak_rss_gb(), 2),
    )


def _load_adapter(server: VllmServer, adapter: Path) -> float:
    started = time.monotonic()
    response = httpx.post(
        f"{server.url}/v1/load_lora_adapter",
        json={"lora_name": ADAPTER_NAME, "lora_path": str(adapter)},
        headers={"Authorization": f"Bearer {server.key}"},
        timeout=120,
    )
    response.raise_for_status()
    return time.monotonic() - started


async def _rates(
    targets: dict[str, Target],
    prompts: list[str],
    max_tokens: int,
    repeats: int,
    server: VllmServer,
) -> dict[str, float]:
    """Median tokens/s of each target over `repeats` alternating runs of `prompts` at once."""
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for r in range(repeats):
        for name, target in targets.items():
            tokens, seconds = await _endpoint(target, prompts, max_tokens, True, 100 * r)
            rates[name].append(tokens / seconds)
            server.sample_rss()
        log(
            f"{len(prompts)} at once, repeat {r}: "
            + ", ".join(f"{n} {v[-1]:.1f} tok/s" for n, v in rates.items())
        )
    return {name: round(statistics.median(values), 2) for name, values in rates.items()}
