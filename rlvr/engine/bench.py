"""Benchmarks of the local policy (LocalTorchBackend), each against the bare torch work it wraps.

- serve: completion tokens/s of N concurrent requests through the OpenAI endpoint (logprobs on, as
  rollouts ask) / a bare batched `model.generate` of the same N prompts with the same (merged)
  weights in the same process; also the figure for the same requests sent one at a time (the
  batching gain), and the same requests on the base weights (`lora_vs_base`: what sampling with
  an adapter costs) and on the adapter unmerged (PEFT's LoRA layers).
- turns: multi-turn chats (system prompt, question, one observation per turn) with the prefix
  cache / the same engine with it off: what reusing earlier turns' keys/values saves.
- train: wall time of `backend.train` on real sampled groups / a bare forward + backward + AdamW
  of each sequence in full (plain causal attention, cross-entropy on the trained tokens), where
  the backend computes the sequences' prefix tree, cut where its levels cost more than they save
  (`tree_tokens` of `sequence_tokens`).

Each returns its typed figures (rlvr.metrics.Figures) whose `ratio_vs_bare` is the headline, plus
peak RSS. Runs alternate
(bare, ours, bare, ours, ...) and report medians, because the machine may be shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import art
import openai
import torch
from art.preprocessing.pack import PackedTensors
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, ConfigDict

from rlvr.engine.adapters import AdapterStore
from rlvr.engine.backend import LocalTorchBackend, pack_groups
from rlvr.engine.decoding import Decoder
from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.lora_engine import Engine
from rlvr.engine.server import Route, ServerThread, create_app
from rlvr.engine.types import SampleRow
from rlvr.engine.weights import WeightsView
from rlvr.metrics import Figures, peak_rss_gb

RATIO = "ratio_vs_bare"
PEAK_RSS = "peak_rss_gb"
BENCH_PROMPTS = [
    "Write a long story about a lighthouse keeper.",
    "Describe your favourite city in detail.",
    "Explain how a bicycle works, step by step.",
    "Tell me about the history of tea.",
    "Write a letter to a friend about a trip to the mountains.",
    "Describe a day in the life of a honeybee.",
    "Explain why the sky is blue to a child.",
    "Write a recipe for a vegetable soup and explain each step.",
]


def sampling_precision(loaded: LoadedModel) -> str:
    """fp32, bf16, or mixed (bf16 prefill, fp32 decoding): how the engine samples; with
    "+packed bf16|fp32" where its projections use packed weights (rlvr.engine.packed_weights)."""
    names = {
        "bf16" if d is not None else "fp32" for d in (loaded.prefill_dtype, loaded.sample_dtype)
    }
    precision = names.pop() if len(names) == 1 else "mixed"
    if not loaded.packed:
        return precision
    return f"{precision}+packed {'bf16' if loaded.products_dtype == torch.bfloat16 else 'fp32'}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _prompts(requests: int) -> list[str]:
    return [BENCH_PROMPTS[i % len(BENCH_PROMPTS)] for i in range(requests)]


async def _registered(
    path: str, model_name: str, threads: int | None
) -> tuple[LocalTorchBackend, art.TrainableModel[Any, Any]]:
    if threads:
        torch.set_num_threads(threads)
    backend = LocalTorchBackend(path=path)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="bench", project="bench", base_model=model_name
    )
    # LocalTorchBackend implements ART's Backend; its train() names the keyword arguments it takes.
    await model.register(cast("art.Backend", backend))
    return backend, model


def bare_generate(
    loaded: LoadedModel,
    prompts: list[str] | list[list[ChatCompletionMessageParam]],
    max_tokens: int,
    temperature: float = 1.0,
    weights: WeightsView | None = None,
) -> tuple[int, float]:
    """Completion tokens (up to and including the end token) and seconds of one batched
    `generate` call of `loaded`'s model as it is: user prompts or whole chats, sampled at
    `temperature` (1, like the endpoint in `serve`; 0 = greedy, like an evaluation); with
    `weights` applied (e.g. an adapter's merged view) when given."""
    tokenizer = loaded.tokenizer
    chats = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
    ids = [
        tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for chat in chats
    ]
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id or 0
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=loaded.device)
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=loaded.device)
    applied = weights.applied() if weights is not None else contextlib.nullcontext()
    with loaded.lock, applied, torch.inference_mode(), loaded.autocast("sample"):
        started = time.perf_counter()
        out = loaded.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            **(
                {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
                if temperature > 0
                else {"do_sample": False}
            ),
            max_new_tokens=max_tokens,
            pad_token_id=pad,
        )
        seconds = time.perf_counter() - started
    tokens = 0
    for row in out[:, width:].tolist():
        ends = [i for i, t in enumerate(row) if t in loaded.stop_ids]
        tokens += ends[0] + 1 if ends else len(row)
    return tokens, seconds


