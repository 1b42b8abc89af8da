"""One sampled row's decoding: its state (tokens, log-probabilities, why it ended) and the rules that
pick its next token and end it (temperature, top_p, seed, grammar, stop strings, end tokens).

The decoder (rlvr.engine.decoding) runs the model over many rows at once; everything here is per
row, on the logits the model gave it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlvr.engine.grammar import Matcher
from rlvr.engine.types import FinishReason, Sampled, SampleRow


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row beyond its nucleus (the most likely token is always kept)."""
    sorted_probs, order = probs.sort(-1, descending=True)
    outside = (sorted_probs.cumsum(-1) - sorted_probs) > top_p[:, None]
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def sample_tokens(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of `probs` ([rows, vocab], each row's own generator): the inverse of
    its cumulative distribution at one uniform variate (a fraction of `torch.multinomial`'s cost
    over a whole vocabulary). Tokens of probability 0 are never sampled."""
    uniform = torch.cat([torch.rand(1, generator=g, device=g.device) for g in generators])
    cdf = probs.double().cumsum(-1)
    target = (uniform.to(cdf) * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp(max=probs.shape[-1] - 1)


def never() -> bool:
    return False


# The tokens a draft's lookup matches on: 3 rarely match by chance, and a repeated phrase or a
# copied id matches at once.
LOOKUP_NGRAM = 3


def lookup_draft(context: list[int], most: int, ngram: int = LOOKUP_NGRAM) -> list[int]:
    """Prompt-lookup drafting: the tokens (at most `most`) that followed the latest earlier
    occurrence of the context's last `ngram` tokens; [] where there is none. What a greedy reply
    copies from its prompt (a tool result, an id) or repeats of itself is drafted exactly. Where
    what followed runs into the end of the context, the context is a loop of that period, and the
    draft goes round it again (a looping greedy reply goes on looping until it ends)."""
    if most <= 0 or len(context) <= ngram:
        return []
    key = context[-ngram:]
    for start in range(len(context) - ngram - 1, -1, -1):
        if context[start : start + ngram] == key:
            period = context[start + ngram :]
            return [period[i % len(period)] for i in range(most)]
    return []


class RowState:
    """Mutable state of one row while it decodes. `gone` says whether its client has gone (the
    row is then dropped at the next step, `cancelled`)."""

    def __init__(
        self,
        row: SampleRow,
        generator: torch.Generator,
        matcher: Matcher | None = None,
        gone: Callable[[], bool] = never,
    ) -> None:
        self.row = row
        self.generator = generator
        self.matcher = matcher
        self.gone = gone
        self.inputs = row.prompt_ids + row.forced_ids  # what the prefill feeds
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[list[tuple[int, float]]] = []
        self.text: str | None = None  # set when a stop string cut it
        self.forced_chars = 0
        self.finish: FinishReason | None = None
        self.cancelled = False

    def record(self, token: int, logprobs: torch.Tensor) -> None:
        """Append `token` with its log-probability under `logprobs` ([vocab])."""
        self.ids.append(token)
        self.logprobs.append(float(logprobs[token]))
        if self.row.top_logprobs:
            values, ids = logprobs.topk(self.row.top_logprobs)
            self.top.append(list(zip(ids.tolist(), values.tolist(), strict=True)))

    def fed(self) -> list[int]:
        """The tokens whose keys/values the batch holds for this row once it ended (a sampled
        token is fed in the step that chose it)."""
        return self.inputs + self.ids[len(self.row.forced_ids) :]

    def result(self, decode: Callable[[list[int]], str]) -> Sampled:
        return Sampled(
            token_ids=self.ids,
            logprobs=self.logprobs,
            top_logprobs=self.top,
            text=self.text if self.text is not None else decode(self.ids),
            finish_reason=self.finish or "length",
        )


class RowRules:
    """What picks a row's tokens and ends it: `tokenizer` (stop strings are matched on text) and
    the model's end tokens `stop_ids`."""

    def __init__(self, tokenizer: Any, stop_ids: frozenset[int]) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def score_forced(self, states: list[RowState], logits: torch.Tensor, width: int) -> None:
        """Record the model's log-probabilities of each row's forced prefix tokens (`logits`:
        the prefill's last `width` columns)."""
        logprobs = torch.log_softmax(logits.float(), -1)
        for b, state in enumerate(states):
            forced = state.row.forced_ids
            for j, token in enumerate(forced):
                state.record(token, logprobs[b, width - len(forced) + j])
            state.forced_chars = len(self.decode(forced))

    def choose(self, logits: torch.Tensor, states: list[RowState]) -> torch.Tensor:
        """Pick one token per row and record it; returns the chosen ids. A row with a grammar
        picks among the tokens it allows; its recorded logprob is the model's own."""
        logits = logits.float()
        logprobs = torch.log_softmax(logits, -1)
        matchers = {b: s.matcher for b, s in enumerate(states) if s.matcher is not None}
        constrained = list(matchers)
        if constrained:
            allowed = torch.stack([matcher.allowed() for matcher in matchers.values()])
            logits = logits.clone()
            logits[constrained] = logits[constrained].masked_fill(
                ~allowed.to(logits.device), float("-inf")
            )
        chosen = logits.argmax(-1)
        temperatures = [s.row.temperature for s in states]
        sampled = [b for b, t in enumerate(temperatures) if t > 0]
        if sampled:
            hot = logits[sampled] / torch.tensor([temperatures[b] for b in sampled])[:, None].to(
                logits.device
            )
            probs = torch.softmax(hot, -1)
            nucleus = [k for k, b in enumerate(sampled) if states[b].row.top_p < 1]
            if nucleus:  # sorting the vocabulary is a decode step's largest extra: only where asked
                top_p = torch.tensor([states[sampled[k]].row.top_p for k in nucleus])
                probs[nucleus] = top_p_filter(probs[nucleus], top_p.to(logits.device))
            chosen[sampled] = sample_tokens(probs, [states[b].generator for b in sampled])
        for b, (state, token) in enumerate(zip(states, chosen.tolist(), strict=True)):
            state.record(token, logprobs[b])
            if state.matcher is not None:
                state.matcher.consume(token)
        return chosen

    def forced_next(self, state: RowState) -> list[int]:
        """The tokens the row's grammar allows as the only continuation (consumed here; recorded
        once the forward that feeds them has scored them), within the row's token budget."""
        if state.matcher is None or state.finish is not None:
            return []
        room = state.row.max_tokens - len(state.ids)
        forced = state.matcher.forced()[:room]
        for token in forced:
            state.matcher.consume(token)
        return forced

    def record_forced_next(
        self, states: list[RowState], fed: list[list[int]], logits: torch.Tensor
    ) -> None:
        """Record each row's grammar-forced tokens with the model's log-probabilities: the one at
        column c of the forward predicts the token fed at column c + 1."""
        width = logits.shape[1]
        for b, state in enumerate(states):
            forced = fed[b][1:]
            if not forced:
                continue
            start = width - len(fed[b])
            logprobs = torch.log_softmax(logits[b, start : start + len(forced)].float(), -1)
            for j, token in enumerate(forced):
                state.record(token, logprobs[j])
            self.finish_if_done(state)

    def drafts(self, states: list[RowState], columns: int) -> list[list[int]]:
        """Each greedy row's draft of the tokens after the one just chosen (`lookup_draft`), the
        batch feeding at most `columns` columns a step (`columns` // rows a row, the chosen token
        included): a decode step of a few rows costs about the same at any width, so drafts are
        nearly free there, and a full batch gets none. [] for rows that sample, follow a grammar
        or have ended."""
        most = columns // max(len(states), 1) - 1
        if most <= 0:
            return [[] for _ in states]
        return [
            lookup_draft(s.fed(), min(most, s.row.max_tokens - len(s.ids)))
            if s.finish is None and s.matcher is None and s.row.temperature == 0
            else []
            for s in states
        ]

    def accept_drafts(
        self, states: list[RowState], drafts: list[list[int]], logits: torch.Tensor
    ) -> list[int]:
        """Keep each row's drafted tokens while each is what greedy decoding chooses (the column
        that fed the token before it predicts it), recording them as chosen, until one is not or
        the row ends; returns how many of each row's drafted tokens were turned down (`logits`:
        [rows, width, vocab], rows right-aligned, a draft in each row's last columns)."""
        width = logits.shape[1]
        refused = []
        for b, (state, draft) in enumerate(zip(states, drafts, strict=True)):
            columns = logits[b, width - 1 - len(draft) : width - 1].float()
            greedy = columns.argmax(-1).tolist()  # as `choose` picks a greedy row's token
            kept = 0
            for token, best, column in zip(draft, greedy, columns, strict=True):
                if state.finish is not None or token != best:
                    break
                state.record(token, torch.log_softmax(column, -1))
                self.finish_if_done(state)
                kept += 1
            refused.append(len(draft) - kept)
        return refused

    def finish_if_done(self, state: RowState) -> None:
        """Set `finish` when the row hit an end token, a stop string or its token budget."""
        row = state.row
        # A finished document leaves the grammar only the end token to allow: it ends there too.
        if (len(state.ids) > len(row.forced_ids) and state.ids[-1] in self.stop_ids) or (
            row.stop and self._cut_at_stop(state)
        ):
            state.finish = "stop"
        elif len(state.ids) >= row.max_tokens:
            state.finish = "length"

    def _cut_at_stop(self, state: RowState) -> bool:
        """Whether a stop string appeared after the forced prefix; if so keep the text before it."""
        text = self.decode(state.ids)
        cuts = [
            i for i in (text.find(s, state.forced_chars) for s in state.row.stop if s) if i >= 0
        ]
        if cuts:
            state.text = text[: min(cuts)]
        return bool(cuts)
