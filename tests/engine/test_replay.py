"""Replay: the same seed draws the same things. A fresh adapter starts from the same weights, every
rollout call samples with its own seed derived from the run's, and a real evaluation run twice on
the same checkpoint gives the same result item by item (fp32: docs/concepts/determinism.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import art
import pytest
import pytest_asyncio
import torch

from rlvr.config import RunConfig
from rlvr.engine.adapters import attach_adapter
from rlvr.engine.types import LoraSettings
from rlvr.task_api.rollout_model import RolloutModel
from rlvr.types import Sampling, derived_seed
from tests.helpers.scripted import ScriptedPolicy
from tests.helpers.tiny_llama import tiny_llama
from tests.helpers.tiny_runs import tiny_model_path


async def _seeds(sampling: Sampling, calls: int) -> list[Any]:
    policy = ScriptedPolicy(["ok"] * calls)
    model = RolloutModel(policy, sampling)  # type: ignore[arg-type]
    for _ in range(calls):  # a new client per call, as an agent may make: one count per rollout
        await model.openai_client().chat.completions.create(messages=[])
    return [request.get("seed") for request in policy.requests]


async def test_each_call_of_a_seeded_rollout_samples_with_its_own_seed_and_a_replay_the_same() -> (
    None
):
    base = Sampling(temperature=1.0, seed=11)
    first = await _seeds(base.for_rollout("item-1", 0), 3)
    assert len(set(first)) == 3 and all(isinstance(s, int) and 0 <= s < 2**62 for s in first)
    assert await _seeds(base.for_rollout("item-1", 0), 3) == first  # the replay
    others = [
        await _seeds(base.for_rollout("item-1", 1), 3),  # the item's next sample
        await _seeds(base.for_rollout("item-2", 0), 3),  # another item
        await _seeds(Sampling(temperature=1.0, seed=12).for_rollout("item-1", 0), 3),
    ]
    assert all(not set(seeds) & set(first) for seeds in others)
    assert await _seeds(Sampling(temperature=1.0).for_rollout("item-1", 0), 2) == [None, None]


async def test_a_seed_the_rollout_sets_itself_is_sent_as_set() -> None:
    policy = ScriptedPolicy(["ok"])
    model = RolloutModel(policy, Sampling(seed=3).for_rollout("i", 0))  # type: ignore[arg-type]
    await model.openai_client().chat.completions.create(messages=[], seed=42)
    assert policy.requests[0]["seed"] == 42


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ((0, "train", 3), (0, "train", 3), True),
        ((0, "train", 3), (0, "train", 4), False),  # an item drawn again at a later step
        ((0, "train", 3), (1, "train", 3), False),  # another run seed
        ((0, "val", 0), (0, "test", 0), False),
    ],
)
def test_a_splits_sampling_is_seeded_by_the_run_seed_the_split_and_the_step(a, b, same) -> None:
    def sampling(seed: int, split: Any, train_step: int) -> Sampling:
        cfg = RunConfig(task="math", seed=seed)
        return Sampling.from_config(cfg, split, train_step=train_step)

    assert (sampling(*a).seed == sampling(*b).seed) is same
    assert sampling(*a).seed == derived_seed(a[0], a[1], a[2])
    assert "seed" not in sampling(*a).request()  # each call gets its own (RolloutModel)


@pytest.mark.parametrize(("seed_a", "seed_b", "same"), [(0, 0, True), (0, 1, False)])
def test_a_fresh_adapter_starts_from_its_seeds_weights(
    seed_a: int, seed_b: int, same: bool
) -> None:
    def lora_a(seed: int) -> list[torch.Tensor]:
        model = attach_adapter(tiny_llama(), None, LoraSettings(r=4, seed=seed))
        return [p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n]

    a, b = lora_a(seed_a), lora_a(seed_b)
    assert a and all(torch.equal(x, y) for x, y in zip(a, b, strict=True)) is same
    assert any(bool(x.abs().sum() > 0) for x in a)  # A is random; B starts at 0


def test_the_adapter_seed_leaves_the_process_generator_alone() -> None:
    model = tiny_llama()
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    attach_adapter(model, None, LoraSettings(r=4, seed=9))
    assert torch.equal(torch.rand(4), expected)


# -------------------------------------------------------------- the real engine (slow)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def policy(tmp_path_factory):
    """The tiny random model: replaying a run is the engine's claim, whatever the model says."""
    from rlvr.engine.backend import LocalTorchBackend
    from rlvr.training.backends import Policy

    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")), precision="fp32")
    model = art.TrainableModel(name="replay", project="tests", base_model=str(tiny_model_path()))
    await model.register(backend)
    yield Policy(model=model, backend=backend)
    await backend.close()


def _math_items(count: int) -> tuple[Any, list[Any]]:
    from scenarios.math import MathEnvironment

    environment = MathEnvironment("easy", 10, seed=0)
    return environment, environment.load()[:count]


async def _evaluate(
    policy: Any, sampling: Sampling, at_once: int, count: int = 6
) -> dict[str, tuple[str, float]]:
    """Each item's completion and score: the math task's check on `count` items, `at_once`
    rollouts at a time through the real endpoint."""
    from rlvr.training.evaluation import evaluate

    environment, items = _math_items(count)
    limit = asyncio.Semaphore(at_once)
    evaluated = await evaluate(
        environment.rollout, environment.check, policy, items, sampling, limit, "eval"
    )
    groups, done = evaluated.groups, evaluated.items
    assert len(done) == len(items)
    return {
        item.id: (
            str(group.trajectories[0].messages()[-1]["content"]),
            group.trajectories[0].reward,
        )
        for item, group in zip(done, groups, strict=True)
    }


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_greedy_evaluation_run_twice_gives_the_same_results_item_by_item(policy) -> None:
    """fp32, first 6 rollouts at once (they share batches in whatever order they arrive), then 2
    at a time (other batches, other padding, a prefix cache the first run filled): the same
    completions and scores."""
    greedy = Sampling(temperature=0.0, max_tokens=24, seed=0)
    first = await _evaluate(policy, greedy, 2)
    assert all(completion for completion, _ in first.values())  # something to compare
    assert first == await _evaluate(policy, greedy, 6)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_seeded_evaluation_at_temperature_1_draws_the_same_tokens_again(policy) -> None:
    """On the same schedule (one rollout at a time, an empty prefix cache) the same seed draws the
    same completions at temperature 1, and another seed other ones: the seed reaches the engine."""
    cache = policy.backend.engine(policy.model).prefixes

    async def sampled(seed: int) -> dict[str, tuple[str, float]]:
        cache.clear()
        # 3 items: a seed that did not reach the engine would already differ on one of them
        return await _evaluate(policy, Sampling(temperature=1.0, max_tokens=24, seed=seed), 1, 3)

    first = await sampled(0)
    assert await sampled(0) == first
    assert await sampled(1) != first