class ServeFigures(Figures):
    """`rlvr bench serve`: completion tokens/s of each way the same requests are served."""

    bench: str = "serve"
    device: str
    precision: str
    threads: int
    requests: int
    max_tokens: int
    bare_generate_tok_s: float
    endpoint_concurrent_tok_s: float
    endpoint_sequential_tok_s: float
    base_tok_s: float
    lora_unmerged_tok_s: float
    lora_vs_base: float
    merged_mb: float
    batching_gain: float
    passes_per_concurrent_run: float
    peak_rss_gb: float
    ratio_vs_bare: float


class TrainFigures(Figures):
    """`rlvr bench train`: backend.train's step time against a bare step of each sequence."""

    bench: str = "train"
    device: str
    precision: str
    threads: int
    trajectories: int
    sequences: int
    sequence_tokens: int
    tree_tokens: int
    trained_tokens: int
    bare_step_s: float
    backend_step_s: float
    peak_rss_gb: float
    ratio_vs_bare: float


class TurnsFigures(Figures):
    """`rlvr bench turns`: multi-turn chats with the prefix cache against it off."""

    bench: str = "turns"
    device: str
    threads: int
    conversations: int
    turns: int
    max_tokens: int
    bare_s: float
    prefix_cache_s: float
    prompt_tokens_reused: float
    speedup: float
    peak_rss_gb: float
    ratio_vs_bare: float


