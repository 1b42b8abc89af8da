"""IFEval instruction checkers: does a response follow one instruction?

Most checkers are the IFEval reference implementation (Google Research, Apache License 2.0) as
shipped in `llm-eval-framework` 0.1.0 (`eval_framework.tasks.ifeval`, Apache-2.0), used unchanged
through its `INSTRUCTION_DICT`. Two of them need nltk's punkt data, which cannot be downloaded
here, so they are rewritten as pure functions with the reference semantics:

- `length_constraints:number_sentences` counts sentences with nupunkt (an offline Punkt);
- `change_case:capital_word_frequency` tokenises words as `nltk.word_tokenize` does (Treebank
  words inside sentences), with nupunkt for the sentences.

langdetect (language and case checks) is seeded so a verdict never changes between calls.

`evaluate` scores a response on an item's instructions, strict (the response as is) and loose
(IFEval's upper bound: also without the first and/or last line and without asterisks). A checker
that raises counts as not followed and is reported in `Evaluation.errors`; nothing here raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue

Relation = Literal["less than", "at least"]


class Instruction(BaseModel):
    """One instruction of an item: its IFEval id and the arguments its checker takes."""

    model_config = ConfigDict(frozen=True)

    id: str
    kwargs: dict[str, JsonValue] = {}  # as the published rows give them


class Evaluation(BaseModel):
    """Per-instruction verdicts for one response; `loose` is None when only strict was asked."""

    model_config = ConfigDict(frozen=True)

    strict: tuple[bool, ...]
    loose: tuple[bool, ...] | None = None
    errors: int = 0  # checkers that raised on the response, counted as not followed

    @property
    def fraction(self) -> float:
        return _fraction(self.strict)

    @property
    def all_followed(self) -> bool:
        return bool(self.strict) and all(self.strict)

    @property
    def loose_fraction(self) -> float | None:
        return None if self.loose is None else _fraction(self.loose)

    @property
    def all_followed_loose(self) -> bool | None:
        return None if self.loose is None else bool(self.loose) and all(self.loose)


def _fraction(verdicts: tuple[bool, ...]) -> float:
    return sum(verdicts) / len(verdicts) if verdicts else 0.0


# --- The two checkers rewritten offline ---------------------------------------------------------


@functools.cache
def _sentence_tokenizer() -> Any:
    import nupunkt

    return nupunkt.load("default")


@functools.cache
def _word_tokenizer() -> Any:
    from nltk.tokenize.destructive import NLTKWordTokenizer

    return NLTKWordTokenizer()


def sentences(text: str) -> list[str]:
    return [s for s in _sentence_tokenizer().tokenize(text) if s.strip()]


def words(text: str) -> list[str]:
    """`nltk.word_tokenize` without punkt: Treebank tokens of each nupunkt sentence."""
    return [token for sentence in sentences(text) for token in _word_tokenizer().tokenize(sentence)]


def _compare(count: int, relation: Relation, threshold: int) -> bool:
    if relation == "less than":
        return count < threshold
    if relation == "at least":
        return count >= threshold
    raise ValueError(f"relation {relation!r} is not 'less than' or 'at least'")


def number_sentences(response: str, *, relation: Relation, num_sentences: int) -> bool:
    return _compare(len(sentences(response)), relation, num_sentences)


def capital_word_frequency(
    response: str, *, capital_relation: Relation, capital_frequency: int
) -> bool:
    return _compare(sum(w.isupper() for w in words(response)), capital_relation, capital_frequency)


OWN: dict[str, Callable[..., bool]] = {
    "length_constraints:number_sentences": number_sentences,
    "change_case:capital_word_frequency": capital_word_frequency,
}


# --- The reference checkers ---------------------------------------------------------------------


@functools.cache
def reference_registry() -> Mapping[str, type]:
    """The reference `INSTRUCTION_DICT`, with langdetect seeded (it samples otherwise)."""
    import langdetect
    from eval_framework.tasks.ifeval.instructions_registry import INSTRUCTION_DICT

    langdetect.DetectorFactory.seed = 0
    return INSTRUCTION_DICT


def _reference(instruction: Instruction, response: str, prompt: str) -> bool:
    checker = reference_registry()[instruction.id](instruction.id)
    checker.build_description(**instruction.kwargs)
    args = checker.get_instruction_args()
    if args and "prompt" in args:  # as the reference evaluation does
        checker.build_description(prompt=prompt)
    return bool(checker.check_following(response))


def follows(instruction: Instruction, response: str, prompt: str = "") -> bool:
    """Whether `response` follows `instruction` (strict IFEval: an empty response never does).
    Raises what the checker raises; `evaluate` is the never-raising entry point."""
    if not response.strip():
        return False
    own = OWN.get(instruction.id)
    if own is not None:
        return own(response, **instruction.kwargs)
    if instruction.id not in reference_registry():
        raise KeyError(f"unknown IFEval instruction id {instruction.id!r}")
    return _reference(instruction, response, prompt)


def loose_variants(response: str) -> list[str]:
    """IFEval's loose responses: as is, without the first / last / both lines, each also without
    asterisks (markdown the model wrapped around an otherwise good answer)."""
    lines = response.split("\n")
    cut = [response, "\n".join(lines[1:]), "\n".join(lines[:-1]), "\n".join(lines[1:-1])]
    cut = [cut[0], *(c.strip() for c in cut[1:])]
    return [variant for c in cut for variant in (c, c.replace("*", ""))]


def evaluate(
    response: str, instructions: Sequence[Instruction], prompt: str = "", *, loose: bool = True
) -> Evaluation:
    """Strict (and, unless `loose=False`, loose) verdicts for every instruction; never raises."""
    strict = [_safe(i, response, prompt) for i in instructions]
    variants = loose_variants(response)[1:] if loose else []
    return Evaluation(
        strict=tuple(ok is True for ok in strict),
        loose=tuple(
            ok is True or any(_safe(i, v, prompt) is True for v in variants)
            for i, ok in zip(instructions, strict, strict=True)
        )
        if loose
        else None,
        errors=sum(ok is None for ok in strict),
    )


def _safe(instruction: Instruction, response: str, prompt: str) -> bool | None:
    """The verdict, or None when the checker raised (a checker bug or odd input)."""
    try:
        return follows(instruction, response, prompt)
    except Exception:
        return None
