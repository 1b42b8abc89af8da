import json
import math
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import ConfigError, RunConfig, parse_overrides


def test_defaults_are_valid_and_json_safe():
    cfg = RunConfig()
    assert cfg.train_ratio + cfg.val_ratio + cfg.test_ratio == pytest.approx(1.0)
    assert RunConfig.model_validate(cfg.public_dict()) == cfg


def test_overrides_parse_types():
    cfg = parse_overrides(
        ["group_size=4", "learning_rate=3e-5", "weave=true", "judge.max_usd=", "task=email"]
    )
    assert (cfg.group_size, cfg.learning_rate, cfg.weave, cfg.judge.max_usd, cfg.task) == (
        4,
        3e-5,
        True,
        None,
        "email",
    )


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["lr=3"], "unknown key 'lr'"),
        (["group_sise=4"], "did you mean 'group_size'"),
        (["group_size=abc"], "group_size='abc'"),
        (["group_size=1"], "group_size='1'"),
        (["backend=gpu"], "one of local, art-local, tinker, serverless"),
        (["train_ratio=0.5"], "must be 1.0"),
        (["temperature=-1"], "temperature"),
        (["nonsense"], "not key=value"),
        (["=3"], "not key=value"),
    ],
)
def test_bad_overrides_give_one_line_naming_the_key(pairs, message):
    with pytest.raises(ConfigError) as error:
        parse_overrides(pairs)
    text = str(error.value)
    assert message in text
    assert "\n" not in text


def test_config_is_immutable():
    cfg = RunConfig()
    with pytest.raises(ValidationError):
        cfg.group_size = 3  # type: ignore[misc]


@pytest.mark.parametrize("task", ["math", "email", "rubric_if", "dataset"])
def test_task_defaults_are_valid_and_overridable(task):
    from rlvr import resolve_task, task_config

    extra = {"data_path": "x.jsonl"} if task == "dataset" else {}
    cfg = task_config(task, max_steps=3, **extra)
    assert cfg.task == task and cfg.max_steps == 3
    for key, value in resolve_task(task).defaults.items():
        if key != "max_steps":  # overridden above
            assert getattr(cfg, key) == value, key
    assert set(cfg.task_options) == set(resolve_task(task).options.model_fields)


def test_task_config_rejects_unknown_tasks_and_keys():
    from rlvr import PluginError, task_config
    from rlvr.config import ConfigError

    with pytest.raises(PluginError, match=r"unknown task 'chess'; installed tasks: .*math"):
        task_config("chess")
    with pytest.raises(ConfigError, match=r"unknown key 'lr'.*math options: difficulty, num_items"):
        task_config("math", lr=1.0)


@pytest.mark.parametrize(
    ("pairs", "judge", "stopping"),
    [
        (["judge=openai/gpt-5-mini"], {"model": "openai/gpt-5-mini"}, {}),
        (["judge.model=local", "judge.max_usd=2"], {"model": "local", "max_usd": 2.0}, {}),
        (["stopping.patience=5", "stopping.judge_gap=0.2"], {}, {"patience": 5, "judge_gap": 0.2}),
    ],
)
def test_judge_and_stopping_are_nested_and_set_with_dotted_keys(
    pairs: list[str], judge: dict, stopping: dict
) -> None:
    cfg = parse_overrides(pairs)
    assert cfg.judge.model_dump().items() >= judge.items()
    assert cfg.stopping.model_dump().items() >= stopping.items()
    assert RunConfig.model_validate(cfg.public_dict()) == cfg  # config.json replays it


OLD_FLAT_KEYS = [
    ("judge_max_usd", "judge.max_usd"),
    ("judge_base_url", "judge.base_url"),
    ("judge_threads", "judge.threads"),
    ("patience", "stopping.patience"),
    ("min_delta", "stopping.min_delta"),
    ("on_divergence", "stopping.on_divergence"),
    ("divergence_window", "stopping.divergence_window"),
    ("judge_gap", "stopping.judge_gap"),
]


@pytest.mark.parametrize(("old", "new"), OLD_FLAT_KEYS)
def test_an_old_flat_key_is_refused_naming_its_dotted_key(old: str, new: str) -> None:
    expected = f"config: '{old}' is no longer a key; use '{new}'"
    with pytest.raises(ConfigError) as error:
        parse_overrides([f"{old}=1"])
    assert str(error.value) == expected
    with pytest.raises(ValidationError, match=re.escape(expected)):
        RunConfig.model_validate({"task": "math", old: 1})  # an old config.json


@pytest.mark.parametrize(("old", "new"), OLD_FLAT_KEYS)
def test_the_cli_refuses_an_old_flat_key_with_exit_2(tmp_path: Path, old: str, new: str) -> None:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["train", "math", f"{old}=1", f"runs_root={runs}"])
    assert result.exit_code == 2, result.output
    assert f"'{old}' is no longer a key; use '{new}'" in result.output.replace("\n", " ")
    assert not runs.exists()


# `sampling`, the item draw's group before it was `draw`: (old key, a value, the key to use).
OLD_DRAW_KEYS = [
    ("sampling", "uniform", "draw"),
    ("sampling.strategy", "signal", "draw.strategy"),
    ("sampling.max_refill", "0", "draw.max_refill"),
]


