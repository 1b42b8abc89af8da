"""The front door and the documentation: README.md stays a front door (at most 250 lines), the
site's pages exist where the navigation points, and no page narrates how the project was made
(dated work logs, "this round", "before → now") — a page says what the product is and does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.helpers.repo import ROOT
from tools.docsite import GENERATED_PAGES

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
GENERATED = set(GENERATED_PAGES)
# Narration of how the project was made. `session` in backticks is rlvr/training/session.py.
DIARY = [
    r"(?<!`)\bsessions?\b(?!`)",
    r"\bsittings?\b",
    r"\b(this|that|the previous|the last|the next|an earlier|earlier|later|first|second|third|"
    r"\w+th) (round|session|sitting)\b",
    r"\bround \d",
    r"\bbefore\s*(→|->|/)\s*now\b",
    r"\bload (at|when) (the )?start",
    r"\b(yesterday|today|this morning|tonight)\b",
    r"\bwe (measured|tried|found|ran|saw|changed)\b",
    r"\bmeasurement log\b",
]


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the front door holds 250"


@pytest.mark.parametrize(
    "page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)) if isinstance(p, Path) else p
)
@pytest.mark.parametrize("pattern", DIARY)
def test_no_page_narrates_how_it_was_made(page: Path, pattern: str) -> None:
    text = " ".join(page.read_text().split())
    found = re.search(pattern, text, flags=re.IGNORECASE)
    assert found is None, (
        f"{page.relative_to(ROOT)}: {found and text[found.start() - 60 : found.end() + 60]!r}"
    )


def nav_pages(entries: list[object]) -> list[str]:
    found: list[str] = []
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            found += nav_pages(value) if isinstance(value, list) else [str(value)]
    return found


def test_every_page_the_navigation_names_exists_or_is_generated() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    named = nav_pages(config["nav"])
    written = {str(p.relative_to(ROOT / "docs")) for p in PAGES}
    assert [p for p in named if p not in written | GENERATED] == []
    assert [p for p in written if p not in named] == []  # no page left out of the navigation
    assert not GENERATED & written  # a generated page is never also a file
