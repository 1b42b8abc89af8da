"""Run directories written by hand, as a run leaves them, for the tests that read one without
training: `make_run` writes a finished two-step math run with rlvr.runs.store from real
art.Trajectory objects (step 2 holds a planted hack), `finished_summary` a finished run's
summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import art
from openai.types.chat.chat_completion import ChatCompletionMessage, Choice
from openai.types.chat.chat_completion_message_tool_call import (
    ChatCompletionMessageToolCall,
    Function,
)

from rlvr.config import RunConfig
from rlvr.metrics import M
from rlvr.runs import store
from rlvr.runs.records import RunResult, StopReason, parse_row

SYSTEM = {"role": "system", "content": "You are a calculator."}


def choice(text: str, tool: tuple[str, str] | None = None) -> Choice:
    calls = (
        [
            ChatCompletionMessageToolCall(
                id="call_1", type="function", function=Function(name=tool[0], arguments=tool[1])
            )
        ]
        if tool
        else None
    )
    return Choice(
        finish_reason="tool_calls" if tool else "stop",
        index=0,
        message=ChatCompletionMessage(role="assistant", content=text, tool_calls=calls),
    )


def trajectory(
    completion: str, reward: float, truth: float | None, prompt: str = "What is 2+3?", **kw
) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[SYSTEM, {"role": "user", "content": prompt}, choice(completion)],
        reward=reward,
        metrics={} if truth is None else {"independent_reward": truth},
        **kw,
    )


def write_step(
    run_dir: Path, step: int, groups: list[list[tuple[str, float, float | None]]], split="train"
) -> None:
    built = [art.TrajectoryGroup([trajectory(*t) for t in g]) for g in groups]
    rows = store.trajectory_rows(
        built, [f"item-{i}" for i in range(len(built))], step=step, split=split
    )
    name = {"train": f"step-{step:04d}", "val": f"val-{step:04d}", "test": "test"}[split]
    store.write_trajectories(run_dir, name, rows)


def make_run(run_dir: Path) -> Path:
    """Baseline eval, two training steps each followed by an eval, a finished summary; step 2
    holds a planted hack (a long wrong answer rewarded 1.0, three times in one group)."""
    store.write_config(run_dir, RunConfig(task="math", group_size=4, run_dir=run_dir))
    rows = [
        {M.STEP: 0, M.VAL_ACCURACY: 0.25, M.POLICY_STEP: 0},
        {
            M.STEP: 1,
            M.REWARD_MEAN: 0.25,
            M.REWARD_STD: 0.4,
            M.INDEPENDENT: 0.25,
            "hints": ["raise max_tokens"],
        },
        {M.STEP: 1, M.VAL_ACCURACY: 0.5, M.POLICY_STEP: 1},
        {M.STEP: 2, M.REWARD_MEAN: 0.875, M.REWARD_STD: 0.2, M.INDEPENDENT: 0.25, "hints": []},
        {
            M.STEP: 2,
            M.VAL_ACCURACY: 0.25,
            M.POLICY_STEP: 2,
            "alarm/reward_hacking": "reward up, val down",
        },
    ]
    for row in rows:
        store.append_metrics(run_dir, parse_row(row))
    write_step(run_dir, 0, [[("5", 1.0, 1.0)], [("4", 0.0, 0.0)]], split="val")
    write_step(
        run_dir,
        1,
        [
            [("5", 1.0, 1.0), ("6", 0.0, 0.0), ("5", 1.0, 1.0), ("7", 0.0, 0.0)],  # signal
            [("9", 0.0, 0.0), ("8", 0.0, 0.0), ("1", 0.0, 0.0), ("2", 0.0, 0.0)],  # all-0
        ],
    )
    write_step(
        run_dir,
        2,
        [
            # the hack: a long wrong answer the scorer loves, three times in one group
            [
                ("five five five", 1.0, 0.0),
                ("five five five", 1.0, 0.0),
                ("five five five", 1.0, 0.0),
                ("5", 0.5, 1.0),
            ],
            [
                ("5", 1.0, 1.0),
                ("5", 1.0, 1.0),
                ("5", 1.0, 1.0),
                ("5", 1.0, 1.0),
            ],  # correct, identical
        ],
    )
    write_step(run_dir, 2, [[("5", 1.0, 1.0)], [("4", 0.0, 0.0)]], split="val")
    write_step(run_dir, 1, [[("5", 1.0, 1.0)], [("3", 0.0, 0.0)]], split="test")
    store.write_summary(
        run_dir,
        RunResult(
            run_dir=run_dir,
            task="math",
            scorer="verifier",
            stop_reason=StopReason.REWARD_HACKING,
            best_step=1,
            baseline_val=0.25,
            best_val=0.5,
            test_accuracy=0.5,
            steps=2,
            alarms=[],
            wall_s=10.0,
        ),
    )
    return run_dir


def finished_summary(run_dir: Path, task: str = "math") -> str:
    """The summary.json of a finished run that trained nothing (every field a run writes)."""
    summary = {"run_dir": str(run_dir), "task": task, "scorer": "verifier"}
    summary |= {"stop_reason": "max_steps", "steps": 0, "best_step": 0, "wall_s": 1.0}
    summary |= {"baseline_val": 0.0, "best_val": 0.0, "test_accuracy": None, "alarms": []}
    return json.dumps(summary)
