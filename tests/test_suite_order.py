"""The order `make test` hands test groups to its workers (tests/conftest.py): heaviest first by
the seconds recorded in tests/durations.json, so no long group starts last while the other
worker idles; a group without a record goes first, collection order breaking ties."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DURATIONS, heaviest_first


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


def test_the_recorded_seconds_are_a_group_to_seconds_map() -> None:
    recorded = json.loads(DURATIONS.read_text())
    assert recorded and all(
        isinstance(group, str) and isinstance(seconds, int | float) and seconds >= 0
        for group, seconds in recorded.items()
    )