def as_file(key: str, value: str) -> str:
    """A JSON config naming `key` as a file spells it: a dotted key inside its group."""
    group, dot, leaf = key.partition(".")
    return json.dumps({"task": "math", group: {leaf: value} if dot else value})


@pytest.mark.parametrize("route", ["overrides", "cli", "task_config", "python", "config file"])
@pytest.mark.parametrize(("old", "value", "new"), OLD_DRAW_KEYS)
def test_the_old_draw_group_is_refused_naming_draw(
    tmp_path: Path, route: str, old: str, value: str, new: str
) -> None:
    expected = f"config: '{old}' is no longer a key; use '{new}'"
    if route == "overrides":
        with pytest.raises(ConfigError) as error:
            parse_overrides([f"{old}={value}"])
        assert str(error.value) == expected
    elif route == "cli":
        runs = tmp_path / "runs"
        result = CliRunner().invoke(app, ["train", "math", f"{old}={value}", f"runs_root={runs}"])
        assert result.exit_code == 2, result.output
        assert expected.removeprefix("config: ") in result.output.replace("\n", " ")
        assert not runs.exists()
    elif route == "task_config":
        from rlvr import task_config

        with pytest.raises(ConfigError) as error:
            task_config("math", **{old: value})
        assert str(error.value) == expected
    elif route == "python":
        with pytest.raises(ValidationError, match=re.escape(expected)):
            RunConfig(**{old: value})
    else:  # the group as a JSON file holds it, whichever key was given
        path = tmp_path / "run.json"
        path.write_text(as_file(old, value))
        refused = "config: 'sampling' is no longer a key; use 'draw'"
        with pytest.raises(ValidationError, match=re.escape(refused)):
            RunConfig.model_validate_json(path.read_text())


def test_draw_is_set_by_its_shorthand_and_dotted_keys() -> None:
    cfg = parse_overrides(["draw=uniform", "draw.max_refill=3"])
    assert (cfg.draw.strategy, cfg.draw.max_refill) == ("uniform", 3)
    public = cfg.public_dict()
    assert "sampling" not in public and public["draw"] == cfg.draw.model_dump()


def test_a_saved_config_with_the_old_group_reads_as_draw(tmp_path: Path) -> None:
    """A run written before `draw` holds `sampling` in its config.json: reading the run renames
    it; the same values given as new input are refused."""
    from rlvr.runs import store

    saved = {**RunConfig(task="math").public_dict(), "run_dir": None}
    saved["sampling"] = {**saved.pop("draw"), "strategy": "uniform", "max_refill": 1}
    (tmp_path / store.CONFIG).write_text(json.dumps(saved))
    cfg = store.read_config(tmp_path)
    assert (cfg.draw.strategy, cfg.draw.max_refill) == ("uniform", 1)
    with pytest.raises(ValidationError, match="'sampling' is no longer a key; use 'draw'"):
        RunConfig.model_validate(saved)


@pytest.mark.parametrize(
    ("saved", "data_seed"), [({"seed": 2}, 2), ({"seed": 2, "data_seed": 0}, 0)]
)
def test_a_saved_config_before_data_seed_keeps_the_data_of_its_seed(
    tmp_path: Path, saved: dict[str, int], data_seed: int
) -> None:
    """A run written before `data_seed` drew its items and split from `seed`: reading it keeps
    that data, so it resumes on the items it trained on; a config naming both keeps both; new
    input without it takes the default."""
    from rlvr.runs import store

    values = {**RunConfig(task="math").public_dict(), "run_dir": None}
    del values["data_seed"]
    (tmp_path / store.CONFIG).write_text(json.dumps({**values, **saved}))
    cfg = store.read_config(tmp_path)
    assert (cfg.seed, cfg.data_seed) == (2, data_seed)
    assert RunConfig.model_validate({**values, "seed": 2}).data_seed == 0


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("judge.nope=1", r"unknown key 'judge.nope'; did you mean 'judge\.(model|rpm)'"),
        (
            "stopping.patience=0",
            r"stopping.patience='0': Input should be greater than or equal to 1",
        ),
    ],
)
def test_bad_nested_keys_are_one_line(pair: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        parse_overrides([pair])
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("values", "patience"),
    [
        ({"stopping.patience": 50, "stopping": {"patience": 9}}, 9),  # defaults, then overrides
        ({"stopping": {"patience": 9}, "stopping.patience": 50}, 50),
    ],
)
def test_a_later_key_wins_however_it_is_spelled(values: dict, patience: int) -> None:
    assert RunConfig(**values).stopping.patience == patience


def paired_items_to_resolve(gain: float, discordant: float) -> int:
    """Items a paired 95% interval needs to exclude zero for `gain` when a `discordant` share of
    items changes outcome (normal approximation: 1.96² (q − g²) / g²)."""
    return math.ceil(1.96**2 * (discordant - gain**2) / gain**2)


@pytest.mark.parametrize("task", ["math", "ifeval", "2048"])
def test_default_test_splits_resolve_a_tenth(task):
    """The bar for a default split: a +0.10 test gain lies outside the 95% interval at the
    task's defaults, when 20 % of items change outcome between start and final."""
    from rlvr import resolve_task, task_config
    from rlvr.training.split import split_items

    cfg = task_config(task)
    items = resolve_task(task).build(cfg).load()
    split = split_items(items, val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.seed)
    assert len(split.test) >= paired_items_to_resolve(0.10, 0.20) == 73
