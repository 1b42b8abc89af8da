"""Tasks: how an Environment is named, configured and built — the public way to bring your own
agent.

A `Task` is a name, a factory that builds an Environment, the task's own options model (its
`key=value` settings, validated by pydantic) and the RunConfig defaults it starts from. The
built-in tasks are Tasks registered under the entry-point group `rlvr.tasks` exactly as an
installed package's tasks are; a user's own file or module is named by reference
(`path/to/task.py:make`, `my_pkg.tasks:make`, resolved in `rlvr.task_api.plugins`).

For the common case there is no class to write: `environment(name=..., load=..., rollout=...,
check=...)` turns plain functions into an Environment, in ART's idiom (`async def rollout(model,
item, sampling) -> art.Trajectory`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, get_args

import art
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlvr.config import (
    ConfigError,
    RunConfig,
    all_keys,
    dotted_name,
    known_key,
    renamed_message,
)
from rlvr.error_lines import did_you_mean, first_error, means_none
from rlvr.json_types import JsonObject
from rlvr.types import (
    ENVIRONMENT_HOOKS,
    ENVIRONMENT_MEMBERS,
    Environment,
    EnvironmentBase,
    Item,
    Judge,
    Sampling,
)

# What a factory may ask for, by parameter name, and what each is: the options and the config
# (cfg) are models, the judge a Judge or None, the environment an Environment.
FACTORY_ARGS = ("options", "cfg", "config", "judge", "environment")
FactoryArg = BaseModel | Judge | Environment | None


class PluginError(ConfigError):
    """A task or scorer that cannot be loaded or built; the message is one line naming it."""


class NoOptions(BaseModel):
    """The options of a task that has none."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def call_factory(factory: Callable[..., Any], ref: str, **available: FactoryArg) -> Any:
    """Call `factory` with the arguments it names among `available` (cfg is also `config`). A
    required parameter that is not on offer is an error naming the reference."""
    available = {**available, "config": available.get("cfg")}
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature: call bare
        return factory()
    kwargs: dict[str, FactoryArg] = {}
    for name, param in params.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in available:
            kwargs[name] = available[name]
        elif param.default is param.empty:
            raise PluginError(
                f"{ref}: factory parameter '{name}' cannot be filled; a factory takes any of "
                f"{', '.join(a for a in FACTORY_ARGS if a in available)} by name"
            )
    return factory(**kwargs)


def _accepts_none(model: type[BaseModel], key: str) -> bool:
    info = model.model_fields.get(key)
    return info is not None and type(None) in get_args(info.annotation)


class Task(BaseModel):
    """A trainable task. `make` builds the Environment and takes any of `options` (an instance of
    `options`), `cfg` (the RunConfig) and `judge` (the run's judge client, or None) by name.
    `defaults` are RunConfig values this task starts from (`rlvr train NAME`, `task_config`)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    make: Callable[..., Any]
    options: type[BaseModel] = NoOptions
    # RunConfig keys (dotted in a group: `stopping.patience`) and option keys, as key=value gives
    # them; checked against RunConfig and the options model when the task is defined
    defaults: JsonObject = Field(default_factory=dict)
    description: str = ""
    # Lines `rlvr tasks` prints under the task: what its options choose among (a family's
    # generators and each one's own options). Called only when listing.
    catalog: Callable[[], list[str]] | None = None

    @model_validator(mode="after")
    def _defaults_make_a_config(self) -> Task:
        """A bad key or value in the defaults is an error where the task is defined, not at its
        first run (ConfigError's one line)."""
        from rlvr.config import build_config

        if not self.defaults:
            return self
        config, options = split_values(self, self.defaults)
        build_config({**config, "task": self.name})
        try:
            self.options.model_validate(options)
        except ValidationError as error:
            # an option the task requires (a data file) is given at run time, not in the defaults
            bad = [e for e in error.errors() if e["type"] != "missing"]
            if bad:
                where = ".".join(str(p) for p in bad[0]["loc"])
                shown = f"={options[where]!r}" if where in options else ""
                raise ConfigError(
                    f"config: task {self.name}: option {where}{shown}: {bad[0]['msg']}"
                    f"{self.describe_option(where)}"
                ) from None
        return self

    @property
    def open_options(self) -> bool:
        """The options model takes keys beyond its fields (`extra="allow"`): options the task
        validates itself, such as a generator's or an environment's own arguments."""
        return self.options.model_config.get("extra") == "allow"

    def parse_options(self, values: Mapping[str, Any]) -> BaseModel:
        """Validate option values (strings from the CLI included) into the options model."""
        cleaned = {
            k: None if means_none(v) and _accepts_none(self.options, k) else v
            for k, v in values.items()
        }
        try:
            return self.options.model_validate(cleaned)
        except ValidationError as error:
            first = first_error(error, "options")
            shown = f"={first.value!r}" if first.where in cleaned else ""
            raise ConfigError(
                f"config: task {self.name}: option {first.where}{shown}: {first.message}"
                f"{self.describe_option(first.where)}"
            ) from None

    def describe_option(self, key: str) -> str:
        info = self.options.model_fields.get(key)
        if info is None:
            return ""
        kind = getattr(info.annotation, "__name__", None) or str(info.annotation)
        return f"; expected {kind.replace('typing.', '')}" + (
            f" ({info.description})" if info.description else ""
        )

    def build(self, cfg: RunConfig, judge: Judge | None = None) -> Environment:
        """The run's Environment: options from `cfg.task_options`, then the factory."""
        options = self.parse_options(cfg.task_options)
        try:
            built = call_factory(
                self.make, f"task {self.name}", options=options, cfg=cfg, judge=judge
            )
        except ConfigError:
            raise
        except Exception as error:
            raise PluginError(
                f"task {self.name}: its factory raised {type(error).__name__}: {error}"
            ) from error
        if not isinstance(built, Environment):
            missing = [a for a in ENVIRONMENT_MEMBERS if not hasattr(built, a)]
            hooks = [a for a in ENVIRONMENT_HOOKS if not hasattr(built, a)]
            raise PluginError(
                f"task {self.name}: the factory returned {type(built).__name__}, not an Environment "
                f"(missing {', '.join(missing + hooks)}); build one with rlvr.environment(...)"
                + (
                    "; subclass rlvr.EnvironmentBase for the optional hooks' defaults"
                    if hooks
                    else ""
                )
            )
        return built


# --- the function form --------------------------------------------------------------------------

RolloutFn = Callable[..., Awaitable[art.Trajectory]]  # (model, item, sampling) or (model, scenario)
CheckFn = Callable[[Any, art.Trajectory], float | Awaitable[float]]


def wrapped(row: Any, default_id: str) -> Item:
    """An Item carrying any object (ART's idiom: a scenario object) as its `source`: its `id`
    and `answer` where it has them (attribute or key), `prompt` where it is text."""

    def get(key: str) -> Any:
        return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)

    answer, prompt = get("answer"), get("prompt")
    return Item(
        id=str(get("id") if get("id") is not None else default_id),
        prompt=prompt if isinstance(prompt, str) else "",
        answer=None if answer is None else str(answer),
        source=row,
    )


