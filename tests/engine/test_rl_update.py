"""What one GRPO update trains, and how far it moves the policy, on the real SmolLM2-135M.

- Every assistant turn of a multi-turn episode is trained, each token with the logprob it was
  sampled with, in the context the sampler saw (the trainer's logprobs for the same weights agree).
- AdamW's moments belong to one objective: the warm start's are not carried into GRPO.
- `update_kl` measures the step (zero when the weights do not move); `sampler_kl` the engines' gap.
- A few GRPO steps on a multi-turn tool task raise the reward of its longer episodes and do not
  shorten them: `make test`'s learning check (CHECK), and at full size an experiment (EXPERIMENT).
"""

import asyncio
import math
from typing import NamedTuple

import art
import pytest
import pytest_asyncio
import torch
from openai.types.chat.chat_completion import Choice

from rlvr.engine.backend import LocalTorchBackend, pack_groups
from rlvr.engine.trainer import OBJECTIVE_KEY, _trimmed, trained_positions
from tests.helpers.engine import registered
from tests.helpers.tiny_runs import tiny_model_path

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

# The engine's claims (which tokens train, with which logprobs; the step's size; the optimizer's
# moments) hold for any weights: the tiny random model's (made before any slow test runs). The
# learning check needs the real model's.
TINY_MODEL = str(tiny_model_path())
QUESTION = "Find the capital of France. Use the tool: write LOOKUP: <country>."
OBSERVATIONS = ["LOOKUP result: Paris is the capital of France.", "Now answer in one word."]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tmp_path_factory):
    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")), precision="fp32")
    yield backend
    await backend.close()


async def episode(
    model: art.TrainableModel, seed: int, reward: float, temperature: float = 0.7
) -> art.Trajectory:
    """Three sampled turns with an observation after each of the first two, as a tool episode
    plays them (the next request carries the earlier turns as ART renders them)."""
    trajectory = art.Trajectory(
        messages_and_choices=[{"role": "user", "content": QUESTION}], reward=reward
    )
    for turn in range(3):
        response = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(),
            messages=trajectory.messages(),
            logprobs=True,
            temperature=temperature,
            max_tokens=16,
            seed=seed * 10 + turn,
        )
        trajectory.messages_and_choices.append(response.choices[0])
        if turn < 2:
            trajectory.messages_and_choices.append({"role": "user", "content": OBSERVATIONS[turn]})
    return trajectory


def sampled(choice: Choice) -> tuple[list[int], list[float]]:
    content = choice.logprobs.content if choice.logprobs else None
    assert content
    return [int(t.token.removeprefix("token_id:")) for t in content], [t.logprob for t in content]


