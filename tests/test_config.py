import pytest
from pydantic import ValidationError

from rlvr.config import ConfigError, TrainConfig, parse_overrides


def test_defaults_are_valid_and_json_safe():
    cfg = TrainConfig()
    assert cfg.train_ratio + cfg.val_ratio + cfg.test_ratio == pytest.approx(1.0)
    assert TrainConfig.model_validate(cfg.public_dict()) == cfg


def test_overrides_parse_types():
    cfg = parse_overrides(
        ["group_size=4", "learning_rate=3e-5", "weave=true", "judge_max_usd=", "task=email"]
    )
    assert (cfg.group_size, cfg.learning_rate, cfg.weave, cfg.judge_max_usd, cfg.task) == (
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
    cfg = TrainConfig()
    with pytest.raises(ValidationError):
        cfg.group_size = 3  # type: ignore[misc]


@pytest.mark.parametrize("task", ["math", "email", "rubric_if", "dataset"])
def test_task_defaults_are_valid_and_overridable(task):
    from rlvr import resolve_task, task_config

    extra = {"data_path": "x.jsonl"} if task == "dataset" else {}
    cfg = task_config(task, max_steps=3, **extra)
    assert cfg.task == task and cfg.max_steps == 3
    for key, value in resolve_task(task).defaults.items():
        assert getattr(cfg, key) == value, key
    assert set(cfg.task_options) == set(resolve_task(task).options.model_fields)


def test_task_config_rejects_unknown_tasks_and_keys():
    from rlvr import PluginError, task_config
    from rlvr.config import ConfigError

    with pytest.raises(PluginError, match=r"unknown task 'chess'; installed tasks: .*math"):
        task_config("chess")
    with pytest.raises(ConfigError, match=r"unknown key 'lr'.*math options: difficulty, num_items"):
        task_config("math", lr=1.0)
