"""Answer and retrieval scores: pure functions of the final answer and the passages retrieved.

    check  = EM(answer, gold)                                  validation and test
    reward = F1(answer, gold)                                  reward=f1 (default: partial credit)
           = EM(answer, gold)                                  reward=em
           = F1(answer, gold) if a supporting passage was retrieved, else 0   reward=gated

EM and F1 are the verifier library's (SQuAD normalisation). "Retrieved" means shown to the model
in full or as a search hit (or in the prompt, at the easy level). Retrieval recall is the share of
supporting passages retrieved; precision the share of retrieved passages that support the answer
(0 when nothing was retrieved). No final answer scores 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from rlvr.scoring.verifiers import exact_match, token_f1


class RewardKind(StrEnum):
    """The training reward of `scorer=verifier` (the task option `reward`)."""

    F1 = "f1"  # token F1 of the answer: partial credit
    EM = "em"  # exact match, the same as the check
    GATED = "gated"  # F1 only when a supporting passage was retrieved


class Retrieval(BaseModel):
    model_config = ConfigDict(frozen=True)

    recall: float
    precision: float

    @property
    def found_support(self) -> bool:
        return self.recall > 0.0


def retrieval_scores(retrieved: Collection[str], supporting: Collection[str]) -> Retrieval:
    hits = len(set(retrieved) & set(supporting))
    return Retrieval(
        recall=hits / len(set(supporting)) if supporting else 0.0,
        precision=hits / len(set(retrieved)) if retrieved else 0.0,
    )


def check_score(answer: str | None, gold: str) -> float:
    return exact_match(answer, gold) if answer is not None else 0.0


def reward_score(kind: RewardKind, answer: str | None, gold: str, retrieval: Retrieval) -> float:
    if answer is None:
        return 0.0
    if kind is RewardKind.EM:
        return exact_match(answer, gold)
    if kind is RewardKind.GATED and not retrieval.found_support:
        return 0.0
    return token_f1(answer, gold)
