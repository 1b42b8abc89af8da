"""LocalTorchBackend: ART client code, real sampling, real GRPO steps. The real SmolLM2-135M where
a claim needs a model that answers (a reply that ends, a tool call, a warm start that teaches);
the tiny random model `BASE` where the claim is the engine's (batching, a step's served adapter,
the training forward, a resume).

One backend (one loaded model per model name) is shared by the module; tests that train use their
own model names so each starts at step 0. Everything goes through `model.openai_client()` over
real HTTP, as rollouts do.
"""

import asyncio
import functools
import json
import math
import random
from pathlib import Path

import art
import openai
import pytest
import pytest_asyncio
import torch
from art.preprocessing.tokenize import tokenize_trajectory_groups

from rlvr.engine.backend import LocalTorchBackend
from rlvr.engine.models import DEFAULT_MODEL, resolve_model
from rlvr.engine.toolcalls import call_prefix
from tests.helpers.engine import registered
from tests.helpers.real_policy import logprobs_alone
from tests.helpers.tiny_runs import tiny_model_path

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

BASE = str(tiny_model_path())  # made before any slow test runs (tests/conftest.py)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tmp_path_factory):
    # Exactness tests of the serving/training logic: fp32, whatever the CPU (bf16 bounds are
    # tested in test_precision.py).
    backend = LocalTorchBackend(path=str(tmp_path_factory.mktemp("art")), precision="fp32")
    yield backend
    await backend.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def policy(backend):
    return await registered(backend, "policy")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tiny_policy(backend):
    return await registered(backend, "tiny", BASE)


async def ask(model: art.TrainableModel, content: str, step: int | None = None, **options):
    return await model.openai_client().chat.completions.create(
        model=model.get_inference_name(step),
        messages=[{"role": "user", "content": content}],
        logprobs=True,
        **options,
    )


def ids_of(choice) -> list[int]:
    return [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]


def logprobs_of(choice) -> list[float]:
    return [t.logprob for t in choice.logprobs.content]


@functools.cache
def tokenizer():
    """SmolLM2's tokenizer, which the tiny model shares: loaded once for the module."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))


def prompt_ids(content: str) -> list[int]:
    return tokenizer().apply_chat_template(
        [{"role": "user", "content": content}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )


def checkpoint(backend: LocalTorchBackend, model: art.TrainableModel, step: int) -> Path:
    return backend.engine(model).adapters.checkpoint_dir(step)


# ----------------------------------------------------------------------------- serving


async def test_sampled_tokens_map_back_to_exact_ids_in_art(backend, policy) -> None:
    messages = [{"role": "user", "content": "Say hi."}]
    response = await policy.openai_client().chat.completions.create(
        model=policy.get_inference_name(),
        messages=messages,
        logprobs=True,
        temperature=0,
        max_tokens=48,
    )
    choice = response.choices[0]
    ids = ids_of(choice)
    assert choice.finish_reason == "stop"
    assert (
        ids[-1] == backend.engine(policy).loaded.tokenizer.eos_token_id
    )  # the end token is sampled too
    assert "<|im_end|>" not in choice.message.content
    assert len(ids) == response.usage.completion_tokens
    assert all(bytes(t.bytes).decode("utf-8") for t in choice.logprobs.content)
    group = art.TrajectoryGroup(
        [art.Trajectory(messages_and_choices=[*messages, choice], reward=r) for r in (0.0, 1.0)]
    )
    tokenizer = backend.engine(policy).loaded.tokenizer
    for result in tokenize_trajectory_groups(tokenizer, [group], False, True):
        assert result.token_ids == prompt_ids("Say hi.") + ids
        trained = [lp for lp, m in zip(result.logprobs, result.assistant_mask, strict=True) if m]
        assert trained == pytest.approx(logprobs_of(choice))


async def test_concurrent_requests_share_one_decoding_pass(backend, policy) -> None:
    decoder = backend.engine(policy).decoder
    before = decoder.counters()
    responses = await asyncio.gather(
        *(ask(policy, f"Count to {i}.", max_tokens=4, temperature=1.0, seed=i) for i in range(6))
    )
    assert all(len(r.choices) == 1 and r.choices[0].logprobs.content for r in responses)
    done = decoder.counters().minus(before)
    assert done.sampling_passes <= 2  # one window; stragglers at most join a second pass


async def test_batched_rows_match_rows_sampled_alone(tiny_policy) -> None:
    """Left padding, positions and dropping finished rows from the KV cache change nothing. The
    tiny model never ends a reply itself: each row's own budget ends it at its own step."""
    questions = {
        "Say hi.": 6,
        "Write a long poem about rivers.": 24,
        "What is 2+2?": 12,
        "Name three colors.": 18,
    }
    together = await asyncio.gather(
        *(ask(tiny_policy, q, temperature=0, max_tokens=n) for q, n in questions.items())
    )
    for (question, budget), response in zip(questions.items(), together, strict=True):
        alone = (await ask(tiny_policy, question, temperature=0, max_tokens=budget)).choices[0]
        assert len(ids_of(alone)) == budget  # rows did finish at different steps
        assert ids_of(response.choices[0]) == ids_of(alone)
        assert logprobs_of(response.choices[0]) == pytest.approx(logprobs_of(alone), abs=1e-3)


