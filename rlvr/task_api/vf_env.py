"""verifiers environments as rlvr tasks, unchanged: `rlvr train vf:MODULE_OR_FILE [arg=value ...]`.

The reference names a module (an installed environment, `vf:vf_math` or `vf:vf-math`, dashes
read as underscores as verifiers does) or a file (`vf:envs/my_env.py`) whose
`load_environment(**kwargs)` builds a verifiers Environment of the classic API
(`import verifiers as vf`: SingleTurnEnv, MultiTurnEnv, ToolEnv, StatefulToolEnv, each with a
Rubric), as verifiers 0.3.x serves it. Every other `key=value` setting is an argument of
`load_environment`, validated against its signature (`env.KEY` passes one named like a
RunConfig key). How the environment then runs is `rlvr.task_api.vf_rollout`.

verifiers is the optional extra `verifiers` (`pip install -e '.[verifiers]'`); without it a
`vf:` reference is one line naming the extra. A verifiers v1 environment (`verifiers.v1`, the
only stack of 0.4.0) is one line saying what is supported.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import signal
import threading
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rlvr.config import ConfigError, RunConfig, all_keys
from rlvr.task_api.api import PluginError, Task
from rlvr.task_api.imports import VF_PREFIX, import_target
from rlvr.task_api.options import coerce, type_name
from rlvr.types import Environment, Scorer

if TYPE_CHECKING:
    from rlvr.task_api.vf_rollout import VfEnvironment

EXTRA = "verifiers"
INSTALL = "pip install -e '.[verifiers]'"
ARG_PREFIX = "env."  # env.seed=3: an argument named like a RunConfig key
SUPPORTED = (
    "rlvr trains verifiers' classic environments (verifiers 0.3.x, `import verifiers as vf`: "
    "SingleTurnEnv, MultiTurnEnv, ToolEnv, StatefulToolEnv with a Rubric)"
)


def target_of(ref: str) -> str:
    """The module or file a `vf:` reference names."""
    target = ref.removeprefix(VF_PREFIX).strip()
    if not target:
        raise PluginError(f"{ref}: expected vf:MODULE or vf:path/to/env.py")
    return target


def is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def import_vf(ref: str) -> Any:
    """verifiers' classic surface (`import verifiers as vf`), or one line naming the extra."""
    try:
        import verifiers as vf

        vf.Environment  # noqa: B018  (the classic API is loaded on first touch)
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] == "verifiers":
            raise PluginError(
                f"{ref}: verifiers environments need the '{EXTRA}' extra: {INSTALL}"
            ) from None
        raise PluginError(
            f"{ref}: verifiers failed to import: no module named '{error.name}' (reinstall the "
            f"'{EXTRA}' extra: {INSTALL})"
        ) from None
    except AttributeError:
        raise PluginError(
            f"{ref}: the installed verifiers has no classic API; {SUPPORTED}: {INSTALL}"
        ) from None
    return vf


def env_module(ref: str) -> Any:
    target = target_of(ref)
    return import_target(target if is_file(target) else target.replace("-", "_"), ref)


def loader_of(module: Any, ref: str) -> Callable[..., Any]:
    load: object = module.__dict__.get("load_environment")
    if not callable(load):
        raise PluginError(f"{ref}: {target_of(ref)} defines no load_environment(**kwargs)")
    return load


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:  # typing.get_type_hints' own type
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: the arguments are taken as undeclared
        return {}


