"""`rlvr new NAME`: a task folder that trains as written, to be edited into your own.

It holds labelled items (`items.jsonl`), a single-turn rollout, a ground-truth check and a
partial-credit reward in `task.py` (the function form, no class), and a test. The example items
are small sums the 135M CPU policy gets partly right, so the first `rlvr train` shows learning
signal at once; replace them with your own.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class ScaffoldError(ValueError):
    """One line: why the folder was not written."""


TASK_PY = '''\
"""{name}: an rlvr task in the function form. Train it with

    rlvr train {name}/task.py:task max_steps=2

Edit `items.jsonl`, the system prompt, `check` (ground truth for validation and test) and
`reward` (the training reward) to make it your own.
"""

import json
from pathlib import Path

import art

import rlvr
from rlvr.scoring.verifiers import contains_answer, numeric_match

HERE = Path(__file__).parent
SYSTEM = "You are a calculator. Reply with only the final number."


def load() -> list[rlvr.Item]:
    lines = (HERE / "items.jsonl").read_text().splitlines()
    return [rlvr.Item(**json.loads(line)) for line in lines if line.strip()]


async def rollout(model: art.Model, item: rlvr.Item, sampling: rlvr.Sampling) -> art.Trajectory:
    messages = [{{"role": "system", "content": SYSTEM}}, {{"role": "user", "content": item.prompt}}]
    return await rlvr.single_turn(model, item, messages, sampling)


def check(item: rlvr.Item, trajectory: art.Trajectory) -> float:
    return numeric_match(rlvr.completion_text(trajectory), item.answer or "")


def reward(item: rlvr.Item, trajectory: art.Trajectory) -> float:
    # Partial credit: 0.5 when the right number appears but is not the final answer.
    return contains_answer(rlvr.completion_text(trajectory), item.answer or "")


task = rlvr.Task(
    name="{name}",
    make=lambda: rlvr.environment(
        name="{name}", load=load, rollout=rollout, check=check, reward=reward
    ),
    defaults={{"temperature": 0.8, "max_tokens": 24, "learning_rate": 3e-4, "group_size": 8}},
    description="sums of small numbers (edit me)",
)
'''

TEST_PY = '''\
"""Fast checks of the {name} task; run with `python -m pytest {name}`."""

import importlib.util
from pathlib import Path

import art
import pytest

HERE = Path(__file__).parent
spec = importlib.util.spec_from_file_location("{module}_task", HERE / "task.py")
task_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(task_module)


def answered(text: str) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[{{"role": "user", "content": "q"}}, {{"role": "assistant", "content": text}}],
        reward=0.0,
    )


def test_items_load_with_unique_ids() -> None:
    items = task_module.task.make().load()
    assert len(items) >= 20
    assert len({{i.id for i in items}}) == len(items)


@pytest.mark.parametrize(("text", "truth", "reward"), [("7", 1.0, 1.0), ("3 + 4 = 7. So 8", 0.0, 0.5), ("no", 0.0, 0.0)])
def test_check_and_reward(text: str, truth: float, reward: float) -> None:
    item = task_module.task.make().load()[0].model_copy(update={{"answer": "7"}})
    assert task_module.check(item, answered(text)) == truth
    assert task_module.reward(item, answered(text)) == reward
'''

README = """\
# {name}

An rlvr task, written by `rlvr new {name}`.

    rlvr train {name}/task.py:task max_steps=2      # a first short run
    rlvr train {name}/task.py:task                  # until validation plateaus
    python -m pytest {name}                         # its tests

`items.jsonl` holds one item per line: `id`, `prompt`, `answer`. `task.py` holds the rollout,
the ground-truth `check` (validation and test) and the training `reward`.
"""


def example_items(count: int = 200, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        rows.append({"id": f"sum-{i:03d}", "prompt": f"What is {a} + {b}?", "answer": str(a + b)})
    return rows


def write_task(name: str, directory: Path) -> Path:
    """Write the folder `directory/name`; refuses to touch an existing one."""
    if not NAME.match(name):
        raise ScaffoldError(
            f"'{name}': a task name is letters, digits, '_' or '-', not starting with a digit"
        )
    folder = directory / name
    if folder.exists():
        raise ScaffoldError(f"{folder}: already exists; choose another name or --dir")
    files = {
        "task.py": TASK_PY.format(name=name),
        "test_task.py": TEST_PY.format(name=name, module=name.replace("-", "_")),
        "README.md": README.format(name=name),
        "items.jsonl": "".join(json.dumps(row) + "\n" for row in example_items()),
    }
    staging = directory / f".{name}.tmp"
    staging.mkdir(parents=True)
    for file, text in files.items():
        (staging / file).write_text(text)
    staging.rename(folder)  # all or nothing
    return folder
