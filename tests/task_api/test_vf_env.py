"""verifiers environments as they are (`rlvr train vf:MODULE_OR_FILE`): written the way verifiers'
documentation writes them, in a temporary directory outside the repository — a SingleTurnEnv with a
Rubric of weighted functions and a ToolEnv with two Python tools. Their datasets become items
(an eval dataset held out as validation and test), their rollouts run against the policy, their
Rubric scores; a real training step each. Bad references are one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import art
import polars as pl
import pytest
from openai.types.chat.chat_completion import Choice
from typer.testing import CliRunner

from rlvr.cli.main import app
from rlvr.config import ConfigError
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.task_api import plugins
from rlvr.task_api.api import PluginError
from rlvr.task_api.imports import referenced_files
from rlvr.task_api.vf_rollout import REWARD, RubricScorer, VfEnvironment
from rlvr.training.split import split_items
from rlvr.types import Sampling
from tests.helpers import warm
from tests.helpers.scripted import ScriptedPolicy
from tests.helpers.tiny_runs import tiny_model_path

SINGLE_TURN = """
import verifiers as vf
from datasets import Dataset


def load_environment(num_examples: int = 40, with_eval: bool = False) -> vf.Environment:
    rows = [
        {"question": f"What is {a} + {b}?", "answer": str(a + b)}
        for a in range(1, 10)
        for b in range(1, 10)
    ]
    parser = vf.Parser()

    def correct_answer(completion, answer, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    def brevity(completion, **kwargs) -> float:
        return 1.0 / (1 + len(parser.parse_answer(completion) or ""))

    rubric = vf.Rubric(funcs=[correct_answer, brevity], weights=[1.0, 0.5], parser=parser)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows[:num_examples]),
        eval_dataset=Dataset.from_list(rows[-10:]) if with_eval else None,
        system_prompt="Reply with only the number.",
        parser=parser,
        rubric=rubric,
    )
"""

TOOL_ENV = '''
import verifiers as vf
from datasets import Dataset

CAPITALS = {"france": "Paris", "peru": "Lima", "kenya": "Nairobi", "japan": "Tokyo",
            "chile": "Santiago", "egypt": "Cairo", "spain": "Madrid", "india": "New Delhi",
            "canada": "Ottawa", "norway": "Oslo", "ghana": "Accra", "cuba": "Havana"}
PEOPLE = {"Paris": 2_100_000, "Lima": 10_000_000}


def lookup(country: str) -> str:
    """Look up the capital of a country.

    Args:
        country: The country's name.
    """
    return CAPITALS[country.strip().lower()]


def population(city: str) -> int:
    """How many people live in a city.

    Args:
        city: The city's name.
    """
    return PEOPLE[city]


def load_environment(max_turns: int = 3) -> vf.Environment:
    rows = [
        {"question": f"What is the capital of {country.title()}?", "answer": city}
        for country, city in CAPITALS.items()
    ]
    parser = vf.Parser()

    def correct_city(completion, answer, **kwargs) -> float:
        return float(answer.lower() in (parser.parse_answer(completion) or "").lower())

    return vf.ToolEnv(
        dataset=Dataset.from_list(rows),
        tools=[lookup, population],
        max_turns=max_turns,
        system_prompt="Use the tools, then answer with the city only.",
        parser=parser,
        rubric=vf.Rubric(funcs=[correct_city], parser=parser),
    )
'''

GROUPED = """
import verifiers as vf
from datasets import Dataset


def load_environment():
    rows = [{"question": f"Say {n}", "answer": str(n)} for n in range(12)]

    def shortest_wins(completions, **kwargs) -> list[float]:
        lengths = [len(str(c[-1].content or "")) for c in completions]
        return [1.0 if n == min(lengths) else 0.0 for n in lengths]

    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[shortest_wins]))
"""


@pytest.fixture
def envs(tmp_path: Path) -> Path:
    """The user's environments, in a folder of their own outside the repository."""
    folder = tmp_path / "envs"
    folder.mkdir()
    for name, text in [("sums", SINGLE_TURN), ("capitals", TOOL_ENV), ("grouped", GROUPED)]:
        (folder / f"{name}.py").write_text(text)
    (folder / "not_an_env.py").write_text("def load_environment():\n    return 42\n")
    (folder / "no_loader.py").write_text("X = 1\n")
    return folder


def built(ref: str, **options: object) -> VfEnvironment:
    cfg = plugins.task_config(ref, **options)
    environment = plugins.resolve_task(ref).build(cfg)
    assert isinstance(environment, VfEnvironment)
    return environment


# --- references ---------------------------------------------------------------------------------


