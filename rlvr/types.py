"""The nouns rlvr adds to ART's four: Item, Sampling, Environment, Scorer (and the Judge a scorer
may call).

Data that flows (Item, Sampling) are small frozen pydantic models. The protocols users implement
(Environment, Scorer) are separate from them. Trajectories and groups are ART's own types.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, runtime_checkable

import art
from pydantic import BaseModel, ConfigDict, Field

from rlvr.json_types import JsonObject

if TYPE_CHECKING:
    from rlvr.config import RunConfig


# An Item whose `data` names its part ("train", "val" or "test") under this key keeps it: a task
# with its own held-out set (a verifiers environment's eval dataset) pins every item.
PINNED = "split"


class Item(BaseModel):
    """One task instance. `answer` is the ground-truth label; scorers used for training only ever
    see training items, so validation and test labels never reach the reward. `source` is the
    object a task's `load()` returned when it was not an Item (ART's idiom: any scenario object);
    it travels with the item and is never stored."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str = ""
    answer: str | None = None
    data: JsonObject = Field(default_factory=dict)  # the task's own fields, stored with the item
    source: Any = Field(None, exclude=True, repr=False)


class ChatKeywords(TypedDict):
    """The chat-completions keywords a Sampling sends (Sampling.request)."""

    temperature: float
    top_p: float
    max_tokens: int
    logprobs: bool


def derived_seed(*parts: object) -> int:
    """A seed from `parts` (their text), the same in every process (Python's hash() is salted
    per process); below 2^62, so a server adding a choice's index stays within 64 bits."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


class Sampling(BaseModel):
    """How a rollout samples from the policy. `step=None` asks for the latest checkpoint.
    `seed` (None: unseeded) seeds what is sampled: `for_rollout` derives each rollout's own, and
    each chat call of a rollout samples with a seed derived from that and the call's number
    (rlvr.task_api.rollout_model), so the same run seed samples the same tokens."""

    model_config = ConfigDict(frozen=True)

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    step: int | None = None
    seed: int | None = None

    @classmethod
    def from_config(
        cls,
        cfg: RunConfig,
        split: Literal["train", "val", "test"],
        step: int | None = None,
        *,
        train_step: int = 0,
    ) -> Sampling:
        """The run's sampling for a split: training samples at `temperature`; validation and
        test at `val_temperature` (0 = greedy). Seeded by the run's seed, the split and
        `train_step` (an item drawn again at a later step samples afresh)."""
        temperature = cfg.temperature if split == "train" else cfg.val_temperature
        return cls(
            temperature=temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_tokens,
            step=step,
            seed=derived_seed(cfg.seed, split, train_step),
        )

    def for_rollout(self, item_id: str, sample: int) -> Sampling:
        """This sampling for the `sample`-th rollout of item `item_id`: its own seed."""
        if self.seed is None:
            return self
        return self.model_copy(update={"seed": derived_seed(self.seed, item_id, sample)})

    def call_seed(self, call: int) -> int | None:
        """The seed of a rollout's `call`-th chat call (None: unseeded)."""
        return None if self.seed is None else derived_seed(self.seed, call)

    def request(self) -> ChatKeywords:
        """The chat-completions keywords this sampling sends, with logprobs: ART trains on them.
        No seed: a rollout's model adds each call's own (rlvr.task_api.rollout_model)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "logprobs": True,
        }


@runtime_checkable
class Environment(Protocol):
    """A task: items, how to play one episode, and the ground-truth check.

    `check` is the truth used for validation, test and `independent_reward` (0..1); it is async
    because some tasks' truth is a judge (rubric pass rate). `reward` is the deterministic training
    reward used by `scorer=verifier` (sync or async, as a task's `reward=` hook may be); it may
    equal the check or give partial credit. Both are deterministic (given the judge) and never
    raise.

    The optional hooks are declared here too, so the loop and the judges read them as attributes,
    never probe for them; `EnvironmentBase` gives their defaults:
    - `demonstrate`: None, or `async (item) -> art.Trajectory` playing the episode with a scripted
      policy (plain dict assistant turns) for the supervised warm start (`sft_steps=`);
    - `judged_check`: True when `check` calls a judge (the loop then does not run it on every
      training rollout);
    - `ruler_rubric`: None, a rubric text, or `(item) -> str`, for the RULER judge.
    """

    name: str
    default_scorer: str
    demonstrate: Callable[[Item], Awaitable[art.Trajectory]] | None
    judged_check: bool
    ruler_rubric: str | Callable[[Item], str] | None

    def load(self) -> list[Item]: ...

    async def rollout(
        self, model: art.Model[Any, Any], item: Item, sampling: Sampling
    ) -> art.Trajectory: ...

    async def check(self, item: Item, trajectory: art.Trajectory) -> float: ...

    def reward(self, item: Item, trajectory: art.Trajectory) -> float | Awaitable[float]: ...


class EnvironmentBase:
    """Defaults of the Environment protocol's optional hooks; subclass it and override what your
    task has (a method named `demonstrate` replaces the None)."""

    default_scorer: str = "verifier"
    demonstrate: Callable[[Item], Awaitable[art.Trajectory]] | None = None
    judged_check: bool = False
    ruler_rubric: str | Callable[[Item], str] | None = None


ENVIRONMENT_MEMBERS = ("name", "default_scorer", "load", "rollout", "check", "reward")
ENVIRONMENT_HOOKS = ("demonstrate", "judged_check", "ruler_rubric")


@runtime_checkable
class Scorer(Protocol):
    """Rewards a group. Returns a new, scored group, or None when the group cannot be scored (a
    judge failed after its retries): the loop skips and counts it; it never becomes a fake 0.0.

    `pop_metrics` returns the counters accumulated since the last call (e.g. `judge/calls`,
    `judge/failures`, `judge/cost_usd`, `train/reward_errors`) and resets them; a step's row
    writes a name without a namespace of its own as `scorer/<name>` (rlvr.metrics.scorer_figures).
    """

    name: str

    async def score(self, group: art.TrajectoryGroup, item: Item) -> art.TrajectoryGroup | None: ...

    def pop_metrics(self) -> dict[str, float]: ...


@runtime_checkable
class Judge(Protocol):
    """The run's judge client, as rlvr sees it (the judges package implements it): its spend so
    far and its cap. A resumed run sets `spent_usd` to what the killed run had spent, so
    `judge.max_usd` caps the whole run; a judge raises BudgetExhausted once the cap is reached."""

    spent_usd: float

    @property
    def max_usd(self) -> float | None: ...


@runtime_checkable
class ServedJudge(Protocol):
    """A judge that asks the run's own inference servers (`judge=vllm`): they start with the
    policy, after the judge is opened, so the session tells it where they are."""

    def serve_from(self, base_url: str, api_key: str, model: str) -> None: ...


class BudgetExhausted(RuntimeError):
    """Raised by a judge when the configured spend cap is reached; ends the run cleanly
    with stop_reason=judge_budget."""


def completion_text(trajectory: art.Trajectory) -> str:
    """The text of the last assistant turn (the 'completion' of the verifier contract)."""
    for message in reversed(trajectory.messages()):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return ""
    return ""
