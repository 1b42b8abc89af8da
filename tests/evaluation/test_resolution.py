"""The smallest gain a held-out split can resolve, read from the paired test `paired_gain` runs:
the figure and the test block it predicts agree at the edge, on either side of it."""

from __future__ import annotations

import pytest

from rlvr.evaluation.paired_gains import paired_gain
from rlvr.evaluation.resolution import TARGET_GAIN, items_for_gain, resolution


def resolved(n: int, up: int, down: int) -> bool:
    """Whether paired_gain's 95% interval excludes 0 with `up` items 0 -> 1, `down` 1 -> 0."""
    before = [0.0] * up + [1.0] * down + [0.0] * (n - up - down)
    after = [1.0] * up + [0.0] * down + [0.0] * (n - up - down)
    return paired_gain(before, after).ci95[0] > 0


@pytest.mark.parametrize(
    ("n", "fewest", "of_all", "claim"),
    [
        (5, None, None, "no gain can resolve on 5"),
        (6, 6, 6, "a gain resolves only if all 6 improve"),
        (40, 6, 27, "a gain resolves from +0.150 (6 of 40 improve and none worsens"),
        (120, 6, 72, "a gain resolves from +0.050 (6 of 120 improve"),
    ],
)
def test_the_smallest_resolvable_gain_is_where_the_paired_test_starts_to_reject(
    n: int, fewest: int | None, of_all: int | None, claim: str
) -> None:
    found = resolution("test", n)
    assert (found.fewest, found.of_all) == (fewest, of_all)
    assert found.claim().startswith(claim)
    assert not resolved(n, n, 0) if fewest is None else resolved(n, fewest, 0)
    if fewest is not None:  # one fewer improving item is a gain the test cannot tell from 0
        assert not resolved(n, fewest - 1, 0)
        assert found.smallest_gain == pytest.approx(fewest / n)
    if of_all is not None:  # every item changed: the edge of the noisiest case
        assert resolved(n, of_all, n - of_all)
        assert not resolved(n, of_all - 1, n - of_all + 1)


def test_a_target_gain_needs_the_items_its_fewest_improving_items_make_up() -> None:
    need = items_for_gain(TARGET_GAIN)
    assert need == 60
    assert resolution("test", need).smallest_gain <= TARGET_GAIN
    assert resolution("test", need - 1).smallest_gain > TARGET_GAIN
