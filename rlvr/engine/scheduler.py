"""Continuous batching for the endpoint: requests join the running decode between two steps, rows
leave as they end, and a row whose client has gone is dropped at the next step.

One `Scheduler` drives one decoder from one thread at a time (`run`, until nothing is waiting or
live); `submit` may be called from any thread. Each iteration takes the engine's lock for one step
(admit the waiting requests, retire the rows that ended, advance one batch by a token), so a
training step waits at most one decode step. Rows on different weights (adapters, steps) cannot
share a forward: each weights tag has its own live batch, and the batches take turns. A batch
keeps the weights it started on (its view holds them), so an update between two steps changes
only what later requests sample.
"""

from __future__ import annotations

import functools
import queue
import time
from collections.abc import Callable

import torch

from rlvr.engine.batch import LiveBatch
from rlvr.engine.decoding import Decoder
from rlvr.engine.device import release_memory
from rlvr.engine.token_sampling import RowState
from rlvr.engine.types import EngineCounters, Sampled, SampleRow
from rlvr.engine.weights import WeightsView

MAX_BATCH_ROWS = 64  # rows decoding at once; later requests wait for room
# Prompt tokens admitted (prefilled) per step, beyond the first request: a burst of long prompts
# is prefilled over several steps, so a request whose client leaves meanwhile is never prefilled
# and a short request arriving behind the burst waits for one chunk, not the whole burst.
ADMIT_TOKENS = 512


def prompt_cost(request: Submission, cached: Callable[[list[int]], int]) -> int:
    """Prompt tokens a request's admission prefills: each distinct prompt once (rows sharing it
    prefill it once), less its prefix the cache holds (`cached`: how many tokens of a prompt the
    prefix cache would serve; a conversation's next turn prefills little more than what is new)."""
    return sum(
        len(ids) - cached(list(ids)) for ids in {tuple(row.prompt_ids) for row in request.rows}
    )


class ClientGone(Exception):
    """The request's client went away (closed its connection or passed its own timeout) before
    the completion was done; its rows were dropped."""


Done = Callable[[list[Sampled] | BaseException], None]


class Submission:
    """One request's rows and the step they sample; `gone` says whether its client has gone and
    `done` receives the completions or the error (called from the decoding thread)."""

    def __init__(
        self, rows: list[SampleRow], step: int | None, gone: Callable[[], bool], done: Done
    ) -> None:
        self.rows, self.step, self.gone, self.done = rows, step, gone, done
        self.states: list[RowState] = []


