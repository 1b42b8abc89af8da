"""2048: the rules (merges, no-ops, terminal boards, seeded spawns), move parsing on garbage,
episodes driven by scripted replies (invalid moves under both modes, the target, the turn
limit, a refused request), the task options, and one real-model rollout (slow)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import art
import httpx
import openai
import pytest
from openai.types.chat.chat_completion import Choice

from rlvr.config import ConfigError, RunConfig
from rlvr.types import Item, Sampling
from scenarios.game2048 import Options, task
from scenarios.game2048.environment import (
    END_PREFIX,
    Episode,
    EpisodeEnd,
    Game2048Environment,
    Metric,
    Outcome,
    Rules,
    episode_reward,
    progress,
    replay,
    start,
    step,
)
from scenarios.game2048.game import (
    Board,
    Direction,
    Game,
    empty_cells,
    is_terminal,
    legal_moves,
    move,
    render,
    slide_row,
    spawn,
)
from scenarios.game2048.moves import directions_named, parse_move
from tests.helpers.real_policy import real_rollout
from tests.helpers.scripted import ScriptedPolicy

L, R, U, D = Direction.LEFT, Direction.RIGHT, Direction.UP, Direction.DOWN

# --- Rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected", "score"),
    [
        ((2, 2, 2, 2), (4, 4, 0, 0), 8),
        ((4, 4, 8), (8, 8, 0), 8),  # the new 8 does not merge again into 16
        ((2, 2, 2), (4, 2, 0), 4),  # the leading pair merges first
        ((8, 8, 8), (16, 8, 0), 16),
        ((2, 0, 2, 0), (4, 0, 0, 0), 4),
        ((2, 2, 4, 4), (4, 8, 0, 0), 12),
        ((0, 0, 0, 2), (2, 0, 0, 0), 0),
        ((2, 4, 8, 16), (2, 4, 8, 16), 0),
        ((4, 0, 4, 4), (8, 4, 0, 0), 8),
        ((0, 0, 0), (0, 0, 0), 0),
    ],
)
def test_slide_row(row: tuple[int, ...], expected: tuple[int, ...], score: int) -> None:
    assert slide_row(row) == (expected, score)


BOARD: Board = ((2, 0, 2), (4, 4, 8), (0, 2, 2))


@pytest.mark.parametrize(
    ("direction", "expected", "score"),
    [
        (L, ((4, 0, 0), (8, 8, 0), (4, 0, 0)), 16),
        (R, ((0, 0, 4), (0, 8, 8), (0, 0, 4)), 16),
        (U, ((2, 4, 2), (4, 2, 8), (0, 0, 2)), 0),
        (D, ((0, 0, 2), (2, 4, 8), (4, 2, 2)), 0),
    ],
)
def test_move_each_direction(direction: Direction, expected: Board, score: int) -> None:
    assert move(BOARD, direction) == (expected, score)


@pytest.mark.parametrize(
    ("board", "noops"),
    [
        (((2, 0), (0, 0)), {L, U}),
        (((0, 0), (0, 2)), {R, D}),
        (((2, 4), (4, 2)), {L, R, U, D}),
        (((2, 2), (4, 8)), {U, D}),  # rows merge sideways, columns are stuck
        (((0, 0), (0, 0)), {L, R, U, D}),
    ],
)
def test_noop_moves_leave_the_board_unchanged(board: Board, noops: set[Direction]) -> None:
    for direction in Direction:
        moved, _ = move(board, direction)
        assert (moved == board) == (direction in noops)
    assert set(legal_moves(board)) == set(Direction) - noops


@pytest.mark.parametrize(
    ("board", "terminal"),
    [
        (((2, 4, 2), (4, 2, 4), (2, 4, 2)), True),
        (((2, 4, 2), (4, 2, 4), (2, 4, 4)), False),  # full, but two 4s touch
        (((2, 4, 2), (4, 2, 4), (2, 2, 8)), False),
        (((2, 4, 2), (4, 0, 4), (2, 4, 2)), False),  # an empty cell
        (((8, 16), (32, 64)), True),
    ],
)
def test_terminal_detection(board: Board, terminal: bool) -> None:
    assert is_terminal(board) is terminal


def test_game_play_spawns_only_after_a_real_move() -> None:
    game = Game(seed=7, board=((2, 0, 0), (0, 0, 0), (0, 0, 2)))
    assert game.play(L) is not None
    stuck = Game(seed=7, board=((2, 0, 0), (0, 0, 0), (0, 0, 0)))
    assert stuck.play(L) is None and stuck.play(U) is None
    moved = stuck.play(R)
    assert moved is not None and moved.spawned == 1
    assert sum(t > 0 for row in moved.board for t in row) == 2


def test_score_is_the_sum_of_merged_tiles() -> None:
    game = Game(seed=1, board=((2, 2, 4), (4, 4, 0), (0, 0, 0)))
    after = game.play(L)
    assert after is not None and after.score == 4 + 8


@pytest.mark.parametrize("seed", [0, 1, 2, 123, 99_999])
def test_spawn_is_deterministic_by_seed(seed: int) -> None:
    assert Game.start(seed, 3) == Game.start(seed, 3)
    game = Game.start(seed, 3)
    assert sum(t > 0 for row in game.board for t in row) == 2 and game.spawned == 2
    assert game.play(legal_moves(game.board)[0]) == game.play(legal_moves(game.board)[0])


def test_spawn_lands_on_empty_cells_with_the_2048_odds() -> None:
    board = ((2, 4, 0), (0, 8, 16), (32, 0, 64))
    tiles = []
    for seed in range(2000):
        after = spawn(board, seed, 0)
        (cell,) = set(empty_cells(board)) - set(empty_cells(after))
        tiles.append(after[cell[0]][cell[1]])
    assert set(tiles) == {2, 4}
    assert 0.07 < tiles.count(4) / len(tiles) < 0.13
    starts = {Game.start(seed, 3).board for seed in range(50)}
    assert len(starts) > 20  # seeds give different boards
    full = ((2, 4), (8, 16))
    assert spawn(full, 0, 0) == full


def test_render() -> None:
    assert render(((2, 0), (16, 128))) == "2 .\n16 128"


# --- Move parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("up", U),
        ("Left", L),
        ("  RIGHT.\n", R),
        ("**down**", D),
        ("I would move left to merge the twos.", L),
        ("Move: up", U),
        ("←", L),
        ("↓ is best", D),
        ("r", R),
        ("U.", U),
        ("up or down", U),  # first named wins (counted as ambiguous)
        ("move_left", L),
        ("", None),
        (None, None),
        ("banana", None),
        ("upward", None),  # not the word 'up'
        ("setup the board", None),
        ("leftover rightly", None),
        ("2048!!! 🤖 " * 300, None),
        ("\x00\x01\ufffd", None),
        ("<|im_end|>", None),
        ("a", None),
    ],
)
def test_parse_move(reply: str | None, expected: Direction | None) -> None:
    assert parse_move(reply) == expected


def test_directions_named_in_order_and_distinct() -> None:
    assert directions_named("up, Up, down then LEFT") == (U, D, L)
    assert directions_named("x" * 10_000 + " left") == ()  # past the cut: long garbage is cheap


# --- Episodes as folds over replies ---------------------------------------------------------------

RULES = Rules(size=3, target=16, max_turns=6)


def _sequence_to(seed: int, rules: Rules, depth: int) -> list[Direction]:
    """Moves that make the target from the seed's start (brute force; small boards only)."""
    for moves in itertools.product(Direction, repeat=depth):
        game: Game | None = start(seed, rules).game
        for n, direction in enumerate(moves):
            game = game.play(direction) if game else None
            if game and game.max_tile >= rules.target:
                return list(moves[: n + 1])
    raise AssertionError("no winning sequence found")


