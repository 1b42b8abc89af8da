"""Training: the hybrid loop and what it is made of.

- `loop`: `run_training` (warm start, steps, validations, the stop, the paired test) and
  `evaluate_run`;
- `session`: what a run opens before its first step (task, scorer, judge, run directory, lock,
  policy), shared by training, evaluation and preflight;
- `step`: one training step; `evaluation`: rollouts and held-out accuracy;
- `state`: where a run stands, rebuilt from its rows (rlvr.runs.records); `stop_rules`: every
  stop rule; `alarms`: every alarm; `trends`: validation's trends and noise; `checkpoints`: which
  are kept;
- `output`: what a run prints.
"""

from rlvr.runs.records import RunResult, StopReason
from rlvr.training.loop import evaluate_run, evaluate_samples, run_training

__all__ = ["RunResult", "StopReason", "evaluate_run", "evaluate_samples", "run_training"]