# verifiers' load_environment takes any keyword arguments (the library is untyped)
def env_args(load: Callable[..., Any], given: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """`load_environment`'s arguments from `key=value` settings, each validated against its
    annotation; an argument it does not take, a wrong value or a missing required one is one
    line naming its arguments."""
    params = inspect.signature(load).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = [n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    hints = _hints(load)
    args: dict[str, Any] = {}  # each validated against load_environment's own annotation
    for key, raw in given.items():
        name = key.removeprefix(ARG_PREFIX)
        if name not in params and not takes_any:
            close = difflib.get_close_matches(name, [*named, *all_keys()], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"config: {ref}: unknown key '{key}'{hint}: load_environment takes "
                f"{', '.join(named) or 'no arguments'}; nor is it a RunConfig key"
            )
        annotation = hints.get(name, params[name].annotation if name in params else Any)
        try:
            args[name] = coerce(annotation, raw)
        except ValueError as error:
            raise ConfigError(
                f"config: {ref}: argument {name}={raw!r}: {error}; expected {type_name(annotation)}"
            ) from None
    missing = [
        n
        for n, p in params.items()
        if p.default is p.empty and n not in args and n in named and p.kind is not p.POSITIONAL_ONLY
    ]
    if missing:
        raise ConfigError(f"config: {ref}: load_environment needs {', '.join(missing)}=VALUE")
    return args


@contextlib.contextmanager
def own_signal_handlers() -> Iterator[None]:
    """A verifiers Environment installs SIGINT/SIGTERM handlers when built; the run keeps its
    own, so Ctrl-C and SIGTERM stop it as they stop every rlvr run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in saved.items():
            if handler is not None:
                signal.signal(number, handler)


def build_environment(ref: str, given: Mapping[str, Any]) -> Any:
    """The Environment `load_environment(**args)` builds; every failure is one line."""
    vf = import_vf(ref)
    load = loader_of(env_module(ref), ref)
    args = env_args(load, given, ref)
    with own_signal_handlers():
        try:
            env = load(**args)
        except ConfigError:
            raise
        except Exception as error:
            text = " ".join(str(error).split())[:300]
            raise PluginError(
                f"{ref}: load_environment raised {type(error).__name__}: {text}"
            ) from error
    if isinstance(env, vf.Environment):
        return env
    kind = f"{type(env).__module__}.{type(env).__qualname__}"
    if kind.startswith("verifiers.v1"):
        raise PluginError(f"{ref}: load_environment returned a verifiers v1 {kind}; {SUPPORTED}")
    raise PluginError(f"{ref}: load_environment returned {kind}, not a verifiers Environment")


class EnvOptions(BaseModel):
    """Any key is an argument of the environment's `load_environment`."""

    model_config = ConfigDict(frozen=True, extra="allow")


def task_name(ref: str) -> str:
    target = target_of(ref)
    return Path(target).stem if is_file(target) else target.replace("-", "_").rpartition(".")[2]


def make_environment(ref: str, options: EnvOptions, cfg: RunConfig) -> VfEnvironment:
    from rlvr.task_api.vf_rollout import VfEnvironment

    env = build_environment(ref, options.model_extra or {})
    return VfEnvironment(env, task_name(ref), cfg.data_seed)


def arguments_catalog(ref: str) -> list[str]:
    """`rlvr tasks vf:...`: load_environment's arguments and their defaults."""
    params = inspect.signature(loader_of(env_module(ref), ref)).parameters
    shown = [
        f"{n}=(required)" if p.default is p.empty else f"{n}={p.default!r}"
        for n, p in params.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return [f"load_environment arguments: {' '.join(shown) or 'none'}"]


def vf_task(ref: str) -> Task:
    """The Task of a `vf:` reference (module docstring); the environment is built with the run.
    Without the extra this is where it says so, before the environment's module is imported."""
    import_vf(ref)
    return Task(
        name=task_name(ref),
        make=functools.partial(make_environment, ref),
        options=EnvOptions,
        description=f"verifiers environment {target_of(ref)}",
        catalog=functools.partial(arguments_catalog, ref),
    )


def rubric_scorer(environment: Environment) -> Scorer:
    """Scorer `vf_rubric`: the environment's Rubric on each group (the default of a `vf:` task)."""
    from rlvr.task_api.vf_rollout import RubricScorer, VfEnvironment

    if not isinstance(environment, VfEnvironment):
        raise PluginError(
            f"scorer vf_rubric: scores a verifiers environment's rollouts (rlvr train vf:...), "
            f"not task {environment.name}"
        )
    return RubricScorer(environment)
