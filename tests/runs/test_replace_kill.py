"""Replacing a checkpoint directory is crash-safe: a real process SIGKILLed between the renames
(old aside / new in / old removed) leaves, after the recovery a resumed run does first, the old
checkpoint or the new one, complete, and no leftovers."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.runs import store
from tests.helpers import faults, warm

WRITER = """
import sys
from pathlib import Path
from rlvr.runs import store
store.save_checkpoint(Path(sys.argv[1]), Path(sys.argv[2]), "best")
"""


def adapter(folder: Path, content: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_text(content)
    (folder / "adapter_config.json").write_text(f'{{"which": "{content}"}}')
    return folder


@pytest.mark.parametrize(
    ("point", "expected"),
    [(faults.FaultPoint.ASIDE, "old"), (faults.FaultPoint.SWAPPED, "new"), (None, "new")],
)
def test_a_kill_while_replacing_a_checkpoint_leaves_old_or_new(
    tmp_path: Path, point: faults.FaultPoint | None, expected: str
) -> None:
    run_dir = tmp_path / "run"
    store.save_checkpoint(run_dir, adapter(tmp_path / "old", "old"), "best")
    env = {faults.FAULT_ENV: f"{point}:best"} if point is not None else {}
    done = warm.run_code(  # a real process of its own, forked warm (tests/helpers/warm.py)
        WRITER,
        str(run_dir),
        str(adapter(tmp_path / "new", "new")),
        env=env,
        unset=[faults.FAULT_ENV],
        timeout_s=120,
    )
    assert done.returncode == (-9 if point is not None else 0)
    store.recover(run_dir)  # what `rlvr train --resume` does first
    best = run_dir / store.CHECKPOINTS / "best"
    assert (best / "adapter_model.safetensors").read_text() == expected
    assert expected in (best / "adapter_config.json").read_text()  # the same version, whole
    assert [p.name for p in (run_dir / store.CHECKPOINTS).iterdir()] == ["best"]
