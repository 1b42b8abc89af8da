"""The order `make test` hands test groups to its workers (tests/conftest.py): heaviest first by
the seconds recorded in tests/durations.json, so no long group starts last while the other
worker idles; a group without a record goes first, collection order breaking ties. Every test
module has its record, and every record names a test module or a shared run."""

from __future__ import annotations

import json

import pytest

from tests.helpers.suite import DURATIONS, heaviest_first, module_names, module_of, stale_records


@pytest.mark.parametrize(
    ("groups", "seconds", "expected"),
    [
        (["a", "b", "c"], {"a": 1.0, "b": 5.0, "c": 3.0}, ["b", "c", "a"]),
        (["a", "new", "b"], {"a": 1.0, "b": 5.0}, ["new", "b", "a"]),  # not yet recorded
        (["a", "b"], {"a": 2.0, "b": 2.0}, ["a", "b"]),  # ties keep the collection order
        (["a", "b"], {}, ["a", "b"]),  # nothing recorded: collection order
    ],
)
def test_groups_start_heaviest_first(
    groups: list[str], seconds: dict[str, float], expected: list[str]
) -> None:
    assert heaviest_first(groups, seconds) == expected


@pytest.mark.parametrize(
    ("nodeid", "module"),
    [
        ("tests/agent/test_agent.py::test_x", "tests.agent.test_agent"),
        ("tests/test_help.py::test_y[a::b/c]", "tests.test_help"),
    ],
)
def test_a_reported_test_is_recorded_under_its_module(nodeid: str, module: str) -> None:
    assert module_of(nodeid) == module
    assert module in module_names()
    assert stale_records(
        {module: 1.0, "tiny_run": 2.0, "tests.test_gone": 3.0}, module_names()
    ) == ["tests.test_gone"]


def test_the_recorded_seconds_are_a_group_to_seconds_map() -> None:
    recorded = json.loads(DURATIONS.read_text())
    assert recorded and all(
        isinstance(group, str) and isinstance(seconds, int | float) and seconds >= 0
        for group, seconds in recorded.items()
    )


def test_every_test_module_has_recorded_seconds_and_every_record_a_module() -> None:
    recorded = json.loads(DURATIONS.read_text())
    modules = module_names()
    missing = [module for module in modules if module not in recorded]
    stale = stale_records(recorded, modules)
    files = " ".join(module.replace(".", "/") + ".py" for module in missing)
    assert not missing, (
        f"tests/durations.json has no seconds for {', '.join(missing)}: run `make durations`, "
        f"or `make durations TESTS='{files}'` to record those alone"
    )
    assert not stale, (
        f"tests/durations.json records {', '.join(stale)}, which is no test module or shared "
        "run: run `make durations` (it drops them)"
    )
