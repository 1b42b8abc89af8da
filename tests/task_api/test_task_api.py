"""The public extension API without a model: references, entry points, options, the function
form, user scorers, the scaffold, and the CLI's one-line errors (exit 2, no run directory)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import art
import pytest
from typer.testing import CliRunner

import rlvr
from rlvr.cli.main import app
from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import M, trajectory_metric_means
from rlvr.task_api import plugins
from rlvr.task_api.api import PluginError, Task, as_items
from rlvr.task_api.plugins import make_scorer
from rlvr.task_api.scaffold import ScaffoldError, write_task
from tests.helpers.repo import ROOT

TASK_FILE = """
import rlvr

def load():
    return [{"id": f"q{i}", "prompt": f"say {i}", "answer": str(i)} for i in range(20)]

async def rollout(model, item, sampling):
    raise NotImplementedError

def check(item, trajectory):
    return float(rlvr.completion_text(trajectory).strip() == item.answer)

def make():
    return rlvr.environment(name="echo", load=load, rollout=rollout, check=check)

def make_with_cfg(cfg, judge):
    assert judge is None
    return rlvr.environment(name=f"echo-{cfg.seed}", load=load, rollout=rollout, check=check)

def make_wants_more(cfg, tokenizer):
    return make()

def broken():
    raise RuntimeError("no data today")

def not_a_environment():
    return 42

def shorter_is_better(group, item):
    return [1.0 / (1 + len(rlvr.completion_text(t))) for t in group.trajectories]

def starts_right(completion, ground_truth):
    return float(completion.startswith(ground_truth))

NOT_CALLABLE = 3
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "usertask" / "task.py"
    path.parent.mkdir()
    path.write_text(TASK_FILE)
    return path


def answered(text: str) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": text},
        ],
        reward=0.0,
    )


def group_of(*texts: str) -> art.TrajectoryGroup:
    return art.TrajectoryGroup([answered(t) for t in texts])


# --- references and tasks ------------------------------------------------------------------------


@pytest.mark.parametrize(("attr", "name"), [("make", "echo"), ("make_with_cfg", "echo-0")])
def test_a_file_reference_builds_the_users_environment(
    user_file: Path, attr: str, name: str
) -> None:
    task = plugins.resolve_task(f"{user_file}:{attr}")
    environment = task.build(RunConfig(task=f"{user_file}:{attr}"), judge=None)
    assert isinstance(environment, rlvr.Environment) and environment.name == name
    items = environment.load()
    assert [i.id for i in items[:2]] == ["q0", "q1"] and items[3].answer == "3"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("{dir}/missing.py:make", r"missing\.py:make: no such file .*missing\.py"),
        ("{file}:nope", r"task\.py:nope: .* has no attribute 'nope'"),
        (
            "{file}:NOT_CALLABLE",
            r"NOT_CALLABLE: int is not an rlvr\.Task, an Environment or a factory",
        ),
        ("no_such_package_xyz.tasks:make", r"no module named 'no_such_package_xyz'"),
        ("{file}:", r"expected path/to/file\.py:name or package\.module:name"),
        ("chess", r"unknown task 'chess'; installed tasks: .*dataset, email, .*math"),
    ],
)
def test_bad_references_are_one_line_errors(user_file: Path, ref: str, message: str) -> None:
    ref = ref.format(dir=user_file.parent, file=user_file)
    with pytest.raises(PluginError, match=message) as error:
        plugins.resolve_task(ref)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("broken", r"factory raised RuntimeError: no data today"),
        ("not_a_environment", r"returned int, not an Environment"),
        ("make_wants_more", r"factory parameter 'tokenizer' cannot be filled"),
    ],
)
def test_factories_that_fail_are_one_line_errors(user_file: Path, attr: str, message: str) -> None:
    task = plugins.resolve_task(f"{user_file}:{attr}")
    with pytest.raises(PluginError, match=message) as error:
        task.build(RunConfig(), judge=None)
    assert "\n" not in str(error.value)


def test_a_file_that_fails_to_import_names_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("import json\nraise ValueError('half written')\n")
    with pytest.raises(PluginError, match=r"bad\.py:make: importing .*ValueError: half written"):
        plugins.load_reference(f"{path}:make")


def test_a_user_file_may_import_its_neighbours(tmp_path: Path) -> None:
    (tmp_path / "helpers_for_task.py").write_text("ANSWER = '42'\n")
    (tmp_path / "t.py").write_text("from helpers_for_task import ANSWER\n")
    assert plugins.load_reference(f"{tmp_path / 't.py'}:ANSWER") == "42"


