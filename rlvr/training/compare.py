"""`rlvr compare RUN_A RUN_B`: did run B's final checkpoint do better than run A's?

Both runs' final checkpoints were scored on their test split at the end of the run
(`trajectories/test.parquet`, one greedy rollout per item). Runs of the same task, data seed and
split ratios hold the same test items whatever their `seed`, so the comparison is paired per item
(`rlvr.evaluation.paired_gains`); runs tested on different items are refused rather than compared
unpaired.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rlvr.evaluation.paired_gains import PairedGain, paired_gain
from rlvr.runs import layout


def final_test_scores(run_dir: Path) -> dict[str, float]:
    """item id -> ground-truth score of the run's final checkpoint on its test split."""
    path = layout.table(run_dir, layout.test_name())
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no test rollouts; has the run finished?")
    frame = pl.read_parquet(path, columns=["item_id", "reward"])
    return dict(zip(frame["item_id"].to_list(), frame["reward"].to_list(), strict=True))


def compare_runs(run_a: Path, run_b: Path) -> PairedGain:
    """B's final test accuracy minus A's, paired over their shared test items."""
    a, b = final_test_scores(run_a), final_test_scores(run_b)
    if set(a) != set(b):
        shared = len(set(a) & set(b))
        raise ValueError(
            f"{run_a} and {run_b} were tested on different items ({len(a)} and {len(b)}, "
            f"{shared} shared): compare runs of the same task, data_seed and split ratios"
        )
    common = sorted(a)
    return paired_gain([a[i] for i in common], [b[i] for i in common])
