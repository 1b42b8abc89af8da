"""Which weights a sampling pass computes with: a `WeightsView` names them (its tag files the keys
and values computed with them in the prefix cache) and applies them to the model for a pass.

A `WeightsSource` gives the view of a step: the adapter store (rlvr.engine.adapters) for a trained
engine, `BaseWeights` for a model served as it is. A view holds its merged set (if any) itself, so
rows admitted on one view finish on it even if the source moves on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from rlvr.engine.merged_weights import MergedSet
from rlvr.engine.types import UnknownStep


class WeightsTag(NamedTuple):
    """Which weights: the base model's, the live adapter at a version, or a step's checkpoint."""

    kind: Literal["base", "live", "step"]
    number: int  # the live adapter's version, or the step


BASE_TAG = WeightsTag("base", 0)


@dataclass(frozen=True)
class WeightsView:
    """One step's weights: `merged` swapped in for a pass, or the model as it is (None)."""

    tag: WeightsTag
    merged: MergedSet | None = None

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The model computes with these weights inside (the caller holds the engine's lock)."""
        if self.merged is None:
            yield
            return
        with self.merged.applied():
            yield


class WeightsSource(Protocol):
    def view(self, step: int | None) -> WeightsView:
        """The weights serving `step` (None: the latest); UnknownStep if there are none. Called
        under the engine's lock."""
        ...


class BaseWeights:
    """A model's own weights, its one step 0."""

    def view(self, step: int | None) -> WeightsView:
        if step not in (None, 0):
            raise UnknownStep(f"step {step}: this model is served as it is (step 0 only)")
        return WeightsView(tag=BASE_TAG)
