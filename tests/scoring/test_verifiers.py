import math

import pytest

from rlvr.scoring.verifiers import (
    VERIFIERS,
    contains_answer,
    exact_match,
    final_answer,
    math_equivalent,
    numeric_match,
    safe_reward,
    token_f1,
)


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        ("Paris", "paris", 1.0),
        ("The Paris!", "paris", 1.0),
        ("  paris  ", "Paris.", 1.0),
        ("Paris, France", "Paris", 0.0),
        ("", "", 0.0),
    ],
)
def test_exact_match(completion, truth, expected):
    assert exact_match(completion, truth) == expected


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        ("new york city", "new york city", 1.0),
        ("new york", "new york city", 0.8),
        ("boston", "new york", 0.0),
        ("", "x", 0.0),
    ],
)
def test_token_f1(completion, truth, expected):
    assert token_f1(completion, truth) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        ("12", "12", 1.0),
        ("The answer is 12.", "12", 1.0),
        ("7 + 5 = 12", "12", 1.0),
        ("Answer: 1,234", "1234", 1.0),
        ("-28", "-28", 1.0),
        ("3.50", "3.5", 1.0),
        ("12 ... no wait, 13", "12", 0.0),
        ("Answer: 13\n", "12", 0.0),
        ("twelve", "12", 0.0),
        ("12", "not a number", 0.0),
    ],
)
def test_numeric_match(completion, truth, expected):
    assert numeric_match(completion, truth) == expected


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        ("12", "12", 1.0),
        ("5+7 is 12, so the answer is 13", "12", 0.5),
        ("I do not know", "12", 0.0),
        ("it is in paris", "Paris", 0.5),
        ("Answer: Paris", "Paris", 1.0),
    ],
)
def test_contains_answer_partial_credit(completion, truth, expected):
    assert contains_answer(completion, truth) == expected


@pytest.mark.parametrize(
    ("completion", "truth", "expected"),
    [
        ("Answer: $\\frac{1}{2}$", "0.5", 1.0),
        ("Answer: 2/4", "1/2", 1.0),
        ("Answer: 3", "1/2", 0.0),
    ],
)
def test_math_equivalent(completion, truth, expected):
    assert math_equivalent(completion, truth) == expected


def test_final_answer_takes_text_after_last_mark():
    assert final_answer("work...\nAnswer: 4\nthanks") == "4"
    assert final_answer("line one\n\nline two\n") == "line two"


GARBAGE = [
    None,
    12,
    3.5,
    float("nan"),
    "\x00\x01",
    "∞" * 1000,
    "1e999",
    "-" * 50,
    "Answer:",
    b"bytes",
    [1, 2],
]


@pytest.mark.parametrize("name", sorted(VERIFIERS))
@pytest.mark.parametrize("garbage", GARBAGE, ids=repr)
def test_verifiers_never_raise_and_stay_in_range(name, garbage):
    for completion, truth in ((garbage, "12"), ("12", garbage), (garbage, garbage)):
        value, errored = safe_reward(VERIFIERS[name], completion, truth)
        assert 0.0 <= value <= 1.0
        assert not errored, f"{name} raised on {completion!r}/{truth!r}"


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda c, g: 1 / 0, (0.0, True)),
        (lambda c, g: float("nan"), (0.0, True)),
        (lambda c, g: "not a number", (0.0, True)),
        (lambda c, g: 7.0, (1.0, False)),
        (lambda c, g: -2, (0.0, False)),
        (lambda c, g: 0.25, (0.25, False)),
    ],
)
def test_safe_reward_enforces_the_contract(fn, expected):
    assert safe_reward(fn, "x", "y") == expected


def test_verifiers_are_deterministic():
    for fn in VERIFIERS.values():
        assert [fn("Answer: 12 or 13", "12") for _ in range(3)] == [
            fn("Answer: 12 or 13", "12")
        ] * 3
    assert not math.isnan(token_f1("a b", "b c"))