def test_installed_entry_points_are_tasks_and_scorers(tmp_path: Path, monkeypatch) -> None:
    """A package installed with entry points (a .dist-info as pip writes it) appears in
    `rlvr tasks` and resolves by name, for tasks and for scorers."""
    package = tmp_path / "site"
    (package / "echo_pkg").mkdir(parents=True)
    (package / "echo_pkg" / "__init__.py").write_text(TASK_FILE)
    info = package / "echo_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[rlvr.tasks]\necho = echo_pkg:make\n\n[rlvr.scorers]\nshort = echo_pkg:shorter_is_better\n"
    )
    monkeypatch.syspath_prepend(str(package))
    plugins._entry_points.cache_clear()
    try:
        assert "echo" in plugins.task_names() and "math" in plugins.task_names()
        environment = plugins.resolve_task("echo").build(RunConfig(task="echo"))
        assert environment.name == "echo"
        scorer = make_scorer(RunConfig(scorer="short"), environment)
        assert scorer.name == "short"
        listing = CliRunner().invoke(app, ["tasks"])
        assert listing.exit_code == 0 and "\necho\t" in listing.output
    finally:
        sys.modules.pop("echo_pkg", None)
        plugins._entry_points.cache_clear()


# --- options and the config -----------------------------------------------------------------------


def test_task_options_are_split_from_train_config_keys() -> None:
    cfg = rlvr.task_config("math", difficulty="hard", num_items="50", group_size="4")
    assert cfg.group_size == 4 and cfg.learning_rate == 3e-4  # a math default
    assert cfg.task_options == {"difficulty": "hard", "num_items": 50}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"difficulty": "galactic"}, r"task math: option difficulty='galactic': Input should be"),
        ({"num_items": "3"}, r"task math: option num_items='3': .*greater than or equal to 10"),
        (
            {"num_itmes": "30"},
            r"unknown key 'num_itmes'; did you mean 'num_items'\?; .*math options: difficulty, num_items; RunConfig keys: task, model",
        ),
        ({"group_size": "one"}, r"config: group_size='one'"),
    ],
)
def test_bad_keys_and_values_name_task_and_config(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        rlvr.task_config("math", **overrides)
    assert "\n" not in str(error.value)


def test_a_task_object_gives_its_config_directly() -> None:
    task = Task(name="t", make=lambda: None, defaults={"max_steps": 7})
    assert rlvr.task_config(task, seed=3).model_dump(include={"task", "max_steps", "seed"}) == {
        "task": "t",
        "max_steps": 7,
        "seed": 3,
    }


# --- the function form ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"id": "a"}], r"row 1: field 'prompt': Field required"),
        ([{"prompt": "p"}, "text"], r"row 2: expected an rlvr\.Item or a dict, got str"),
        (
            [{"id": "a", "prompt": "p"}, {"id": "a", "prompt": "q"}],
            r"item id 'a' appears more than once",
        ),
    ],
)
def test_loaded_rows_are_validated(rows: list, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        as_items(rows, "task t: load()")


def test_rows_become_items_with_ids_and_string_answers() -> None:
    items = as_items([{"prompt": "p", "answer": 7}, rlvr.Item(id="x", prompt="q")], "src")
    assert items[0].id == "src-1" and items[0].answer == "7" and items[1].id == "x"


def test_rollout_must_be_async() -> None:
    with pytest.raises(PluginError, match="rollout must be an async function"):
        rlvr.environment(name="t", load=list, rollout=lambda m, i, s: None, check=lambda i, t: 0.0)


async def test_function_environment_check_and_reward_may_be_async() -> None:
    async def check(item, trajectory):
        return 1.0

    async def rollout(model, item, sampling):
        return answered("x")

    environment = rlvr.environment(name="t", load=list, rollout=rollout, check=check)
    item = rlvr.Item(id="i", prompt="p")
    assert await environment.check(item, answered("x")) == 1.0
    scored = await make_scorer(RunConfig(scorer="verifier"), environment).score(
        group_of("a", "b"), item
    )
    assert [t.reward for t in scored.trajectories] == [1.0, 1.0]


# --- user scorers ---------------------------------------------------------------------------------


async def test_user_scorers_by_reference_alone_and_composed(user_file: Path) -> None:
    environment = plugins.resolve_task(f"{user_file}:make").build(RunConfig())
    item = rlvr.Item(id="i", prompt="p", answer="7")
    group = group_of("7", "7 is it", "no")
    short = f"{user_file}:shorter_is_better"
    starts = f"{user_file}:starts_right"

    alone = await make_scorer(RunConfig(scorer=short), environment).score(group, item)
    assert [round(t.reward, 3) for t in alone.trajectories] == [0.5, 0.125, 0.333]

    mixed = make_scorer(RunConfig(scorer=f"{starts}*0.5+verifier*0.5"), environment)
    scored = await mixed.score(group, item)
    assert [t.reward for t in scored.trajectories] == [1.0, 0.5, 0.0]
    assert scored.trajectories[1].metrics[f"reward/{starts}"] == 1.0

    gated = await make_scorer(RunConfig(scorer=f"verifier>{short}"), environment).score(group, item)
    assert [round(t.reward, 3) for t in gated.trajectories] == [0.5, 0.0, 0.0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "nonsense",
            r"unknown scorer 'nonsense'; installed: length, rollout, rubric, ruler, ruler_ref, verifier",
        ),
        ("ruler", r"ruler: this scorer needs a judge"),
        ("{file}:NOT_CALLABLE", r"int is not a scorer or a scorer factory"),
        ("{file}:make", r"the factory returned FunctionEnvironment, not a Scorer"),
    ],
)
def test_bad_scorers_are_one_line_errors(user_file: Path, spec: str, message: str) -> None:
    environment = plugins.resolve_task(f"{user_file}:make").build(RunConfig())
    with pytest.raises(ConfigError, match=message):
        make_scorer(RunConfig(scorer=spec.format(file=user_file)), environment, judge=None)