class Target(BaseModel):
    """A model name on an OpenAI-compatible endpoint."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    client: openai.AsyncOpenAI
    name: str


async def _endpoint(
    target: Target, prompts: list[str], max_tokens: int, concurrent: bool, seed: int
) -> tuple[int, float]:
    async def one(i: int, prompt: str) -> int:
        response = await target.client.chat.completions.create(
            model=target.name,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=1.0,
            logprobs=True,
            seed=seed + i,
        )
        return response.usage.completion_tokens if response.usage else 0

    started = time.perf_counter()
    if concurrent:
        counts = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    else:
        counts = [await one(i, p) for i, p in enumerate(prompts)]
    return sum(counts), time.perf_counter() - started


def _side_server(engine: Engine, model_name: str) -> tuple[ServerThread, dict[str, Target]]:
    """A second endpoint beside the policy's: the base weights as the local judge serves them
    (`base`, a model of their own), and the policy's live adapter sampled through PEFT's LoRA
    layers instead of merged (`unmerged`)."""
    from rlvr.engine.frozen import frozen_decoder
    from rlvr.engine.models import resolve_model

    adapters = engine.adapters
    unmerged = AdapterStore(
        engine.loaded, adapters.output_dir, adapters.live_step, lambda: None, merge=False
    )
    decoders = {
        "base": frozen_decoder(resolve_model(model_name)),
        "unmerged": Decoder(engine.loaded, unmerged),
    }

    def route(name: str) -> Route:
        return Route(engine=decoders[name], step=None)

    key = secrets.token_urlsafe(16)
    server = ServerThread(create_app(route, lambda: list(decoders), api_key=key))
    server.start()
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=key)
    return server, {name: Target(client=client, name=name) for name in decoders}


async def run_serve_bench(
    model_name: str = "smollm2-135m",
    requests: int = 8,
    max_tokens: int = 64,
    repeats: int = 3,
    threads: int | None = None,
) -> ServeFigures:
    """Completion tokens/s of `requests` concurrent chat requests: the LoRA policy's endpoint
    (merged weights), the base weights served the same way, the policy sampled unmerged, and a bare
    batched `generate` with the policy's merged weights; runs alternate, medians reported."""
    prompts = _prompts(requests)
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as path:
        backend, model = await _registered(path, model_name, threads)
        engine = backend.engine(model)
        server, side = await asyncio.to_thread(_side_server, engine, model_name)
        policy = openai.AsyncOpenAI(base_url=await backend.serve(), api_key=backend.api_key)
        targets = {"lora": Target(client=policy, name=model.get_inference_name())}
        targets |= side
        try:
            rates, passes = await _serve_repeats(engine, targets, prompts, max_tokens, repeats)
            tokens, seconds = await _endpoint(targets["lora"], prompts, max_tokens, False, 1000)
            sequential = tokens / seconds
            log(f"serve one at a time: {sequential:.1f} tok/s")
            merged_mb = engine.adapters.merged_bytes / 2**20
        finally:
            await asyncio.to_thread(server.stop)
            await backend.close()
    median = {name: statistics.median(values) for name, values in rates.items()}
    return ServeFigures(
        device=str(engine.loaded.device),
        precision=sampling_precision(engine.loaded),
        threads=torch.get_num_threads(),
        requests=requests,
        max_tokens=max_tokens,
        bare_generate_tok_s=round(median["bare"], 2),
        endpoint_concurrent_tok_s=round(median["lora"], 2),
        endpoint_sequential_tok_s=round(sequential, 2),
        base_tok_s=round(median["base"], 2),
        lora_unmerged_tok_s=round(median["unmerged"], 2),
        lora_vs_base=round(median["lora"] / median["base"], 3),
        merged_mb=round(merged_mb, 1),
        batching_gain=round(median["lora"] / sequential, 2),
        passes_per_concurrent_run=statistics.median(passes),
        peak_rss_gb=round(peak_rss_gb(), 2),
        ratio_vs_bare=round(median["lora"] / median["bare"], 3),
    )


async def _serve_repeats(
    engine: Engine, targets: dict[str, Target], prompts: list[str], max_tokens: int, repeats: int
) -> tuple[dict[str, list[float]], list[int]]:
    """Tokens/s per repeat of the bare generate and of each endpoint target, alternating; and the
    sampling passes each concurrent run of the policy took."""
    for target in targets.values():  # warm-up: servers, caches, the merged weights
        await _endpoint(target, prompts[:1], 4, True, 0)
    await asyncio.to_thread(bare_generate_policy, engine, prompts[:1], 4)
    rates: dict[str, list[float]] = {name: [] for name in ["bare", *targets]}
    passes = []
    for r in range(repeats):
        tokens, seconds = await asyncio.to_thread(bare_generate_policy, engine, prompts, max_tokens)
        rates["bare"].append(tokens / seconds)
        for name, target in targets.items():
            before = engine.decoder.counters()
            tokens, seconds = await _endpoint(target, prompts, max_tokens, True, 100 * r)
            rates[name].append(tokens / seconds)
            if name == "lora":
                passes.append(engine.decoder.counters().minus(before).sampling_passes)
        log(f"serve repeat {r}: " + ", ".join(f"{n} {v[-1]:.1f} tok/s" for n, v in rates.items()))
    return rates, passes


def bare_generate_policy(
    engine: Engine,
    prompts: list[str] | list[list[ChatCompletionMessageParam]],
    max_tokens: int,
    temperature: float = 1.0,
) -> tuple[int, float]:
    """`bare_generate` with the policy's live weights merged, as the endpoint samples them."""
    with engine.loaded.lock:
        view = engine.adapters.view(None)
    return bare_generate(engine.loaded, prompts, max_tokens, temperature, weights=view)


