"""A verifiers Environment run by rlvr's loop as it runs itself (classic API, verifiers 0.3.x).

- **Items**: the rows of the environment's dataset. Where it also has an eval dataset (two rows
  or more), that one is held out: shuffled by the run's data seed and halved into validation and
  test, every item pinned to its part (`rlvr.types.PINNED`); otherwise all rows take the usual
  80/10/10 split.
- **Rollout**: `env.rollout(row, client, model, sampling_args)` exactly as verifiers calls it,
  with `PolicyClient` as its client: verifiers' own chat-completions client, except that each
  request goes through the policy's `model.openai_client()` (the run's sampling, logprobs,
  checkpoint) and keeps the sampled `Choice`. The run's temperature, top_p and max_tokens go on
  top of the environment's own `sampling_args`.
- **Trajectory**: the environment's prompt and completion messages, each sampled assistant turn
  as its `Choice` (trained on its own logprobs). Where a turn cannot be matched to what was
  sampled (an environment that rewrites its history) the messages stay plain and are trained
  with logprobs recomputed, as ART-idiom rollouts are.
- **Score and check**: the environment's Rubric, weights as it sets them. Each rollout is scored
  alone when it ends; that weighted sum is the check (validation, test) and, for a rubric of
  per-rollout functions, the training reward. A rubric with group reward functions scores each
  training group together (`RubricScorer`). Each function's value is a metric, `vf/<name>`.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

import art
from art.trajectories import MetadataValue
from art.types import MessagesAndChoices
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion import Choice
from verifiers.legacy.clients.openai_chat_completions_client import (
    OpenAIChatCompletionsClient,
    handle_openai_overlong_prompt,
)
from verifiers.legacy.utils.error_utils import ErrorChain

from rlvr.json_types import JsonObject
from rlvr.scoring.scorers import rescored
from rlvr.types import PINNED, EnvironmentBase, Item, Sampling

REWARD = "vf_reward"  # trajectory metadata: the rubric's weighted sum for this rollout alone
STATE = "vf_state"  # trajectory metadata: where its verifiers State waits for group scoring
METRIC_PREFIX = "vf/"
# States kept for group scoring: a training step's groups are scored as soon as they finish;
# states of validation rollouts are never group-scored and age out.
KEPT_STATES = 4096


class PolicyClient(OpenAIChatCompletionsClient):  # type: ignore[misc]  # verifiers has no types
    """verifiers' chat-completions client over the policy: requests go through
    `model.openai_client().chat.completions.create` (not a raw POST), and every sampled Choice
    is kept, in order, in `choices`."""

    def __init__(self, model: art.Model[Any, Any]) -> None:
        super().__init__(model.openai_client())
        self.choices: list[Choice] = []

    @handle_openai_overlong_prompt  # type: ignore[untyped-decorator]  # verifiers has no types
    async def get_native_response(
        self,
        prompt: Any,
        model: str,
        sampling_args: Any,
        tools: Any = None,
        **kwargs: Any,
    ) -> Any:
        request = {k: v for k, v in dict(sampling_args).items() if v is not None}
        extra_body = request.pop("extra_body", None) or {}
        headers = kwargs.get("extra_headers")
        response = await self.client.chat.completions.create(
            model=model,
            messages=prompt,
            **({"tools": tools} if tools else {}),
            **request,
            **({"extra_body": extra_body} if extra_body else {}),
            **({"extra_headers": headers} if headers else {}),
        )
        self.choices.extend(response.choices[:1])
        return response


# verifiers' sampling_args: the environment's own (the library is untyped), a request body's JSON
def sampling_args(env_args: Mapping[str, Any], sampling: Sampling) -> JsonObject:
    """The environment's sampling args with the run's on top (greedy for validation and test)."""
    own = {
        k: v
        for k, v in env_args.items()
        if k not in ("max_completion_tokens", "logprobs") and not (k == "n" and v == 1)
    }
    return {
        **own,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "logprobs": True,
    }


def prompt_text(prompt: Any) -> str:
    """What a row asks, for reading: its last user message's text."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return str(content or "")


