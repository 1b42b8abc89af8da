"""Where and in which precision the policy runs: the device, the autocast dtype (bf16 where the CPU
has native bf16, with the LM head kept in fp32), and returning freed memory to the system."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rlvr.config import ConfigError
from rlvr.engine.types import PRECISION_ENV, Phase, Precision

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return None


_LIBC = _libc()


# glibc serves a block from its own mapping, handed back when freed, only above a threshold that
# rises to the largest block freed so far (up to 32 MB); smaller blocks come from the heap, whose
# freed pieces stay resident. The engine holds it per phase. Sampling: 256 KB, since the key/value
# blocks of finished rows left holes that stayed resident, and decoding is as fast. Training: 4 MB,
# since mapping every activation afresh costs a page fault each (docs/concepts/cpu-engine.md,
# Memory).
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES: dict[Phase, int] = {
    "prefill": 256 * 1024,
    "sample": 256 * 1024,
    "train": 4 * 1024 * 1024,
}
MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"  # glibc's own knob: a person's setting is kept


# The threshold last held: the engine enters a phase at every decode step, and only a change of
# phase calls into glibc.
_held: list[int] = []


def hold_mmap_threshold(phase: Phase) -> None:
    """Fix glibc's mmap threshold for `phase` (MMAP_THRESHOLD_BYTES), unless the environment
    sets MALLOC_MMAP_THRESHOLD_; a no-op while the phase's threshold is held already."""
    size = MMAP_THRESHOLD_BYTES[phase]
    if _LIBC is None or _held == [size]:
        return
    if not os.environ.get(MMAP_THRESHOLD_ENV):
        _LIBC.mallopt(M_MMAP_THRESHOLD, size)
    _held[:] = [size]


# oneDNN, behind torch's bf16 and packed CPU matrix products, keeps a compiled kernel and its
# buffers per product shape in two caches: torch's ideep cache (LRU_CACHE_CAPACITY) and oneDNN's
# own (ONEDNN_PRIMITIVE_CACHE_CAPACITY), 1,024 shapes each by default. Every prefill and training
# row brings a new shape (its token count), so at their default both caches grow for the whole run,
# while building a kernel again costs little time (docs/concepts/cpu-engine.md, Memory). A
# person's own setting is kept.
KERNEL_CACHE_ENVS = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")
KERNEL_CACHE_SHAPES = 32


def bound_kernel_caches() -> None:
    """Cap oneDNN's kernel caches at KERNEL_CACHE_SHAPES shapes each. Both read their capacity
    at their first use, so this runs before the model computes anything."""
    for name in KERNEL_CACHE_ENVS:
        os.environ.setdefault(name, str(KERNEL_CACHE_SHAPES))


def release_memory() -> None:
    """Hand memory freed by the last update back to the OS (glibc keeps it otherwise)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def choose_device(device: str | None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_bf16(cpu_flags: str, kernels: str) -> bool:
    """Whether bf16 runs natively: the CPU has bf16 units (`cpu_flags`, /proc/cpuinfo) and torch's
    kernels use them (`kernels`, torch's CPU capability). Torch held to AVX2 kernels
    (`ATEN_CPU_CAPABILITY=avx2`, as on an AVX2-only CPU) emulates bf16."""
    units = "avx512_bf16" in cpu_flags or "amx_bf16" in cpu_flags
    return units and kernels == "AVX512"


def _cpu_has_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return native_bf16(flags, torch.backends.cpu.get_cpu_capability())


def choose_autocast(
    device: torch.device, precision: Precision | None = None, phase: Phase = "train"
) -> torch.dtype | None:
    """bf16 autocast or fp32 (None) for one phase of the engine: `precision` if given, else
    RLVR_PRECISION, else the faster one measured for that phase. fp32 and bf16 force every phase;
    mixed is bf16 training and prefill with fp32 decoding.

    On AVX2-only CPUs bf16 is emulated and much slower, so they run fp32 throughout. With bf16
    units a training step and a prompt's prefill (large matrix products) are faster in bf16 but
    decoding (small matrix products, a token a row) is not, so those CPUs run mixed. CUDA runs bf16 throughout where the GPU has it. The figures:
    docs/concepts/cpu-engine.md, "Precision, per phase"; the sampler/trainer log-prob gap of each choice is measured
    in tests/engine/test_precision.py.
    """
    forced = precision or os.environ.get(PRECISION_ENV, "").strip().lower()
    if forced not in ("", "fp32", "bf16", "mixed"):
        raise ConfigError(f"{PRECISION_ENV}={forced!r}: expected fp32, bf16 or mixed (or unset)")
    if forced == "mixed":
        return None if phase == "sample" else torch.bfloat16
    if forced in ("fp32", "bf16"):
        return torch.bfloat16 if forced == "bf16" else None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if phase == "sample":
        return None
    return torch.bfloat16 if device.type == "cpu" and _cpu_has_native_bf16() else None


def run_head_in_fp32(model: PreTrainedModel) -> None:
    """Make the LM head compute fp32 logits even under bf16 autocast, for the decoder and the
    trainer alike. bf16 logits keep ~3 significant digits (a step of 0.125 near a logit of 20),
    and two forwards of different shapes round differently, so the decoder's and the trainer's
    log-probs of the same tokens would differ: an off-policy error in the PPO ratio. With the
    head in fp32 the bf16 body alone leaves the gap (docs/results/performance.md)."""
    head: torch.nn.Module = model.get_output_embeddings()
    forward = head.forward

    def fp32_forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            logits: torch.Tensor = forward(hidden.float())
            return logits

    head.forward = fp32_forward