def test_step_counts_each_outcome() -> None:
    first = Episode(game=Game(seed=3, board=((2, 0, 0), (0, 0, 0), (0, 0, 0))))
    episode, outcome = step(first, "banana", RULES)
    assert outcome is Outcome.UNPARSED and episode.game == first.game
    episode, outcome = step(episode, "left please", RULES)
    assert outcome is Outcome.NOOP and episode.game == first.game
    episode, outcome = step(episode, "right or left", RULES)
    assert outcome is Outcome.MOVED and episode.game.board[0][2] == 2
    assert (episode.turns, episode.moves, episode.unparsed, episode.noop) == (3, 1, 1, 1)
    assert episode.ambiguous == 1 and episode.invalid == 2 and episode.end is None


def test_invalid_move_ends_the_episode_under_end() -> None:
    rules = RULES.model_copy(update={"invalid_move": "end"})
    episode, _ = step(start(3, rules), "I don't know", rules)
    assert episode.end is EpisodeEnd.INVALID_MOVE


def test_turn_limit_and_replay_ignore_later_replies() -> None:
    episode = replay(3, ["nope"] * 20, RULES)
    assert episode.end is EpisodeEnd.TURN_LIMIT and episode.turns == RULES.max_turns


def test_target_ends_the_episode() -> None:
    rules = Rules(size=3, target=8, max_turns=12)
    moves = _sequence_to(5, rules, depth=5)
    episode = replay(5, [*moves, "up", "up"], rules)
    assert episode.end is EpisodeEnd.TARGET and episode.turns == len(moves)
    assert episode_reward(episode, rules) == 1.0


