"""One line everywhere: a user's task whose import, options, factory (`make`) or `load()` raises
is one line naming the file and line of its code, exit 2, from every command that runs that code
(`train`, `preflight`, `eval`, `tasks`, `bench eval`, `bench hack`), with nothing written; the
commands that only read a run directory (`inspect`, `compare`) never run the task's code and work
on a run of the broken task as on any other.

The fast tests check the one-line form itself; the slow matrix runs every command against the
same broken task, each command in a process of its own (tests/helpers/warm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import art
import pytest

from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.runs.records import parse_row
from rlvr.task_api.api import PluginError
from rlvr.training.failures import RunFailed, as_one_line, first_line, one_line, where_raised

KINDS = ["import", "options", "make", "load"]

BROKEN_TASK = '''
"""A user's task, broken in one place: BREAK names where."""
import art
import rlvr
from pydantic import BaseModel, ConfigDict, field_validator

BREAK = "{kind}"
LEVELS = {{"easy": 1, "hard": 2}}
if BREAK == "import":
    LEVEL = LEVELS["medium"]  # breaks: import


class Options(BaseModel):
    model_config = ConfigDict(frozen=True, validate_default=True)  # extra keys are ignored

    level: str = "easy"

    @field_validator("level")
    @classmethod
    def known_level(cls, value):
        return value if BREAK != "options" else LEVELS[value.upper()]  # breaks: options


def load():
    rows = {{"items": [{{"prompt": f"What is {{a}} + 1?", "answer": str(a + 1)}} for a in range(12)]}}
    return rows["item"] if BREAK == "load" else rows["items"]  # breaks: load


async def rollout(model, item, sampling):
    return await rlvr.single_turn(model, item, [{{"role": "user", "content": item.prompt}}], sampling)


def make(options):
    if BREAK == "make":
        raise RuntimeError("the index is not built")  # breaks: make
    return rlvr.environment(
        name="broken", load=load, rollout=rollout, check=lambda i, t: 0.0
    )


