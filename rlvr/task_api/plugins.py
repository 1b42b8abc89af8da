"""Resolution of task, scorer and judge names: the one place where a name becomes an object, and
where a run's parts (`resolve_run`: its task built, its scorer, its judge) are made from what the
caller gave, before a run directory is written.

A name is one of
- an entry point of an installed package: group `rlvr.tasks` (tasks), `rlvr.scorers`
  (scorers) or `rlvr.judges` (the judge client's opener) — rlvr's own are registered this way,
  with no privileged path (so `rlvr` never imports `judges`);
- a file reference `path/to/file.py:attr` (the file's folder goes on sys.path, so it may import
  its neighbours);
- a module reference `package.module:attr`.
Every failure (missing file or module, missing attribute, import error, wrong kind of object) is a
PluginError whose message is one line naming the reference.

A scorer spec composes names:

    verifier | length | ruler | rubric      one installed scorer (entry-point group rlvr.scorers)
    path/to/file.py:fn, pkg.module:fn        a scorer of your own (`as_scorer`)
    verifier+ruler, verifier*0.3+ruler*0.7  weighted sum (weights default to 1)
    verifier>ruler                           gated: ruler counts only where verifier passes
    default                                  the task's own default
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from rlvr.config import ConfigError, RunConfig
from rlvr.json_types import JsonObject
from rlvr.scoring.scorers import GatedScorer, WeightedScorer, group_scorer, reward_scorer
from rlvr.task_api.api import PluginError, Task, call_factory, config_for
from rlvr.task_api.imports import VF_PREFIX, import_target
from rlvr.types import Environment, Judge, Scorer

TASK_GROUP = "rlvr.tasks"
SCORER_GROUP = "rlvr.scorers"
# Judges plug in like tasks and scorers: an entry point `open` in this group is
# `open(cfg) -> async context manager yielding the judge client` (rlvr's own: judges:open_judge).
JUDGE_GROUP = "rlvr.judges"
JUDGE_OPENER = "open"


def is_reference(name: str) -> bool:
    return ":" in name


def load_reference(ref: str) -> Any:
    """The object named by `path/to/file.py:attr` or `package.module:attr`."""
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise PluginError(f"{ref}: expected path/to/file.py:name or package.module:name")
    module = import_target(target, ref)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{ref}: {target} has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj


@cache
def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def _load_entry_point(group: str, name: str) -> Any:
    ep = _entry_points(group)[name]
    try:
        return ep.load()
    except Exception as error:
        raise PluginError(
            f"{name}: entry point {ep.value} ({group}) failed to load: {type(error).__name__}: {error}"
        ) from error


def as_task(obj: Any, ref: str) -> Task:
    """A Task from what a reference names: a Task, an Environment, or a factory returning one."""
    if isinstance(obj, Task):
        return obj
    if isinstance(obj, Environment) and not inspect.isclass(obj):
        return Task(name=obj.name, make=lambda: obj)
    if callable(obj):
        name = Path(ref.rpartition(":")[0]).stem.rpartition(".")[2] or ref
        return Task(name=name, make=obj)
    raise PluginError(
        f"{ref}: {type(obj).__name__} is not an rlvr.Task, an Environment or a factory returning one"
    )


def task_names() -> list[str]:
    """The installed tasks (entry-point group rlvr.tasks)."""
    return sorted(_entry_points(TASK_GROUP))


def resolve_task(name: str) -> Task:
    """The Task for an installed task name, a file/module reference, or a verifiers
    environment (`vf:MODULE_OR_FILE`, rlvr.task_api.vf_env)."""
    if name in _entry_points(TASK_GROUP):
        return as_task(_load_entry_point(TASK_GROUP, name), name)
    if name.startswith(VF_PREFIX):
        from rlvr.task_api.vf_env import vf_task

        return vf_task(name)
    if is_reference(name):
        return as_task(load_reference(name), name)
    raise PluginError(
        f"unknown task '{name}'; installed tasks: {', '.join(task_names())}; or name your own as "
        "path/to/file.py:factory or package.module:factory, or a verifiers environment as "
        "vf:MODULE_OR_FILE"
    )


def task_config(task: str | Task, /, **overrides: Any) -> RunConfig:
    """The config `rlvr train TASK key=value ...` runs with: the task's defaults, then `overrides`
    (RunConfig keys and the task's option keys, mixed; strings are parsed). The Python and
    notebook equivalent of the CLI."""
    spec = task if isinstance(task, Task) else resolve_task(task)
    return config_for(spec, task if isinstance(task, str) else spec.name, overrides)


# --- scorers ------------------------------------------------------------------------------------


def scorer_names() -> list[str]:
    return sorted(_entry_points(SCORER_GROUP))


def _first_param(fn: Any) -> str | None:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return params[0] if params else None


def as_scorer(obj: Any, ref: str, **available: Any) -> Scorer:
    """A Scorer from what a name resolves to:
    - a Scorer object (`score`, `pop_metrics`, `name`);
    - a function over a group, `fn(group, item) -> list[float] | TrajectoryGroup | None`;
    - a per-trajectory reward, `fn(completion, ground_truth) -> float`;
    - a factory (class or function) taking any of cfg, judge, environment by name."""
    if isinstance(obj, Scorer) and not inspect.isclass(obj):
        return obj
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        first = _first_param(obj)
        if first == "group":
            return group_scorer(obj, name=ref)
        if first == "completion":
            return reward_scorer(obj, name=ref)
    if not callable(obj):
        raise PluginError(f"{ref}: {type(obj).__name__} is not a scorer or a scorer factory")
    if available.get("judge") is None and "judge" in _required_params(obj):
        raise PluginError(
            f"{ref}: this scorer needs a judge; set judge=local or a litellm model id"
        )
    built = call_factory(obj, ref, **available)
    if isinstance(built, Scorer):
        return built
    raise PluginError(
        f"{ref}: the factory returned {type(built).__name__}, not a Scorer (score, pop_metrics, name)"
    )


def _required_params(fn: Any) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty]


def resolve_scorer(name: str, **available: Any) -> Scorer:
    """One scorer by installed name or reference; `available` holds cfg, judge and environment."""
    if name in _entry_points(SCORER_GROUP):
        return as_scorer(_load_entry_point(SCORER_GROUP, name), name, **available)
    if is_reference(name):
        return as_scorer(load_reference(name), name, **available)
    raise PluginError(
        f"config: scorer: unknown scorer '{name}'; installed: {', '.join(scorer_names())}, or "
        "path/to/file.py:name; combine as a+b, a*0.3+b*0.7 or a>b"
    )


def open_judge(cfg: RunConfig) -> AbstractAsyncContextManager[Judge | None]:
    """The run's judge client (an `rlvr.types.Judge`) as an async context manager, from the
    installed judge provider (entry point `open` in group `rlvr.judges`); None inside for
    judge=none."""
    if cfg.judge.model == "none":
        return contextlib.nullcontext(None)
    if JUDGE_OPENER not in _entry_points(JUDGE_GROUP):
        raise PluginError(
            f"judge={cfg.judge.model}: no judge provider is installed (entry point '{JUDGE_OPENER}' in "
            f"group {JUDGE_GROUP}); install rlvr with its judges package, or set judge=none"
        )
    opener: Callable[[RunConfig], AbstractAsyncContextManager[Judge | None]]
    opener = _load_entry_point(JUDGE_GROUP, JUDGE_OPENER)
    return opener(cfg)


# --- scorer specs -------------------------------------------------------------------------------

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
        gated, counted = one(gate), parse_scorer(rest, cfg, environment, judge)
        return GatedScorer(gated, counted)
    parts = [_weighted_part(p) for p in spec.split("+")]
    if len(parts) == 1 and parts[0][1] == 1.0:
        return one(parts[0][0])
    return WeightedScorer([(one(name), w) for name, w in parts])


# --- a run's parts ------------------------------------------------------------------------------


class RunParts(BaseModel):
    """What a run trains with, resolved from what the caller gave: the config (naming the objects
    that did not come from it), the built environment, the scorer, the judge, the task's own
    defaults (for the settings line) and whether the scorer is compared with the truth."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    cfg: RunConfig
    environment: SkipValidation[Environment]
    scorer: SkipValidation[Scorer]
    judge: SkipValidation[Judge | None]
    defaults: JsonObject = Field(default_factory=dict)  # the Task's (Task.defaults)
    # A scorer object of the caller's is compared with the truth; a spec unless it names the
    # task's own reward (`compared_with_truth`).
    compared_with_truth: bool


async def resolve_run(
    cfg: RunConfig,
    stack: AsyncExitStack,
    environment: Environment | Task | None,
    scorer: Scorer | str | None,
    resuming: bool,
) -> RunParts:
    """A run's parts; the judge is opened on `stack` first, since the task and the scorer may
    both need it. Everything that can reject the task, scorer or judge is raised here."""
    task = environment if isinstance(environment, Task) else None
    if environment is None:
        task = resolve_task(cfg.task)
    elif not resuming:
        cfg = cfg.model_copy(update={"task": environment.name})
    judge = await stack.enter_async_context(open_judge(cfg))
    built = task.build(cfg, judge) if task is not None else environment
    assert isinstance(built, Environment)
    if isinstance(scorer, str):
        cfg = cfg.model_copy(update={"scorer": scorer})
    given = scorer is not None and not isinstance(scorer, str)
    compared = given or compared_with_truth(cfg, built)
    if scorer is None or isinstance(scorer, str):
        scorer = make_scorer(cfg, built, judge)
    elif not resuming:
        cfg = cfg.model_copy(update={"scorer": scorer.name})
    return RunParts(
        cfg=cfg,
        environment=built,
        scorer=scorer,
        judge=judge,
        defaults=task.defaults if task is not None else {},
        compared_with_truth=compared,
    )
