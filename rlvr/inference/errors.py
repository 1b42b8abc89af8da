"""The one error of the inference seam a user can act on."""

from __future__ import annotations


class InferenceError(RuntimeError):
    """A vLLM environment, server or adapter that does not work; the message is one line that
    names it and says what to do (the CLI prints it and exits 2)."""
