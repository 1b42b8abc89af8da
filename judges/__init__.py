"""Everything that asks an LLM for a reward.

- `open_judge(cfg)` — the run's judge client as an async context manager; for `judge=local` it owns
  the local judge (started on first use, always stopped on exit).
- `ruler_scorer`, `rubric_scorer` — the scorer factories registered as `scorer=ruler` (ART's RULER
  ranks a group in one call) and `scorer=rubric` (per-criterion pass rate, one call per response)
  in the `rlvr.scorers` entry-point group.

Modules: `client` (JudgeClient: dialects, parsing, retries, limits, cost, spend cap), `local`
(the local judge's lifecycle), `server` (its child process: rlvr's batched engine with structured
output), `ruler`, `rubric`, `rubric_data` (the Tinker recipe's dataset
format and HealthBench), `bench` (`rlvr bench judge`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judges.client import JudgeClient
    from rlvr.config import RunConfig
    from rlvr.types import Environment, Scorer

# Submodules are imported inside the functions: `import judges.local` (for `rlvr judge serve`)
# must not pay for litellm and ART.


@contextlib.asynccontextmanager
async def open_judge(cfg: RunConfig) -> AsyncIterator[JudgeClient]:
    """The run's judge. `judge=local` without `judge.base_url` gets a private local judge on
    127.0.0.1 (judges.server), started lazily by the first request and stopped when this context exits (normally,
    on an exception, or on Ctrl-C); any other id is a litellm model used directly."""
    from judges.client import LOCAL_JUDGE, JudgeClient, JudgeSettings
    from judges.local import KEY_ENV, LocalJudge, LocalJudgeSettings

    settings = JudgeSettings.from_config(cfg)
    local = None
    if cfg.judge.model == LOCAL_JUDGE and cfg.judge.base_url is None:
        local = LocalJudge(
            LocalJudgeSettings.default(threads=cfg.judge.threads, model=cfg.judge.local_model)
        )
    client = JudgeClient(
        settings,
        local.ensure_started if local else None,
        seed=cfg.seed,
        endpoint_key=local.key if local else os.environ.get(KEY_ENV),
    )
    try:
        yield client
    finally:
        if local is not None:
            local.stop()


def ruler_scorer(judge: JudgeClient, environment: Environment) -> Scorer:
    """`scorer=ruler`: ART's RULER ranks each group in one judge call."""
    from judges.ruler import RulerScorer

    return RulerScorer(judge, environment)


def ruler_ref_scorer(judge: JudgeClient, environment: Environment) -> Scorer:
    """`scorer=ruler_ref`: RULER told each training item's reference answer (reference-guided
    judging, for judges too small to solve the task themselves)."""
    from judges.ruler import RulerScorer

    return RulerScorer(judge, environment, reference=True)


def rubric_scorer(judge: JudgeClient) -> Scorer:
    """`scorer=rubric`: per-criterion pass rate, one judge call per response."""
    from judges.rubric import RubricScorer

    return RubricScorer(judge)


__all__ = ["open_judge", "rubric_scorer", "ruler_ref_scorer", "ruler_scorer"]
