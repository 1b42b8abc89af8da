"""A task's defaults are checked where the task is defined: a key that is neither a RunConfig key
nor one of its options, or a value of the wrong type, is an error then, not at its first run."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from rlvr.task_api.api import Task


class Options(BaseModel):
    data_path: str  # required: given at run time, so the defaults need not name it
    num_items: int = 10


@pytest.mark.parametrize(
    ("defaults", "said"),
    [
        ({"temprature": 0.5}, "unknown key 'temprature'; did you mean 'temperature'?"),
        ({"temperature": "hot"}, "temperature='hot'"),
        ({"stopping.patience": "soon"}, "stopping.patience"),
        ({"num_items": "many"}, "option num_items='many'"),
    ],
)
def test_a_bad_default_is_refused_where_the_task_is_defined(
    defaults: dict[str, object], said: str
) -> None:
    with pytest.raises(ValidationError, match="config: ") as refused:
        Task(name="t", make=lambda: None, options=Options, defaults=defaults)
    assert said in str(refused.value)


def test_good_defaults_and_a_required_option_left_to_the_run_are_kept() -> None:
    defaults = {"temperature": 0.5, "stopping.patience": 3, "num_items": 20, "judge": "none"}
    task = Task(name="t", make=lambda: None, options=Options, defaults=defaults)
    assert task.defaults == defaults
