"""Scoring a final answer: is it right, and does it cite the right emails?

    correct = answer_score >= CORRECT_THRESHOLD                        (the check: 1.0 or 0.0)
    reward  = ANSWER_WEIGHT * correct + SOURCE_WEIGHT * source_f1       (answerable questions)
    reward  = correct                                                   (ABSENT questions)

answer_score is 1.0 for a normalised exact match, a short answer that contains the expected one,
or (money, counts) a first or last number equal to the expected one; otherwise the token F1 against the
expected answer. An answer that says the inbox does not have it scores 1.0 on ABSENT questions and
0.0 elsewhere. The training reward credits an answer only when it is correct — partial F1 credit
for a wrong answer taught the policy to write near misses, its reward rising while no answer was
correct — and adds source_f1, the F1 between cited ids and supporting ids, for having found the
right emails. ABSENT questions have no supporting emails, so citations neither earn nor cost
anything there (else an empty citation would earn credit for any answer). No answer: 0.0.

Where the episode's reads are given (the task's default, `source_credit=read`), a cited supporting
id earns credit only if the episode read that email (or the prompt showed it whole): citing the ids
a search listed, beside a wrong answer, earns nothing, where without the reads it earns as much as
reading them did. That credit for searching and citing was the only reward left once a run had
stopped reading (docs/guide/tool-agents.md, "Credit for reading").
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

from scenarios.email.inbox import AnswerType

ANSWER_WEIGHT = 0.8
SOURCE_WEIGHT = 0.2
# An answer this close to the expected one counts as correct (metric `correct`).
CORRECT_THRESHOLD = 0.8
# A longer answer that contains the expected one is still a correct answer ("It is in Room 4B."),
# up to this many extra tokens; beyond it, F1 decides (so dumping the email does not pay).
CONTAINMENT_SLACK = 6

_ARTICLES = frozenset({"a", "an", "the"})
_NUMBER_WORDS = {
    w: str(n)
    for n, w in enumerate(
        ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    )
}
_PUNCTUATION = str.maketrans(dict.fromkeys(string.punctuation, " "))

# Ways of saying "the inbox does not say", matched against the normalised answer.
NOT_IN_INBOX_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"\bnot (?:in|found in|mentioned in|present in|available in|included in) (?:my |your |this )?(?:inbox|emails?|mailbox)",
        r"\b(?:inbox|emails?|mailbox) (?:does|do)(?: not|n t) (?:say|mention|contain|include|have|show|tell)",
        r"\b(?:no|not any) (?:such |matching |relevant )?(?:email|invoice|meeting|flight|booking|record|information|mention)s?\b",
        r"\b(?:cannot|can not|can t|could not|couldn t|unable to) (?:find|locate|determine|tell|see)\b",
        r"\bnot (?:mentioned|found|available|specified|stated|known|provided)\b",
        r"\b(?:does|do)(?: not|n t) (?:exist|say|mention)\b",
        r"\b(?:unknown|nowhere)\b",
        r"\b(?:don t|do not) know\b",
        r"\bno answer\b",
    )
)


def normalise(text: str) -> str:
    """Lowercase, thousands separators and currency signs dropped, punctuation to spaces (decimal
    points inside numbers kept), articles dropped, number words as digits, whitespace collapsed."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    text = re.sub(r"(?<=\d)\.(?=\d)", "\x00", text)  # keep decimal points through the next line
    text = text.translate(_PUNCTUATION).replace("\x00", ".")
    words = [_NUMBER_WORDS.get(w, w) for w in text.split() if w not in _ARTICLES]
    return " ".join(_canonical_number(w) for w in words)


def _canonical_number(word: str) -> str:
    if re.fullmatch(r"\d+\.\d+", word):
        return word.rstrip("0").rstrip(".")
    return word


def token_f1(predicted: str, expected: str) -> float:
    pred, gold = normalise(predicted).split(), normalise(expected).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if not pred or not gold or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def says_not_in_inbox(answer: str) -> bool:
    text = normalise(answer)
    return any(p.search(text) for p in NOT_IN_INBOX_PATTERNS)


def _numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", normalise(text))]


def answer_score(expected: str, answer_type: AnswerType, given: str) -> float:
    """How right `given` is, 0..1 (see the module docstring)."""
    if answer_type is AnswerType.ABSENT:
        return 1.0 if says_not_in_inbox(given) else 0.0
    if not given.strip() or says_not_in_inbox(given):
        return 0.0
    pred, gold = normalise(given).split(), normalise(expected).split()
    if pred == gold:
        return 1.0
    if answer_type in (AnswerType.MONEY, AnswerType.COUNT):
        numbers, target = _numbers(given), _numbers(expected)
        # The stated result is the first or the last number ("$7,568.57 in total over 2").
        if target and any(abs(n - target[-1]) < 0.005 for n in numbers[:1] + numbers[-1:]):
            return 1.0
    if _contains(pred, gold) and len(pred) <= len(gold) + CONTAINMENT_SLACK:
        return 1.0
    return token_f1(given, expected)


def _contains(tokens: list[str], part: list[str]) -> bool:
    return bool(part) and any(
        tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1)
    )


def source_f1(
    cited: Iterable[str], supporting: Iterable[str], read: Iterable[str] | None = None
) -> float:
    """F1 of the cited ids against the supporting ones; with `read`, a cited id that was not read
    counts as a wrong citation."""
    cited_set = {c.strip().lower() for c in cited if c.strip()}
    gold = {s.lower() for s in supporting}
    credited = gold if read is None else gold & {r.lower() for r in read}
    hits = len(cited_set & credited)
    if not hits:
        return 0.0
    precision, recall = hits / len(cited_set), hits / len(gold)
    return 2 * precision * recall / (precision + recall)


def score_answer(
    expected: str,
    answer_type: AnswerType,
    supporting: Iterable[str],
    given: str | None,
    cited: Iterable[str],
    read: Iterable[str] | None = None,
) -> float:
    """The training reward of one final answer (None = the episode ended without one); `read`, the
    ids the episode read, limits the source credit to them (module docstring)."""
    if given is None:
        return 0.0
    correctness = float(answer_score(expected, answer_type, given) >= CORRECT_THRESHOLD)
    if answer_type is AnswerType.ABSENT:
        return correctness
    return ANSWER_WEIGHT * correctness + SOURCE_WEIGHT * source_f1(cited, supporting, read)
