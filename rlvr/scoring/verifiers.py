"""The verifier library: deterministic, offline reward functions.

Every function follows one contract, `compute_reward(completion, ground_truth) -> float` in
[0, 1], and none of them raises on garbage. `safe_reward` enforces the contract around any
function, user-written ones included: an exception or a non-finite value becomes 0.0 and is
reported as an error so the loop can count it as `train/reward_errors` instead of training on it
silently.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable

RewardFn = Callable[[str, str], float]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
# Numbers as people write them: -1,234.5 / 3.0 / .5 / 1e3 / 12%
_NUMBER = re.compile(
    r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])"
)
_ANSWER_MARK = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:=]?\s*", re.IGNORECASE)


def normalize(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, single spaces."""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(completion: str, ground_truth: str) -> float:
    """1.0 when the normalised completion equals the normalised ground truth."""
    return float(normalize(completion) == normalize(ground_truth) != "")


def token_f1(completion: str, ground_truth: str) -> float:
    """Bag-of-tokens F1 between the normalised texts (partial credit for partial answers)."""
    pred, gold = normalize(completion).split(), normalize(ground_truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if not pred or not gold or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def parse_number(text: str) -> float | None:
    """The number written in `text` ("1,234", "-3.50", "12%"), or None."""
    cleaned = str(text).strip().replace("−", "-").replace(",", "").rstrip("%").strip()
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numbers_in(text: str) -> list[float]:
    """Every number in `text`, in order."""
    values = (parse_number(match.group()) for match in _NUMBER.finditer(str(text)))
    return [value for value in values if value is not None]


def final_answer(completion: str) -> str:
    """The part of a completion that states its answer: the text after the last 'Answer:' mark,
    else the last line that is not empty."""
    text = str(completion)
    marks = list(_ANSWER_MARK.finditer(text))
    if marks:
        rest = text[marks[-1].end() :].strip()
        return rest.splitlines()[0].strip() if rest else ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def numeric_match(completion: str, ground_truth: str) -> float:
    """1.0 when the last number of the completion's final answer equals the numeric ground truth."""
    gold = parse_number(ground_truth)
    found = numbers_in(final_answer(completion)) or numbers_in(completion)
    return float(gold is not None and bool(found) and _close(found[-1], gold))


def math_equivalent(completion: str, ground_truth: str) -> float:
    """Symbolic equivalence via math-verify (LaTeX, fractions, expressions), falling back to the
    numeric check when math-verify cannot parse either side."""
    from math_verify import parse, verify

    gold = parse(str(ground_truth), parsing_timeout=None)
    pred = parse(final_answer(completion) or str(completion), parsing_timeout=None)
    if gold and pred:
        return float(verify(gold, pred, timeout_seconds=None))
    return numeric_match(completion, ground_truth)


def contains_answer(completion: str, ground_truth: str) -> float:
    """Partial credit: 1.0 when the final answer is right, 0.5 when the right answer appears
    somewhere else in the completion, 0.0 otherwise. Numbers compare numerically."""
    if numeric_match(completion, ground_truth) or exact_match(
        final_answer(completion), ground_truth
    ):
        return 1.0
    gold = parse_number(ground_truth)
    if gold is not None:
        return 0.5 * any(_close(value, gold) for value in numbers_in(completion))
    gold_text = normalize(ground_truth)
    return 0.5 * bool(gold_text) * (gold_text in normalize(completion))


VERIFIERS: dict[str, RewardFn] = {
    "exact": exact_match,
    "f1": token_f1,
    "numeric": numeric_match,
    "math": math_equivalent,
    "contains": contains_answer,
}


def guarded(call: Callable[[], object]) -> tuple[float, bool]:
    """Run a reward computation under the contract: (value in [0, 1], errored). An exception, a
    non-number or a NaN is (0.0, True); values outside [0, 1] are clipped."""
    try:
        value = float(call())  # type: ignore[arg-type]  # any object: float() tells numbers apart
    except Exception:
        return 0.0, True
    if not math.isfinite(value):
        return 0.0, True
    return min(1.0, max(0.0, value)), False


def safe_reward(fn: RewardFn, completion: object, ground_truth: object) -> tuple[float, bool]:
    """`fn(completion, ground_truth)` under the contract (see `guarded`)."""
    return guarded(lambda: fn(str(completion), str(ground_truth)))