def _reward(text: str) -> float:
    """Deterministic, varied within a group: enough for GRPO to have advantages to train on."""
    return (len(text) % 7) / 6


async def _sampled_groups(
    model: art.TrainableModel[Any, Any], groups: int, group_size: int, max_tokens: int
) -> list[art.TrajectoryGroup]:
    client = model.openai_client()

    async def group(i: int) -> art.TrajectoryGroup:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": BENCH_PROMPTS[i % len(BENCH_PROMPTS)]}
        ]
        response = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            max_tokens=max_tokens,
            temperature=1.0,
            logprobs=True,
            n=group_size,
            seed=i,
        )
        return art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[*messages, c], reward=_reward(c.message.content or "")
                )
                for c in response.choices
            ]
        )

    return list(await asyncio.gather(*(group(i) for i in range(groups))))


def bare_train_step(
    loaded: LoadedModel, packed: PackedTensors, optimizer: torch.optim.Optimizer
) -> float:
    """Seconds of forward + backward + AdamW over the rows' sequences, each on its own (plain
    causal attention, cross-entropy on the trained tokens) with `loaded`'s model, nothing else:
    what a trainer that computes every sequence in full does."""
    from art.loss import shift_tensor

    lengths = (packed["group_ids"] != -1).sum(1).tolist()
    tokens = packed["tokens"].to(loaded.device)
    trained = shift_tensor(packed["assistant_mask"], False).to(loaded.device)
    with loaded.lock:
        started = time.perf_counter()
        for row, length in enumerate(lengths):
            with loaded.autocast("train"):
                logits = loaded.model(input_ids=tokens[row : row + 1, :length]).logits[0].float()
            targets = torch.nn.functional.pad(tokens[row, 1:length], (0, 1))
            at = trained[row, :length]
            loss = torch.nn.functional.cross_entropy(logits[at], targets[at])
            torch.autograd.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started


async def run_train_bench(
    model_name: str = "smollm2-135m",
    groups: int = 2,
    group_size: int = 8,
    max_tokens: int = 48,
    repeats: int = 3,
    threads: int | None = None,
) -> TrainFigures:
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as path:
        backend, model = await _registered(path, model_name, threads)
        engine = backend.engine(model)
        try:
            sampled = await _sampled_groups(model, groups, group_size, max_tokens)
            packed = pack_groups(engine.loaded.tokenizer, sampled)
            if packed is None:
                raise RuntimeError("bench train: the sampled groups carry no learning signal")
            lengths = (packed["group_ids"] != -1).sum(1).tolist()
            optimizer = torch.optim.AdamW(engine.adapters.trainable_parameters(), lr=1e-6)
            await asyncio.to_thread(bare_train_step, engine.loaded, packed, optimizer)  # warm-up
            bare_times, ours_times, metrics, tree_tokens = [], [], {}, 0
            for r in range(repeats):
                bare_times.append(
                    await asyncio.to_thread(bare_train_step, engine.loaded, packed, optimizer)
                )
                started, before = time.perf_counter(), engine.trainer.counters()
                result = await backend.train(model, sampled, learning_rate=1e-6)
                ours_times.append(time.perf_counter() - started)
                tree_tokens = engine.trainer.counters().minus(before).forwarded_tokens
                metrics = result.metrics
                log(
                    f"train repeat {r}: bare {bare_times[-1]:.2f} s, backend {ours_times[-1]:.2f} s"
                )
        finally:
            await backend.close()
    bare, ours = statistics.median(bare_times), statistics.median(ours_times)
    return TrainFigures(
        device=str(engine.loaded.device),
        precision="bf16" if engine.loaded.train_dtype is not None else "fp32",
        threads=torch.get_num_threads(),
        trajectories=groups * group_size,
        sequences=len(lengths),
        sequence_tokens=sum(lengths),
        tree_tokens=tree_tokens,
        trained_tokens=int(metrics.get("num_tokens", 0)),
        bare_step_s=round(bare, 3),
        backend_step_s=round(ours, 3),
        peak_rss_gb=round(peak_rss_gb(), 2),
        ratio_vs_bare=round(ours / bare, 3),
    )


