"""`rlvr bench ...`: each command runs one benchmark against its bare baseline in the same process
and prints one JSON line last. Heavy modules are imported inside the commands, so `rlvr --help`
stays fast."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from rlvr.engine.bench import TurnsFigures
    from rlvr.metrics import Figures

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks; each prints one JSON line last.")

ModelOption = Annotated[str, typer.Option(help="policy model: alias, local HF dir, or hub id")]
ThreadsOption = Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's)")]
Overrides = Annotated[list[str] | None, typer.Argument(help="config overrides as key=value")]


def _fail(message: str, code: int = 2) -> NoReturn:
    from rlvr.redact import redact_error

    typer.echo(f"error: {redact_error(message)}", err=True)
    raise typer.Exit(code)


def _print_figures(run: Coroutine[Any, Any, Figures]) -> None:
    """Run a benchmark coroutine and print its JSON line. Model and config errors, and a task
    whose own code raised (named by file and line), are one line and exit 2
    (rlvr.training.failures.as_one_line); an error of rlvr's own keeps its traceback."""
    from rlvr.config import ConfigError
    from rlvr.engine import ModelError
    from rlvr.inference.errors import InferenceError
    from rlvr.training.failures import as_one_line

    try:
        result = asyncio.run(run)
    except Exception as error:
        known = isinstance(error, ModelError | ConfigError | InferenceError)
        said = as_one_line(error, known=known)
        if said is None:
            raise
        _fail(*said)
    typer.echo(result.line())


def _overrides(pairs: list[str] | None) -> dict[str, str]:
    from rlvr.config import ConfigError, pairs_to_dict

    try:
        return pairs_to_dict(pairs or [])
    except ConfigError as error:
        _fail(str(error))


@bench_app.command("hack")
def bench_hack(
    overrides: Overrides = None,
    record: Annotated[Path | None, typer.Option(help="write the evaluation history here")] = None,
    runs_root: Annotated[Path, typer.Option(help="where the run directory goes")] = Path("runs"),
) -> None:
    """Train on a length-rewarding scorer; the divergence alarm should fire."""
    from rlvr.bench.loop import hack_benchmark
    from rlvr.config import ConfigError, parse_overrides

    try:
        extra = parse_overrides(overrides or []).model_dump(exclude_unset=True)
    except ConfigError as error:
        _fail(str(error))
    _print_figures(hack_benchmark(runs_root, record, **extra))


@bench_app.command("serve")
def bench_serve(
    model: ModelOption = "smollm2-135m",
    requests: Annotated[int, typer.Option(help="concurrent requests", min=1)] = 8,
    max_tokens: Annotated[int, typer.Option(help="completion tokens per request", min=1)] = 64,
    repeats: Annotated[int, typer.Option(help="alternating repeats (median)", min=1)] = 3,
    threads: ThreadsOption = None,
    inference: Annotated[
        str,
        typer.Option(
            help="rlvr: its endpoint against a bare generate; vllm: a vLLM server against "
            "rlvr's engine at 8 and 32 concurrent requests (`make vllm-env` first)"
        ),
    ] = "rlvr",
) -> None:
    """Endpoint tokens/s for concurrent requests ÷ a bare batched generate of the same prompts
    (ratio_vs_bare), plus one-at-a-time tokens/s and peak RSS. With --inference vllm: a vLLM
    server and rlvr's engine, LoRA and base, at 8 and 32 concurrent requests, with vLLM's startup
    seconds and both processes' peak RSS. Prints one JSON line last."""
    if inference == "vllm":
        from rlvr.bench.vllm import run_vllm_serve_bench

        _print_figures(run_vllm_serve_bench(model, (8, 32), max_tokens, repeats, threads))
        return
    if inference != "rlvr":
        _fail(f"--inference {inference!r}: expected rlvr or vllm")
    from rlvr.engine import run_serve_bench

    _print_figures(run_serve_bench(model, requests, max_tokens, repeats, threads))


@bench_app.command("turns")
def bench_turns(
    model: ModelOption = "smollm2-135m",
    conversations: Annotated[int, typer.Option(help="chats played together", min=1)] = 8,
    turns: Annotated[int, typer.Option(help="turns per chat", min=1)] = 4,
    max_tokens: Annotated[int, typer.Option(help="completion tokens per turn", min=1)] = 24,
    repeats: Annotated[int, typer.Option(help="alternating repeats (median)", min=1)] = 3,
    threads: ThreadsOption = None,
) -> None:
    """Multi-turn chats with the policy's prefix cache ÷ the same engine with it off
    (ratio_vs_bare; speedup is its inverse), plus the share of prompt tokens reused."""
    from rlvr.engine import run_turns_bench

    async def run() -> TurnsFigures:
        return run_turns_bench(model, conversations, turns, max_tokens, repeats, threads)

    _print_figures(run())