def test_a_file_reference_loads_the_environment_with_its_arguments(envs: Path) -> None:
    environment = built(f"vf:{envs}/sums.py", num_examples="12")
    items = environment.load()
    assert environment.name == "sums" and environment.default_scorer == "vf_rubric"
    assert len(items) == 12 and items[0].prompt == "What is 1 + 1?" and items[0].answer == "2"
    assert items[0].source["prompt"][0] == {
        "role": "system",
        "content": "Reply with only the number.",
    }


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "sums",
            {"num_exampels": "3"},
            "unknown key 'num_exampels' (did you mean 'num_examples'?)",
        ),
        ("sums", {"num_examples": "many"}, "argument num_examples='many': Input should be a valid"),
        ("not_an_env", {}, "load_environment returned builtins.int, not a verifiers Environment"),
        ("no_loader", {}, "defines no load_environment"),
        ("missing", {}, "no such file"),
    ],
)
def test_bad_environments_and_arguments_are_one_line_errors(
    envs: Path, name: str, options: dict, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        built(f"vf:{envs}/{name}.py", **options)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_without_the_extra_a_vf_reference_names_it(envs: Path, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", None)  # as if the extra were not installed
    with pytest.raises(
        PluginError, match=r"need the 'verifiers' extra: pip install -e '\.\[verifiers\]'"
    ):
        plugins.resolve_task(f"vf:{envs}/sums.py")
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["train", f"vf:{envs}/sums.py", f"runs_root={runs}"])
    assert result.exit_code == 2 and "'verifiers' extra" in result.output, result.output
    assert "Traceback" not in result.output and not runs.exists()


def test_a_resumed_run_announces_the_environment_file(envs: Path) -> None:
    assert referenced_files(f"vf:{envs}/sums.py") == [(envs / "sums.py").resolve()]


def test_rlvr_tasks_shows_load_environment_arguments(envs: Path) -> None:
    result = CliRunner().invoke(app, ["tasks", f"vf:{envs}/sums.py"])
    assert result.exit_code == 0, result.output
    assert "load_environment arguments: num_examples=40 with_eval=False" in result.output


# --- items and the split ------------------------------------------------------------------------


def test_an_eval_dataset_is_held_out_as_validation_and_test(envs: Path) -> None:
    environment = built(f"vf:{envs}/sums.py", num_examples="30", with_eval="true")
    split = split_items(environment.load(), val_ratio=0.1, test_ratio=0.1, seed=0)
    assert [i.id for i in split.train] == [f"train-{n}" for n in range(30)]
    held_out = sorted(i.id for i in [*split.val, *split.test])
    assert held_out == sorted(f"eval-{n}" for n in range(10))
    assert len(split.val) == len(split.test) == 5


def test_without_an_eval_dataset_the_usual_split_applies(envs: Path) -> None:
    split = split_items(built(f"vf:{envs}/sums.py").load(), val_ratio=0.1, test_ratio=0.1, seed=0)
    assert (len(split.train), len(split.val), len(split.test)) == (32, 4, 4)


# --- rollouts and the rubric (a scripted policy drives the tool path deterministically) ---------


async def test_tool_env_rollout_through_the_policy_client(envs: Path) -> None:
    environment = built(f"vf:{envs}/capitals.py")
    item = next(i for i in environment.load() if i.answer == "Lima")
    policy = ScriptedPolicy([[("lookup", '{"country": "Peru"}')], [("nope", "{}")], "Lima"])
    trajectory = await environment.rollout(policy, item, Sampling(temperature=0.5, max_tokens=12))
    sent = policy.requests[0]
    assert sent["temperature"] == 0.5 and sent["max_tokens"] == 12 and sent["logprobs"] is True
    assert [t["function"]["name"] for t in sent["tools"]] == ["lookup", "population"]
    kinds = [
        "choice" if isinstance(m, Choice) else m["role"] for m in trajectory.messages_and_choices
    ]
    assert kinds == ["system", "user", "choice", "tool", "choice", "tool", "choice"]
    tool_replies = [m["content"] for m in trajectory.messages_and_choices if isinstance(m, dict)][
        2:
    ]
    assert tool_replies[0] == "Lima" and "nope" in tool_replies[1]  # the env's own error text
    assert trajectory.metadata["vf_turns_matched"] is True
    assert (
        trajectory.metrics["vf/correct_city"] == 1.0 and trajectory.metrics["vf/lookup_calls"] == 1
    )
    assert [t["function"]["name"] for t in trajectory.tools] == ["lookup", "population"]
    assert await environment.check(item, trajectory) == 1.0 == trajectory.metadata[REWARD]


async def test_the_rubric_scores_with_the_envs_weights(envs: Path) -> None:
    environment = built(f"vf:{envs}/sums.py", num_examples="12")
    item = environment.load()[0]  # 1 + 1
    right = await environment.rollout(ScriptedPolicy(["2"]), item, Sampling())
    wrong = await environment.rollout(ScriptedPolicy(["three"]), item, Sampling())
    assert await environment.check(item, right) == pytest.approx(1.0 + 0.5 * 1 / 2)
    assert await environment.check(item, wrong) == pytest.approx(0.5 * 1 / 6)
    group = art.TrajectoryGroup([right, wrong])
    scored = await RubricScorer(environment).score(group, item)
    assert [t.reward for t in scored.trajectories] == pytest.approx([1.25, 0.5 / 6])


async def test_group_reward_functions_score_the_group_together(envs: Path) -> None:
    environment = built(f"vf:{envs}/grouped.py")
    assert environment.grouped
    item = environment.load()[0]
    rollouts = [
        await environment.rollout(ScriptedPolicy([text]), item, Sampling())
        for text in ("0", "zero")
    ]
    assert [await environment.check(item, t) for t in rollouts] == [1.0, 1.0]  # alone, each wins
    scored = await RubricScorer(environment).score(art.TrajectoryGroup(rollouts), item)
    assert [t.reward for t in scored.trajectories] == [1.0, 0.0]
    again = await RubricScorer(environment).score(art.TrajectoryGroup(rollouts), item)
    assert again is None  # each state is scored once: a repeat is skipped, never a fake 0


async def test_an_empty_reply_the_env_refuses_is_kept_and_scored(envs: Path) -> None:
    environment = built(f"vf:{envs}/sums.py", num_examples="12")
    item = environment.load()[0]
    trajectory = await environment.rollout(ScriptedPolicy([""]), item, Sampling())
    assert isinstance(trajectory.messages_and_choices[-1], Choice)
    assert "EmptyModelResponseError" in str(trajectory.metadata["vf_error"])
    assert await environment.check(item, trajectory) == 0.5  # brevity of "" by the env's rubric


async def test_an_endpoint_that_fails_is_a_rollout_error(envs: Path) -> None:
    environment = built(f"vf:{envs}/sums.py", num_examples="12")
    policy = ScriptedPolicy([ConnectionError("endpoint down")])
    with pytest.raises(RuntimeError, match=r"failed before any turn: .*endpoint down"):
        await environment.rollout(policy, environment.load()[0], Sampling())


# --- two real training steps ---------------------------------------------------------------------

TINY = {  # on the tiny random model: the route is checked, not what the policy says
    "model": str(tiny_model_path()),
    "group_size": 4,
    "groups_per_batch": 2,
    "max_steps": 1,
    "eval_every": 1,
    "max_tokens": 12,
    "judge": "none",
    "stopping.on_divergence": "warn",
}


def train_cli(ref: str, runs: Path, *extra: str) -> Path:
    out = warm.rlvr(
        "train",
        ref,
        *extra,
        *[f"{k}={v}" for k, v in TINY.items()],
        f"runs_root={runs}",
        timeout_s=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = [p.parent for p in runs.glob("*/summary.json")]
    return run_dir


def assert_trained(run_dir: Path, metric: str) -> list[dict]:
    rows = [r for r in (row.on_disk() for row in store.read_metrics(run_dir)) if M.REWARD_MEAN in r]
    assert [r[M.STEP] for r in rows] == [1]
    assert all(metric in r and r[M.NO_LOGPROB_TURNS] == 0 for r in rows), rows
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["scorer"] == "vf_rubric"
    return rows


@pytest.mark.slow
def test_a_single_turn_env_trains_a_step(envs: Path, tmp_path: Path) -> None:
    run_dir = train_cli(
        f"vf:{envs}/sums.py", tmp_path / "runs", "num_examples=24", "with_eval=true"
    )
    assert run_dir.name.startswith("sums-")
    rows = assert_trained(run_dir, "vf/correct_answer")
    assert all("vf/brevity" in r for r in rows)
    frame = pl.read_parquet(run_dir / "trajectories" / "test.parquet")
    assert len(frame) == 5  # half of the env's own 10-row eval dataset


@pytest.mark.slow
def test_a_tool_env_trains_a_step(envs: Path, tmp_path: Path) -> None:
    run_dir = train_cli(f"vf:{envs}/capitals.py", tmp_path / "runs")
    rows = assert_trained(run_dir, "vf/correct_city")
    assert all("vf/total_tool_calls" in r for r in rows)
    frame = pl.read_parquet(run_dir / "trajectories" / "step-0001.parquet")
    tools = [json.loads(t) for t in frame["tools"].to_list()]
    assert all([s["function"]["name"] for s in t] == ["lookup", "population"] for t in tools)
