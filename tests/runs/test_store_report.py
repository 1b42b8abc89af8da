import json

import art
import polars as pl
import pytest

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.runs.records import RunResult, StepRow, StopReason, parse_row
from rlvr.runs.report import plot_report
from rlvr.training.hints import decision_hints
from rlvr.training.output import CUT_CALLS, truncation_detail


def hints_of(metrics: dict, cfg: RunConfig) -> list[str]:
    """The hints of a step whose row holds `metrics`."""
    return decision_hints(StepRow.model_validate({M.REWARD_MEAN: 0.0, **metrics}), cfg)


def test_config_round_trip_and_metrics_tolerate_torn_lines(tmp_path):
    cfg = RunConfig(task="math", group_size=4, run_dir=tmp_path)
    store.write_config(tmp_path, cfg)
    assert store.read_config(tmp_path) == cfg
    store.append_metrics(
        tmp_path, parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5, M.SAMPLER_KL: float("nan")})
    )
    with (tmp_path / store.METRICS).open("a") as f:
        f.write('{"step": 2, "train/rew')  # a run killed mid-write
    rows = store.read_metrics(tmp_path)
    assert [r.on_disk() for r in rows] == [
        {"kind": "step", M.STEP: 1, M.REWARD_MEAN: 0.5, M.SAMPLER_KL: None}
    ]


def test_read_config_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        store.read_config(tmp_path)


def test_trajectories_parquet_schema(tmp_path):
    groups = [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": "q"},
                        {"role": "assistant", "content": "a"},
                    ],
                    reward=1.0,
                    metrics={"independent_reward": 0.0},
                    metadata={"item_id": "i1"},
                ),
                art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=0.0),
            ]
        )
    ]
    path = store.write_trajectories(
        tmp_path, "step-0001", store.trajectory_rows(groups, ["i1"], step=1, split="train")
    )
    frame = pl.read_parquet(path)
    assert frame.columns == [
        "step",
        "split",
        "item_id",
        "group",
        "index",
        "reward",
        "independent_reward",
        "messages",
        "tools",
        "metrics",
        "metadata",
        "logs",
    ]
    assert frame["reward"].to_list() == [1.0, 0.0]
    assert frame["independent_reward"].to_list() == [0.0, None]
    assert json.loads(frame["messages"][0])[1] == {"role": "assistant", "content": "a"}
    assert not list(tmp_path.glob("trajectories/.*"))  # no temp files left behind


def test_report_png_is_written(tmp_path):
    rows = [
        {M.STEP: 0, M.VAL_ACCURACY: 0.3},
        *({M.STEP: s, M.REWARD_MEAN: 0.1 * s, M.REWARD_STD: 0.1} for s in range(1, 5)),
        {M.STEP: 4, M.VAL_ACCURACY: 0.2, "alarm/reward_hacking": "reward up, val down"},
    ]
    summary = RunResult(
        run_dir=tmp_path,
        task="math",
        scorer="verifier",
        stop_reason=StopReason.REWARD_HACKING,
        steps=4,
        baseline_val=0.3,
        best_val=0.3,
        best_step=0,
        test_accuracy=0.25,
        alarms=[],
        wall_s=60.0,
    )
    path = plot_report([parse_row(r) for r in rows], summary, tmp_path / "report.png")
    assert path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({M.GROUPS: 8, M.ALL_ZERO: 5, M.TRUNCATED_RATE: 0.4}, "raise max_tokens"),
        ({M.GROUPS: 8, M.ALL_ZERO: 5, M.TRUNCATED_RATE: 0.0}, "partial credit"),
        ({M.GROUPS: 8, M.TRUNCATED_RATE: 0.4, M.LOOPING_RATE: 0.1}, "raise max_tokens"),
        # the email run's step 17: half its completions cut, nearly all of them loops
        (
            {M.GROUPS: 4, M.ALL_ZERO: 2, M.TRUNCATED_RATE: 0.5, M.LOOPING_RATE: 0.47},
            "47% in a loop (a cut turn repeating itself): keep max_tokens (now 48)",
        ),
        ({M.GROUPS: 8, M.TRUNCATED_RATE: 0.4, M.LOOPING_RATE: 0.4}, "lower learning_rate"),
        ({M.GROUPS: 8, M.ALL_ONE: 6}, "converged or data too easy"),
        ({M.GROUPS: 8, M.UPDATE_KL: 0.5}, "lower learning_rate"),
        ({M.GROUPS: 8, M.UPDATE_KL: 1e-7, M.TRAINED_TOKENS: 900}, "raise learning_rate"),
        ({M.GROUPS: 8, M.SAMPLER_KL: 0.3}, "truncated_importance_sampling"),
        ({M.GROUPS: 8, M.REWARD_ERRORS: 3}, "fix the reward function"),
        ({M.GROUPS: 8, M.SKIPPED: 2}, "judge failed"),
        ({M.GROUPS: 8, M.JUDGE_AGREEMENT: 0.02}, "judge may be too weak"),
        # the email run with the 135M local judge: RULER 0.85, ground truth 0.01
        (
            {M.GROUPS: 2, M.ALL_ONE: 1, M.REWARD_MEAN: 0.85, M.INDEPENDENT: 0.01},
            "rewards wrong answers",
        ),
    ],
)
def test_hints_of(metrics, expected):
    hints = hints_of(metrics, RunConfig())
    assert any(expected in h for h in hints), hints


def test_hints_tolerate_a_step_without_training():
    assert (
        hints_of(
            {
                M.GROUPS: 2,
                M.ALL_ZERO: 0,
                M.UPDATE_KL: None,
                M.SAMPLER_KL: None,
                M.JUDGE_AGREEMENT: None,
            },
            RunConfig(),
        )
        == []
    )


def test_no_hints_on_a_healthy_step():
    assert (
        hints_of(
            {
                M.GROUPS: 8,
                M.ALL_ZERO: 1,
                M.ALL_ONE: 1,
                M.UPDATE_KL: 0.01,
                M.SAMPLER_KL: 1e-4,
                M.TRAINED_TOKENS: 900,
                M.TRUNCATED_RATE: 0.05,
            },
            RunConfig(),
        )
        == []
    )


def test_a_lenient_scorer_is_not_called_converged():
    metrics = {M.GROUPS: 2, M.ALL_ONE: 1, M.REWARD_MEAN: 0.85, M.INDEPENDENT: 0.01}
    assert not any("converged" in h for h in hints_of(metrics, RunConfig()))
    agreeing = {**metrics, M.INDEPENDENT: 0.8}  # the reward is earned: no lenience hint
    assert not any("wrong answers" in h for h in hints_of(agreeing, RunConfig()))


@pytest.mark.parametrize(
    ("row", "detail"),
    [
        ({M.TRUNCATED_RATE: 0.0}, ""),
        ({M.TRUNCATED_RATE: 0.2, M.LOOPING_RATE: 0.0, CUT_CALLS: 0.0}, ""),
        ({M.TRUNCATED_RATE: 0.5, M.LOOPING_RATE: 0.47}, " (loops 47%)"),
        (
            {M.TRUNCATED_RATE: 0.5, M.LOOPING_RATE: 0.47, CUT_CALLS: 0.25},
            " (loops 47%, ended at a cut call 25%)",
        ),
        ({M.TRUNCATED_RATE: 0.1, CUT_CALLS: 0.06}, " (ended at a cut call 6%)"),
    ],
)
def test_the_step_line_says_what_the_truncated_rollouts_were(row, detail):
    assert truncation_detail(parse_row({M.STEP: 1, M.REWARD_MEAN: 0.5, **row})) == detail
