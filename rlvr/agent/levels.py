"""Difficulty levels of an agent task: how much of the evidence the prompt shows, and how many
turns the episode may take. A task subclasses `LevelSpec` with what else its levels vary."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Level(StrEnum):
    EASY = "easy"  # the evidence is in the prompt: read it and answer
    MEDIUM = "medium"  # find the evidence with the tools, then answer
    HARD = "hard"  # evidence spread over several finds


class LevelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    evidence_in_prompt: bool
    max_turns: int
