"""Task and Environment, one noun each: the old names (Scenario, rlvr.scenario, `scenario=`, the
entry-point group rlvr.scenarios) still work for one release, each use with a DeprecationWarning
naming the new name; and rlvr's own code never says "scenario" outside those shims, except where
the word is ART's own (one item, as in `rollout(model, scenario)`)."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlvr
from rlvr.cli import app
from rlvr.config import RunConfig
from rlvr.tasks import plugins
from rlvr.tasks.plugins import make_scorer
from rlvr.training import evaluate_run, evaluate_samples, run_training
from tests.test_no_signal import config, constant_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("rlvr", "Scenario", "Environment"),
        ("rlvr", "ScenarioBase", "EnvironmentBase"),
        ("rlvr", "scenario", "environment"),
        ("rlvr.types", "Scenario", "Environment"),
        ("rlvr.types", "ScenarioBase", "EnvironmentBase"),
        ("rlvr.types", "SCENARIO_MEMBERS", "ENVIRONMENT_MEMBERS"),
        ("rlvr.types", "SCENARIO_HOOKS", "ENVIRONMENT_HOOKS"),
        ("rlvr.tasks.api", "scenario", "environment"),
        ("rlvr.tasks.api", "FunctionScenario", "FunctionEnvironment"),
    ],
)
def test_an_old_name_warns_on_every_use_and_is_the_new_object(
    module: str, old: str, new: str
) -> None:
    space = importlib.import_module(module)
    for _ in range(2):  # never cached: the second use warns too
        with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is now {module}\.{new};"):
            value = getattr(space, old)
        assert value is getattr(space, new)
    assert old not in space.__dict__ and old not in getattr(space, "__all__", [])


def test_the_old_function_form_still_builds_an_environment() -> None:
    with pytest.warns(DeprecationWarning, match=r"rlvr\.scenario is now rlvr\.environment"):
        made = rlvr.scenario(name="old", load=list, rollout=_rollout)
    assert isinstance(made, rlvr.Environment) and made.name == "old"


async def _rollout(model: object, item: object, sampling: object) -> None: ...


PACKAGE = """
import rlvr

def load():
    return [{"id": f"q{i}", "prompt": f"say {i}", "answer": str(i)} for i in range(20)]

async def rollout(model, item, sampling):
    raise NotImplementedError

def make():
    return rlvr.environment(name="echo", load=load, rollout=rollout)
"""


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str) -> None:
    """A package installed as pip writes one (a .dist-info): task `echo` in `group`, and in the
    old group `math`, a name rlvr's own tasks hold in the new one."""
    site = tmp_path / "site"
    (site / "echo_pkg").mkdir(parents=True)
    (site / "echo_pkg" / "__init__.py").write_text(PACKAGE)
    info = site / "echo_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-pkg\nVersion: 1.0\n")
    groups: dict[str, list[str]] = {group: ["echo"]}
    groups.setdefault("rlvr.scenarios", []).append("math")
    (info / "entry_points.txt").write_text(
        "\n".join(
            f"[{g}]\n" + "".join(f"{n} = echo_pkg:make\n" for n in names)
            for g, names in groups.items()
        )
    )
    monkeypatch.syspath_prepend(str(site))
    plugins._entry_points.cache_clear()


@pytest.mark.parametrize(("group", "warns"), [("rlvr.tasks", False), ("rlvr.scenarios", True)])
def test_installed_tasks_resolve_from_either_group_and_the_new_one_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str, warns: bool
) -> None:
    install(tmp_path, monkeypatch, group)
    try:
        assert {"echo", "math"} <= set(plugins.task_names())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            echo = plugins.resolve_task("echo").build(RunConfig(task="echo"))
            math = plugins.resolve_task("math").build(RunConfig(task="math"))
        said = [str(w.message) for w in caught if w.category is DeprecationWarning]
        old_group = [s for s in said if "rlvr.scenarios" in s]
        assert old_group == (
            [
                "task echo: entry-point group rlvr.scenarios is now rlvr.tasks; the old name goes "
                "in the next release"
            ]
            if warns
            else []
        )  # and none for math: it resolved from the new group
        assert echo.name == "echo" and len(echo.load()) == 20
        # `math` is rlvr's own in rlvr.tasks: the old group's never shadows it
        assert (math.name, type(math).__module__) == ("math", "rlvr_tasks.math")
        listing = CliRunner().invoke(app, ["tasks"])
        assert listing.exit_code == 0 and "\necho\t" in listing.output
    finally:
        sys.modules.pop("echo_pkg", None)
        plugins._entry_points.cache_clear()


