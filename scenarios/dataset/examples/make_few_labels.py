"""Writes few_labels.jsonl, the data of docs/guide/few-labels.md: 400 unlabelled prompts and 60
labelled ones, one-digit sums and differences as in arithmetic.jsonl.

    python scenarios/dataset/examples/make_few_labels.py

The 60 labelled questions are sums and differences the 400 unlabelled ones never ask, so the
held-out accuracy is measured on questions training never saw. Seeded: the same file every time.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SYSTEM = "You are a calculator. Reply with only the final number."
UNLABELLED, LABELLED = 400, 60
OUT = Path(__file__).with_name("few_labels.jsonl")


def rows(seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    questions = [(a, op, b) for a in range(10) for b in range(10) for op in "+-"]
    rng.shuffle(questions)
    held, trained = questions[:LABELLED], questions[LABELLED:]

    def row(kind: str, number: int, question: tuple[int, str, int], label: bool) -> dict[str, str]:
        a, op, b = question
        value = {
            "id": f"{kind}-{number:03d}",
            "system": SYSTEM,
            "prompt": f"Calculate {a} {op} {b}.",
        }
        return {**value, "answer": str(a + b if op == "+" else a - b)} if label else value

    unlabelled = [row("prompt", i, rng.choice(trained), False) for i in range(UNLABELLED)]
    labelled = [row("label", i, q, True) for i, q in enumerate(held)]
    return unlabelled + labelled


def text(seed: int = 0) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows(seed))


if __name__ == "__main__":
    OUT.write_text(text())
