"""TASK=reasoning_gym: reasoning-gym's generators with their own options and `score_answer`, mixes
by weight, one-line errors for unknown generators and options, and a real training step from
the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import art
import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import ConfigError, RunConfig
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.task_api.plugins import resolve_task, task_config
from scenarios.reasoning_gym.generators import generator_options, parse_choices
from tests.helpers import warm
from tests.helpers.tiny_runs import tiny_model_path

EASY = {"dataset": "chain_sum", "min_terms": "2", "max_terms": "2", "max_digits": "1"}


def build(**options: object):
    """The environment of `rlvr train reasoning_gym` with the easy chain_sum and `options`."""
    return build_only(**{**EASY, **options})


def build_only(**options: object):
    cfg = task_config("reasoning_gym", **{"num_items": 20, **options})
    return resolve_task("reasoning_gym").build(cfg)


def replied(text: str) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": text},
        ],
        reward=0.0,
    )


def test_items_come_from_the_generator_with_its_options() -> None:
    import reasoning_gym

    environment = build()
    items = environment.load()
    own = reasoning_gym.create_dataset(
        "chain_sum", size=20, seed=RunConfig().seed, min_terms=2, max_terms=2, max_digits=1
    )
    assert [i.prompt for i in items] == [e["question"] for e in own]
    assert [i.answer for i in items] == [str(e["answer"]) for e in own]
    assert len({i.id for i in items}) == 20 and items[0].id.startswith("chain_sum-")
    assert all(e["metadata"]["num_terms"] == 2 for e in (i.source for i in items))


@pytest.mark.parametrize(
    ("answer_format", "reply", "score"),
    [
        ("auto", "{answer}", 1.0),
        ("auto", "  {answer}\n", 1.0),
        ("auto", "thinking... <answer>{answer}</answer>", 1.0),
        ("auto", "no idea", 0.0),
        ("tags", "{answer}", 0.0),
        ("tags", "<answer>{answer}</answer>", 1.0),
        ("plain", "<answer>{answer}</answer>", None),  # the tags stay: partial credit
    ],
)
async def test_the_generators_own_score_answer_is_check_and_reward(
    answer_format: str, reply: str, score: float | None
) -> None:
    environment = build(answer_format=answer_format)
    item = environment.load()[0]
    trajectory = replied(reply.format(answer=item.answer))
    checked = await environment.check(item, trajectory)
    assert checked == score if score is not None else 0.0 < checked < 1.0
    assert environment.reward(item, trajectory) == checked


async def test_partial_credit_is_the_generators_own() -> None:
    """leg_counting scores an answer inside longer text by reasoning-gym's base score_answer
    (the answer's share of the reply)."""
    environment = build_only(dataset="leg_counting")
    item = environment.load()[0]
    reply = f"{item.answer} legs"
    partial = await environment.check(item, replied(reply))
    assert partial == pytest.approx(len(item.answer) / len(reply))


def test_a_weighted_mix_uses_reasoning_gyms_composite() -> None:
    environment = build(dataset="chain_sum*3,basic_arithmetic", num_items=60)
    generators = [i.data["generator"] for i in environment.load()]
    assert set(generators) == {"chain_sum", "basic_arithmetic"}
    assert generators.count("chain_sum") > generators.count("basic_arithmetic")


def test_options_apply_to_every_generator_that_has_them_or_to_one_by_name() -> None:
    choices = parse_choices("chain_sum,basic_arithmetic")
    chosen = generator_options(
        choices, {"max_terms": "3", "chain_sum.max_digits": "1", "operators": "+,-"}
    )
    assert chosen == {
        "chain_sum": {"max_terms": 3, "max_digits": 1},
        "basic_arithmetic": {"max_terms": 3, "operators": ["+", "-"]},
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dataset": "chain_som"}, "unknown generator 'chain_som' (did you mean 'chain_sum'?)"),
        ({"dataset": "chain_sum*0"}, "weight '0' of chain_sum: expected a positive number"),
        ({"max_term": "3"}, "unknown option 'max_term' (did you mean 'max_terms'?)"),
        ({"max_terms": "many"}, "option max_terms='many': Input should be a valid integer"),
        ({"size": "3"}, "option size: set by the run; use seed= and num_items="),
        ({"leg_counting.min_animals": "3"}, "leg_counting is not among the chosen generators"),
        ({"min_terms": "5"}, "the generator rejected its options"),
    ],
)
def test_bad_generators_and_options_are_one_line_errors(options: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        build(**options)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_options_given_are_recorded_in_config_json() -> None:
    cfg = task_config("reasoning_gym", **EASY)
    assert cfg.task_options["max_terms"] == "2" and cfg.task_options["dataset"] == "chain_sum"
    assert resolve_task("reasoning_gym").parse_options(cfg.task_options).model_extra == {
        "min_terms": "2",
        "max_terms": "2",
        "max_digits": "1",
    }


def test_rlvr_tasks_lists_the_generators_and_their_options() -> None:
    result = CliRunner().invoke(app, ["tasks", "reasoning_gym"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("reasoning_gym\t")
    assert any(line.strip().startswith("chain_sum: min_terms=2 max_terms=6") for line in lines)
    assert sum(":" in line and line.startswith("      ") for line in lines) > 100


def test_the_cli_rejects_an_unknown_generator_with_exit_2(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["train", "reasoning_gym", "dataset=nope", f"runs_root={runs}", "judge=none"]
    )
    assert result.exit_code == 2, result.output
    assert "unknown generator 'nope'" in result.output and "Traceback" not in result.output
    assert not runs.exists()


@pytest.mark.slow
def test_a_generator_trains_a_step_from_the_cli(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    out = warm.rlvr(
        "train",
        "reasoning_gym",
        f"model={tiny_model_path()}",  # the generator's route, not what the policy says
        *[f"{k}={v}" for k, v in EASY.items()],
        "num_items=40",
        "group_size=4",
        "groups_per_batch=2",
        "max_steps=1",
        "eval_every=1",
        "max_tokens=8",
        "judge=none",
        "stopping.on_divergence=warn",
        # 4 rollouts of 8 tokens can all come back wrong: this tests the route, not the signal
        # (a no-signal stop would skip the test block this checks).
        "preflight=false",
        f"runs_root={runs}",
        timeout_s=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = [p.parent for p in runs.glob("*/summary.json")]
    assert run_dir.name.startswith("reasoning_gym-")
    rows = [row.on_disk() for row in store.read_metrics(run_dir)]
    steps = [r for r in rows if M.REWARD_MEAN in r]
    assert [r[M.STEP] for r in steps] == [1]
    assert all(0.0 <= r[M.REWARD_MEAN] <= 1.0 for r in steps)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 1 and 0.0 <= summary["test_accuracy"] <= 1.0
    options = json.loads((run_dir / "config.json").read_text())["task_options"]
    assert options["dataset"] == "chain_sum" and options["max_digits"] == "1"
