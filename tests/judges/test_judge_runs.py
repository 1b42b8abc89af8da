"""Three-step training runs with each judge scorer against the fault-injecting judge server: every
fault lands in metrics.jsonl, failed calls skip groups instead of scoring them, and the spend cap
ends a run cleanly with stop_reason=judge_budget. The policy is the tiny random model
(`tiny_model`): what is checked is the judge's route, not what the policy says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from rlvr.config import RunConfig
from rlvr.training import run_training
from tests.helpers.fault_server import Fault, FaultServer

pytestmark = pytest.mark.slow

PAIRS = [
    (3, 4),
    (5, 2),
    (6, 1),
    (2, 2),
    (7, 1),
    (4, 4),
    (1, 8),
    (3, 3),
    (9, 0),
    (2, 5),
    (6, 2),
    (1, 1),
]


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer(hang_s=15.0) as running:
        yield running


@pytest.fixture
def recipe_file(tmp_path: Path) -> Path:
    """A small dataset in the Tinker recipe's format."""
    rows = [
        {
            "task_id": f"add-{a}-{b}",
            "prompt": f"What is {a} + {b}? Reply with the number.",
            "rubric - 1. criterion": f"States that the answer is {a + b}",
            "rubric - 2. criterion": "Replies with the number only",
        }
        for a, b in PAIRS
    ]
    path = tmp_path / "rubrics.json"
    path.write_text(json.dumps(rows))
    return path


def run_config(server: FaultServer, tmp_path: Path, model: Path, **overrides: object) -> RunConfig:
    values: dict = {
        "task": "math",
        "model": str(model),
        "judge": "openai/gpt-4o-mini",  # priced by litellm: cost and the cap are real
        "judge.base_url": server.base_url,
        # Generous: the policy trains on CPU in this process while the server thread answers
        # (a good reply takes milliseconds; each run waits out one hang, so no more than this).
        "judge.timeout_s": 3.0,
        "judge.backoff_s": 0.01,
        "judge.max_retries": 8,  # more than the faults scheduled: no call may run out
        "group_size": 2,
        "groups_per_batch": 1,
        # the tests count one scored group a step: a group of two identical 8-token replies
        # (equal scores, no signal) would otherwise be refilled with another item
        "draw.max_refill": 0,
        "max_steps": 3,
        "max_tokens": 8,
        "eval_every": 3,
        "max_val_items": 2,
        "task_options": {"num_items": 20},  # a 2-item test split: the test evaluation stays short
        "runs_root": tmp_path / "runs",
        "seed": 0,
    }
    return RunConfig(**{**values, **overrides})


def metric_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def total(rows: list[dict], key: str) -> float:
    return sum(float(row.get(key) or 0) for row in rows)


