"""Which checkpoints a run keeps: checkpoints/ holds the start of RL, the best, the newest and
every save_every-th step, so a run directory stops growing with the run's length; the end of a
run says once what was removed. Fast on the rules and the removal; slow on the shared tiny run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.runs import atomic, layout, store
from rlvr.runs.checkpoints import saved_steps
from rlvr.runs.records import EvalRow
from rlvr.training.checkpoints import copies_kept, kept_line
from tests.helpers.tiny_runs import TinyRun


@pytest.mark.parametrize(
    ("saved", "best", "newest", "save_every", "kept"),
    [
        ([0, 3, 6, 9, 12], 6, 12, None, {0, 6, 12}),
        ([0, 3, 6, 9, 12], 0, 12, None, {0, 12}),  # the best is the start of RL
        ([0, 3, 6, 9, 12], 12, 12, None, {0, 12}),
        ([0, 3, 6, 9, 12], 3, 12, 6, {0, 3, 6, 12}),
        ([0, 3, 6, 9, 12], 3, 12, 3, {0, 3, 6, 9, 12}),  # save_every=eval_every keeps all
        ([9, 12], 9, 12, None, {9, 12}),  # a resumed run: its first copy is the oldest it has
        ([], 0, 0, None, set()),
    ],
)
def test_checkpoints_keeps_the_start_the_best_and_the_newest(
    saved: list[int], best: int, newest: int, save_every: int | None, kept: set[int]
) -> None:
    assert copies_kept(saved, best, newest, save_every) == kept


def test_the_end_of_a_run_says_once_what_was_removed() -> None:
    line = kept_line([0, 3, 6, 9, 12], [0, 6, 12], None)
    assert line is not None and "\n" not in line
    assert "kept step-0000, step-0006, step-0012 and best" in line
    assert "removed the adapters of 2 other evaluations (save_every=N keeps every Nth)" in line
    assert kept_line([0, 3], [0, 3], None) is None  # nothing removed, nothing said


def test_a_removed_checkpoint_leaves_nothing_and_a_killed_removal_is_cleared(
    tmp_path: Path,
) -> None:
    folder = tmp_path / layout.CHECKPOINTS
    for step in (0, 3):
        (folder / layout.step_name(step)).mkdir(parents=True)
        (folder / layout.step_name(step) / "adapter_model.safetensors").write_text("w")
    atomic.remove_dir(folder / layout.step_name(3))
    assert sorted(p.name for p in folder.iterdir()) == ["step-0000"]
    # A kill between the rename and the removal leaves the temporary, which a resume clears.
    (folder / layout.step_name(0)).rename(atomic.temp_path(folder / layout.step_name(0)))
    store.recover(tmp_path)
    assert list(folder.iterdir()) == []


@pytest.mark.slow
def test_a_real_run_keeps_only_the_checkpoints_it_can_need(tiny_run: TinyRun) -> None:
    summary = store.read_summary(tiny_run.run_dir)
    evaluated = [r.step for r in store.read_metrics(tiny_run.run_dir) if isinstance(r, EvalRow)]
    kept = copies_kept(evaluated, summary.best_step, max(evaluated), None)
    assert saved_steps(tiny_run.run_dir) == sorted(kept)
    assert (tiny_run.run_dir / layout.CHECKPOINTS / layout.BEST).is_dir()
