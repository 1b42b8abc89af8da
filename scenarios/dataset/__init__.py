"""TASK=dataset: the no-code task — an idea and labelled examples, nothing to write.

    rlvr train dataset data_path=my.jsonl verifier=numeric

Rows are `{"prompt": ..., "answer": ...}` with an optional `system` prompt and `id`, in JSONL,
a JSON array, CSV or parquet (read with polars). A row with no or an empty answer is unlabelled:
it trains under a scorer that reads no label (`scorer=ruler`), and the labelled rows are held out
(docs/guide/few-labels.md; `examples/few_labels.jsonl`). Each episode is one chat turn; validation and
test check the answer with the chosen verifier, training gives partial credit where the verifier
allows it. A file in the Tinker recipe's rubric format (`prompt` plus `rubric - N. criterion`
columns) is trained with the rubric judge instead (`scorer=rubric`, the default there).

A bad row is an error naming the file, row and field; `skip_bad_rows=true` skips and counts them.
`scenarios/dataset/examples/arithmetic.jsonl` is a ready example (400 one-digit sums and
differences with a calculator system prompt).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.task_api.api import Task
from scenarios.math import ONE_TURN_DEFAULTS

if TYPE_CHECKING:
    from rlvr.types import Environment

EXAMPLE = Path(__file__).parent / "examples" / "arithmetic.jsonl"
FEW_LABELS = EXAMPLE.with_name("few_labels.jsonl")  # 400 unlabelled prompts, 60 labelled rows


class Options(BaseModel):
    """`rlvr train dataset key=value` options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_path: Path = Field(description="JSONL, JSON array, CSV or parquet file of rows")
    verifier: Literal["math", "numeric", "exact", "f1", "contains"] = Field(
        "exact", description="how an answer is checked against the row's answer"
    )
    partial_credit: bool = Field(
        True,
        description="training reward 0.5 when the right answer appears but is not the final "
        "one (math, numeric, exact)",
    )
    system: str | None = Field(None, description="system prompt for rows without one")
    prompt_field: str = Field("prompt", description="column holding the prompt")
    answer_field: str = Field("answer", description="column holding the answer")
    num_items: int | None = Field(None, ge=10, description="use only the first N rows")
    skip_bad_rows: bool = Field(False, description="skip (and count) bad rows instead of failing")


def make(options: Options, judge: Any = None) -> Environment:
    from scenarios.dataset.environment import make_environment

    return make_environment(options, judge)


task = Task(
    name="dataset",
    make=make,
    options=Options,
    # The math task's defaults, for the same kind of episode: a labelled row answered in one short
    # checked turn (the reason for each value: scenarios/math).
    defaults=ONE_TURN_DEFAULTS,
    description="your labelled examples (prompt, answer) checked by a verifier, or a rubric file",
)

__all__ = ["EXAMPLE", "FEW_LABELS", "Options", "task"]