def trajectories(run_dir: Path, prefix: str = "step-") -> pl.DataFrame:
    files = sorted((run_dir / "trajectories").glob(f"{prefix}*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


FAULTS = {
    "ruler": [
        Fault.RATE_LIMIT,
        Fault.SERVER_ERROR,
        Fault.HANG,
        Fault.MALFORMED,
        Fault.WRONG_COUNT,
        Fault.OUT_OF_RANGE,
    ],
    "rubric": [
        Fault.RATE_LIMIT,
        Fault.SERVER_ERROR,
        Fault.HANG,
        Fault.MALFORMED,
        Fault.WRONG_COUNT,
        Fault.WRONG_TYPE,
    ],
}
FAULT_METRIC = {
    Fault.RATE_LIMIT: "judge/rate_limited",
    Fault.SERVER_ERROR: "judge/server_errors",
    Fault.HANG: "judge/timeouts",
    Fault.MALFORMED: "judge/invalid_output",
    Fault.WRONG_COUNT: "judge/invalid_output",
    Fault.OUT_OF_RANGE: "judge/invalid_output",
    Fault.WRONG_TYPE: "judge/invalid_output",
}


@pytest.mark.parametrize(
    ("scorer", "task"),
    [
        ("ruler", "math"),  # ground truth is deterministic: every judge request is RULER's
        ("rubric", "rubric_if"),  # validation is a judge too: its requests meet the faults as well
    ],
)
async def test_three_step_run_counts_every_fault(
    server: FaultServer,
    tmp_path: Path,
    tiny_model: Path,
    recipe_file: Path,
    scorer: str,
    task: str,
) -> None:
    faults = FAULTS[scorer]
    server.schedule(faults)
    options = {"num_items": 20} | ({"data_path": str(recipe_file)} if task == "rubric_if" else {})
    cfg = run_config(server, tmp_path, tiny_model, task=task, scorer=scorer, task_options=options)
    result = await run_training(cfg)

    rows = metric_rows(result.run_dir)
    assert result.steps == 3
    assert json.loads((result.run_dir / "summary.json").read_text())["stop_reason"] == "max_steps"
    # The faults are the first requests (baseline validation, step 1): each is in metrics.jsonl.
    assert server.faults_served()[: len(faults)] == faults
    for metric in set(FAULT_METRIC[f] for f in faults):
        assert total(rows, metric) == sum(FAULT_METRIC[f] == metric for f in faults), metric
    assert total(rows, "judge/retries") == len(faults)
    assert total(rows, "judge/failures") == 0
    assert total(rows, "train/skipped_groups") == 0
    assert total(rows, "judge/calls") > 0 and total(rows, "judge/cost_usd") > 0
    scored = trajectories(result.run_dir)
    assert scored.height == 3 * cfg.group_size
    for metadata, metrics, reward in zip(
        scored["metadata"], scored["metrics"], scored["reward"], strict=True
    ):
        if scorer == "rubric":  # per-criterion verdicts reach the parquet
            verdicts = json.loads(json.loads(metadata)["rubric_verdicts"])
            assert [v["criterion"] for v in verdicts] == [1, 2]
            assert json.loads(metrics)["rubric_pass_rate"] == reward
        else:
            assert json.loads(metrics)["ruler_score"] == reward


async def test_failed_judge_calls_skip_groups_never_score_them(
    server: FaultServer, tmp_path: Path, tiny_model: Path
) -> None:
    # RULER on math (a deterministic truth): every judge request fails, no retries.
    server.schedule([Fault.SERVER_ERROR] * 100)
    cfg = run_config(server, tmp_path, tiny_model, scorer="ruler", **{"judge.max_retries": 0})
    result = await run_training(cfg)
    server.schedule([])

    rows = [r for r in metric_rows(result.run_dir) if "train/reward_mean" in r]
    assert len(rows) == 3
    assert total(rows, "judge/failures") == 3 and total(rows, "judge/server_errors") == 3
    assert total(rows, "train/skipped_groups") == 3
    assert (
        not list((result.run_dir / "trajectories").glob("step-*.parquet"))
        or trajectories(result.run_dir).is_empty()
    )


@pytest.mark.parametrize(
    ("scorer", "task", "cap"),
    [
        ("ruler", "math", 1e-4),  # about one and a half RULER requests
        ("rubric", "rubric_if", 2e-4),  # baseline check plus one group, then the cap
    ],
)
async def test_spend_cap_ends_the_run_cleanly(
    server: FaultServer,
    tmp_path: Path,
    tiny_model: Path,
    recipe_file: Path,
    scorer: str,
    task: str,
    cap: float,
) -> None:
    server.schedule([])
    options = {"num_items": 20} | ({"data_path": str(recipe_file)} if task == "rubric_if" else {})
    cfg = run_config(
        server,
        tmp_path,
        tiny_model,
        task=task,
        scorer=scorer,
        task_options=options,
        **{"judge.max_usd": cap},
    )
    result = await run_training(cfg)

    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "judge_budget" == result.stop_reason
    assert result.steps < cfg.max_steps
    rows = metric_rows(result.run_dir)
    assert total(rows, "judge/cost_usd") <= cap * 3  # at most one round of requests past the cap
    assert total(rows, "judge/failures") == 0


async def test_reference_guided_ruler_sees_training_labels_only(
    server: FaultServer, tmp_path: Path, tiny_model: Path
) -> None:
    """scorer=ruler_ref puts each item's label in the judge's prompt: asserted on the prompts
    the judge received, every one is a training item's with its own label, and no validation
    or test item (question or label) ever reaches the judge."""
    from rlvr.task_api.plugins import resolve_task
    from rlvr.training.split import split_items

    server.schedule([])
    server.bodies.clear()
    cfg = run_config(server, tmp_path, tiny_model, scorer="ruler_ref", max_steps=2, eval_every=2)
    result = await run_training(cfg)
    assert result.steps == 2

    items = resolve_task("math").build(cfg).load()
    split = split_items(items, val_ratio=cfg.val_ratio, test_ratio=cfg.test_ratio, seed=cfg.seed)
    prompts = [
        "\n".join(str(m.get("content") or "") for m in body["messages"]) for body in server.bodies
    ]
    assert prompts
    for prompt in prompts:
        shown = [i for i in split.train if i.prompt in prompt]
        assert any(f"The correct final answer to this task is: {i.answer}" in prompt for i in shown)
        assert not any(i.prompt in prompt for i in [*split.val, *split.test])
