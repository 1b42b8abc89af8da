"""Names rlvr renamed, kept for one release: each use of an old one warns (DeprecationWarning)
naming the new one, and then works as the new one does.

"Scenario" left rlvr's vocabulary: what a task trains on is an Environment (ART calls one item a
scenario, so the word named two things). This module is the one place the old words live.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")

# old public name -> new, at the top level (rlvr.X) and in the module defining the new name
RENAMED_EXPORTS = {
    "Scenario": "Environment",
    "ScenarioBase": "EnvironmentBase",
    "scenario": "environment",
    "TrainConfig": "RunConfig",
}
RENAMED_IN_TYPES = {
    "Scenario": "Environment",
    "ScenarioBase": "EnvironmentBase",
    "SCENARIO_MEMBERS": "ENVIRONMENT_MEMBERS",
    "SCENARIO_HOOKS": "ENVIRONMENT_HOOKS",
}
RENAMED_IN_CONFIG = {"TrainConfig": "RunConfig"}
RENAMED_IN_TASK_API = {"scenario": "environment", "FunctionScenario": "FunctionEnvironment"}

# The entry-point group installed tasks registered under before `rlvr.tasks`.
OLD_TASK_GROUP = "rlvr.scenarios"
# A factory's parameter name that asks for the environment by its old name.
OLD_FACTORY_ARG = "scenario"


def warn_renamed(old: str, new: str, stacklevel: int = 2) -> None:
    """Say that `old` is now `new`; `stacklevel` as warnings.warn's, counted from the caller."""
    warnings.warn(
        f"{old} is now {new}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def renamed_attribute(
    module: str, name: str, renamed: Mapping[str, str], space: Mapping[str, object]
) -> object:
    """A module __getattr__'s answer for `name`: the new object under an old name, with a
    warning at the user's line; AttributeError for a name that is neither."""
    new = renamed.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn_renamed(f"{module}.{name}", f"{module}.{new}", stacklevel=3)
    return space[new]


def task_keyword(where: str, task: T, scenario: T) -> T:
    """`task=` of `where`, also accepted as its old name `scenario=` (with a warning at the
    user's line); both at once is a TypeError, as a keyword given twice is."""
    if scenario is None:
        return task
    if task is not None:
        raise TypeError(f"{where}() got task= and its old name scenario=; pass task= only")
    warn_renamed(f"{where}(scenario=...)", f"{where}(task=...)", stacklevel=3)
    return scenario
