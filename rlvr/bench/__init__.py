"""Benchmarks (`rlvr bench ...`): each prints its ratio against a bare baseline run in the same
process (`policy`: serve, turns, train; `eval`; `step`: a task's real steps; `loop`: the
reward-hacking demonstration)."""
