"""`rlvr bench phases TASK`: how near each phase of a real run comes to this CPU's matrix-product
peak (issue 69, "the fp32 path near its limit").

In one process it measures the peak, then a short real run of TASK (email by default) on the
policy the task uses, and sets each phase's achieved FLOP/s against the peak of the precision the
phase ran in:

- the peak: the best of a few large square `torch.mm` calls (`matmul_peak`) in each precision the
  engine's phases use (rlvr.engine.device.choose_autocast: RLVR_PRECISION, else what the CPU runs
  fastest), on the same torch threads as the run (RLVR_TORCH_THREADS, else torch's default);
- the warm start: `--demonstrations` demonstrations through the loop's own SFT path (whole
  batches of `sft_batch_size`);
- the evaluation after it: `--items` held-out items, greedy, in flight together as a run's
  validation puts them (up to `rollout_concurrency`). After a few demonstrations the policy's
  episodes end sooner than after a run's whole warm start (email's: 96), so the evaluation's
  seconds an item are a run's only with that many;
- `--steps` real RL steps (the loop's own, rlvr.bench.step.bench_one_step): their rollouts, split
  by the engine's counters into prompt prefill and decode steps, and their update.

Work is counted as useful FLOPs from the policy's parameter count (`ModelSize`): a token's forward
is 2 FLOPs per parameter it is multiplied by. Attention's products over the context are left out
(4·layers·width FLOPs a token per token before it: 0.07 MFLOP for SmolLM2-135M, against 0.27 GFLOP
for its weights, so a quarter more at a 1,000-token context), and every ratio is a lower bound.
Each ratio of the peak is the seconds the phase's work would take at the peak of its precision ÷
the seconds it took; the raw figures (tokens, seconds, tok/s, FLOP/s) are printed beside. Beside
them the issue's goals for the email task on the AVX2 path (GOAL_STEP_S, GOAL_EVAL_S_PER_ITEM) are
printed with what was measured; they set no exit code.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from rlvr.bench.step import StepFigures, bench_one_step, rounded
from rlvr.config import RunConfig
from rlvr.engine import THREADS_ENV, EngineCounters, LocalTorchBackend
from rlvr.engine.bench import log, sampling_precision
from rlvr.engine.loaded_model import LoadedModel
from rlvr.engine.types import whole_number
from rlvr.memory import EVALUATION, WARM_START, RssWatch
from rlvr.metrics import Figures, peak_rss_gb
from rlvr.task_api.plugins import task_config
from rlvr.training.backends import engine_counters
from rlvr.training.session import Session, open_session
from rlvr.training.warmstart import warm_start
from rlvr.types import Item

# The peak's product: square matrices of this size (2·n³ FLOPs a call: 17 GFLOP at 2048, a tenth
# of a second or two on a 2-core CPU, far past where the kernel is compute-bound), its best of
# this many calls after one warm-up.
PEAK_SIZE = 2048
PEAK_REPEATS = 10

# A training step's useful work a token, in forwards (the module docstring, `ModelSize`).
TRAIN_FORWARDS = 2

# Issue 69's goals on the AVX2 path (fp32 throughout, torch held to AVX2 kernels).
GOAL_TASK = "email"
GOAL_STEP_S = 30.0  # an email RL step at its defaults, at most
GOAL_EVAL_S_PER_ITEM = 1.0  # an evaluation, seconds an item at most
AVX2 = "AVX2"  # torch's CPU capability on the AVX2 path (ATEN_CPU_CAPABILITY=avx2)

PRECISION_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def precision_name(dtype: torch.dtype | None) -> str:
    """fp32 or bf16: the name of an autocast dtype (None: fp32)."""
    return PRECISION_NAMES[dtype or torch.float32]


def matmul_peak(
    dtype: torch.dtype = torch.float32,
    size: int = PEAK_SIZE,
    repeats: int = PEAK_REPEATS,
    device: torch.device | None = None,
) -> float:
    """This machine's matrix-product peak in FLOP/s: the best of `repeats` `torch.mm` calls of
    two `size`×`size` matrices in `dtype` (2·size³ FLOPs each) into a preallocated result, after
    one warm-up call, on torch's current threads. Best, not median: a shared machine only ever
    slows a call down."""
    device = device or torch.device("cpu")
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(device, dtype) for _ in range(2))
    out = torch.empty(size, size, dtype=dtype, device=device)
    best = math.inf

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        torch.mm(a, b, out=out)  # warm-up: the kernel's buffers, the threads' pool
        for _ in range(max(1, repeats)):
            synchronize()
            started = time.perf_counter()
            torch.mm(a, b, out=out)
            synchronize()
            best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


class ModelSize(BaseModel):
    """The parameters a token's forward multiplies by: the decoder's (`body`: its projections,
    LoRA's included, and its norms) and the LM head's. The input embeddings are a lookup, so
    they count in neither (a head tied to them counts once, as the head).

    A forward is 2·parameters FLOPs a token; a prompt's prefill computes the head for its last
    token only, so it counts the body alone. A LoRA training step is TRAIN_FORWARDS (2)
    forwards a token, 4·parameters: the forward, and a backward that carries the activations'
    gradients back through every frozen weight (one product as large as the forward's) but forms
    no weight gradient for them (LoRA's own are under 1 % of the parameters), so not the 3
    forwards of full fine-tuning; the forward an RL update recomputes in its backward
    (RLVR_RECOMPUTE) is work the CPU does that this leaves out, as are padding and rejected
    drafts: the figures are of useful work."""

    model_config = ConfigDict(frozen=True)

    body: int
    head: int

    @classmethod
    def of(cls, model: Any) -> ModelSize:
        embeddings = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        total = sum(p.numel() for p in model.parameters())  # a tied weight once
        tied = head.data_ptr() == embeddings.data_ptr()
        body = total - embeddings.numel() - (0 if tied else head.numel())
        return cls(body=body, head=head.numel())

    def forward_flops(self, tokens: float, head: bool = True) -> float:
        return 2.0 * (self.body + (self.head if head else 0)) * tokens


def phase_precisions(loaded: LoadedModel) -> dict[str, str]:
    """The precision of each phase's matrix products: a prompt's prefill and training in their
    autocast dtype; decoding in its own, or in the packed weights' dtype where they are packed
    (rlvr.engine.loaded_model.sampling_products)."""
    decode = loaded.products_dtype if loaded.packed else loaded.sample_dtype
    return {
        "prefill": precision_name(loaded.prefill_dtype),
        "decode": precision_name(decode),
        "train": precision_name(loaded.train_dtype),
    }


Work = list[tuple[float, float]]  # (FLOPs, the peak FLOP/s of their precision) pairs


class Achieved(BaseModel):
    """One phase's useful FLOP/s and its share of the peak (None where it did no work)."""

    model_config = ConfigDict(frozen=True)

    flop_s: float | None = None
    vs_peak: float | None = None


def achieved(work: Work, seconds: float) -> Achieved:
    """The FLOP/s of `work` done in `seconds`, and its share of the peak: the seconds the work
    takes at its peak ÷ `seconds`."""
    flops = sum(f for f, _ in work)
    if flops <= 0 or seconds <= 0:
        return Achieved()
    at_peak = sum(f / peak for f, peak in work)
    return Achieved(flop_s=float(f"{flops / seconds:.4g}"), vs_peak=rounded(at_peak / seconds))


def per_s(tokens: float, seconds: float) -> float | None:
    return round(tokens / seconds, 2) if tokens > 0 and seconds > 0 else None


class PhasesFigures(Figures):
    """`rlvr bench phases`: each phase's raw figures (tokens, seconds, tok/s), its useful FLOP/s
    and its share of the peak measured in the same run (`*_vs_peak`); the issue's goals beside
    (None where the task is not the goals' or a phase was not run)."""

    bench: str = "phases"
    task: str
    model: str
    device: str
    precision: str  # sampling's (rlvr.engine.bench.sampling_precision), then training's
    cpu_capability: str  # torch's CPU kernels: AVX2, AVX512, ...
    avx2_path: bool  # fp32 throughout on AVX2 kernels: where the goals are set
    threads: int
    parameters: int  # body + head (ModelSize)
    peak_size: int
    peak_fp32_flop_s: float | None
    peak_bf16_flop_s: float | None
    seed: int  # the split's, the demonstrations' and their order's
    # the warm start: demonstrations through the loop's SFT path, at its rate and schedule
    sft_learning_rate: float
    sft_schedule: str
    sft_demonstrations: int
    warm_start_s: float | None  # wall, the demonstrations' making included
    sft_tokens: int  # tokens computed (forward and backward)
    sft_s: float | None  # seconds the trainer held the model
    sft_tok_s: float | None
    sft_flop_s: float | None
    sft_vs_peak: float | None
    sft_loss_last: float | None  # the last batch's loss: where the warm start ended
    # the evaluation after the warm start
    eval_items: int
    eval_accuracy: float | None  # ground truth over its items: what the warm start taught
    eval_s_per_item: float | None
    eval_prefilled_tokens: int
    eval_decoded_tokens: int
    eval_tok_s: float | None  # decoded tokens ÷ the evaluation's wall seconds
    eval_flop_s: float | None
    eval_vs_peak: float | None
    # RL steps: medians of their seconds; tokens, rates and ratios over all of them
    steps: int
    step_s: float | None
    rollout_s: float | None
    update_s: float | None
    prefilled_tokens: int
    prefill_s: float | None
    prefill_tok_s: float | None
    prefill_flop_s: float | None
    prefill_vs_peak: float | None
    decoded_tokens: int
    decode_s: float | None  # the decoder's seconds less its prefills'
    decode_tok_s: float | None
    decode_flop_s: float | None
    decode_vs_peak: float | None
    rollout_tok_s: float | None  # decoded tokens ÷ the rollouts' wall seconds
    rollout_vs_peak: float | None  # prefill and decode work ÷ the rollouts' wall seconds
    update_tokens: int  # tokens computed (forward and backward): their trees
    trained_tokens: int
    update_train_s: float | None  # seconds the trainer held the model
    update_tok_s: float | None
    update_flop_s: float | None
    update_vs_peak: float | None
    # issue 69's goals, on the AVX2 path
    goal_step_s: float | None
    step_meets_goal: bool | None
    goal_eval_s_per_item: float | None
    eval_meets_goal: bool | None
    peak_rss_gb: float


class Measured(BaseModel):
    """What the engine counted over one phase, its wall seconds and how many things it did
    (demonstrations trained, items evaluated)."""

    model_config = ConfigDict(frozen=True)

    done: EngineCounters
    seconds: float
    count: int
    loss_last: float | None = None  # the warm start's last batch loss
    accuracy: float | None = None  # the evaluation's


class Peaks(BaseModel):
    """The policy's size, the precision of each phase's products and the peak of each."""

    model_config = ConfigDict(frozen=True)

    size: ModelSize
    precisions: dict[str, str]  # phase (prefill, decode, train) -> fp32 | bf16
    flop_s: dict[str, float]  # fp32 | bf16 -> the measured peak

    def sampling(self, done: EngineCounters) -> tuple[Work, Work]:
        """The useful work of a prompt's prefill and of the decode steps in `done`."""
        prefill = self.size.forward_flops(done.prefilled_tokens, head=False)
        decode = self.size.forward_flops(done.decoded_tokens)
        return (
            [(prefill, self.flop_s[self.precisions["prefill"]])],
            [(decode, self.flop_s[self.precisions["decode"]])],
        )

    def training(self, tokens: int) -> Work:
        """The useful work of training on `tokens` computed tokens."""
        flops = TRAIN_FORWARDS * self.size.forward_flops(tokens)
        return [(flops, self.flop_s[self.precisions["train"]])]


def measure_peaks(loaded: LoadedModel, size: int, repeats: int) -> Peaks:
    """The peak of each precision `loaded`'s phases compute in, on its device."""
    precisions = phase_precisions(loaded)
    flop_s = {
        name: matmul_peak(dtype, size, repeats, loaded.device)
        for dtype, name in PRECISION_NAMES.items()
        if name in precisions.values()
    }
    return Peaks(size=ModelSize.of(loaded.model), precisions=precisions, flop_s=flop_s)


def counted(run: Session) -> EngineCounters:
    found = engine_counters(run.policy)
    assert found is not None, "the policy is rlvr's engine (checked when the session opens)"
    return found


async def measured_warm_start(run: Session, watch: RssWatch) -> Measured | None:
    """The loop's warm start (its demonstrations, then its SFT steps), with no budget share to
    cut it; None without one (sft_steps=0)."""
    cfg = run.cfg
    if cfg.sft_steps <= 0:
        return None
    before, started = counted(run), time.monotonic()
    with watch.phase(WARM_START):
        row = await warm_start(cfg, run.environment, run.policy.model, run.split.train, share=1.0)
    seconds = time.monotonic() - started
    return Measured(
        done=counted(run).minus(before),
        seconds=seconds,
        count=int(row.demonstrations or 0),
        loss_last=row.loss_last,
    )


def held_out(run: Session, items: int) -> list[Item]:
    """The first `items` held-out items: validation first, then test (as rlvr bench eval)."""
    return (run.split.val + run.split.test)[:items]


async def measured_evaluation(run: Session, items: int, watch: RssWatch) -> Measured | None:
    """One evaluation of `items` held-out items, greedy, in flight together up to
    `rollout_concurrency`, as a run validates; None without any."""
    chosen = held_out(run, items)
    if not chosen:
        return None
    before, started = counted(run), time.monotonic()
    with watch.phase(EVALUATION):
        evaluated = await run.evaluate(chosen, "val", "phases: evaluation")
    seconds = time.monotonic() - started
    return Measured(
        done=counted(run).minus(before),
        seconds=seconds,
        count=len(chosen),
        accuracy=evaluated.accuracy,
    )


def median_of(per_step: list[StepFigures], key: str) -> float | None:
    values = [v for f in per_step if (v := getattr(f, key)) is not None]
    return rounded(statistics.median(values)) if values else None


def seconds_or_none(value: float) -> float | None:
    return round(value, 3) if value > 0 else None


async def run_phases_bench(
    task: str = GOAL_TASK,
    demonstrations: int = 8,
    steps: int = 1,
    items: int = 8,
    peak_size: int = PEAK_SIZE,
    peak_repeats: int = PEAK_REPEATS,
    **overrides: Any,
) -> PhasesFigures:
    """The peak, then a short real run of `task` at its defaults (with `overrides`): the warm
    start on `demonstrations` (rounded up to whole SFT batches; 0: none, as is an `sft_steps`
    override), an evaluation of `items` held-out items, and `steps` RL steps (0: none); each
    phase's raw figures and useful FLOP/s against the peak of its precision."""
    batch = task_config(task, **overrides).sft_batch_size
    sft_steps = math.ceil(demonstrations / batch) if demonstrations > 0 else 0
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-phases-") as path:
        options = {**overrides, "sft_steps": sft_steps, "run_dir": str(Path(path) / "run")}
        cfg = task_config(task, **options)
        with RssWatch() as watch:
            async with open_session(cfg, None, None, None) as run:
                backend = run.policy.backend
                if not isinstance(backend, LocalTorchBackend):
                    raise ValueError(
                        "rlvr bench phases measures rlvr's own engine (backend=local), "
                        f"not {cfg.backend}"
                    )
                loaded = backend.engine(run.policy.model).loaded
                # torch's threads are set per thread, and the engine set its own in a worker's
                if threads := whole_number(THREADS_ENV, 0):
                    torch.set_num_threads(threads)
                peaks = measure_peaks(loaded, peak_size, peak_repeats)
                log(
                    "peak: "
                    + ", ".join(f"{n} {p / 1e9:.1f} GFLOP/s" for n, p in peaks.flop_s.items())
                    + f" ({peak_size}x{peak_size} torch.mm, {torch.get_num_threads()} threads)"
                )
                warm = await measured_warm_start(run, watch)
                evaluation = await measured_evaluation(run, items, watch)
                before = counted(run)
                per_step = [await bench_one_step(run, step, False, watch) for step in range(steps)]
                stepped = counted(run).minus(before)
    figures = phases_figures(cfg, loaded, peaks, peak_size, warm, evaluation, per_step, stepped)
    for line in report_lines(figures):
        log(line)
    return figures


def phases_figures(
    cfg: RunConfig,
    loaded: LoadedModel,
    peaks: Peaks,
    peak_size: int,
    warm: Measured | None,
    evaluation: Measured | None,
    per_step: list[StepFigures],
    stepped: EngineCounters,
) -> PhasesFigures:
    """The measured phases' raw figures, their achieved FLOP/s and their shares of the peak."""
    sft = warm.done if warm is not None else EngineCounters()
    sft_done = achieved(peaks.training(sft.forwarded_tokens), sft.training_s)
    ev = evaluation.done if evaluation is not None else EngineCounters()
    eval_s = evaluation.seconds if evaluation is not None else 0.0
    eval_prefill, eval_decode = peaks.sampling(ev)
    eval_done = achieved(eval_prefill + eval_decode, eval_s)
    eval_s_per_item = round(eval_s / evaluation.count, 3) if evaluation is not None else None
    prefill, decode = peaks.sampling(stepped)
    prefill_done = achieved(prefill, stepped.prefill_s)
    decode_s = stepped.sampling_s - stepped.prefill_s
    decode_done = achieved(decode, decode_s)
    rollout_s = sum(f.rollout_s or 0.0 for f in per_step)
    update = achieved(peaks.training(stepped.forwarded_tokens), stepped.training_s)
    step_s = median_of(per_step, "step_s")
    capability = torch.backends.cpu.get_cpu_capability()
    fp32 = set(peaks.precisions.values()) == {"fp32"}
    goals = cfg.task == GOAL_TASK
    return PhasesFigures(
        task=cfg.task,
        model=cfg.model,
        seed=cfg.seed,
        device=str(loaded.device),
        precision=f"{sampling_precision(loaded)}, train {peaks.precisions['train']}",
        cpu_capability=capability,
        avx2_path=loaded.device.type == "cpu" and capability == AVX2 and fp32,
        threads=torch.get_num_threads(),
        parameters=peaks.size.body + peaks.size.head,
        peak_size=peak_size,
        peak_fp32_flop_s=significant(peaks.flop_s.get("fp32")),
        peak_bf16_flop_s=significant(peaks.flop_s.get("bf16")),
        sft_learning_rate=cfg.sft_learning_rate,
        sft_schedule=cfg.sft_schedule,
        sft_demonstrations=warm.count if warm is not None else 0,
        warm_start_s=round(warm.seconds, 3) if warm is not None else None,
        sft_tokens=sft.forwarded_tokens,
        sft_s=seconds_or_none(sft.training_s),
        sft_tok_s=per_s(sft.forwarded_tokens, sft.training_s),
        sft_flop_s=sft_done.flop_s,
        sft_vs_peak=sft_done.vs_peak,
        sft_loss_last=significant(warm.loss_last) if warm is not None else None,
        eval_items=evaluation.count if evaluation is not None else 0,
        eval_accuracy=round(evaluation.accuracy, 4)
        if evaluation is not None and evaluation.accuracy is not None
        else None,
        eval_s_per_item=eval_s_per_item,
        eval_prefilled_tokens=ev.prefilled_tokens,
        eval_decoded_tokens=ev.decoded_tokens,
        eval_tok_s=per_s(ev.decoded_tokens, eval_s),
        eval_flop_s=eval_done.flop_s,
        eval_vs_peak=eval_done.vs_peak,
        steps=len(per_step),
        step_s=step_s,
        rollout_s=median_of(per_step, "rollout_s"),
        update_s=median_of(per_step, "update_s"),
        prefilled_tokens=stepped.prefilled_tokens,
        prefill_s=seconds_or_none(stepped.prefill_s),
        prefill_tok_s=per_s(stepped.prefilled_tokens, stepped.prefill_s),
        prefill_flop_s=prefill_done.flop_s,
        prefill_vs_peak=prefill_done.vs_peak,
        decoded_tokens=stepped.decoded_tokens,
        decode_s=seconds_or_none(decode_s),
        decode_tok_s=per_s(stepped.decoded_tokens, decode_s),
        decode_flop_s=decode_done.flop_s,
        decode_vs_peak=decode_done.vs_peak,
        rollout_tok_s=per_s(stepped.decoded_tokens, rollout_s),
        rollout_vs_peak=achieved(prefill + decode, rollout_s).vs_peak,
        update_tokens=stepped.forwarded_tokens,
        trained_tokens=stepped.trained_tokens,
        update_train_s=seconds_or_none(stepped.training_s),
        update_tok_s=per_s(stepped.forwarded_tokens, stepped.training_s),
        update_flop_s=update.flop_s,
        update_vs_peak=update.vs_peak,
        goal_step_s=GOAL_STEP_S if goals else None,
        step_meets_goal=step_s <= GOAL_STEP_S if goals and step_s is not None else None,
        goal_eval_s_per_item=GOAL_EVAL_S_PER_ITEM if goals else None,
        eval_meets_goal=(
            eval_s_per_item <= GOAL_EVAL_S_PER_ITEM
            if goals and eval_s_per_item is not None
            else None
        ),
        peak_rss_gb=round(peak_rss_gb(), 2),
    )


def significant(value: float | None) -> float | None:
    """Four significant digits (FLOP/s run to 1e11)."""
    return None if value is None else float(f"{value:.4g}")


def phase_line(
    name: str, tokens: int, seconds: float | None, flop_s: float | None, vs_peak: float | None
) -> str:
    """One phase for a person: its tokens, seconds and tok/s, its GFLOP/s and share of the peak."""
    if not tokens or not seconds:
        return f"  {name:<16} not run, or no work"
    done = f"{tokens:>7,} tokens in {seconds:7.2f} s = {tokens / seconds:8.1f} tok/s"
    if flop_s is None or vs_peak is None:
        return f"  {name:<16} {done}"
    return f"  {name:<16} {done}, {flop_s / 1e9:6.2f} GFLOP/s = {vs_peak:.3g} of peak"


def goal_line(what: str, value: float | None, goal: float | None, unit: str) -> str | None:
    if goal is None:
        return None
    if value is None:
        return f"  {what} at most {goal:g} {unit}: not measured"
    verdict = "meets it" if value <= goal else "misses it"
    return f"  {what} at most {goal:g} {unit}: measured {value:g} {unit}, {verdict}"


def report_lines(f: PhasesFigures) -> list[str]:
    """The figures for a person (stderr; the JSON line is stdout's last): each phase's raw
    figures and share of the peak of its precision, then the issue's goals and what was
    measured."""
    peaks = ", ".join(
        f"{name} {value / 1e9:.1f} GFLOP/s"
        for name, value in (("fp32", f.peak_fp32_flop_s), ("bf16", f.peak_bf16_flop_s))
        if value is not None
    )
    lines = [
        f"phases of {f.task} on {f.model} ({f.parameters:,} parameters; {f.precision}; torch "
        f"{f.cpu_capability} kernels, {f.threads} threads); matmul peak {peaks}",
        phase_line("warm start SFT", f.sft_tokens, f.sft_s, f.sft_flop_s, f.sft_vs_peak),
        phase_line(
            "rollout prefill", f.prefilled_tokens, f.prefill_s, f.prefill_flop_s, f.prefill_vs_peak
        ),
        phase_line(
            "rollout decode", f.decoded_tokens, f.decode_s, f.decode_flop_s, f.decode_vs_peak
        ),
        phase_line("update", f.update_tokens, f.update_train_s, f.update_flop_s, f.update_vs_peak),
        phase_line(
            "evaluation",
            f.eval_decoded_tokens,
            f.eval_s_per_item * f.eval_items if f.eval_s_per_item is not None else None,
            f.eval_flop_s,
            f.eval_vs_peak,
        ),
        f"  RL step {f.step_s} s (rollouts {f.rollout_s} s, {f.rollout_vs_peak} of peak; update "
        f"{f.update_s} s); evaluation {f.eval_s_per_item} s an item over {f.eval_items} items",
        f"  warm start ({f.sft_schedule} from {f.sft_learning_rate}, seed {f.seed}): last loss "
        f"{f.sft_loss_last}; evaluation correct {f.eval_accuracy}",
    ]
    where = "on the AVX2 path" if f.avx2_path else "set for the AVX2 path; this run is not on it"
    goals = [
        goal_line(f"{GOAL_TASK} RL step", f.step_s, f.goal_step_s, "s"),
        goal_line("evaluation", f.eval_s_per_item, f.goal_eval_s_per_item, "s an item"),
    ]
    if any(goals):
        lines.append(f"issue 69's goals ({where}):")
        lines += [g for g in goals if g is not None]
    return lines