SCORERS = """
import rlvr

SEEN = []

def by_old_name(scenario):
    SEEN.append(scenario)
    return rlvr.group_scorer(lambda group, item: [1.0] * len(group.trajectories), name="old")

def by_new_name(environment):
    SEEN.append(environment)
    return rlvr.group_scorer(lambda group, item: [1.0] * len(group.trajectories), name="new")
"""


@pytest.mark.parametrize(("factory", "warns"), [("by_new_name", False), ("by_old_name", True)])
def test_a_scorer_factory_asking_for_scenario_gets_the_environment(
    tmp_path: Path, factory: str, warns: bool
) -> None:
    path = tmp_path / "my_scorers.py"
    path.write_text(SCORERS)
    made = constant_task(0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_scorer(RunConfig(scorer=f"{path}:{factory}"), made)  # type: ignore[arg-type]
    said = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert [s for s in said if "factory parameter" in s] == (
        [
            f"{path}:{factory}: factory parameter 'scenario' is now 'environment'; the old "
            "name goes in the next release"
        ]
        if warns
        else []
    )
    assert plugins.load_reference(f"{path}:SEEN") == [made]  # the same module, loaded once


@pytest.mark.parametrize("keyword", ["task", "scenario"])
def test_run_training_takes_task_and_for_one_release_scenario(tmp_path: Path, keyword: str) -> None:
    """The no-signal run of tests/test_no_signal (no policy is loaded: rollouts set their reward)."""
    given = {keyword: constant_task(0.0)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = asyncio.run(run_training(config(tmp_path), **given))  # type: ignore[arg-type]
    said = [str(w.message) for w in caught if w.category is DeprecationWarning]
    old = [s for s in said if "scenario=" in s]
    expected = "run_training(scenario=...) is now run_training(task=...); the old name goes in"
    assert [s.startswith(expected) for s in old] == ([True] if keyword == "scenario" else [])
    assert result.stop_reason == "no_signal"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["task"] == "constant"


@pytest.mark.parametrize(
    "call",
    [
        lambda env, d: run_training(RunConfig(), task=env, scenario=env),
        lambda env, d: evaluate_run(d, "test", env, scenario=env),
        lambda env, d: evaluate_samples(d, 2, 1.0, "test", env, scenario=env),
    ],
    ids=["run_training", "evaluate_run", "evaluate_samples"],
)
def test_task_and_its_old_name_together_is_a_type_error(tmp_path: Path, call) -> None:
    with pytest.raises(TypeError, match=r"got task= and its old name scenario=; pass task= only"):
        asyncio.run(call(constant_task(0.0), tmp_path))


# --- the word itself ------------------------------------------------------------------------------

# Where "scenario" is ART's word for one item, which rlvr's docstrings may quote.
ART_ITEM = re.compile(r"\(model, scenario\)|ART's idiom: (?:a|any) scenario object")
SHIMS = {"rlvr/deprecations.py"}  # the one module the old names live in
MARKER = "# deprecated alias"  # a shim's line elsewhere (an old keyword)


def said_scenario(path: Path, root: Path = ROOT) -> list[str]:
    where = path.relative_to(root).as_posix()
    return [
        f"{where}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if MARKER not in line and re.search("scenario", ART_ITEM.sub("", line), re.IGNORECASE)
    ]


def test_rlvr_says_environment_not_scenario() -> None:
    found = [
        hit
        for path in sorted((ROOT / "rlvr").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in SHIMS
        for hit in said_scenario(path)
    ]
    assert found == [], "rlvr's word is Environment (or item, for ART's scenario):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        ("def build(scenario: Environment) -> None:", True),
        ("class VfScenario(EnvironmentBase):", True),
        ("SCENARIO_HOOKS = ()", True),
        (
            '"""True for a rollout in ART\'s idiom, `rollout(model, scenario)`: two positional',
            False,
        ),
        ("    scenario: Task | None = None,  # deprecated alias of task", False),
        ("def build(environment: Environment) -> None:", False),
    ],
)
def test_the_word_check_flags_rlvr_s_own_use_only(tmp_path: Path, line: str, flagged: bool) -> None:
    path = tmp_path / "rlvr" / "some.py"
    path.parent.mkdir()
    path.write_text(f"x = 1\n{line}\n")
    assert said_scenario(path, tmp_path) == ([f"rlvr/some.py:2: {line.strip()}"] if flagged else [])
