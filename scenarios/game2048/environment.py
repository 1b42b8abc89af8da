"""2048 played over a multi-turn chat: each user turn shows the board, the policy answers a move.

The chat opens with a short system prompt and one example exchange (a board, "left"), then the
item's board; every later user turn is the new board (after a note on an invalid reply) with
the moves that change it.

An episode is a fold of `step` over the policy's replies, starting from the item's seeded board
(`start`). `step` is pure, so the reward and the check re-play an episode from its stored
messages (`replay`) by the very rules the rollout used. Each reply is sampled with
`rlvr.task_api.rollouts.chat_turn` and its `Choice` kept, so ART trains on the sampled tokens.

A reply that names no direction (unparsed) or a direction that changes nothing (no-op) is an
invalid move: counted in `game/invalid_moves`, it costs `invalid_penalty` of reward and, under
`invalid_move=end`, ends the episode; under `penalize` the turn is lost and the game goes on.
The episode also ends when the target tile is made, when no move changes the board, or after
`max_turns` replies.

Reward (training): progress (log2(max tile) - 1) / (log2(target) - 1), capped at 1 (a 2 is 0,
the target is 1, each doubling between counts the same), minus the invalid-move penalties,
floored at 0. Check (validation, test): 1.0 when the target tile was made, else 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import StrEnum
from typing import Literal

import art
import openai
from pydantic import BaseModel, ConfigDict

from rlvr.task_api.rollouts import chat_turn
from rlvr.types import EnvironmentBase, Item, Sampling
from scenarios.game2048.game import Board, Direction, Game, legal_moves, render
from scenarios.game2048.moves import directions_named, parse_move

InvalidMove = Literal["end", "penalize"]
SEED_STRIDE = 100_000  # item seeds of run seed s are s * SEED_STRIDE + i
SHOWN_REPLY_CHARS = 30


class Rules(BaseModel):
    """One difficulty setting of the game (the task options that shape an episode)."""

    model_config = ConfigDict(frozen=True)

    size: int = 3
    target: int = 8
    max_turns: int = 6
    invalid_move: InvalidMove = "penalize"
    invalid_penalty: float = 0.05


class Outcome(StrEnum):
    """What one reply did."""

    MOVED = "moved"  # a legal move, played
    UNPARSED = "unparsed"  # the reply names no direction
    NOOP = "noop"  # a direction that changes nothing on this board


class EpisodeEnd(StrEnum):
    """Why an episode ended; mirrored one-hot into metrics under END_PREFIX."""

    TARGET = "target"  # the target tile was made
    NO_MOVES = "no_moves"  # no move changes the board (game over)
    INVALID_MOVE = "invalid_move"  # an unparsed or no-op reply under invalid_move=end
    TURN_LIMIT = "turn_limit"  # max_turns replies without making the target
    POLICY_ERROR = "policy_error"  # the endpoint refused a later turn (e.g. context too long)


END_PREFIX = "end/"


class Metric(StrEnum):
    TURNS = "game/turns"  # replies sampled
    MOVES = "game/moves"  # legal moves played
    INVALID_MOVES = "game/invalid_moves"  # unparsed + no-op replies
    UNPARSED_MOVES = "game/unparsed_moves"
    NOOP_MOVES = "game/noop_moves"
    AMBIGUOUS_MOVES = "game/ambiguous_moves"  # replies naming several directions (first played)
    MAX_TILE = "game/max_tile"
    SCORE = "game/score"  # sum of the tiles made by merges
    REACHED_TARGET = "game/reached_target"


class Episode(BaseModel):
    """An episode's state after some replies."""

    model_config = ConfigDict(frozen=True)

    game: Game
    turns: int = 0
    moves: int = 0
    unparsed: int = 0
    noop: int = 0
    ambiguous: int = 0
    end: EpisodeEnd | None = None

    @property
    def invalid(self) -> int:
        return self.unparsed + self.noop


def start(seed: int, rules: Rules) -> Episode:
    game = Game.start(seed, rules.size)
    return Episode(game=game, end=_end(game, Outcome.MOVED, 0, rules))


def _end(game: Game, outcome: Outcome, turns: int, rules: Rules) -> EpisodeEnd | None:
    if game.max_tile >= rules.target:
        return EpisodeEnd.TARGET
    if outcome is not Outcome.MOVED and rules.invalid_move == "end":
        return EpisodeEnd.INVALID_MOVE
    if game.over:
        return EpisodeEnd.NO_MOVES
    if turns >= rules.max_turns:
        return EpisodeEnd.TURN_LIMIT
    return None


def step(episode: Episode, reply: str | None, rules: Rules) -> tuple[Episode, Outcome]:
    """The episode after one reply, and what the reply did."""
    named = directions_named(reply)
    played = episode.game.play(named[0]) if named else None
    outcome = Outcome.MOVED if played else Outcome.NOOP if named else Outcome.UNPARSED
    game = played or episode.game
    turns = episode.turns + 1
    return episode.model_copy(
        update={
            "game": game,
            "turns": turns,
            "moves": episode.moves + (outcome is Outcome.MOVED),
            "unparsed": episode.unparsed + (outcome is Outcome.UNPARSED),
            "noop": episode.noop + (outcome is Outcome.NOOP),
            "ambiguous": episode.ambiguous + (len(named) > 1),
            "end": _end(game, outcome, turns, rules),
        }
    ), outcome


def replay(seed: int, replies: Iterable[str | None], rules: Rules) -> Episode:
    """The episode these replies play from the seeded start (replies after its end are ignored)."""
    episode = start(seed, rules)
    for reply in replies:
        if episode.end is not None:
            break
        episode, _ = step(episode, reply, rules)
    return episode


