"""The lock file's tie to pyproject.toml. Standard library only: the Makefile runs this file with
the bare interpreter before any environment exists (`python tools/lockfile.py check|stamp`).

`requirements.lock` is compiled by `uv pip compile --generate-hashes` (`make lock`) and starts
with a line `# pyproject-digest: <sha256>` over the dependency tables of pyproject.toml
(`requires-python`, `dependencies`, `optional-dependencies`). `check` refuses an install when the
two disagree — a changed dependency without a re-lock — so every install is exactly the lock.

The lock pins torch's CPU build (`torch==2.13.0+cpu`), which PyPI does not serve. `links` names
where it comes from, as uv `--find-links` arguments: the local wheel folder (`WHEELS`) when it holds
the file, otherwise the torch page of the index `TORCH_INDEX` (PyTorch's own CPU index by default:
the same file, the same sha256 as the lock). With neither, it says so in one line.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urljoin, urlsplit

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


class Pin(NamedTuple):
    """A package the lock pins at one version, with the sha256 of every file it accepts."""

    name: str
    version: str
    hashes: frozenset[str]


class SourceMissing(Exception):
    """No source serves a pinned file PyPI lacks; the message is the one line to print."""


PIN = re.compile(r"^torch==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)", re.MULTILINE)
INDEX_TIMEOUT_S = 30.0


def torch_pin(lock_text: str) -> Pin:
    """The lock's torch pin and its hashes (torch is the one package whose build PyPI lacks)."""
    found = PIN.search(lock_text)
    if found is None:
        raise SourceMissing(f"{LOCK.name} pins no torch==VERSION with hashes: run `make lock`")
    hashes = frozenset(re.findall(r"sha256:([0-9a-f]{64})", found.group(2)))
    return Pin(name="torch", version=found.group(1), hashes=hashes)


class _Links(HTMLParser):
    """The href of every anchor on a PEP 503 project page (or a plain directory listing)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def serves(page_html: str, pin: Pin) -> bool:
    """Whether an index page links a wheel of the pinned version whose sha256 (when the link
    carries one, as PEP 503 pages do) is one the lock accepts."""
    parser = _Links()
    parser.feed(page_html)
    for href in parser.hrefs:
        path, _, fragment = href.partition("#")
        filename = unquote(urlsplit(path).path.rsplit("/", 1)[-1])
        if not (filename.startswith(f"{pin.name}-{pin.version}-") and filename.endswith(".whl")):
            continue
        digest = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        if digest is None or digest in pin.hashes:
            return True
    return False


def fetch_page(url: str) -> str:
    """The text of an index page; urllib's errors propagate (the caller names them)."""
    with urllib.request.urlopen(url, timeout=INDEX_TIMEOUT_S) as response:
        body: bytes = response.read()
        return body.decode("utf-8", errors="replace")


def find_links(
    pin: Pin, wheels: Path, index: str, fetch: Callable[[str], str] = fetch_page
) -> list[str]:
    """uv's --find-links arguments that serve the pinned torch build: the wheel folder (always,
    when it exists: it may hold other wheels too) and, when it lacks the file, the index's torch
    page. Raises SourceMissing naming WHEELS and TORCH_INDEX when neither serves it."""
    links = [str(wheels)] if wheels.is_dir() else []
    if wheels.is_dir() and any(wheels.glob(f"{pin.name}-{pin.version}-*.whl")):
        return links
    page = urljoin(index.rstrip("/") + "/", f"{pin.name}/")
    try:
        if serves(fetch(page), pin):
            return [*links, page]
        why = f"{page} lists no {pin.name}-{pin.version} wheel with the lock's sha256"
    except (OSError, ValueError) as error:  # URLError and HTTPError are OSErrors
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        why = f"{page} could not be read ({reason})"
    raise SourceMissing(
        f"{pin.name}=={pin.version} (the lock's CPU build; PyPI does not serve it) is in neither "
        f"WHEELS={wheels} nor TORCH_INDEX={index} ({why}): set TORCH_INDEX=URL to an index that "
        f"serves it (PyTorch's: https://download.pytorch.org/whl/cpu) or WHEELS=DIR to a folder "
        f"holding its wheel"
    )


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
    if command == "links" and len(argv) == 4 and lock is not None:
        try:
            print(
                " ".join(
                    f"--find-links {link}"
                    for link in find_links(torch_pin(lock), Path(argv[2]), argv[3])
                )
            )
        except SourceMissing as missing:
            print(f"error: {missing}", file=sys.stderr)
            return 2
        return 0
    print("usage: python tools/lockfile.py check|stamp|links WHEELS TORCH_INDEX", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
