"""The lock file's tie to pyproject.toml. Standard library only: the Makefile runs this file with
the bare interpreter before any environment exists (`python rlvr/lockfile.py check|stamp`).

`requirements.lock` is compiled by `uv pip compile --generate-hashes` (`make lock`) and starts
with a line `# pyproject-digest: <sha256>` over the dependency tables of pyproject.toml
(`requires-python`, `dependencies`, `optional-dependencies`). `check` refuses an install when the
two disagree — a changed dependency without a re-lock — so every install is exactly the lock.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "requirements.lock"
DIGEST_PREFIX = "# pyproject-digest: "


def dependency_digest(pyproject_text: str) -> str:
    """sha256 of the dependency tables, canonical JSON (comments and order of tables ignored)."""
    project = tomllib.loads(pyproject_text)["project"]
    tables = {
        key: project.get(key)
        for key in ("requires-python", "dependencies", "optional-dependencies")
    }
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


def recorded_digest(lock_text: str) -> str | None:
    """The digest a lock was stamped with, or None."""
    first = lock_text.partition("\n")[0]
    return first.removeprefix(DIGEST_PREFIX).strip() if first.startswith(DIGEST_PREFIX) else None


def stamped(lock_text: str, digest: str) -> str:
    """The lock text with its digest line (replaced if present)."""
    body = lock_text if recorded_digest(lock_text) is None else lock_text.partition("\n")[2]
    return f"{DIGEST_PREFIX}{digest}\n{body}"


def problem(pyproject_text: str, lock_text: str | None) -> str | None:
    """Why the lock cannot be installed as is, in one line; None when it matches."""
    if lock_text is None:
        return f"{LOCK.name} is missing: run `make lock`"
    recorded = recorded_digest(lock_text)
    if recorded is None:
        return f"{LOCK.name} has no '{DIGEST_PREFIX.strip()}' first line: run `make lock`"
    if recorded != dependency_digest(pyproject_text):
        return (
            f"pyproject.toml's dependencies changed since {LOCK.name} was compiled: run "
            "`make lock` and commit the new lock"
        )
    return None


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "check"
    pyproject = PYPROJECT.read_text()
    lock = LOCK.read_text() if LOCK.is_file() else None
    if command == "stamp" and lock is not None:
        LOCK.write_text(stamped(lock, dependency_digest(pyproject)))
        return 0
    if command == "check":
        reason = problem(pyproject, lock)
        if reason:
            print(f"error: {reason}", file=sys.stderr)
            return 2
        return 0
    print("usage: python rlvr/lockfile.py check|stamp", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
