"""Build the training scorer from its spec string.

verifier | length | ruler | rubric      one scorer
verifier+ruler, verifier*0.3+ruler*0.7  weighted sum (weights default to 1)
verifier>ruler                           gated: ruler counts only where verifier passes
default                                  the scenario's own default
"""

from __future__ import annotations

from typing import Any

from rlvr.config import ConfigError, TrainConfig
from rlvr.scorers import GatedScorer, LengthScorer, VerifierScorer, WeightedScorer
from rlvr.types import Scenario, Scorer

SIMPLE = ("verifier", "length")
JUDGED = ("ruler", "rubric")


def scorer_spec(cfg: TrainConfig, scenario: Scenario) -> str:
    return scenario.default_scorer if cfg.scorer == "default" else cfg.scorer


def needs_judge(spec: str) -> bool:
    return any(name in spec for name in JUDGED)


def _one(name: str, cfg: TrainConfig, scenario: Scenario, judge: Any) -> Scorer:
    if name == "verifier":
        return VerifierScorer(scenario.reward)
    if name == "length":
        return LengthScorer()
    if name in JUDGED:
        if judge is None:
            raise ConfigError(
                f"config: scorer '{name}' needs a judge; set judge=local or a model id"
            )
        from judges import make_scorer as make_judge_scorer

        return make_judge_scorer(name, cfg, judge, scenario)
    raise ConfigError(
        f"config: scorer: unknown scorer '{name}'; expected one of {', '.join(SIMPLE + JUDGED)}, "
        "combined as a+b, a*0.3+b*0.7 or a>b"
    )


def _weighted_part(part: str) -> tuple[str, float]:
    name, _, weight = part.partition("*")
    try:
        return name.strip(), float(weight) if weight else 1.0
    except ValueError:
        raise ConfigError(
            f"config: scorer: weight '{weight}' of '{name}' is not a number"
        ) from None


def make_scorer(cfg: TrainConfig, scenario: Scenario, judge: Any = None) -> Scorer:
    spec = scorer_spec(cfg, scenario).replace(" ", "")
    if ">" in spec:
        gate, _, rest = spec.partition(">")
        return GatedScorer(
            _one(gate, cfg, scenario, judge), make_scorer_from(rest, cfg, scenario, judge)
        )
    return make_scorer_from(spec, cfg, scenario, judge)


def make_scorer_from(spec: str, cfg: TrainConfig, scenario: Scenario, judge: Any) -> Scorer:
    parts = [_weighted_part(p) for p in spec.split("+")]
    if len(parts) == 1 and parts[0][1] == 1.0:
        return _one(parts[0][0], cfg, scenario, judge)
    return WeightedScorer([(_one(name, cfg, scenario, judge), w) for name, w in parts])
