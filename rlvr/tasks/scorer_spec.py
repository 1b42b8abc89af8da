"""Build the training scorer from its spec string.

verifier | length | ruler | rubric      one installed scorer (entry-point group rlvr.scorers)
path/to/file.py:fn, pkg.module:fn        a scorer of your own (see rlvr.tasks.plugins.as_scorer)
verifier+ruler, verifier*0.3+ruler*0.7  weighted sum (weights default to 1)
verifier>ruler                           gated: ruler counts only where verifier passes
default                                  the environment's own default
"""

from __future__ import annotations

from rlvr.config import ConfigError, RunConfig
from rlvr.scoring.scorers import GatedScorer, WeightedScorer
from rlvr.tasks.plugins import resolve_scorer
from rlvr.types import Environment, Judge, Scorer

# The task's own training reward (its `reward` hook, or the reward its rollout set): its partial
# credit differs from its check by design, so alarm/judge_disagrees does not compare it. Every
# other scorer — a judge, a composite, a reward function of the user's — is compared.
OWN_REWARD = frozenset({"verifier", "rollout"})


def scorer_spec(cfg: RunConfig, environment: Environment) -> str:
    return environment.default_scorer if cfg.scorer == "default" else cfg.scorer


def compared_with_truth(cfg: RunConfig, environment: Environment) -> bool:
    """Whether the run's configured scorer is checked against the ground truth of the same
    rollouts (alarm/judge_disagrees): every scorer but the task's own reward."""
    return scorer_spec(cfg, environment).replace(" ", "") not in OWN_REWARD


def _weighted_part(part: str) -> tuple[str, float]:
    name, _, weight = part.partition("*")
    try:
        return name.strip(), float(weight) if weight else 1.0
    except ValueError:
        raise ConfigError(
            f"config: scorer: weight '{weight}' of '{name}' is not a number"
        ) from None


def make_scorer(cfg: RunConfig, environment: Environment, judge: Judge | None = None) -> Scorer:
    """The run's scorer from `cfg.scorer` (or the environment's default)."""
    return parse_scorer(scorer_spec(cfg, environment).replace(" ", ""), cfg, environment, judge)


def parse_scorer(
    spec: str, cfg: RunConfig, environment: Environment, judge: Judge | None
) -> Scorer:
    def one(name: str) -> Scorer:
        return resolve_scorer(name, cfg=cfg, judge=judge, environment=environment)

    if ">" in spec:
        gate, _, rest = spec.partition(">")
        return GatedScorer(one(gate), parse_scorer(rest, cfg, environment, judge))
    parts = [_weighted_part(p) for p in spec.split("+")]
    if len(parts) == 1 and parts[0][1] == 1.0:
        return one(parts[0][0])
    return WeightedScorer([(one(name), w) for name, w in parts])