class Scheduler:
    """Requests for one decoder, decoded continuously (see the module's docstring)."""

    def __init__(self, decoder: Decoder, max_rows: int = MAX_BATCH_ROWS) -> None:
        self.decoder = decoder
        self.max_rows = max_rows
        self._inbox: queue.SimpleQueue[Submission] = queue.SimpleQueue()
        # Touched by the decoding thread only:
        self._waiting: list[Submission] = []
        self._batches: list[LiveBatch] = []
        self._owners: dict[int, Submission] = {}  # id(row state) -> its request
        self._admitting: list[Submission] = []  # taken from the queue, not yet in a batch
        self._turn = 0

    def submit(self, request: Submission) -> None:
        self._inbox.put(request)

    def busy(self) -> bool:
        """Whether `run` has work (ask only while no `run` is going)."""
        return bool(self._waiting or self._batches or not self._inbox.empty())

    def fail_all(self, error: Exception) -> None:
        """Answer every request held here with `error` and forget them all. For when the decoding
        loop itself raised (a fault, not one request's): its batches cannot be trusted, and a
        request left unanswered would wait forever (call it while no `run` is going)."""
        while not self._inbox.empty():
            self._waiting.append(self._inbox.get_nowait())
        held = [*self._waiting, *self._admitting, *self._owners.values()]
        self._waiting, self._admitting, self._batches, self._owners = [], [], [], {}
        for request in {id(r): r for r in held}.values():
            request.done(error)

    def run(self) -> None:
        """Decode until nothing is waiting or live (blocking: run it in a thread)."""
        try:
            while self._iterate():
                time.sleep(0)  # let a thread waiting for the lock (a training step) take it
        finally:
            release_memory()  # a long prefill's transients would stay resident otherwise

    def _iterate(self) -> bool:
        """One step under the lock: admit what waits, retire what ended, advance one batch."""
        while not self._inbox.empty():
            self._waiting.append(self._inbox.get_nowait())
        loaded = self.decoder.loaded
        with loaded.lock, torch.inference_mode(), loaded.autocast("sample"):
            started = time.perf_counter()
            self._admit()
            self._retire()
            if self._batches:
                batch = self._batches[self._turn % len(self._batches)]
                self._turn += 1
                try:
                    with batch.view.applied():
                        self.decoder.advance(batch)
                except Exception as error:  # answered per request; the scheduler keeps running
                    self._fail(batch.states, error)
                    self._batches.remove(batch)
            self.decoder.count(EngineCounters(sampling_s=time.perf_counter() - started))
        return bool(self._waiting or self._batches)

    def _admit(self) -> None:
        """Prefill the waiting requests that fit (first come, first served; about ADMIT_TOKENS
        prompt tokens a step), one batch per weights tag, and join each into the live batch of
        its tag."""
        for request in [r for r in self._waiting if r.gone()]:
            self._waiting.remove(request)
            self.decoder.count(EngineCounters(cancelled_rows=len(request.rows)))
            request.done(ClientGone("the client went away before its rows were admitted"))
        room = self.max_rows - sum(len(b.states) for b in self._batches)
        budget = ADMIT_TOKENS
        groups: dict[object, tuple[WeightsView, list[Submission]]] = {}
        while self._waiting and (len(self._waiting[0].rows) <= room or room == self.max_rows):
            if budget <= 0 and groups:
                break  # the rest is admitted at the next steps
            request = self._waiting.pop(0)
            try:
                view = self.decoder.weights.view(request.step)
                request.states = [self.decoder.new_state(r, request.gone) for r in request.rows]
            except Exception as error:  # an unknown step, a grammar: this request's error
                request.done(error)
                continue
            budget -= prompt_cost(request, functools.partial(self.decoder.cached_tokens, view.tag))
            room -= len(request.rows)
            groups.setdefault(view.tag, (view, []))[1].append(request)
        self._admitting = [request for _, requests in groups.values() for request in requests]
        for view, requests in groups.values():
            states = [state for request in requests for state in request.states]
            try:
                with view.applied():
                    newcomers = self.decoder.admit(states, view)
            except Exception as error:
                for request in requests:
                    request.done(error)
                continue
            self._owners |= {id(state): request for request in requests for state in request.states}
            self._place(newcomers)
        self._admitting = []

    def _place(self, newcomers: LiveBatch) -> None:
        for b, live in enumerate(self._batches):
            if live.view.tag == newcomers.view.tag:
                merged = self.decoder.join(live, newcomers)
                if merged is not None:
                    self._batches[b] = merged
                    return
        self._batches.append(self.decoder.seat(newcomers))

    def _retire(self) -> None:
        """Drop the rows that ended or whose client went; answer the requests now complete."""
        kept = []
        for batch in self._batches:
            rest, left = self.decoder.retire(batch)
            if rest is not None:
                kept.append(rest)
            for state in left:
                self._settle(self._owners.pop(id(state)))
        self._batches = kept

    def _settle(self, request: Submission) -> None:
        """Answer `request` once none of its rows is decoding any more."""
        if any(id(state) in self._owners for state in request.states):
            return
        if any(state.cancelled for state in request.states):
            request.done(ClientGone("the client went away; its rows were dropped"))
        else:
            request.done([state.result(self.decoder.rules.decode) for state in request.states])

    def _fail(self, states: list[RowState], error: Exception) -> None:
        requests = {id(r): r for s in states if (r := self._owners.pop(id(s), None)) is not None}
        for request in requests.values():
            for state in request.states:
                self._owners.pop(id(state), None)
            request.done(error)
