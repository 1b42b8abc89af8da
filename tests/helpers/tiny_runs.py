"""The smallest real runs the tests train on the CPU policy: the settings of the session's shared
`tiny_run` (tests/conftest.py) and of a user's task or agent trained from the CLI, and the CLI
in a process of its own."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tests.helpers import warm


@cache
def tiny_model_path() -> Path:
    """Where the suite's one tiny model directory lives (tests/helpers/tiny_llama.py
    `cached_tiny_model` makes it): under the converted models' cache, named by the text of the
    file that makes it, so a change there makes a new one."""
    import hashlib

    from rlvr.engine.models import cache_root

    maker = Path(__file__).with_name("tiny_llama.py")
    digest = hashlib.sha256(maker.read_bytes()).hexdigest()[:12]
    return cache_root() / "models" / f"tests-tiny-llama-{digest}"


TINY_RUN = {
    # the tiny random model: its readers check the run directory, the CLI and the loop's story
    "model": str(tiny_model_path()),
    "task": "math",
    "task_options": {"difficulty": "easy", "num_items": 40},
    "group_size": 4,
    "groups_per_batch": 2,
    "max_steps": 2,
    "eval_every": 1,
    "max_tokens": 16,
    "judge": "none",
    # the tiny model never answers a sum: a reward with spread trains it (validation stays 0)
    "scorer": "length",
    # 4 validation items swing by 0.25: a noisy fall must not stop this fixture early
    "stopping.on_divergence": "warn",
    # the tests that read it count groups: no refills (tests/training/test_pool.py covers them)
    "draw.max_refill": 0,
    # its 4 groups of 4 at 16 tokens are sometimes all constant: the run's story, not its preflight,
    # is what the readers test (tests/training/test_no_signal.py covers the no-signal stop)
    "preflight": False,
    # the rows' learning rate rises over the first step (tests/training/test_loop.py reads it)
    "lr_warmup_steps": 2,
}


class TinyRun(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    run_dir: Path
    result: object  # rlvr.training.RunResult


class AgentRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_dir: Path
    stdout: str  # what `rlvr train` printed, piped to a file
    stderr: str


# The CLI settings of a user's task or agent trained from its file. One step: these runs test a
# route (loading, scoring, the run directory), and a second step would only repeat the first;
# TWO_STEPS where the second step is what a test checks. The policy is the tiny random model
# (tests/helpers/tiny_llama.py, made before any slow test starts): what they check is the route,
# not what the policy says.
TINY = {
    "model": str(tiny_model_path()),
    "group_size": 4,
    "groups_per_batch": 2,
    "max_steps": 1,
    "eval_every": 1,
    "max_tokens": 8,
    "judge": "none",
    "stopping.on_divergence": "warn",  # 4 validation items are noisy: the run must reach its steps
}
TWO_STEPS = {"max_steps": 2, "eval_every": 2}


def cli(*args: str, path: list[Path] | None = None) -> warm.Finished:
    """`rlvr ARGS` in a process of its own, forked warm (tests/helpers/warm.py); `path` as
    PYTHONPATH."""
    out = warm.rlvr(*args, path=path or [], timeout_s=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def only_run(runs: Path) -> Path:
    """The one run directory under a runs root."""
    [run_dir] = [p.parent for p in runs.glob("*/summary.json")]
    return run_dir