@pytest.mark.parametrize(
    ("tile", "target", "expected"),
    [(2, 16, 0.0), (4, 16, 1 / 3), (8, 16, 2 / 3), (16, 16, 1.0), (32, 16, 1.0), (8, 32, 0.5)],
)
def test_progress(tile: int, target: int, expected: float) -> None:
    assert progress(tile, target) == pytest.approx(expected)


def test_reward_subtracts_invalid_moves_and_floors_at_zero() -> None:
    seed = next(s for s in range(100) if start(s, RULES).game.max_tile == 4)  # progress 1/3
    legal = legal_moves(start(seed, RULES).game.board)[0]
    clean, dirty = replay(seed, [legal], RULES), replay(seed, ["?", legal], RULES)
    assert episode_reward(clean, RULES) >= 1 / 3
    assert episode_reward(dirty, RULES) == pytest.approx(episode_reward(clean, RULES) - 0.05)
    assert episode_reward(replay(seed, ["?"] * 6, RULES), RULES) == pytest.approx(1 / 3 - 0.3)
    harsh = RULES.model_copy(update={"invalid_penalty": 1.0})
    assert episode_reward(replay(seed, ["?"], harsh), harsh) == 0.0


# --- The rollout with scripted replies ------------------------------------------------------------


def playing(replies: list) -> ScriptedPolicy:
    """Scripted moves, then "up" for every later turn."""
    return ScriptedPolicy(replies, then="up")


SAMPLING = Sampling(temperature=1.0, max_tokens=8, step=2)


def environment_for(**options: Any) -> Game2048Environment:
    return task.build(RunConfig(task="2048", task_options={"num_items": 10, **options}))


def choices(trajectory: art.Trajectory) -> list[Choice]:
    return [m for m in trajectory.messages_and_choices if isinstance(m, Choice)]


async def test_rollout_metrics_match_the_replay() -> None:
    environment = environment_for(target=32, max_turns=8)  # no early win: every reply is played
    item = environment.load()[0]
    policy = playing(["left", "gibberish", "up", "Right!", "down", "left", "up"] * 3)
    trajectory = await environment.rollout(policy, item, SAMPLING)

    request = policy.requests[0]
    assert request["model"] == "policy@2" and request["logprobs"] is True
    assert request["max_tokens"] == 8
    system, example, example_reply, board = request["messages"]
    assert "2048" in system["content"] and "the 32 tile within 8 moves" in system["content"]
    assert example["role"] == "user" and example_reply == {"role": "assistant", "content": "left"}
    assert board["content"].startswith(item.prompt) and "Choose one:" in board["content"]
    kinds = [
        "choice" if isinstance(m, Choice) else m["role"] for m in trajectory.messages_and_choices
    ]
    assert kinds[:6] == ["system", "user", "assistant", "user", "choice", "user"]
    assert kinds[-1] == "choice"
    assert "'gibberish' is not a move" in trajectory.messages_and_choices[7]["content"]

    episode = environment.replay(item, trajectory)
    metrics = trajectory.metrics
    assert (
        metrics[Metric.TURNS] == episode.turns == len(choices(trajectory)) == len(policy.requests)
    )
    assert metrics[Metric.INVALID_MOVES] == episode.invalid >= 1
    assert metrics[Metric.UNPARSED_MOVES] >= 1
    assert metrics[Metric.MAX_TILE] == episode.game.max_tile
    assert sum(metrics[END_PREFIX + r] for r in EpisodeEnd) == 1.0
    assert metrics[END_PREFIX + episode.end] == 1.0
    assert environment.reward(item, trajectory) == episode_reward(episode, environment.rules)
    assert await environment.check(item, trajectory) == metrics[Metric.REACHED_TARGET]
    art.TrajectoryGroup([trajectory])


async def test_noop_reply_is_named_in_feedback() -> None:
    environment = environment_for()
    boards = {i.id: start(int(i.id), environment.rules).game.board for i in environment.load()}
    item = next(i for i in environment.load() if len(legal_moves(boards[i.id])) < 4)
    noop = next(d for d in Direction if d not in legal_moves(boards[item.id]))
    trajectory = await environment.rollout(playing([noop.value]), item, SAMPLING)
    assert f"{noop} changes nothing" in trajectory.messages_and_choices[5]["content"]
    assert trajectory.metrics[Metric.NOOP_MOVES] >= 1


