"""The email agent task (ART·E style): search a generated inbox with tools and answer questions.

Modules: `inbox` (seeded generator: emails, questions, exact answers), `store` (SQLite + FTS5,
parameterised queries only), `actions` (tool schemas, the text-action fallback, observations),
`scoring` (the ground-truth check), `scenario` (rollout, levels, `make_scenario`).

The generator, store and check import without ART; `make_scenario` loads the rest on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.config import TrainConfig
    from scenarios.email.scenario import EmailScenario


def make_scenario(cfg: TrainConfig, judge: object | None = None) -> EmailScenario:
    from scenarios.email.scenario import make_scenario as make

    return make(cfg, judge)


__all__ = ["make_scenario"]
