"""The order `make test` hands its groups to the workers (tests/conftest.py)."""

import pytest

from tests.conftest import heaviest_first


@pytest.mark.parametrize(
    ("groups", "seconds", "expected"),
    [
        (["a", "b", "c"], {"a": 1.0, "b": 30.0, "c": 5.0}, ["b", "c", "a"]),
        # a group never recorded (a new module) goes first: it may be the longest
        (["a", "new", "b"], {"a": 1.0, "b": 30.0}, ["new", "b", "a"]),
        (["a", "b"], {}, ["a", "b"]),  # nothing recorded: collection order
        (["a", "b"], {"a": 2.0, "b": 2.0}, ["a", "b"]),  # ties keep collection order
    ],
)
def test_groups_go_longest_first(groups, seconds, expected) -> None:
    assert heaviest_first(groups, seconds) == expected