def progress(max_tile: int, target: int) -> float:
    """0 for a lone 2, 1 at the target, equal steps per doubling."""
    return min(max((math.log2(max_tile) - 1) / (math.log2(target) - 1), 0.0), 1.0)


def episode_reward(episode: Episode, rules: Rules) -> float:
    return max(
        progress(episode.game.max_tile, rules.target) - rules.invalid_penalty * episode.invalid, 0.0
    )


# --- Prompts --------------------------------------------------------------------------------------

# Short because the whole chat is prefilled again at every turn, which is what an episode costs on
# CPU. The example exchange before the first board is what makes SmolLM2-135M answer with a
# direction (in 31 of 32 first replies, against 17 without it); it is context only, never trained on (ART trains sampled Choices)
# and never played (`replies`).
SYSTEM = (
    "You play 2048 on a {size}x{size} board: make the {target} tile within {max_turns} moves. "
    "Reply with a single direction word."
)
EXAMPLE_REPLY = Direction.LEFT


def show(board: Board) -> str:
    return f"{render(board)}\nChoose one: {', '.join(legal_moves(board))}."


def example_board(size: int) -> Board:
    """A board where merging the top row's 2s (EXAMPLE_REPLY) is the obvious move."""
    cells = {(0, 0): 2, (0, 1): 2, (size - 1, 1): 4}
    return tuple(tuple(cells.get((r, c), 0) for c in range(size)) for r in range(size))


def opening(rules: Rules) -> list[dict[str, str]]:
    """The messages before the first board: the system prompt and the example exchange."""
    return [
        {"role": "system", "content": SYSTEM.format(**rules.model_dump())},
        {"role": "user", "content": show(example_board(rules.size))},
        {"role": "assistant", "content": EXAMPLE_REPLY.value},
    ]


def feedback(outcome: Outcome, reply: str | None) -> str:
    """What the user turn says about an invalid reply before showing the board again."""
    if outcome is Outcome.NOOP:
        return f"{parse_move(reply)} changes nothing.\n"
    if outcome is Outcome.UNPARSED:
        shown = " ".join((reply or "").split())[:SHOWN_REPLY_CHARS]
        return f"'{shown}' is not a move.\n"
    return ""


# --- The environment ------------------------------------------------------------------------------


class Game2048Environment(EnvironmentBase):
    """Items (seeded starting boards), episodes and the check for the 2048 task."""

    name = "2048"
    default_scorer = "verifier"

    def __init__(self, rules: Rules, num_items: int, seed: int) -> None:
        self.rules, self.num_items, self.seed = rules, num_items, seed

    def load(self) -> list[Item]:
        seeds = [self.seed * SEED_STRIDE + i for i in range(self.num_items)]
        return [
            Item(
                id=str(seed),
                prompt=render(start(seed, self.rules).game.board),
                answer=str(self.rules.target),
                data={"seed": seed},
            )
            for seed in seeds
        ]

    async def rollout(self, model: art.Model, item: Item, sampling: Sampling) -> art.Trajectory:
        rules = self.rules
        episode = start(item.data["seed"], rules)
        trajectory = art.Trajectory(
            messages_and_choices=[
                *opening(rules),
                {"role": "user", "content": show(episode.game.board)},
            ],
            metadata={"item_id": item.id, "seed": item.data["seed"]},
        )
        end = episode.end
        while end is None:
            try:
                choice = await chat_turn(model, trajectory.messages(), sampling)
            except openai.BadRequestError:
                if episode.turns == 0:  # the first request failing is a setup problem
                    raise
                end = EpisodeEnd.POLICY_ERROR
                break
            trajectory.messages_and_choices.append(choice)
            episode, outcome = step(episode, choice.message.content, rules)
            end = episode.end
            if end is None:
                trajectory.messages_and_choices.append(
                    {
                        "role": "user",
                        "content": feedback(outcome, choice.message.content)
                        + show(episode.game.board),
                    }
                )
        return self._finish(trajectory, episode, end)

    def _finish(
        self, trajectory: art.Trajectory, episode: Episode, end: EpisodeEnd
    ) -> art.Trajectory:
        game = episode.game
        trajectory.metrics.update(
            {
                Metric.TURNS: float(episode.turns),
                Metric.MOVES: float(episode.moves),
                Metric.INVALID_MOVES: float(episode.invalid),
                Metric.UNPARSED_MOVES: float(episode.unparsed),
                Metric.NOOP_MOVES: float(episode.noop),
                Metric.AMBIGUOUS_MOVES: float(episode.ambiguous),
                Metric.MAX_TILE: float(game.max_tile),
                Metric.SCORE: float(game.score),
                Metric.REACHED_TARGET: float(game.max_tile >= self.rules.target),
                **{f"{END_PREFIX}{reason}": float(reason is end) for reason in EpisodeEnd},
            }
        )
        trajectory.metadata["final_board"] = render(game.board)
        return trajectory.finish()

    def replay(self, item: Item, trajectory: art.Trajectory) -> Episode:
        """The episode of a stored trajectory, re-played from its assistant messages."""
        return replay(item.data["seed"], replies(trajectory, self.rules), self.rules)

    async def check(self, item: Item, trajectory: art.Trajectory) -> float:
        return float(self.replay(item, trajectory).game.max_tile >= self.rules.target)

    def reward(self, item: Item, trajectory: art.Trajectory) -> float:
        return episode_reward(self.replay(item, trajectory), self.rules)


def replies(trajectory: art.Trajectory, rules: Rules) -> list[str | None]:
    """The policy's replies: assistant messages after the opening's example exchange."""
    return [
        m["content"] if isinstance(m.get("content"), str) else None
        for m in trajectory.messages()[len(opening(rules)) :]
        if m.get("role") == "assistant"
    ]