@bench_app.command("train")
def bench_train(
    model: ModelOption = "smollm2-135m",
    groups: Annotated[int, typer.Option(help="trajectory groups per step", min=1)] = 2,
    group_size: Annotated[int, typer.Option(help="trajectories per group", min=2)] = 8,
    max_tokens: Annotated[int, typer.Option(help="completion tokens per rollout", min=1)] = 48,
    repeats: Annotated[int, typer.Option(help="alternating repeats (median)", min=1)] = 3,
    threads: ThreadsOption = None,
) -> None:
    """backend.train step time (over the sequences' prefix tree) ÷ a bare forward+backward+AdamW
    of each sequence in full (ratio_vs_bare), plus peak RSS. Prints one JSON line last."""
    from rlvr.engine import run_train_bench

    _print_figures(run_train_bench(model, groups, group_size, max_tokens, repeats, threads))


@bench_app.command("eval")
def bench_eval(
    task: Annotated[str, typer.Argument(help="a task name (see `rlvr tasks`)")] = "math",
    overrides: Overrides = None,
    items: Annotated[int, typer.Option(help="held-out items evaluated", min=1)] = 32,
    repeats: Annotated[int, typer.Option(help="alternating repeats (median)", min=1)] = 3,
    threads: ThreadsOption = None,
    run: Annotated[
        Path | None,
        typer.Option(
            help="a finished run directory: evaluate its best checkpoint (the trained agent) on "
            "its own held-out items; TASK and overrides are then ignored"
        ),
    ] = None,
) -> None:
    """Evaluation items/s with every item in flight (as the loop validates) ÷ a bare batched
    greedy generate of the same first-turn prompts (ratio_vs_bare), and ÷ the same items one at a
    time (speedup_vs_one_at_a_time). Prints one JSON line last."""
    from rlvr.bench.eval import run_eval_bench
    from rlvr.runs.store import SUMMARY

    if run is not None and not (run / SUMMARY).is_file():
        _fail(f"--run {run}: no {SUMMARY} there; expected a finished run directory")
    _print_figures(run_eval_bench(task, items, repeats, threads, run, **_overrides(overrides)))


@bench_app.command("step")
def bench_step(
    task: Annotated[str, typer.Argument(help="a task name (see `rlvr tasks`)")] = "math",
    overrides: Overrides = None,
    steps: Annotated[int, typer.Option(help="RL steps measured (median)", min=1)] = 2,
    bare: Annotated[bool, typer.Option(help="also time the bare baselines")] = True,
    inference: Annotated[
        str,
        typer.Option(
            help="rlvr: rlvr's engine samples; vllm: the same steps sampled by a vLLM server, "
            "then by rlvr's engine, side by side (`make vllm-env` first)"
        ),
    ] = "rlvr",
) -> None:
    """Real RL steps of TASK at its defaults (its warm start first): seconds in rollouts,
    scoring and the update, tokens prompted (prefix-cached), decoded and trained, each against
    its bare figure (a batched generate of the same turn prompts; a bare forward+backward+AdamW
    of each sequence in full). With --inference vllm: both engines' figures (step, rollout,
    update and adapter-load seconds, evaluation seconds per item, vLLM's startup, both
    processes' memory) and vLLM's ÷ rlvr's. Prints one JSON line last."""
    from rlvr.bench.step import run_step_bench, run_step_side_by_side

    extra = _overrides(overrides)
    if "inference" in extra or any(k.startswith("inference.") for k in extra):
        _fail("bench step: choose the engine with --inference, not an inference= override")
    if inference == "vllm":
        _print_figures(run_step_side_by_side(task, steps, bare, **extra))
        return
    if inference != "rlvr":
        _fail(f"--inference {inference!r}: expected rlvr or vllm")
    _print_figures(run_step_bench(task, steps, bare, **extra))


@bench_app.command("phases")
def bench_phases(
    task: Annotated[str, typer.Argument(help="a task name (see `rlvr tasks`)")] = "email",
    overrides: Overrides = None,
    demonstrations: Annotated[
        int, typer.Option(help="warm-start demonstrations (whole SFT batches; 0: none)", min=0)
    ] = 8,
    steps: Annotated[int, typer.Option(help="RL steps measured (0: none)", min=0)] = 1,
    items: Annotated[
        int,
        typer.Option(
            help="held-out items evaluated, in flight together up to rollout_concurrency "
            "(a run's validation: up to max_val_items)",
            min=0,
        ),
    ] = 8,
    peak_size: Annotated[int, typer.Option(help="the peak's square torch.mm size", min=64)] = 2048,
    peak_repeats: Annotated[int, typer.Option(help="torch.mm calls (best kept)", min=1)] = 10,
) -> None:
    """This CPU's matrix-product peak (the best of a few large torch.mm, in each precision the
    run's phases use, on a run's torch threads), then a short real run of TASK at its defaults:
    the warm start's SFT, an evaluation, RL steps' rollouts (prefill and decode) and update, each
    as tokens/s, useful FLOP/s and a share of the peak; with the issue-69 goals for email on the
    AVX2 path (a step at most 30 s, an evaluation at most 1.0 s an item) beside what was
    measured (no exit code). Prints one JSON line last."""
    from rlvr.bench.phases import run_phases_bench

    extra = _overrides(overrides)
    _print_figures(
        run_phases_bench(task, demonstrations, steps, items, peak_size, peak_repeats, **extra)
    )
