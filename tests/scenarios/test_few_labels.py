"""Few labels, the hybrid (docs/guide/few-labels.md): unlabelled prompts train under a scorer
that reads no label, the labelled rows are held out, and the run says what its test split can
resolve. Bad label budgets are one line and exit 2 with nothing written; the slow tests run the
page's command and a task of one's own in ART's idiom for 2 steps on the CPU policy."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from rlvr.cli.main import app
from scenarios.dataset.examples import make_few_labels
from tests.helpers.tiny_runs import tiny_model_path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "few-labels.md"
DATA = ROOT / "scenarios" / "dataset" / "examples" / "few_labels.jsonl"
# The smallest real run: 2 steps of one group of two, short replies, 10 validation items, on the
# tiny random model, which the local judge serves too (what is checked is which items train and
# which are held out).
TINY = {
    "model": str(tiny_model_path()),
    "judge.local_model": str(tiny_model_path()),
    "group_size": 2,
    "groups_per_batch": 1,
    "max_steps": 2,
    "eval_every": 2,
    "max_tokens": 8,
    "max_minutes": "none",
    "max_val_items": 10,
    "draw.max_refill": 0,
    "preflight": "false",
}


def test_the_shipped_file_is_the_script_s_400_unlabelled_and_60_labelled_rows() -> None:
    assert DATA.read_text() == make_few_labels.text()
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    labelled = [r for r in rows if r.get("answer")]
    assert (len(rows) - len(labelled), len(labelled)) == (400, 60)
    assert not {r["prompt"] for r in labelled} & {r["prompt"] for r in rows if not r.get("answer")}


def write(tmp_path: Path, labelled: int, unlabelled: int) -> Path:
    rows = [{"prompt": f"Calculate {i} + 1.", "answer": str(i + 1)} for i in range(labelled)]
    rows += [{"prompt": f"Calculate {i} + 2.", "answer": ""} for i in range(unlabelled)]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("data", "settings", "message"),
    [
        ("few", [], "400 item(s) have no label (no answer) and would train under scorer verifier"),
        ("few", ["scorer={reward}:exact"], "reward.py:exact, which reads the label"),
        ((0, 20), ["scorer=length"], "0 of 20 rows have an answer (field 'answer')"),
        ((0, 20), [], "0 of 20 rows have an answer"),
        ((2, 20), ["scorer=length"], "2 of 22 rows have an answer"),
        ((20, 0), ["scorer=length", "holdout=labelled"], "none is left to train on"),
    ],
)
def test_a_label_budget_that_cannot_work_is_one_line_and_exit_2(
    tmp_path: Path, data: object, settings: list[str], message: str
) -> None:
    path = DATA if data == "few" else write(tmp_path, *data)  # type: ignore[misc]
    reward = tmp_path / "reward.py"  # a verifier-contract reward of one's own reads the label
    reward.write_text(
        "def exact(completion, ground_truth):\n    return float(completion == ground_truth)\n"
    )
    settings = [s.format(reward=reward) for s in settings]
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        ["train", "dataset", f"data_path={path}", f"runs_root={runs}", "judge=none", *settings],
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert message in lines[0]
    if "no label" in message:
        assert "skip_bad_rows" in lines[0] and "ruler" in lines[0]
    assert "Traceback" not in result.output and not runs.exists()


def page_command() -> list[str]:
    """The page's `rlvr train` command, as words."""
    [command] = re.findall(r"```bash\n(rlvr train [^\n]+)\n```", PAGE.read_text())
    return shlex.split(command)[1:]


def page_lines() -> list[str]:
    """The lines the page shows the run printing before its first step."""
    [block] = re.findall(r"```text\n(labels: .*?)```", PAGE.read_text(), re.S)
    return block.strip().splitlines()


def trained_ids(run_dir: Path, name: str) -> set[str]:
    return set(pl.read_parquet(run_dir / "trajectories" / name)["item_id"].to_list())


