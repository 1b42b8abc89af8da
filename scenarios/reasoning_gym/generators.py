"""reasoning-gym's generators as rlvr options: which exist, what each one's options are, and how
`dataset=a*2,b` and `key=value` settings become the arguments of `reasoning_gym.create_dataset`.

A generator is a registered `ProceduralDataset` with a config dataclass (`reasoning_gym.factory.
DATASETS`); its fields are the generator's own options. Values from the command line are text,
validated against each field's type (`rlvr.task_api.options.coerce`: lists also as `a,b,c`). `seed`
and `size` are the run's (`seed=`, `num_items=`), never a generator option.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from rlvr.config import ConfigError
from rlvr.task_api.options import coerce, type_name

RUN_OWNED = ("seed", "size")  # set from the run (seed=, num_items=), never per generator


class Choice(BaseModel):
    """One generator of a mix and its weight."""

    model_config = ConfigDict(frozen=True)

    name: str
    weight: float = 1.0


@cache
def registry() -> dict[str, tuple[type, type]]:
    """Generator name -> (dataset class, config dataclass), as reasoning-gym registers them; its
    own `composite` is how rlvr mixes several, so it is not offered as one."""
    from reasoning_gym.factory import DATASETS

    return {name: pair for name, pair in sorted(DATASETS.items()) if name != "composite"}


@cache
def fields(name: str) -> dict[str, tuple[Any, Any]]:
    """A generator's options: name -> (type, default), in declaration order."""
    config = registry()[name][1]
    hints = typing.get_type_hints(config)
    return {
        f.name: (hints[f.name], _default(f))
        for f in dataclasses.fields(config)
        if f.name not in RUN_OWNED
    }


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _shown(value: Any) -> str:
    """A value as one token of a `key=value` line: lists as `a,b`, other data as compact JSON."""
    try:
        plain = to_jsonable_python(value)
    except Exception:  # a value pydantic cannot render: its repr, for reading only
        return repr(value)
    if isinstance(plain, list) and all(isinstance(v, str | int | float | bool) for v in plain):
        return ",".join(str(v) for v in plain)
    if isinstance(plain, list | dict):
        return json.dumps(plain, separators=(",", ":"))
    return str(plain)


def catalog() -> list[str]:
    """One line per generator with its options and defaults (for `rlvr tasks`)."""
    lines = ["generators (dataset=NAME, or a mix NAME*2,NAME; options as key=value):"]
    for name in registry():
        options = " ".join(f"{key}={_shown(default)}" for key, (_, default) in fields(name).items())
        lines.append(f"  {name}: {options}".rstrip())
    return lines


def _unknown(name: str) -> ConfigError:
    close = difflib.get_close_matches(name, registry(), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(
        f"config: task reasoning_gym: dataset: unknown generator '{name}'{hint}; generators: "
        f"{', '.join(registry())}"
    )


def parse_choices(spec: str) -> list[Choice]:
    """`chain_sum` or `chain_sum*2,basic_arithmetic` -> the generators with their weights."""
    choices: list[Choice] = []
    for part in (p.strip() for p in spec.split(",")):
        name, star, weight = part.partition("*")
        name = name.strip()
        if not name:
            raise ConfigError(
                f"config: task reasoning_gym: dataset={spec!r}: expected NAME or NAME*WEIGHT,NAME"
            )
        if name not in registry():
            raise _unknown(name)
        try:
            value = float(weight) if star else 1.0
        except ValueError:
            value = float("nan")
        if not value > 0:
            raise ConfigError(
                f"config: task reasoning_gym: dataset: weight {weight!r} of {name}: expected a "
                "positive number"
            )
        if any(c.name == name for c in choices):
            raise ConfigError(f"config: task reasoning_gym: dataset: {name} is named twice")
        choices.append(Choice(name=name, weight=value))
    return choices


def generator_options(choices: list[Choice], values: Mapping[str, Any]) -> dict[str, dict]:
    """Each chosen generator's options from `key=value` settings: `key` applies to every chosen
    generator that has that option, `NAME.key` to that generator only. A key no chosen generator
    has, or a value of the wrong type, is one line naming what exists."""
    names = [c.name for c in choices]
    chosen: dict[str, dict[str, object]] = {name: {} for name in names}
    for key, raw in values.items():
        prefix, dot, leaf = key.rpartition(".")
        targets = [prefix] if dot else [n for n in names if key in fields(n)]
        option = leaf if dot else key
        if dot and prefix not in chosen:
            raise ConfigError(
                f"config: task reasoning_gym: option {key}: {prefix} is not among the chosen "
                f"generators ({', '.join(names)})"
            )
        if key in RUN_OWNED or option in RUN_OWNED:
            raise ConfigError(
                f"config: task reasoning_gym: option {key}: set by the run; use seed= and num_items="
            )
        if not targets or any(option not in fields(t) for t in targets):
            raise _unknown_option(key, names)
        for target in targets:
            annotation = fields(target)[option][0]
            try:
                chosen[target][option] = coerce(annotation, raw)
            except ValueError as error:
                raise ConfigError(
                    f"config: task reasoning_gym: option {key}={raw!r}: {error}; expected "
                    f"{type_name(annotation)}"
                ) from None
    return chosen


def _unknown_option(key: str, names: list[str]) -> ConfigError:
    from rlvr.config import all_keys

    known = {f"{n}.{k}": k for n in names for k in fields(n)}
    close = difflib.get_close_matches(key, [*known.values(), *known, *all_keys()], n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    own = "; ".join(f"{n}: {', '.join(fields(n)) or 'none'}" for n in names)
    return ConfigError(
        f"config: task reasoning_gym: unknown option '{key}'{hint}: not an option of the chosen "
        f"generators ({own}) nor a RunConfig key (see `rlvr tasks`)"
    )


def create(choices: list[Choice], options: dict[str, dict], size: int, seed: int) -> Any:
    """The reasoning-gym dataset: the one generator, or reasoning-gym's own composite mixing
    several by weight (its `score_answer` forwards each entry to its generator). A config its
    own `validate()` rejects is one line naming the generator."""
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec

    try:
        if len(choices) == 1:
            name = choices[0].name
            return reasoning_gym.create_dataset(name, size=size, seed=seed, **options[name])
        specs = [DatasetSpec(name=c.name, weight=c.weight, config=options[c.name]) for c in choices]
        return reasoning_gym.create_dataset("composite", size=size, seed=seed, datasets=specs)
    except (AssertionError, ValueError, TypeError) as error:
        given = "; ".join(
            f"{name}: {' '.join(f'{k}={_shown(v)}' for k, v in opts.items()) or 'defaults'}"
            for name, opts in options.items()
        )
        reason = str(error) or f"{type(error).__name__} in its config's validate()"
        raise ConfigError(
            f"config: task reasoning_gym: the generator rejected its options ({given}): {reason}"
        ) from None