def as_items(rows: Iterable[Any], source: str, objects: bool = False) -> list[Item]:
    """Items from Items or dicts (`prompt`, optional `id`, `answer`, `data`); with `objects`
    (ART's idiom), any other object is carried as the item's `source` (`wrapped`). A bad row is
    one line naming the source, the row and the field."""
    items: list[Item] = []
    for number, row in enumerate(rows, start=1):
        if isinstance(row, Item):
            items.append(row)
            continue
        if objects:
            items.append(wrapped(row, f"{source}-{number}"))
            continue
        if not isinstance(row, Mapping):
            raise ConfigError(
                f"{source}: row {number}: expected an rlvr.Item or a dict, got {type(row).__name__}"
            )
        if "prompt" not in row:  # an Item's prompt defaults to "" only for ART's idiom
            raise ConfigError(f"{source}: row {number}: field 'prompt': Field required")
        values = {"id": f"{source}-{number}", **row}
        if values.get("answer") is not None and not isinstance(values["answer"], str):
            values["answer"] = str(values["answer"])
        try:
            items.append(Item.model_validate(values))
        except ValidationError as error:
            first = first_error(error, "row")
            raise ConfigError(
                f"{source}: row {number}: field '{first.where}': {first.message}"
            ) from None
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"{source}: item id '{dup}' appears more than once; ids must be unique")
    return items


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def takes_two(fn: Callable[..., Any]) -> bool:
    """True for a rollout in ART's idiom, `rollout(model, scenario)`: two positional
    parameters, no third."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    return len(required) == 2 and not any(p.kind is p.VAR_POSITIONAL for p in params)


async def _own_reward(item: Any, trajectory: art.Trajectory) -> float:
    """The check of a task without one: the reward its rollout set."""
    return float(trajectory.reward)


class FunctionEnvironment(EnvironmentBase):
    """An Environment made of plain functions; see `environment`. A rollout in ART's idiom (two
    arguments) gets the objects `load()` returned, and so do `check` and `reward`."""

    def __init__(
        self,
        name: str,
        load: Callable[[], Iterable[Any]],
        rollout: RolloutFn,
        check: CheckFn,
        reward: CheckFn | None,
        default_scorer: str,
        judged_check: bool,
        demonstrate: Callable[[Item], Awaitable[art.Trajectory]] | None = None,
        ruler_rubric: str | Callable[[Item], str] | None = None,
    ) -> None:
        self.name, self.default_scorer, self.judged_check = name, default_scorer, judged_check
        self._load, self._rollout, self._check = load, rollout, check
        self._reward = reward or check
        self.art_idiom = takes_two(rollout)
        self._demonstrate, self.ruler_rubric = demonstrate, ruler_rubric
        if demonstrate is not None:
            self.demonstrate = self._demonstrated

    async def _demonstrated(self, item: Item) -> art.Trajectory:
        assert self._demonstrate is not None
        return await self._demonstrate(self._theirs(item))

    def _theirs(self, item: Item) -> Any:
        """What the user's functions receive: their own object in ART's idiom, else the Item."""
        return item.source if self.art_idiom and item.source is not None else item

    def load(self) -> list[Item]:
        return as_items(self._load(), f"task {self.name}: load()", objects=self.art_idiom)

    async def rollout(
        self, model: art.Model[Any, Any], item: Item, sampling: Sampling
    ) -> art.Trajectory:
        if self.art_idiom:  # the model carries the sampling settings (rlvr.task_api.rollout_model)
            return await self._rollout(model, self._theirs(item))
        return await self._rollout(model, item, sampling)

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return float(await _maybe_await(self._check(self._theirs(item), trajectory)))

    def reward(self, item: Item, trajectory: art.Trajectory) -> float | Awaitable[float]:
        return self._reward(self._theirs(item), trajectory)


def environment(
    *,
    name: str,
    load: Callable[[], Iterable[Any]],
    rollout: RolloutFn,
    check: CheckFn | None = None,
    reward: CheckFn | None = None,
    default_scorer: str | None = None,
    judged_check: bool = False,
    demonstrate: Callable[[Item], Awaitable[art.Trajectory]] | None = None,
    ruler_rubric: str | Callable[[Item], str] | None = None,
) -> Environment:
    """An Environment from functions, no class needed.

    - `load()` returns `rlvr.Item`s or dicts with `prompt` (and `id`, `answer`, `data`);
    - `async rollout(model, item, sampling) -> art.Trajectory` plays one episode;
    - `check(item, trajectory) -> float` (sync or async) is the ground truth in [0, 1] used for
      validation and test;
    - `reward(item, trajectory)` is the training reward of `scorer=verifier` (default: `check`).

    ART's idiom runs as written: `async rollout(model, scenario) -> art.Trajectory` (two
    arguments) gets whatever objects `load()` returned (pydantic models, dataclasses, dicts; the
    item id is their `id` where they have one), and so do `check`, `reward` and `demonstrate`;
    the model fills in the run's sampling settings and logprobs (`rlvr.task_api.rollout_model`). Without
    a `check`, validation and test measure the reward the rollout set, and the default scorer is
    `rollout`, which trains on that reward as it is (any real number).
    `judged_check=True` says the check calls a judge, so the loop does not run it on every
    training rollout. `demonstrate(item)` (async) plays the episode with a scripted policy for the
    warm start (`sft_steps=`; `rlvr.tool_episode(..., script=...)` does it for tool agents);
    `ruler_rubric` is the RULER judge's rubric (a text, or a function of the item).
    """
    if not inspect.iscoroutinefunction(rollout) and not inspect.iscoroutinefunction(
        getattr(rollout, "__call__", None)  # noqa: B004  (async callable objects)
    ):
        raise PluginError(
            f"task {name}: rollout must be an async function (async def rollout(model, item, sampling))"
        )
    if default_scorer is None:
        default_scorer = "verifier" if check is not None else "rollout"
    return FunctionEnvironment(
        name,
        load,
        rollout,
        check or _own_reward,
        reward,
        default_scorer,
        judged_check,
        demonstrate,
        ruler_rubric,
    )


# raw settings (text from key=value, JSON from defaults, values from code) before pydantic
# validates them (its own input: any value)
def split_values(
    task: Task, values: Mapping[str, object]
) -> tuple[dict[str, object], dict[str, object]]:
    """Split flat `key=value` settings into RunConfig values, with `none` (any spelling) as None
    where the key accepts None, and the task's option values. A key that is neither is one line
    naming both sets of keys."""
    from rlvr.config import accepts_none

    config: dict[str, object] = {}
    given = values.get("task_options") or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"config: task_options: expected key=value options, got {given!r}")
    options: dict[str, object] = dict(given)
    for key, value in values.items():
        if key == "task_options":
            continue
        if known_key(key):
            config[key] = None if means_none(value) and accepts_none(key) else value
        elif key in task.options.model_fields or task.open_options:
            options[key] = value
        elif (new := dotted_name(key)) is not None:
            raise ConfigError(renamed_message(key, new))
        else:
            hint = did_you_mean(key, [*all_keys(), *task.options.model_fields])
            own = ", ".join(task.options.model_fields) or "none"
            raise ConfigError(
                f"config: unknown key '{key}'{hint}; not a RunConfig key nor an option of task "
                f"{task.name}; {task.name} options: {own}; RunConfig keys: "
                f"{', '.join(k for k in all_keys() if k != 'task_options')}"
            )
    return config, options


def config_for(task: Task, ref: str, values: Mapping[str, Any]) -> RunConfig:
    """RunConfig for `task` (named `ref` in config.json): its defaults, then `values` on top;
    the options are validated now and recorded in full, so config.json replays the run."""
    from rlvr.config import build_config

    config, options = split_values(task, {**task.defaults, **values})
    parsed = task.parse_options(options)
    return build_config({**config, "task": ref, "task_options": parsed.model_dump(mode="json")})
