"""TASK=2048: play the sliding-tile game over a multi-turn chat, one move per turn.

Modules: `game` (the pure environment: boards, moves, merges, seeded spawns), `moves` (reading a
move out of a reply), `environment` (episodes as a fold over replies, prompts, reward and check).
Items are seeded starting boards (item id = seed). See `environment` for the reward.

Difficulty is the board `size`, the `target` tile and `max_turns`. Every turn re-reads the whole
chat, so on CPU the turn count is the cost: the defaults (3x3, target 8, 6 turns) keep episodes
short while the 135M policy's groups still mix games that make the tile and games that do not
(random legal play makes the 8 tile in most 6-move games, the untrained policy in fewer; at
`target=16 max_turns=10` it made none). Harder settings:
`target=16 max_turns=12`, `size=4`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlvr.task_api.api import Task

if TYPE_CHECKING:
    from rlvr.config import RunConfig
    from scenarios.game2048.environment import Game2048Environment


class Options(BaseModel):
    """`rlvr train 2048 key=value` options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(3, ge=2, le=6, description="board side (3 = 3x3)")
    target: int = Field(8, ge=8, description="tile that wins (a power of 2); check = made it")
    max_turns: int = Field(6, ge=1, le=64, description="replies (model calls) per episode")
    invalid_move: Literal["end", "penalize"] = Field(
        "penalize",
        description="end: an unparsed or no-op reply ends the episode; penalize: the turn is lost",
    )
    invalid_penalty: float = Field(0.05, ge=0, le=1, description="reward lost per invalid move")
    num_items: int = Field(
        400, ge=10, le=100_000, description="seeded starting boards before the split"
    )

    @field_validator("target")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError("must be a power of 2 (8, 16, 32, ...)")
        return value


def make(options: Options, cfg: RunConfig) -> Game2048Environment:
    from scenarios.game2048.environment import Game2048Environment, Rules

    rules = Rules(**options.model_dump(exclude={"num_items"}))
    return Game2048Environment(rules, options.num_items, cfg.data_seed)


task = Task(
    name="2048",
    make=make,
    options=Options,
    defaults={
        "max_tokens": 8,  # a direction is one or two tokens: room for "right.", none for rambling
        "temperature": 1.0,
        "groups_per_batch": 4,
        # Work, not minutes, so a seed gives the same agent on every CPU: the steps a capped
        # run reached (results/records/2048-2026-11-26-rlvr-train-2048-sampling-signal-e9a520.json),
        # well inside the fresh training boards.
        "max_steps": 10,
        "train_ratio": 0.7,
        "val_ratio": 0.1,  # 40 boards: less noise than 20 at an evaluation cost the budget holds
        "test_ratio": 0.2,  # 80 boards: a +0.10 paired gain needs ~73 to clear its 95% interval
    },
    description="2048 over a multi-turn chat, one move a turn; reward = progress to the target tile",
)

__all__ = ["Options", "task"]
