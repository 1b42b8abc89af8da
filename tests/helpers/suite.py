"""How `make test` groups and orders the suite (tests/conftest.py applies it): a module's tests
form one xdist group, every test that reads a shared session run joins that run's group, and the
groups start heaviest first by the seconds `make durations` recorded in tests/durations.json."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DURATIONS = TESTS / "durations.json"

# Session-scoped real runs (tests/conftest.py): every test that reads one joins its group (one
# worker trains it once).
SHARED_RUNS = ("tiny_run", "agent_run")


def group_of(module: str, fixtures: tuple[str, ...] | list[str]) -> str:
    """The xdist group of a test in `module` (dotted) that uses `fixtures`."""
    shared = [name for name in SHARED_RUNS if name in fixtures]
    return shared[0] if shared else module


def heaviest_first(groups: list[str], seconds: dict[str, float]) -> list[str]:
    """`groups` (in collection order) by their recorded seconds, longest first; a group without
    a record (a new module) goes first too, as if it were the longest, until it has one."""
    longest = max(seconds.values(), default=0.0)
    return sorted(groups, key=lambda group: -seconds.get(group, longest))


def module_of(nodeid: str) -> str:
    """The dotted module of a test id (`tests/agent/test_agent.py::test_x` -> tests.agent.test_agent)."""
    return nodeid.split("::", 1)[0].removesuffix(".py").replace("/", ".")


def module_names(root: Path = TESTS) -> list[str]:
    """Every test module under `root`, dotted as pytest imports them (tests.<package>.test_x)."""
    return sorted(
        ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for path in root.rglob("test_*.py")
    )


def stale_records(seconds: dict[str, float], modules: list[str]) -> list[str]:
    """The recorded groups that are neither a test module nor a shared run."""
    return sorted(set(seconds) - set(modules) - set(SHARED_RUNS))
