"""`rlvr bench eval`: the evaluation benchmark on the real policy (tiny sizes), and the first-turn
prompt it hands the bare baseline."""

from __future__ import annotations

import art
import pytest
from openai.types.chat.chat_completion import Choice

from rlvr.bench.eval import first_prompt, run_eval_bench
from rlvr.bench.policy import RATIO


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


@pytest.mark.slow
async def test_the_eval_bench_times_all_three_ways_on_the_real_model() -> None:
    figures = await run_eval_bench("math", items=4, repeats=1, max_tokens=8)
    assert figures["items"] == 4 and figures["max_tokens"] == 8
    for key in ("concurrent_items_s", "one_at_a_time_items_s", "bare_generate_items_s", RATIO):
        assert figures[key] > 0, key
    assert 0.0 <= figures["accuracy"] <= 1.0
    assert figures["eval_s_per_item"] == pytest.approx(1 / figures["concurrent_items_s"], rel=0.05)
