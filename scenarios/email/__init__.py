"""The email agent task (ART·E style): search a generated inbox with tools and answer questions.

Modules: `inbox` (seeded generator: emails, questions, exact answers), `store` (SQLite + FTS5,
parameterised queries only), `actions` (tool schemas, the text-action fallback, observations),
`scoring` (the ground-truth check), `scenario` (rollout, levels, `make_scenario`).

The generator, store and check import without ART; `make_scenario` loads the rest on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.tasks import Task

if TYPE_CHECKING:
    from rlvr.config import TrainConfig
    from scenarios.email.scenario import EmailScenario


class Options(BaseModel):
    """`rlvr train email key=value` options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    difficulty: str = Field("easy", description="easy, medium (= default) or hard")
    tool_protocol: Literal["auto", "tools", "text"] = Field(
        "text",
        description="OpenAI tool calls, one-line text actions, or auto (tool calls when the "
        "model emits them, else the text actions)",
    )
    num_items: int = Field(400, ge=10, description="questions generated before the split")


def make(options: Options, cfg: TrainConfig) -> EmailScenario:
    from scenarios.email.scenario import make_scenario

    return make_scenario(options, cfg.seed)


task = Task(
    name="email",
    make=make,
    options=Options,
    # Measured on 2 cores (`make train TASK=email` on a fresh clone): 6 warm-start steps on 48
    # oracle demonstrations (loss 1.96 -> 0.26, 6 min) lift validation from 0.27 to 0.42 on 40
    # held-out questions, so RL starts from groups that sometimes succeed. Training samples at
    # 0.7 (at 1.0 the sampled answers were far worse than greedy). The scorer is the ground-truth
    # verifier: the local 135M judge cannot judge this task (RULER agreement +0.08; reference-
    # guided RULER scored 0.75 where the truth gave 0.01, with no signal) — with a real judge,
    # use scorer=ruler_ref. Validation dominates the budget: ~10 s per question on 2 cores.
    defaults={
        "sft_steps": 6,
        "sft_batch_size": 8,
        "temperature": 0.7,
        "learning_rate": 2e-4,
        "groups_per_batch": 2,
        "max_val_items": 16,  # 40 items took 6.6 min to validate on 2 quiet cores
        "max_minutes": 27,
    },
    description="answer questions by searching a generated inbox with tools (ART·E style)",
)

__all__ = ["Options", "task"]
