"""rlvr's built-in tasks. Each subpackage exposes a `task` (an `rlvr.Task`) registered under the
entry-point group `rlvr.tasks` in pyproject.toml — the same way any installed package adds
tasks. Nothing in `rlvr/` imports this package.
"""