@pytest.mark.slow
def test_the_page_s_command_trains_on_the_unlabelled_prompts_and_tests_on_labels(
    tmp_path: Path,
) -> None:
    from tests.helpers.tiny_runs import cli, only_run

    runs = tmp_path / "runs"
    words = page_command()
    assert words[:2] == ["train", "dataset"] and "scorer=ruler" in words
    assert not any(w.startswith("judge=") for w in words)  # the local judge, the default
    out = cli(*words, *(f"{k}={v}" for k, v in TINY.items()), f"runs_root={runs}")
    printed = out.stdout.replace("\n", " ")
    labels, test, validation = page_lines()
    assert labels in printed and test in printed, out.stdout[-3000:]
    assert validation.startswith("validation: 30 items, steps of 0.033")
    assert "validation: 10 of 30 (max_val_items) items, steps of 0.100" in printed
    assert "dataset: 400 train / 30 val / 30 test items; scorer ruler" in printed
    run_dir = only_run(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["held_out"]["labelled"] == 60 and summary["held_out"]["unlabelled"] == 400
    assert summary["held_out"]["test"]["items"] == 30
    assert summary["held_out"]["test"]["fewest"] == 6
    assert summary["test"]["items"] == 30 and summary["test"]["gain_ci95"] is not None
    # No labelled item reached the scorer: every training rollout is of an unlabelled prompt,
    # and validation and test are labelled rows only.
    for step in ("step-0001.parquet", "step-0002.parquet"):
        assert all(i.startswith("prompt-") for i in trained_ids(run_dir, step))
    assert all(i.startswith("label-") for i in trained_ids(run_dir, "val-0000.parquet"))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/reward_mean" in r]
    assert all(r.get("judge/agreement") is None for r in steps)
    assert all(r.get("train/independent_reward_mean") is None for r in steps)


ART_TASK = '''
"""A task in ART's idiom: scenario objects, most of them without an answer."""
import art
from pydantic import BaseModel

import rlvr


class Scenario(BaseModel):
    id: str
    question: str
    answer: str | None = None


def load():
    labelled = [Scenario(id=f"label-{a}", question=f"{a} + 1", answer=str(a + 1)) for a in range(12)]
    unlabelled = [Scenario(id=f"prompt-{a}", question=f"{a} + 2") for a in range(30)]
    return labelled + unlabelled


async def rollout(model, scenario):
    messages = [{"role": "user", "content": f"Calculate {scenario.question}. Reply with the number."}]
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=messages
    )
    return art.Trajectory(messages_and_choices=[*messages, completion.choices[0]], reward=0.0)


def check(scenario, trajectory):
    if scenario.answer is None:
        raise RuntimeError(f"check() called on unlabelled item {scenario.id}")
    return float(scenario.answer in (trajectory.messages()[-1].get("content") or ""))


def make():
    return rlvr.environment(name="own-few-labels", load=load, rollout=rollout, check=check)
'''


@pytest.mark.slow
def test_a_task_of_one_s_own_trains_its_unlabelled_scenarios_and_never_checks_them(
    tmp_path: Path,
) -> None:
    from tests.helpers.tiny_runs import cli, only_run

    task = tmp_path / "own_task.py"
    task.write_text(ART_TASK)
    runs = tmp_path / "runs"
    settings = {**TINY, "judge": "none", "scorer": "length", "group_size": 4}
    out = cli(
        "train", f"{task}:make", *(f"{k}={v}" for k, v in settings.items()), f"runs_root={runs}"
    )
    printed = out.stdout.replace("\n", " ")
    assert "check() called" not in out.stdout + out.stderr
    assert (
        "labels: 12 labelled item(s): all 12 held out (6 validation, 6 test); the scorer reads "
        "no label; 30 unlabelled item(s) train"
    ) in printed
    assert "test: 6 labelled items; a gain resolves only if all 6 improve" in printed
    assert "too small to stop on (under 10 items)" in printed
    run_dir = only_run(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["test"]["items"] == 6 and summary["held_out"]["stops"] is False
    assert summary["stop_reason"] == "max_steps"
    for step in ("step-0001.parquet", "step-0002.parquet"):
        frame = pl.read_parquet(run_dir / "trajectories" / step)
        assert all(i.startswith("prompt-") for i in frame["item_id"].to_list())
        assert frame["independent_reward"].null_count() == len(frame)


@pytest.mark.slow
def test_sixty_labelled_rows_say_what_their_six_test_items_resolve_before_training(
    tmp_path: Path,
) -> None:
    from tests.helpers.tiny_runs import cli, only_run

    path = write(tmp_path, 60, 0)
    runs = tmp_path / "runs"
    settings = {**TINY, "max_steps": 1, "eval_every": 1, "judge": "none"}
    out = cli(
        "train",
        "dataset",
        f"data_path={path}",
        "verifier=exact",
        *(f"{k}={v}" for k, v in settings.items()),
        f"runs_root={runs}",
    )
    said = "test: 6 labelled items; a gain resolves only if all 6 improve"
    printed = out.stdout.replace("\n", " ")
    assert said in printed, out.stdout[-3000:]
    # said before the first step trains, not only in the summary
    first_step = re.search(r"\bstep 1 ", printed)
    assert first_step is not None and printed.index(said) < first_step.start()
    summary = json.loads((only_run(runs) / "summary.json").read_text())
    held = summary["held_out"]
    assert (held["labelled"], held["unlabelled"], held["train_labelled"]) == (60, 0, 48)
    assert held["test"]["items"] == 6 and held["test"]["fewest"] == 6
    assert held["stops"] is False
