import pytest

from rlvr.training.split import split_items, split_sizes


@pytest.mark.parametrize(
    ("n", "expected"),
    [(10, (8, 1, 1)), (11, (9, 1, 1)), (3, (1, 1, 1)), (101, (81, 10, 10)), (399, (319, 40, 40))],
)
def test_sizes_on_odd_counts(n, expected):
    assert split_sizes(n, 0.1, 0.1) == expected


def test_too_few_items_is_an_error():
    with pytest.raises(ValueError, match="at least 3"):
        split_sizes(2, 0.1, 0.1)


@pytest.mark.parametrize("n", [3, 10, 57, 400])
def test_split_is_deterministic_disjoint_and_complete(n):
    items = list(range(n))
    a = split_items(items, val_ratio=0.1, test_ratio=0.1, seed=7)
    b = split_items(items, val_ratio=0.1, test_ratio=0.1, seed=7)
    assert (a.train, a.val, a.test) == (b.train, b.val, b.test)
    parts = [set(a.train), set(a.val), set(a.test)]
    assert sum(len(p) for p in parts) == n
    assert set().union(*parts) == set(items)
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])


def test_seed_changes_the_split_but_not_the_input():
    items = list(range(100))
    a = split_items(items, val_ratio=0.1, test_ratio=0.1, seed=1)
    b = split_items(items, val_ratio=0.1, test_ratio=0.1, seed=2)
    assert a.val != b.val
    assert items == list(range(100))