async def test_invalid_move_end_mode_stops_after_one_turn() -> None:
    environment = environment_for(invalid_move="end")
    item = environment.load()[0]
    trajectory = await environment.rollout(playing(["", "up"]), item, SAMPLING)
    assert len(choices(trajectory)) == 1
    assert trajectory.metrics[END_PREFIX + EpisodeEnd.INVALID_MOVE] == 1.0
    assert environment.reward(item, trajectory) == pytest.approx(
        max(progress(start(int(item.id), environment.rules).game.max_tile, 8) - 0.05, 0.0)
    )
    assert await environment.check(item, trajectory) == 0.0


async def test_winning_episode_checks_one() -> None:
    environment = environment_for(target=8)
    item = environment.load()[1]
    moves = _sequence_to(int(item.id), environment.rules, depth=5)
    trajectory = await environment.rollout(playing([m.value for m in moves]), item, SAMPLING)
    assert trajectory.metrics[END_PREFIX + EpisodeEnd.TARGET] == 1.0
    assert await environment.check(item, trajectory) == 1.0 == environment.reward(item, trajectory)


def _bad_request() -> openai.BadRequestError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(400, request=request, json={"error": "context length exceeded"})
    return openai.BadRequestError("context length exceeded", response=response, body=None)


async def test_refused_later_turn_ends_cleanly_but_first_turn_raises() -> None:
    environment = environment_for()
    item = environment.load()[0]
    legal = legal_moves(start(int(item.id), environment.rules).game.board)[0]
    trajectory = await environment.rollout(playing([legal.value, _bad_request()]), item, SAMPLING)
    assert trajectory.metrics[END_PREFIX + EpisodeEnd.POLICY_ERROR] == 1.0
    assert len(choices(trajectory)) == 1
    with pytest.raises(openai.BadRequestError):
        await environment.rollout(playing([_bad_request()]), item, SAMPLING)


# --- Items and options ----------------------------------------------------------------------------


def test_items_are_seeded_boards() -> None:
    environment = environment_for()
    items = environment.load()
    assert [i.id for i in items] == [str(s) for s in range(10)]
    assert all(i.prompt == render(start(int(i.id), environment.rules).game.board) for i in items)
    other = task.build(RunConfig(task="2048", data_seed=1, task_options={"num_items": 10}))
    assert {i.id for i in other.load()}.isdisjoint(i.id for i in items)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target": 24}, "power of 2"),
        ({"target": 4}, "greater than or equal to 8"),
        ({"invalid_move": "ignore"}, "invalid_move"),
        ({"size": 1}, "size"),
    ],
)
def test_bad_options_are_one_line_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        task.parse_options(options)
    assert "\n" not in str(error.value)


def test_defaults_and_options() -> None:
    assert Options().model_dump() == {
        "size": 3,
        "target": 8,
        "max_turns": 6,
        "invalid_move": "penalize",
        "invalid_penalty": 0.05,
        "num_items": 400,
    }
    assert task.defaults["max_tokens"] <= 16


# --- The real model -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_rollout_on_real_model(tmp_path: Path) -> None:
    """SmolLM2-135M served by rlvr's LocalTorchBackend plays one short game: a well-formed multi-turn
    trajectory (Choices with logprobs, a board after each move) whose replay matches."""

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    environment = environment_for(max_turns=4, target=64)  # four turns unless the board locks up
    item: Item = environment.load()[0]
    trajectory = await real_rollout(
        environment, item, Sampling(temperature=1.0, max_tokens=8), tmp_path, "game2048-test"
    )
    sampled = choices(trajectory)
    assert 1 <= len(sampled) <= 4 and all(c.logprobs is not None for c in sampled)
    roles = [m["role"] for m in trajectory.messages()]
    assert roles[:4] == ["system", "user", "assistant", "user"]
    assert roles[4::2] == ["assistant"] * len(sampled) and roles[-1] == "assistant"
    episode = environment.replay(item, trajectory)
    assert trajectory.metrics[Metric.TURNS] == episode.turns == len(sampled)
    assert trajectory.metrics[Metric.MOVES] + trajectory.metrics[Metric.INVALID_MOVES] == len(
        sampled
    )
    assert 0.0 <= environment.reward(item, trajectory) <= 1.0
    assert await environment.check(item, trajectory) in (0.0, 1.0)
    art.TrajectoryGroup([trajectory])