async def test_a_failing_group_scorer_is_retried_counted_and_skipped() -> None:
    calls = []

    async def flaky(group, item):
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("judge down")
        return [0.0, 1.0]

    scorer = rlvr.group_scorer(flaky, retries=2)
    item = rlvr.Item(id="i", prompt="p")
    scored = await scorer.score(group_of("a", "b"), item)
    assert [t.reward for t in scored.trajectories] == [0.0, 1.0] and len(calls) == 3
    assert scorer.pop_metrics()[M.REWARD_ERRORS] == 2

    async def always_down(group, item):
        raise ConnectionError("judge down")

    down = rlvr.group_scorer(always_down, retries=1)
    assert await down.score(group_of("a", "b"), item) is None  # skipped, never a fake 0.0
    assert down.pop_metrics()[M.REWARD_ERRORS] == 2


async def test_a_group_scorer_with_the_wrong_count_is_an_error_not_a_reward() -> None:
    scorer = rlvr.group_scorer(lambda group, item: [1.0], retries=0)
    assert await scorer.score(group_of("a", "b"), rlvr.Item(id="i", prompt="p")) is None


def test_trajectory_metrics_are_averaged_per_step() -> None:
    a, b = answered("a"), answered("b")
    a.metrics.update({"recall": 1.0, "retrieval/precision": 0.5, "truncated": True, "note": "x"})
    b.metrics.update({"recall": 0.0, "retrieval/precision": 1.0})
    assert trajectory_metric_means([art.TrajectoryGroup([a, b])]) == {
        "retrieval/precision": 0.75,
        "rollout/recall": 0.5,
    }


def test_a_trajectory_metric_in_the_loop_s_namespaces_goes_under_rollout() -> None:
    a = answered("a")
    a.metrics.update({"train/reward_mean": 1.0, "time/tool_s": 2.0, "alarm/converged": 1.0})
    assert trajectory_metric_means([art.TrajectoryGroup([a])]) == {
        "rollout/alarm/converged": 1.0,
        "rollout/time/tool_s": 2.0,
        "rollout/train/reward_mean": 1.0,
    }


# --- the CLI --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{dir}/missing.py:make"], "no such file"),
        (["{file}:broken"], "factory raised RuntimeError: no data today"),
        (["{file}:not_a_environment"], "not an Environment"),
        (["{file}:make", "scorer=nonsense"], "unknown scorer 'nonsense'"),
        (["math", "difficulty=galactic"], "option difficulty='galactic'"),
        (["math", "colour=blue"], "unknown key 'colour'"),
    ],
)
def test_cli_rejects_bad_plugins_with_exit_2_and_no_run_directory(
    user_file: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    runs = tmp_path / "runs"
    args = [a.format(dir=user_file.parent, file=user_file) for a in args]
    result = CliRunner().invoke(app, ["train", *args, f"runs_root={runs}", "judge=none"])
    assert result.exit_code == 2, result.output
    assert message in result.output.replace("\n", " ")
    assert not runs.exists()


def test_rlvr_tasks_lists_options_with_defaults() -> None:
    result = CliRunner().invoke(app, ["tasks"])
    assert result.exit_code == 0
    assert "math\t" in result.output and "difficulty='easy'" in result.output
    assert "data_path=(required)" in result.output  # the dataset task
    assert "defaults: temperature=0.8" in result.output


# --- the scaffold ---------------------------------------------------------------------------------


def test_rlvr_new_writes_a_task_that_resolves(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["new", "adder", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "adder"
    assert {p.name for p in folder.iterdir()} == {
        "task.py",
        "test_task.py",
        "README.md",
        "items.jsonl",
    }
    rows = [json.loads(line) for line in (folder / "items.jsonl").read_text().splitlines()]
    assert len(rows) == 200 and {"id", "prompt", "answer"} <= set(rows[0])
    task = plugins.resolve_task(f"{folder}/task.py:task")
    assert task.name == "adder" and task.defaults["max_tokens"] == 24
    environment = task.build(rlvr.task_config(task))
    assert len(environment.load()) == 200


@pytest.mark.parametrize("name", ["9lives", "has space", "a/b"])
def test_rlvr_new_rejects_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ScaffoldError, match="a task name is letters"):
        write_task(name, tmp_path)


def test_rlvr_new_never_overwrites(tmp_path: Path) -> None:
    write_task("adder", tmp_path)
    result = CliRunner().invoke(app, ["new", "adder", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "already exists" in result.output


def test_readme_shows_the_function_form() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your own task", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    assert "rlvr.environment(" in code and "async def rollout" in code
    compile(textwrap.dedent(code), "README", "exec")  # the shown code is valid Python
