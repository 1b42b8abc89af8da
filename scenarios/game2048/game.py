"""2048 as a pure environment: boards are tuples of tuples, every function returns new values.

Rules exactly as in 2048: a move slides every tile as far as it goes; two equal tiles that meet
merge into their sum, and a tile made by a merge does not merge again in the same move
([2, 2, 2, 2] -> [4, 4], [4, 4, 8] -> [8, 8]); the score grows by the value of every merged tile.
A move that changes nothing is not a move (no tile spawns). After a move one tile spawns on an
empty cell: a 2 with probability 0.9, else a 4. The game is over when no move changes the board.

Spawns are deterministic: the n-th spawn of a game draws from `Random(f"{seed}:{n}")`, so a game
is a pure function of its seed and its moves (episodes replay exactly from stored trajectories).
"""

from __future__ import annotations

import random
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

Row = tuple[int, ...]
Board = tuple[Row, ...]

FOUR_PROBABILITY = 0.1
START_TILES = 2


class Direction(StrEnum):
    UP = "up"
    DOWN = "down"
    LEFT = "left"
    RIGHT = "right"


def slide_row(row: Row) -> tuple[Row, int]:
    """Slide one row to the left, merging each pair of equal neighbours once: (row, score)."""
    tiles = [t for t in row if t]
    merged: list[int] = []
    score = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            merged.append(2 * tiles[i])
            score += 2 * tiles[i]
            i += 2  # the merged tile is done for this move
        else:
            merged.append(tiles[i])
            i += 1
    return (*merged, *(0,) * (len(row) - len(merged))), score


def transpose(board: Board) -> Board:
    return tuple(zip(*board, strict=True))


def _mirror(board: Board) -> Board:
    return tuple(row[::-1] for row in board)


def move(board: Board, direction: Direction) -> tuple[Board, int]:
    """The board after one move and the score it earned (unchanged board = a no-op move)."""
    # Every direction is a left slide seen through a transpose and/or a mirror (self-inverse).
    view = {
        Direction.LEFT: lambda b: b,
        Direction.RIGHT: _mirror,
        Direction.UP: transpose,
        Direction.DOWN: lambda b: _mirror(transpose(b)),
    }[direction]
    unview = {Direction.DOWN: lambda b: transpose(_mirror(b))}.get(direction, view)
    slid = [slide_row(row) for row in view(board)]
    return unview(tuple(row for row, _ in slid)), sum(score for _, score in slid)


def legal_moves(board: Board) -> tuple[Direction, ...]:
    """The moves that change the board, in Direction order."""
    return tuple(d for d in Direction if move(board, d)[0] != board)


def is_terminal(board: Board) -> bool:
    return not legal_moves(board)


def empty_cells(board: Board) -> list[tuple[int, int]]:
    return [(r, c) for r, row in enumerate(board) for c, tile in enumerate(row) if not tile]


def spawn(board: Board, seed: int, n: int) -> Board:
    """The board with the game's n-th spawned tile; unchanged when the board is full."""
    cells = empty_cells(board)
    if not cells:
        return board
    rng = random.Random(f"{seed}:{n}")
    r, c = rng.choice(cells)
    tile = 4 if rng.random() < FOUR_PROBABILITY else 2
    return tuple(
        tuple(tile if (i, j) == (r, c) else t for j, t in enumerate(row))
        for i, row in enumerate(board)
    )


def empty_board(size: int) -> Board:
    return tuple((0,) * size for _ in range(size))


def max_tile(board: Board) -> int:
    return max(max(row) for row in board)


class Game(BaseModel):
    """One game's state: the board, the score and how many tiles have spawned."""

    model_config = ConfigDict(frozen=True)

    seed: int
    board: Board
    score: int = 0
    spawned: int = 0

    @classmethod
    def start(cls, seed: int, size: int) -> Game:
        game = cls(seed=seed, board=empty_board(size))
        for _ in range(START_TILES):
            game = game.with_spawn()
        return game

    def with_spawn(self) -> Game:
        board = spawn(self.board, self.seed, self.spawned)
        return self.model_copy(update={"board": board, "spawned": self.spawned + 1})

    def play(self, direction: Direction) -> Game | None:
        """The game after `direction` and its spawn, or None when the move changes nothing."""
        board, gained = move(self.board, direction)
        if board == self.board:
            return None
        moved = self.model_copy(update={"board": board, "score": self.score + gained})
        return moved.with_spawn()

    @property
    def max_tile(self) -> int:
        return max_tile(self.board)

    @property
    def over(self) -> bool:
        return is_terminal(self.board)


def render(board: Board) -> str:
    """The board as text rows, '.' for an empty cell (unpadded: every token costs prefill)."""
    return "\n".join(" ".join(str(t or ".") for t in row) for row in board)