def spans(mask: list[bool]) -> list[tuple[int, int]]:
    """The runs of True in `mask` as (start, end)."""
    found, start = [], None
    for i, flag in enumerate([*mask, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            found.append((start, i))
            start = None
    return found


async def test_every_turn_is_trained_with_the_logprobs_it_was_sampled_with(backend) -> None:
    model = await registered(backend, "turns", TINY_MODEL)
    group = art.TrajectoryGroup(
        list(await asyncio.gather(*(episode(model, s, float(s)) for s in (0, 1))))
    )
    engine = backend.engine(model)
    packed = pack_groups(engine.loaded.tokenizer, [group])
    assert packed is not None
    tensors = _trimmed(packed, engine.loaded.device)
    for row in range(2):
        mask = tensors["assistant_mask"][row].bool().tolist()
        turns = spans(mask)
        tokens = tensors["tokens"][row].tolist()
        logprobs = tensors["logprobs"][row].tolist()
        # ART shuffles a group's rows: find this row's trajectory by its first turn's tokens
        by_first = {tuple(sampled(t.messages_and_choices[1])[0]): t for t in group.trajectories}
        start, end = turns[0]
        trajectory = by_first[tuple(tokens[start:end])]
        choices = [m for m in trajectory.messages_and_choices if isinstance(m, Choice)]
        assert len(turns) == len(choices) == 3  # every sampled turn is trained
        for (start, end), choice in zip(turns, choices, strict=True):
            ids, lps = sampled(choice)
            assert tokens[start:end] == ids
            assert logprobs[start:end] == pytest.approx(lps, abs=1e-6)
    # The trainer, given the same weights, computes the same logprobs for every trained token:
    # each later turn is conditioned on what the sampler was conditioned on.
    with torch.no_grad():
        mine = engine.trainer.forward_logprobs(tensors).logprobs
    trained = trained_positions(tensors)
    old = torch.nn.functional.pad(tensors["logprobs"][:, 1:], (0, 1), value=float("nan"))
    gap = (mine[trained] - old[trained]).abs()
    assert not gap.isnan().any()
    assert float(gap.max()) < 2e-3, float(gap.max())


async def update(
    backend, model, learning_rate: float, temperature: float = 1.0
) -> dict[str, float]:
    """One GRPO step on a group of two episodes, rewarded 0 and 1."""
    group = art.TrajectoryGroup(
        list(await asyncio.gather(*(episode(model, s, float(s), temperature) for s in (0, 1))))
    )
    result = await backend.train(
        model, [group], learning_rate=learning_rate, rollout_temperature=temperature
    )
    return result.metrics


@pytest.mark.parametrize("temperature", [1.0, 0.6])
async def test_update_kl_is_the_step_size(backend, temperature) -> None:
    # One model (one engine to load): a step that moves nothing first, then one that moves.
    model = await registered(backend, f"size-{temperature:g}", TINY_MODEL)
    unchanged = await update(backend, model, 1e-12, temperature)
    moved = await update(backend, model, 1e-2, temperature)  # the tiny model's near-flat logits
    for metrics in (unchanged, moved):
        assert metrics["sampler_kl"] < 1e-3  # the engines agree, whatever the step
    assert unchanged["update_kl"] < 1e-6  # rounding: the step moved nothing
    assert moved["update_kl"] > 1e-4


async def test_grpo_starts_with_fresh_optimizer_moments(backend) -> None:
    model = await registered(backend, "moments", TINY_MODEL)
    demo = art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "LOOKUP: France"},
        ],
        reward=1.0,
    )
    async for _ in model.backend()._train_sft(
        model, [demo] * 4, art.TrainSFTConfig(learning_rate=1e-3, batch_size=2), {}
    ):
        pass
    optimizer = backend.engine(model).trainer.optimizer
    assert optimizer.param_groups[0][OBJECTIVE_KEY] == "sft"
    assert {float(s["step"]) for s in optimizer.state.values()} == {2.0}
    await update(backend, model, 1e-4)
    assert optimizer.param_groups[0][OBJECTIVE_KEY] == "rl"
    # one RL step on fresh moments: the warm start's two are gone
    assert {float(s["step"]) for s in optimizer.state.values()} == {1.0}
    await update(backend, model, 1e-4)
    assert {float(s["step"]) for s in optimizer.state.values()} == {2.0}
    saved = torch.load(
        backend.engine(model).adapters.checkpoint_dir(await model.get_step()) / "optimizer.pt",
        weights_only=True,
    )
    assert saved["param_groups"][0][OBJECTIVE_KEY] == "rl"  # a resumed run keeps its moments
    assert all(math.isfinite(float(s["step"])) for s in saved["state"].values())


# --------------------------------------------------------------- RL on a multi-turn tool task
# A task whose rewarded episodes are the longer ones: the agent looks a word up, and is rewarded
# only when it looks up the word's note too (two calls) before answering. After a warm start on as
# many one-call as two-call demonstrations, a few GRPO steps must raise the reward and must not
# shorten the episodes (the email agent, whose rewarded episodes read after searching, learned to
# answer after one search while the warm start's optimizer moments were carried into RL).
#
# Every round plays the same words with the same seeds as the round two before it, so a later
# round replays an earlier one's episodes on the trained policy: where the updates move nothing,
# it samples the same tokens and the same reward; the rounds' difference is what RL taught.

WORDS = ["apple", "river", "stone", "cloud", "tiger", "piano", "lemon", "candle"]
SEED = 1234  # the rounds' sampling


def lookup(word: str) -> str:
    """Look up a word's entry."""
    return f"{word}: see NOTE {word}"


def note(word: str) -> str:
    """Read a word's note."""
    return f"note on {word}: done"


def two_call_reward(trajectory: art.Trajectory) -> float:
    return float(
        trajectory.metadata.get("end") == "replied"
        and trajectory.metrics.get("calls/lookup") == 1
        and trajectory.metrics.get("calls/note") == 1
    )


def opening_messages(word: str) -> list[dict[str, str]]:
    from rlvr.agent.episode import chat

    return chat("You use tools, then answer DONE.", f"Word: {word}")