async def test_seeded_samples_repeat_and_stop_strings_cut(policy) -> None:
    # The prompt's keys/values come from the prefix cache for both seeded calls: a prompt computed
    # in another shape (fresh, or after another test cached only the chat template's system
    # turn) rounds its logits differently, which can move a near-tie sample.
    await ask(policy, "List three fruits.", max_tokens=1, temperature=0)
    first = await ask(policy, "List three fruits.", n=3, seed=7, max_tokens=12, temperature=1.0)
    again = await ask(policy, "List three fruits.", n=3, seed=7, max_tokens=12, temperature=1.0)
    assert [ids_of(c) for c in first.choices] == [ids_of(c) for c in again.choices]
    assert len({tuple(ids_of(c)) for c in first.choices}) > 1  # the n choices differ
    cut = await ask(
        policy, "Write a sentence about the sea.", stop=[" "], temperature=0, max_tokens=16
    )
    assert cut.choices[0].finish_reason == "stop"
    assert " " not in cut.choices[0].message.content
    long = await ask(policy, "Write a long story.", temperature=0, max_tokens=5)
    assert long.choices[0].finish_reason == "length" and len(ids_of(long.choices[0])) == 5


async def test_a_named_tool_choice_starts_a_call_to_that_tool(backend, policy) -> None:
    response = await policy.openai_client().chat.completions.create(
        model=policy.get_inference_name(),
        messages=[{"role": "user", "content": "What is 2 plus 3?"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "add"}},
        logprobs=True,
        temperature=0,
        max_tokens=24,
    )
    choice = response.choices[0]
    forced = backend.engine(policy).loaded.tokenizer.encode(
        call_prefix("add"), add_special_tokens=False
    )
    assert ids_of(choice)[: len(forced)] == forced  # the prefix is part of the trained completion
    if choice.message.tool_calls:  # parsed: an OpenAI tool call to `add`
        call = choice.message.tool_calls[0]
        assert call.function.name == "add" and isinstance(json.loads(call.function.arguments), dict)
        assert choice.finish_reason in ("tool_calls", "length")
    else:  # the 135M model's arguments did not parse: plain content, not an error
        assert choice.message.content.startswith(call_prefix("add"))
    auto = await policy.openai_client().chat.completions.create(
        model=policy.get_inference_name(),
        messages=[{"role": "user", "content": "Tell me a joke."}],
        tools=TOOLS,
        tool_choice="auto",
        temperature=0,
        max_tokens=16,
    )
    assert auto.choices[0].message.content or auto.choices[0].message.tool_calls


async def test_unknown_model_or_step_is_not_found(policy) -> None:
    client = policy.openai_client()
    for name, words in [("policy@99", "step 99"), ("nobody", "not served"), ("policy@x", "number")]:
        with pytest.raises(openai.NotFoundError) as error:
            await client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        assert words in str(error.value)


# ----------------------------------------------------------------------------- training