def answer_text(answer: Any) -> str | None:
    if answer is None or answer == "":
        return None
    return answer if isinstance(answer, str) else json.dumps(answer, default=str)


# a row of a verifiers environment's dataset: Hugging Face's Dataset.to_list(), any column type
def as_item(row: dict[str, Any], part: str, pinned: str | None) -> Item:
    return Item(
        id=f"{part}-{row['example_id']}",
        prompt=prompt_text(row.get("prompt")),
        answer=answer_text(row.get("answer")),
        data={PINNED: pinned} if pinned else {},
        source=row,
    )


def plan_items(
    train: list[dict[str, Any]],  # the dataset's rows as Hugging Face's to_list() gives them
    held_out: list[dict[str, Any]],  # the eval dataset's, likewise
    seed: int,
) -> list[Item]:
    """Items from the dataset rows and the eval dataset rows (module docstring)."""
    if train and len(held_out) >= 2:
        order = list(held_out)
        random.Random(seed).shuffle(order)
        half = (len(order) + 1) // 2
        return [
            *(as_item(r, "train", "train") for r in train),
            *(as_item(r, "eval", "val") for r in order[:half]),
            *(as_item(r, "eval", "test") for r in order[half:]),
        ]
    return [
        *(as_item(r, "train", None) for r in train),
        *(as_item(r, "eval", None) for r in held_out),
    ]


def _plain(message: Mapping[str, Any]) -> ChatCompletionMessageParam:
    """An OpenAI chat message as verifiers' client renders it natively, without its None fields
    (verifiers has no types: the shape is OpenAI's)."""
    return cast("ChatCompletionMessageParam", {k: v for k, v in message.items() if v is not None})


