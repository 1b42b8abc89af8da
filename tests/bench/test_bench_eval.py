"""`rlvr bench eval`: the evaluation benchmark on the real policy (tiny sizes), and the first-turn
prompt it hands the bare baseline."""

from __future__ import annotations

import art
import pytest
from openai.types.chat.chat_completion import Choice

from rlvr.bench.eval import episode_figures, first_prompt, run_eval_bench
from rlvr.engine.bench import RATIO


def _choice(text: str) -> Choice:
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": text},
        }
    )


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, _choice("a")],
            [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "more"},
            ],
            [{"role": "user", "content": "q"}],
        ),
        ([{"role": "user", "content": "q"}], [{"role": "user", "content": "q"}]),
    ],
)
def test_the_first_prompt_is_what_preceded_the_first_reply(messages, expected) -> None:
    trajectory = art.Trajectory(messages_and_choices=messages, reward=0.0)
    assert first_prompt(trajectory) == expected


def _episode(metrics: dict[str, float]) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[{"role": "user", "content": "q"}], reward=0.0, metrics=metrics
    )


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (
            [
                {"turns": 3.0, "observation_tokens": 300.0, "trimmed_observations": 1.0},
                {"turns": 2.0, "observation_tokens": 100.0, "trimmed_observations": 0.0},
            ],
            {"observation_tokens_mean": 200.0, "trimmed_observations_mean": 0.5, "turns_mean": 2.5},
        ),
        (  # a single-turn task counts none of it
            [{"correct": 1.0}],
            {
                "observation_tokens_mean": None,
                "trimmed_observations_mean": None,
                "turns_mean": None,
            },
        ),
    ],
)
def test_episode_figures_are_means_of_the_episode_metrics(
    metrics: list[dict[str, float]], expected: dict[str, float | None]
) -> None:
    groups = [art.TrajectoryGroup([_episode(m)]) for m in metrics]
    assert episode_figures(groups) == expected


@pytest.mark.slow
async def test_the_eval_bench_times_all_three_ways_on_the_real_model() -> None:
    figures = (await run_eval_bench("math", items=4, repeats=1, max_tokens=8)).model_dump()
    assert figures["items"] == 4 and figures["max_tokens"] == 8
    for key in ("concurrent_items_s", "one_at_a_time_items_s", "bare_generate_items_s", RATIO):
        assert figures[key] > 0, key
    assert 0.0 <= figures["accuracy"] <= 1.0
    assert figures["eval_s_per_item"] == pytest.approx(1 / figures["concurrent_items_s"], rel=0.05)


@pytest.mark.slow
async def test_the_eval_bench_measures_a_finished_runs_trained_agent(tiny_run) -> None:
    figures = await run_eval_bench(items=4, repeats=1, run_dir=tiny_run.run_dir)
    assert figures.run == str(tiny_run.run_dir) and figures.task == "math"
    assert figures.items == 4 and figures.concurrent_items_s > 0


def test_the_eval_bench_refuses_a_directory_that_holds_no_finished_run(tmp_path) -> None:
    from typer.testing import CliRunner

    from rlvr.cli.main import app

    result = CliRunner().invoke(app, ["bench", "eval", "--run", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: --run {tmp_path}: no summary.json there; expected a finished run directory"
    )
