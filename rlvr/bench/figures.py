"""What a benchmark returns: one typed model per `rlvr bench ...` command, printed as its one
JSON line (rlvr.runs.results.BenchLine reads such lines back into the results tables)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Figures(BaseModel):
    """A benchmark's figures; `bench` names the benchmark (the results table it goes in)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bench: str

    def line(self) -> str:
        """The JSON line a benchmark prints last: every figure it has (one it has none of, e.g. a
        vLLM-only figure on rlvr's engine, is left out)."""
        return self.model_dump_json(exclude_none=True)
