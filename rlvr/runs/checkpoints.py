"""Which adapter directory a finished run's checkpoint names: the one place that reads where a run
keeps its checkpoints, for everything that takes a trained agent out of its run (`rlvr export`,
`rlvr serve`).

The contract: `best` is the checkpoint the run chose (checkpoints/best), `last` its highest saved
step, and a number (or `step-NNNN`) that step's saved checkpoint (checkpoints/step-NNNN). A
checkpoint is a PEFT adapter directory (adapter_config.json, adapter_model.safetensors).
"""

from __future__ import annotations

import re
from pathlib import Path

from rlvr.runs import layout

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
BEST = layout.BEST
LAST = "last"
STEP_DIR = re.compile(r"step-(\d+)")
WHICH = re.compile(r"(?:step-)?(\d+)")


class NoCheckpoint(FileNotFoundError):
    """A run directory without the checkpoint asked for (or not a run); the message is one line."""


def saved_steps(run_dir: Path) -> list[int]:
    """The steps whose adapters the run saved (checkpoints/step-NNNN holding adapter weights)."""
    root = run_dir / layout.CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(
        int(found[1])
        for path in root.iterdir()
        if (found := STEP_DIR.fullmatch(path.name)) and (path / ADAPTER_WEIGHTS).is_file()
    )


def available(run_dir: Path) -> str:
    """The checkpoints a user can name for `run_dir`, for an error message."""
    steps = saved_steps(run_dir)
    names = (
        [BEST] if (run_dir / layout.CHECKPOINTS / BEST / ADAPTER_WEIGHTS).is_file() else []
    ) + ([LAST, *(str(s) for s in steps)] if steps else [])
    return ", ".join(names) if names else "none"


def checkpoint_for(run_dir: Path, which: str = BEST) -> Path:
    """The adapter directory of `which` (best, last, or a step: 7 or step-0007) in `run_dir`;
    NoCheckpoint, one line naming the run and what it holds, where there is none."""
    if not (run_dir / layout.CONFIG).is_file():
        raise NoCheckpoint(f"{run_dir}: not a run directory (no {layout.CONFIG})")
    root = run_dir / layout.CHECKPOINTS
    wanted = which.strip().lower()
    if wanted == BEST:
        path = root / BEST
    elif wanted == LAST:
        steps = saved_steps(run_dir)
        if not steps:
            raise NoCheckpoint(f"{run_dir}: no saved step checkpoint in {root} (available: none)")
        path = root / layout.step_name(steps[-1])
    elif found := WHICH.fullmatch(wanted):
        path = root / layout.step_name(int(found[1]))
    else:
        raise NoCheckpoint(
            f"{run_dir}: checkpoint '{which}': expected best, last or a step number "
            f"(available: {available(run_dir)})"
        )
    if not path.is_dir():
        raise NoCheckpoint(f"{run_dir}: no checkpoint '{which}' (available: {available(run_dir)})")
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (path / name).is_file():
            raise NoCheckpoint(
                f"{path}: incomplete checkpoint, no {name} (available: {available(run_dir)})"
            )
    return path