# A multi-turn agent's shape: a long system prompt (instructions, tools), a question, then one
# tool observation per turn; every turn sends the whole chat again.
TURNS_SYSTEM = (
    "You are an assistant that answers questions by searching a mailbox. Tools, one per line: "
    "search(keywords) returns up to five message ids with subjects and dates; read(id) returns "
    "a message with its sender, date and body; answer(text) ends the episode with your answer. "
    "Reply with exactly one tool call per turn and nothing else. Prefer precise keywords; read a "
    "message before you answer from it; answer briefly with the name, date or amount asked for. "
    + " ".join(BENCH_PROMPTS)
)


def _observation(turn: int) -> str:
    return "\n".join(
        f"message {turn}-{i}: from person{i}@example.com on 2024-0{i + 1}-1{turn}, "
        f"subject: {BENCH_PROMPTS[(turn + i) % len(BENCH_PROMPTS)]}"
        for i in range(4)
    )


def play_turns(decoder: Decoder, conversations: int, turns: int, max_tokens: int) -> float:
    """Seconds to play `conversations` chats for `turns` turns, each turn one batched greedy
    `sample` call of every chat (greedy, so both modes do the same decoding work)."""
    chats = [
        [{"role": "system", "content": TURNS_SYSTEM}, {"role": "user", "content": p}]
        for p in _prompts(conversations)
    ]
    started = time.perf_counter()
    for turn in range(turns):
        rows = [
            SampleRow(
                prompt_ids=decoder.tokenizer.apply_chat_template(
                    chat, add_generation_prompt=True, tokenize=True, return_dict=False
                ),
                max_tokens=max_tokens,
                temperature=0.0,
            )
            for chat in chats
        ]
        for chat, sampled in zip(chats, decoder.sample(rows), strict=True):
            chat += [
                {"role": "assistant", "content": sampled.text},
                {"role": "user", "content": _observation(turn)},
            ]
    return time.perf_counter() - started


def run_turns_bench(
    model_name: str = "smollm2-135m",
    conversations: int = 8,
    turns: int = 4,
    max_tokens: int = 24,
    repeats: int = 3,
    threads: int | None = None,
) -> TurnsFigures:
    """Multi-turn chats with the prefix cache / the same engine with the cache off (bare)."""
    from rlvr.engine.models import resolve_model

    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as path:
        engine = Engine(resolve_model(model_name), Path(path))
        decoder = engine.decoder
        cache = decoder.prefixes
        budget = cache.max_bytes
        play_turns(decoder, 1, 1, 4)  # warm-up
        bare_times, ours_times, shares = [], [], []
        for r in range(repeats):
            cache.clear()
            cache.max_bytes = 0
            bare_times.append(play_turns(decoder, conversations, turns, max_tokens))
            cache.max_bytes = budget
            cache.clear()
            before = decoder.counters()
            ours_times.append(play_turns(decoder, conversations, turns, max_tokens))
            done = decoder.counters().minus(before)
            shares.append(done.cached_prompt_tokens / max(done.prompt_tokens, 1))
            log(f"turns repeat {r}: bare {bare_times[-1]:.2f} s, cached {ours_times[-1]:.2f} s")
    bare, ours = statistics.median(bare_times), statistics.median(ours_times)
    return TurnsFigures(
        device=str(engine.loaded.device),
        threads=torch.get_num_threads(),
        conversations=conversations,
        turns=turns,
        max_tokens=max_tokens,
        bare_s=round(bare, 2),
        prefix_cache_s=round(ours, 2),
        prompt_tokens_reused=round(statistics.median(shares), 3),
        speedup=round(bare / ours, 2),
        peak_rss_gb=round(peak_rss_gb(), 2),
        ratio_vs_bare=round(ours / bare, 3),
    )
