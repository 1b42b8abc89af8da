"""The trainer's pure parts: which rows of a step its measures read."""

import pytest

from rlvr.engine.trainer import update_kl_rows


@pytest.mark.parametrize(
    ("sequences", "rows"),
    [(1, [0]), (2, [0]), (4, [0]), (5, [0, 4]), (16, [0, 4, 8, 12]), (17, [0, 4, 8, 12, 16])],
)
def test_update_kl_is_measured_on_every_fourth_sequence(sequences: int, rows: list[int]) -> None:
    # The first sequence always, so a step of one group of two still has its measure.
    assert update_kl_rows(sequences) == rows