async def play(model, word: str, sampling, script=None) -> art.Trajectory:
    from rlvr.agent.episode import tool_episode
    from rlvr.types import Item

    return await tool_episode(
        None if script else model,
        Item(id=word, prompt=word),
        opening_messages(word),
        [lookup, note],
        sampling,
        max_turns=3,
        protocol="text",
        script=script,
        last_turn_note=None,
    )


def demonstration_script(word: str, calls: int):
    from rlvr.agent.tools import Call

    plan = [Call(name="lookup", arguments={"word": word})]
    if calls == 2:
        plan.append(Call(name="note", arguments={"word": word}))

    def script(history, turn: int):
        return plan[turn] if turn < len(plan) else "DONE"

    return script


class Size(NamedTuple):
    """How much a run of the tool task plays and trains."""

    words: int  # words a round, a group of episodes each (the rounds alternate two sets)
    episodes: int  # episodes a word
    rounds: int  # rounds of rollouts, each but the last followed by an update
    demos: int  # passes over the 16 demonstrations in the warm start
    demo_batch: int  # demonstrations a warm-start step


# `make test`'s: the smallest that still fails where the warm start's moments are carried into
# RL. Measured over three seeds: with them carried, the third round's reward equalled the first's
# (0.19, 0, 0.19: the updates moved nearly nothing); with fresh moments it rose from the same
# start to 0.81, 0.25 and 0.69. With 4 episodes a word, a seed's groups had no spread at all.
CHECK = Size(words=2, episodes=8, rounds=3, demos=3, demo_batch=4)
# The experiment: measured at this size (unseeded), the warm start made both calls in 0.09 to
# 0.14 of its episodes and three updates later 0.69 to 0.84 did; with the moments carried, the
# reward was 0 at every step and the calls went 1.03 -> 1.0. At lr 1e-3 and 6 warm-start steps
# the warm start made both calls in 1 of 64 episodes and a step often had no group with spread.
EXPERIMENT = Size(words=4, episodes=8, rounds=4, demos=6, demo_batch=8)


async def learn(backend, name: str, size: Size) -> tuple[list[float], list[float]]:
    """Warm start, then `size.rounds` rounds of GRPO on the tool task: each round's mean reward
    and mean tool calls."""
    from rlvr.task_api.rollout_model import RolloutModel
    from rlvr.types import Sampling

    model = await registered(backend, name)
    demos = [
        await play(None, word, Sampling(), demonstration_script(word, calls))
        for word in WORDS
        for calls in (1, 2)
    ]
    config = art.TrainSFTConfig(learning_rate=3e-4, batch_size=size.demo_batch)
    async for _ in model.backend()._train_sft(model, demos * size.demos, config, {}):
        pass
    sampling = Sampling(temperature=1.0, max_tokens=24, seed=SEED)
    stride = len(WORDS) // size.words
    rewards, calls = [], []
    for round_ in range(size.rounds):
        words = WORDS[round_ % 2 :: stride]
        groups = []
        for group in await asyncio.gather(
            *(
                asyncio.gather(
                    *(
                        play(RolloutModel(model, seeded), word, seeded)
                        for seeded in (sampling.for_rollout(word, i) for i in range(size.episodes))
                    )
                )
                for word in words
            )
        ):
            for trajectory in group:
                trajectory.reward = two_call_reward(trajectory)
            groups.append(art.TrajectoryGroup(group))
        played = [t for g in groups for t in g.trajectories]
        rewards.append(sum(t.reward for t in played) / len(played))
        calls.append(sum(t.metrics["tool_calls"] for t in played) / len(played))
        if round_ < size.rounds - 1:
            await backend.train(model, groups, learning_rate=1e-4)
    return rewards, calls


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(CHECK, id="check"),
        pytest.param(EXPERIMENT, id="experiment", marks=pytest.mark.experiment),
    ],
)
async def test_grpo_learns_the_longer_episodes_of_a_tool_task(backend, size: Size) -> None:
    rewards, calls = await learn(backend, f"two-calls-{size.words}x{size.episodes}", size)
    print(f"reward by round {rewards}, tool calls by round {calls}")
    half = size.rounds // 2
    early, late = slice(0, half), slice(size.rounds - half, None)
    assert sum(rewards[late]) / half > sum(rewards[early]) / half + 0.1
    # The episodes must not shorten: a fall of one episode a round (its one call fewer) is noise.
    noise = 1 / (size.words * size.episodes)
    assert sum(calls[late]) / half >= sum(calls[early]) / half - noise