def _same_turn(message: Mapping[str, Any], choice: Choice) -> bool:
    """The assistant message verifiers kept is the Choice that was sampled."""
    sampled = choice.message
    calls = [
        (c.function.name, c.function.arguments)
        for c in sampled.tool_calls or []
        if isinstance(c, ChatCompletionMessageFunctionToolCall)
    ]
    kept = [
        (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []
    ]
    return (message.get("content") or "") == (sampled.content or "") and calls == kept


def with_choices(
    completion: list[ChatCompletionMessageParam], choices: list[Choice], errored: bool
) -> tuple[MessagesAndChoices, bool]:
    """The completion with each assistant message replaced by the Choice it was sampled as, and
    whether they matched; a turn the environment refused (an empty reply is an error to it) is
    kept at the end. Unmatched: the plain messages, trained with recomputed logprobs."""
    turns = [i for i, m in enumerate(completion) if m.get("role") == "assistant"]
    matched = len(turns) <= len(choices) and all(
        _same_turn(completion[i], c) for i, c in zip(turns, choices, strict=False)
    )
    if not matched:
        return list(completion), False
    merged: MessagesAndChoices = list(completion)
    for index, choice in zip(turns, choices, strict=False):
        merged[index] = choice
    refused = choices[len(turns) :] if errored else []
    return [*merged, *refused], True


def rubric_metrics(state: Mapping[str, Any]) -> dict[str, float]:
    return {
        f"{METRIC_PREFIX}{name}": float(value)
        for name, value in (state.get("metrics") or {}).items()
        if isinstance(value, int | float)
    }


async def as_trajectory(
    state: Mapping[str, Any], client: PolicyClient, item_id: str
) -> art.Trajectory:
    """The rollout as ART's Trajectory (module docstring)."""
    prompt, _ = await client.to_native_prompt(state["prompt"])
    completion, _ = await client.to_native_prompt(state.get("completion") or [])
    errored = state.get("error") is not None
    messages, matched = with_choices([_plain(m) for m in completion], client.choices, errored)
    tools: list[ChatCompletionFunctionToolParam] = [
        await client.to_native_tool(t) for t in state.get("tool_defs") or []
    ]
    reward = float(state.get("reward") or 0.0)
    metadata: dict[str, MetadataValue] = {
        "item_id": item_id,
        "vf_stop": str(state.get("stop_condition")),
        "vf_turns_matched": matched,
        REWARD: reward,
    }
    if errored:
        metadata["vf_error"] = repr(ErrorChain(state["error"]))[:300]
    return art.Trajectory(
        messages_and_choices=[*(_plain(m) for m in prompt), *messages],
        tools=[ChatCompletionFunctionToolParam(**t) for t in tools] or None,
        reward=reward,
        metadata=metadata,
        metrics={"turns": float(len(state.get("trajectory") or [])), **rubric_metrics(state)},
    )


def own_reward(trajectory: art.Trajectory) -> float:
    """The rubric's weighted sum for this rollout alone, as `as_trajectory` recorded it."""
    value = trajectory.metadata[REWARD]
    if not isinstance(value, int | float):
        raise TypeError(f"trajectory metadata {REWARD}={value!r} is not a number")
    return float(value)


class VfEnvironment(EnvironmentBase):
    """A verifiers Environment as an rlvr Environment (module docstring)."""

    default_scorer = "vf_rubric"

    def __init__(self, env: Any, name: str, data_seed: int) -> None:
        self.env, self.name, self.data_seed = env, name, data_seed
        # Group reward functions need the group's states together (RubricScorer).
        self.grouped: bool = env.rubric.has_group_rewards
        self._states: OrderedDict[str, Any] = OrderedDict()

    def load(self) -> list[Item]:
        train = (
            self.env.get_dataset().to_list()
            if self.env.dataset is not None or self.env.dataset_source is not None
            else []
        )
        held_out = (
            self.env.get_eval_dataset().to_list()
            if self.env.eval_dataset is not None or self.env.eval_dataset_source is not None
            else []
        )
        return plan_items(train, held_out, self.data_seed)

    async def rollout(
        self, model: art.Model[Any, Any], item: Item, sampling: Sampling
    ) -> art.Trajectory:
        client = PolicyClient(model)
        args = sampling_args(self.env.sampling_args, sampling)
        state = await self.env.rollout(
            item.source, client, model.get_inference_name(sampling.step), args
        )
        if not client.choices:  # nothing was sampled: the endpoint itself failed
            raise RuntimeError(
                f"verifiers rollout failed before any turn: {ErrorChain(state['error'])!r}"
                if state.get("error") is not None
                else "verifiers rollout sampled no turn"
            )
        await self.env.rubric.score_group([state])
        await self.env.rubric.cleanup(state)
        trajectory = await as_trajectory(state, client, item.id)
        if self.grouped:
            key = uuid.uuid4().hex
            self._states[key] = state
            while len(self._states) > KEPT_STATES:
                self._states.popitem(last=False)
            trajectory.metadata[STATE] = key
        return trajectory

    def state_of(self, trajectory: art.Trajectory) -> Any:
        """The verifiers State of a training rollout (taken: it is scored once), or None."""
        return self._states.pop(str(trajectory.metadata.get(STATE)), None)

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return own_reward(trajectory)

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        return own_reward(trajectory)


class RubricScorer:
    """The environment's Rubric as the training scorer: each rollout's own weighted sum, or for
    a rubric with group reward functions the group scored together (verifiers' `score_group`).
    A group whose states are gone (more than `KEPT_STATES` rollouts ago) is skipped, counted."""

    name = "vf_rubric"

    def __init__(self, environment: VfEnvironment) -> None:
        self.environment = environment

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None:
        trajectories = group.trajectories
        if not self.environment.grouped:
            return rescored(group, [own_reward(t) for t in trajectories])
        states = [self.environment.state_of(t) for t in trajectories]
        if any(s is None for s in states):
            return None
        await self.environment.env.rubric.score_group(states)
        return rescored(
            group, [float(s["reward"]) for s in states], [rubric_metrics(s) for s in states]
        )

    def pop_metrics(self) -> dict[str, float]:
        return {}