def independent_logprobs(
    base_model: str, adapter: Path, prompt: list[int], completion: list[int]
) -> list[float]:
    """log p(completion | prompt) under `base_model` + `adapter`, loaded here with plain
    transformers/peft."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(resolve_model(base_model), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter).eval()
    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return (
        torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()
    )


async def rollout_group(
    model: art.TrainableModel, question: str, seeds: list[int], reward, max_tokens: int = 12
) -> art.TrajectoryGroup:
    messages = [{"role": "user", "content": question}]

    async def one(seed: int) -> art.Trajectory:
        response = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            logprobs=True,
            temperature=1.0,
            max_tokens=max_tokens,
            seed=seed,
        )
        choice = response.choices[0]
        return art.Trajectory(messages_and_choices=[*messages, choice], reward=reward(seed, choice))

    return art.TrajectoryGroup(await asyncio.gather(*(one(s) for s in seeds)))


async def test_train_step_changes_the_served_adapter(backend, tiny_policy) -> None:
    """On the tiny model: what a step changes is which adapter serves, not what the model says."""
    question = "Say hello."
    before = (await ask(tiny_policy, question, temperature=0, max_tokens=12)).choices[0]
    groups = [
        await rollout_group(
            tiny_policy, q, [10 * g + i for i in range(4)], lambda seed, _: float(seed % 2)
        )
        for g, q in enumerate(["Name a color.", "Name a fruit."])
    ]
    for group in groups:
        for trajectory in group:
            choice = trajectory.messages_and_choices[-1]
            assert isinstance(choice, openai.types.chat.chat_completion.Choice)
            assert all(t.token.startswith("token_id:") for t in choice.logprobs.content)
    step0 = (checkpoint(backend, tiny_policy, 0) / "adapter_model.safetensors").read_bytes()

    # the tiny model's logits are flat: a larger rate moves them measurably in one step
    result = await backend.train(tiny_policy, groups, learning_rate=3e-2)

    assert result.step == 1 == await tiny_policy.get_step()
    assert tiny_policy.get_inference_name() == "tiny@1"
    assert all(
        math.isfinite(result.metrics[k])
        for k in ("loss", "sampler_kl", "update_kl", "grad_norm", "entropy", "num_tokens")
    )
    assert result.metrics["num_tokens"] > 0 and result.metrics["grad_norm"] > 0
    # the trainer sees the sampled tokens as the sampler did; the update moved them
    assert result.metrics["sampler_kl"] < 1e-3 < result.metrics["update_kl"]
    step1 = (checkpoint(backend, tiny_policy, 1) / "adapter_model.safetensors").read_bytes()
    assert step1 != step0

    after = (await ask(tiny_policy, question, temperature=0, max_tokens=12)).choices[0]
    prompt = prompt_ids(question)
    served_new = independent_logprobs(
        BASE, checkpoint(backend, tiny_policy, 1), prompt, ids_of(after)
    )
    assert logprobs_of(after) == pytest.approx(served_new, abs=2e-3)  # served = step 1 on disk
    old_weights = independent_logprobs(
        BASE, checkpoint(backend, tiny_policy, 0), prompt, ids_of(after)
    )
    assert max(abs(a - b) for a, b in zip(logprobs_of(after), old_weights, strict=True)) > 1e-2
    by_step = (await ask(tiny_policy, question, step=0, temperature=0, max_tokens=12)).choices[0]
    assert ids_of(by_step) == ids_of(before)  # name@0 still serves step 0
    assert logprobs_of(by_step) == pytest.approx(logprobs_of(before), abs=1e-4)

    await tiny_policy.delete_checkpoints()
    assert (
        not checkpoint(backend, tiny_policy, 0).exists()
        and checkpoint(backend, tiny_policy, 1).exists()
    )
    with pytest.raises(openai.NotFoundError):
        await ask(tiny_policy, question, step=0, max_tokens=2)


async def test_training_logprobs_are_each_sequences_own_full_forward(backend, tiny_policy) -> None:
    """The training forward computes a group's sequences as one tree (shared prompt once) and the
    LM head on the trained positions only; each sequence's log-probabilities equal those of its
    own full forward there, and nothing elsewhere."""
    from rlvr.engine.backend import pack_groups
    from rlvr.engine.trainer import _trimmed, sequences_of, trained_positions

    group = await rollout_group(
        tiny_policy, "Name a planet.", [1, 2, 3, 4], lambda s, _: float(s % 2)
    )
    engine = backend.engine(tiny_policy)
    tensors = _trimmed(pack_groups(engine.loaded.tokenizer, [group]), engine.loaded.device)
    trained = trained_positions(tensors)
    with torch.no_grad():
        fast = engine.trainer.forward_logprobs(tensors).logprobs
        for row, sequence in enumerate(sequences_of(tensors)):
            full = logprobs_alone(engine.loaded.model, sequence)
            at = trained[row, : len(full)]
            assert at.sum() > 0
            assert torch.allclose(fast[row, : len(full)][at], full[at], atol=1e-4)
    assert len(tensors["tokens"]) == 4  # one sequence a row
    assert bool((fast[~trained] == 0).all())


async def test_supervised_warm_start_lowers_the_demonstration_loss(backend) -> None:
    """ART's model.train_sft on this backend: cross-entropy on dict assistant turns, one update
    per batch, the result saved as the next step and served."""
    from art.types import TrainSFTConfig

    model = await registered(backend, "sft")
    demos = [
        art.Trajectory(
            messages_and_choices=[
                {"role": "user", "content": f"What is {a} + {b}?"},
                {"role": "assistant", "content": f"answer: {a + b}"},
            ],
            reward=1.0,
        )
        for a, b in [(2, 3), (4, 1), (6, 2), (3, 3)]
    ]
    config = TrainSFTConfig(learning_rate=3e-3, batch_size=4)
    losses = [
        m["loss"]
        async for m in backend._train_sft(model, demos * 2, config, {})  # 2 batches, 1 epoch each
    ]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.7 * losses[0]
    assert await model.get_step() == 1
    reply = (await ask(model, "What is 4 + 1?", temperature=0, max_tokens=16)).choices[0]
    assert reply.message.content.startswith("answer:")
    assert reply.finish_reason == "stop"  # the end-of-turn token was trained too


def starts_with_the(text: str | None) -> float:
    return float((text or "").strip().startswith("The"))


@pytest.mark.experiment  # `make test`'s learning check is tests/engine/test_rl_update.py's
async def test_grpo_steps_raise_a_simple_preference(backend) -> None:
    """Reward 1 when the reply starts with "The" (the model does so ~1 time in 4). The rollouts
    stop after 4 tokens, which show whether a reply starts so: 3 steps raise it past 0.8."""
    random.seed(0)
    model = await registered(backend, "grpo")
    questions = ["Name a color.", "Name an animal. One word."]

    async def mean_reward() -> float:
        responses = await asyncio.gather(
            *(ask(model, q, n=16, seed=1234, max_tokens=6) for q in questions)
        )
        replies = [c for r in responses for c in r.choices]
        return sum(starts_with_the(c.message.content) for c in replies) / len(replies)

    baseline = await mean_reward()
    for step in range(3):
        groups = await asyncio.gather(
            *(
                rollout_group(
                    model,
                    q,
                    [100 * step + 10 * i + j for j in range(8)],
                    lambda _, c: starts_with_the(c.message.content),
                    max_tokens=4,
                )
                for i, q in enumerate(questions)
            )
        )
        await backend.train(model, groups, learning_rate=1e-3)
    trained = await mean_reward()
    print(f"mean reward {baseline:.3f} -> {trained:.3f}")
    assert trained >= baseline + 0.3, (baseline, trained)


async def test_a_new_backend_resumes_at_the_stored_step(tmp_path) -> None:
    first = LocalTorchBackend(path=str(tmp_path))
    model = await registered(first, "restart", BASE)
    group = await rollout_group(
        model, "Name a color.", [1, 2, 3, 4], lambda seed, _: float(seed % 2)
    )
    await first.train(model, [group], learning_rate=1e-3)
    served = (await ask(model, "Say hello.", temperature=0, max_tokens=8)).choices[0]
    await first.close()

    second = LocalTorchBackend(path=str(tmp_path))
    again = await registered(second, "restart", BASE)
    try:
        assert await again.get_step() == 1 and again.get_inference_name() == "restart@1"
        assert second.engine(again).trainer.optimizer.state  # the optimizer state came back too
        resumed = (await ask(again, "Say hello.", temperature=0, max_tokens=8)).choices[0]
        assert ids_of(resumed) == ids_of(served)
        assert logprobs_of(resumed) == pytest.approx(logprobs_of(served), abs=1e-4)
        result = await second.train(
            again, [group], learning_rate=1e-3, kl_penalty_coef=0.1, num_substeps=2
        )
        assert result.step == 2 and (tmp_path / "tests/models/restart/checkpoints/0002").is_dir()
        assert math.isfinite(result.metrics["kl_ref"]) and result.metrics["kl_ref"] != 0.0
        assert result.metrics["num_gradient_steps"] == min(2, result.metrics["num_sequences"])
    finally:
        await second.close()
