"""Code comments and docstrings say why, and point only at what exists: every `docs/...md` page,
`results/records/...json` record and `tests/...` file a comment in rlvr/, scenarios/, judges/,
tools/, the Makefile or pyproject.toml names is there (or is a page the docs hook generates),
and no comment tells the story of a particular run (a commit hash, a numbered seed, a date, a
measured gain with its interval). A run's figures live in its record under results/records/ and
on the docs pages."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.docsite import GENERATED_PAGES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rlvr", "scenarios", "judges", "tools")
HASH_COMMENTED = ("Makefile", "pyproject.toml")  # files whose comments are `#` lines

# What a comment may point at, and the pattern that finds the pointer.
POINTER = re.compile(
    r"\b(?P<path>(?:docs/[\w./-]+\.md|results/records/[\w.*-]+\.json|tests/[\w/-]+\.(?:py|json)))"
)
# A run story: the patterns apply outside `code spans` and pointers (a record's file name carries
# its date). Each names what it catches; conservative, so that a why in words never matches.
STORIES = {
    "commit hash": r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
    "numbered seed": r"\bseeds? ?-?\d+\b",
    # a run's day; not a date as data (`after:2024-03-01`, `'2024-03-01'`)
    "date": r"(?<![\w:'\"/-])20\d\d-[01]\d-[0-3]\d\b",
    "gain with its interval": r"[+\-−]\d?\.\d+ \[[+\-−]?\d?\.\d+,",
}
STORY = {name: re.compile(pattern) for name, pattern in STORIES.items()}


class Text:
    """One comment or docstring line: where it is and what it says."""

    def __init__(self, path: Path, line: int, text: str) -> None:
        self.where = f"{path.relative_to(ROOT)}:{line}"
        self.text = text


def python_texts(path: Path) -> Iterator[Text]:
    """Every `#` comment and every module, class and function docstring line of `path`."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield Text(path, token.start[0], token.string)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            for offset, line in enumerate(first.value.value.splitlines()):
                yield Text(path, first.lineno + offset, line)


def hash_texts(path: Path) -> Iterator[Text]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("#"):
            yield Text(path, number, line)


def code_texts() -> list[Text]:
    texts = [t for p in PACKAGES for f in sorted((ROOT / p).rglob("*.py")) for t in python_texts(f)]
    return texts + [t for name in HASH_COMMENTED for t in hash_texts(ROOT / name)]


TEXTS = code_texts()
GENERATED = {f"docs/{page}" for page in GENERATED_PAGES}


def exists(pointer: str) -> bool:
    """Whether the file a comment points at is there: a glob must match one at least, and a docs
    page may be one the docs hook generates."""
    return pointer in GENERATED or any(ROOT.glob(pointer)) or (ROOT / pointer).is_file()


def stories(text: str) -> list[str]:
    """The kinds of run story `text` tells, outside its `code spans` and pointers."""
    prose = POINTER.sub(" ", re.sub(r"`[^`]*`", " ", text))
    return [name for name, pattern in STORY.items() if pattern.search(prose)]


def test_the_scan_reads_comments_and_docstrings() -> None:
    where = {t.where.split(":")[0] for t in TEXTS}
    assert {"rlvr/engine/device.py", "scenarios/email/__init__.py", "Makefile"} <= where
    assert len(TEXTS) > 1000


def test_every_pointer_in_a_comment_exists() -> None:
    stale = [
        f"{t.where}: {m['path']}"
        for t in TEXTS
        for m in POINTER.finditer(t.text)
        if not exists(m["path"].rstrip("."))
    ]
    assert not stale, "comments point at files that are not there:\n" + "\n".join(stale)


def test_no_comment_tells_a_run_story() -> None:
    told = [f"{t.where}: {', '.join(stories(t.text))}: {t.text.strip()}" for t in TEXTS]
    told = [line for line, t in zip(told, TEXTS, strict=True) if stories(t.text)]
    assert not told, (
        "comments say why, not what a run measured (its record holds that):\n" + "\n".join(told)
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("at 7e8cde5's behaviour", "commit hash"),
        ("(records at 3a61ee7)", "commit hash"),
        ("a default seed-1 email run stopped at its highest validation", "numbered seed"),
        ("on seed 1, once a lucky batch had rewarded repeats", "numbered seed"),
        ("seeds 0, 1 and 2 resolved it", "numbered seed"),
        ("the records of 2026-11-29", "date"),
        ("RL's gain +0.041 [-0.033, +0.121] on 74 items", "gain with its interval"),
        ("seed 0 +0.067 [+0.015, +0.123]", "gain with its interval"),
    ],
)
def test_a_run_story_is_caught(text: str, kind: str) -> None:
    assert kind in stories(text)


@pytest.mark.parametrize(
    "text",
    [
        "# Less than the source credit (0.2): a correct answer with a repeat still beats a wrong one",
        "Items are seeded starting boards (item id = seed).",
        "run = ri.load_run('runs/math-20261122-101500')",
        "`rlvr train email seed=1` trains on other inboxes",
        "cfg.seed: 0 by default",
        "the 95% interval, printed as `+0.142 [+0.042, +0.242]`",
        "Figures: results/records/email-2026-11-30-email-20261130-013443.json",
        "--hash=sha256 pins the wheel; decade-old caches",
        "Never admit a compromised release (OSV MAL-2026-2144)",
        "0.05 score grid; 1e-3 learning rate; a 4096-token context",
        "SEARCH: dinner reservation after:2024-03-01",
        "'March 2024' -> ('2024-03-01', '2024-04-01'), the filters of that month",
    ],
)
def test_a_why_is_not_a_run_story(text: str) -> None:
    assert stories(text) == []


@pytest.mark.parametrize(
    ("pointer", "there"),
    [
        ("docs/concepts/cpu-engine.md", True),
        ("docs/reference/tasks.md", True),  # generated by the docs hook
        ("results/records/email-*.json", True),
        ("docs/performance.md", False),
        ("results/records/email-1999-01-01-none.json", False),
        ("tests/test_precision.py", False),
    ],
)
def test_a_pointer_exists_where_its_file_does(pointer: str, there: bool) -> None:
    assert exists(pointer) is there