task = rlvr.Task(name="broken", make=make, options=Options)
'''


def write_task(folder: Path, kind: str) -> tuple[Path, int]:
    """The broken task file and the line its `kind` of breakage raises at."""
    text = BROKEN_TASK.format(kind=kind)
    path = folder / "elsewhere" / f"broken_{kind}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, text.splitlines().index(
        next(line for line in text.splitlines() if line.endswith(f"# breaks: {kind}"))
    ) + 1


def raised_from(path: Path, kind: str) -> BaseException:
    """What the broken task raises, executed in-process as the file it is."""
    namespace: dict = {"__name__": "broken"}
    try:
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        task = namespace["task"]
        options = task.parse_options({})
        environment = task.make(options)
        environment.load()
    except Exception as error:
        return error
    raise AssertionError(f"{kind}: nothing raised")


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_from_the_users_code_is_named_by_its_file_and_line(
    tmp_path: Path, kind: str
) -> None:
    path, line = write_task(tmp_path, kind)
    error = raised_from(path, kind)
    assert where_raised(error) == f"{path}:{line}"
    said = as_one_line(error, known=False)
    assert said is not None and said[1] == 2
    assert said[0].startswith(f"{path}:{line}: {type(error).__name__}: ")
    assert "\n" not in said[0]


def test_a_wrapped_error_is_named_by_the_place_of_its_cause(tmp_path: Path) -> None:
    """rlvr's own one-line errors (here: the factory raised, wrapped by `Task.build`) keep their
    text, led by the place in the user's code their cause came from."""
    path, line = write_task(tmp_path, "make")
    namespace: dict = {"__name__": "broken"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(PluginError) as caught:
        namespace["task"].build(RunConfig(judge="none"))
    assert one_line(caught.value, known=True) == (
        f"{path}:{line}: task broken: its factory raised RuntimeError: the index is not built"
    )


@pytest.mark.parametrize(
    ("error", "known", "said"),
    [
        (ConfigError("config: unknown key 'x'"), True, ("config: unknown key 'x'", 2)),
        (RunFailed("every rollout of step 1 failed (8)"), False, None),
        (ValueError("rlvr's own bug"), False, None),  # no user frame: its traceback helps
        (KeyError("missing"), True, ("'missing'", 2)),
        (ConfigError("first\nsecond\nthird"), True, ("first [+2 more lines]", 2)),
    ],
)
def test_one_line_says_what_a_user_can_act_on(
    error: BaseException, known: bool, said: tuple[str, int] | None
) -> None:
    if isinstance(error, RunFailed):
        assert as_one_line(error, known) == (str(error), 1)
        return
    assert as_one_line(error, known) == said


@pytest.mark.parametrize(
    ("text", "line"), [("", "(no message)"), ("one", "one"), (" a\nb\n", "a [+1 more lines]")]
)
def test_first_line_marks_what_it_left_out(text: str, line: str) -> None:
    assert first_line(text) == line


# --- every command against the same broken task -------------------------------------------------

# What each command does with the task: the parts it executes, and its arguments.
RUNS_THE_TASK = {
    "train": set(KINDS),
    "preflight": set(KINDS),
    "eval": set(KINDS),
    "tasks": {"import", "options"},  # lists the options; never builds or loads the task
    "bench eval": set(KINDS),
    "bench hack": set(KINDS),
    "inspect": set(),  # reads the run directory only
    "compare": set(),
}


def finished_run(run_dir: Path, task: str) -> Path:
    """A finished run directory of `task`, as a run writes it (no checkpoints needed)."""
    run_dir.mkdir(parents=True)
    store.write_config(run_dir, RunConfig(task=task, judge="none", run_dir=run_dir))
    store.append_metrics(run_dir, parse_row({M.STEP: 0, M.VAL_ACCURACY: 0.25, M.POLICY_STEP: 0}))
    store.append_metrics(run_dir, parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5, M.REWARD_STD: 0.1}))
    group = art.TrajectoryGroup(
        [
            art.Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": "What is 1 + 1?"},
                    {"role": "assistant", "content": "2"},
                ],
                reward=1.0,
            )
        ]
    )
    rows = store.trajectory_rows([group], ["broken-1"], step=0, split="test")
    store.write_trajectories(run_dir, "test", rows)
    summary = {"task": task, "stop_reason": "max_steps", "steps": 1, "best_step": 0}
    summary |= {"baseline_val": 0.25, "best_val": 0.25, "test_accuracy": 1.0, "alarms": []}
    summary |= {"run_dir": str(run_dir), "scorer": "verifier", "wall_s": 1.0}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def command_args(command: str, reference: str, tmp_path: Path) -> list[str]:
    runs = tmp_path / "runs"
    if command in ("eval", "inspect", "compare"):
        run_a = finished_run(tmp_path / "run-a", reference)
        if command == "compare":
            return ["compare", str(run_a), str(finished_run(tmp_path / "run-b", reference))]
        return [command, str(run_a)]
    return {
        "train": ["train", reference, "judge=none", f"runs_root={runs}"],
        "preflight": ["preflight", reference, "judge=none"],
        "tasks": ["tasks", reference],
        "bench eval": ["bench", "eval", reference, "--items", "2", "--repeats", "1"],
        "bench hack": ["bench", "hack", f"task={reference}", "--runs-root", str(runs)],
    }[command]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", list(RUNS_THE_TASK))
def test_every_command_against_the_same_broken_task(
    tmp_path: Path, command: str, kind: str
) -> None:
    from tests.helpers import warm

    path, line = write_task(tmp_path, kind)
    args = command_args(command, f"{path}:task", tmp_path)
    done = warm.rlvr(*args, timeout_s=300)
    if kind not in RUNS_THE_TASK[command]:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        return
    errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"error: {path}:{line}: "), errors[0]
    # the rest of stderr is at most the line saying which code a run directory makes it run
    # (and the warm runner's own note that it ran rlvr.cli.main preloaded: tests/helpers/warm.py)
    others = [
        x
        for x in done.stderr.splitlines()
        if x.strip() and not x.startswith(("error:", "<frozen runpy>"))
    ]
    assert all("its config.json names" in x for x in others), others
    assert not (tmp_path / "runs").exists()  # nothing written


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RLVR_PRECISION", "fp16"),
        ("RLVR_PACKED_WEIGHTS", "yes"),
        ("RLVR_TORCH_THREADS", "two"),
        ("RLVR_PREFIX_CACHE_MB", "-1"),
        ("RLVR_TREE_TOKENS", "0"),
        ("RLVR_RECOMPUTE", "yes"),
    ],
)
def test_a_bad_engine_setting_stops_a_run_before_it_writes_anything(
    tmp_path: Path, variable: str, value: str
) -> None:
    from tests.helpers import warm

    runs = tmp_path / "runs"
    done = warm.rlvr(
        "train", "math", "judge=none", f"runs_root={runs}", env={variable: value}, timeout_s=300
    )
    errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert errors == [errors[0]] and errors[0].startswith(f"error: {variable}={value!r}: expected")
    assert not runs.exists()  # nothing written


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        (["model=/no/such/model"], "model"),
        (["scorer=ruler", "judge.local_model=./no-such-judge"], "judge.local_model"),
    ],
    ids=["policy", "local-judge"],
)
def test_a_model_that_resolves_to_nothing_stops_a_run_before_it_writes_anything(
    tmp_path: Path, settings: list[str], key: str
) -> None:
    from typer.testing import CliRunner

    from rlvr.cli.main import app

    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["train", "math", *settings, f"runs_root={runs}"])
    errors = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    value = settings[-1].split("=", 1)[1]
    assert len(errors) == 1 and errors[0].startswith(f"error: {key}: '{value}' is not an alias")
    assert "a local model directory or a hub id" in errors[0]
    assert not runs.exists()  # nothing written
