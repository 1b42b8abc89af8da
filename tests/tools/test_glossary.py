"""The glossary's words mean one thing each, and the code's names say the same: each word has
exactly one entry in docs/reference/glossary.md, an entry lists the values its config key takes,
and no module, class or metric key uses the word for anything else."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import get_args

import pytest

from rlvr.config import RENAMED_GROUPS, Backend, InferenceEngine, ItemDraw, RunConfig
from rlvr.metrics import RENAMED_PREFIXES, M, current_key

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "reference" / "glossary.md"
WORDS = (
    "backend",
    "engine",
    "verifier",
    "pool",
    "draw",
    "scenario",
    "task",
    "environment",
    "seed",
    "data seed",
)
CODE = ("rlvr", "scenarios", "judges")


def entries() -> dict[str, list[str]]:
    """Each bold term (`**word**` alone on its line) -> the texts of its entries."""
    found: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=\*\*)", GLOSSARY.read_text()):
        head = re.match(r"\*\*([^*]+)\*\*\n:", block)
        if head:
            found.setdefault(head.group(1).strip().lower(), []).append(" ".join(block.split()))
    return found


def entry(word: str) -> str:
    [text] = entries()[word]
    return text


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def class_names(*folders: str) -> dict[str, Path]:
    return {
        node.name: path
        for path in sources(*folders)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


@pytest.mark.parametrize("word", WORDS)
def test_each_word_has_exactly_one_entry(word: str) -> None:
    assert len(entries().get(word, [])) == 1, f"glossary: {word!r} needs exactly one entry"


@pytest.mark.parametrize(
    ("word", "field", "values", "written"),
    [
        ("backend", "backend", get_args(Backend), "`{}`"),
        ("engine", "inference.engine", get_args(InferenceEngine), "`{}`"),
        (
            "draw",
            "draw.strategy",
            get_args(ItemDraw.model_fields["strategy"].annotation),
            "`draw={}`",
        ),
    ],
)
def test_an_entry_lists_every_value_its_config_key_takes(
    word: str, field: str, values: tuple[str, ...], written: str
) -> None:
    model: type = RunConfig
    for part in field.split("."):
        assert part in model.model_fields, f"RunConfig has no {field}"
        model = model.model_fields[part].annotation
    text = entry(word)
    assert values and [v for v in values if written.format(v) not in text] == []


def test_the_backends_of_backend_local_are_named_for_it_and_in_the_entry() -> None:
    """rlvr's own ART Backends are the classes ending in Backend; each says it is backend=local."""
    ours = sorted(n for n in class_names("rlvr") if n.endswith("Backend"))
    assert ours == ["LocalTorchBackend", "LocalVllmBackend"]
    assert all(f"`{name}`" in entry("backend") for name in ours)


def test_engine_names_no_judge_and_no_server_launcher() -> None:
    """An Engine class is rlvr's torch engine (rlvr/engine/); the judge's launcher is LocalJudge."""
    misnamed = {
        n: str(p.relative_to(ROOT))
        for n, p in class_names(*CODE).items()
        if "Engine" in n and "rlvr/engine" not in p.as_posix()
    }
    assert misnamed == {}
    assert not (ROOT / "judges" / "engine.py").exists()


def test_pool_names_only_the_item_pool() -> None:
    modules = [p for p in sources(*CODE) if "pool" in p.stem.lower()]
    assert [str(p.relative_to(ROOT)) for p in modules] == ["rlvr/training/pool.py"]
    elsewhere = {
        n: str(p.relative_to(ROOT))
        for n, p in class_names(*CODE).items()
        if "pool" in n.lower() and p != ROOT / "rlvr" / "training" / "pool.py"
    }
    assert elsewhere == {}
    assert "`rlvr/training/pool.py`" in entry("pool")


def string_constants(path: Path) -> list[str]:
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_metric_key_starts_with_sampling() -> None:
    """The item draw's metrics are draw/*; sampling/* only in the map old rows are read through."""
    assert [k.value for k in M if k.value.startswith("sampling/")] == []
    written = {
        str(p.relative_to(ROOT))
        for p in sources(*CODE)
        if any(s.startswith("sampling/") for s in string_constants(p))
    }
    assert written == {"rlvr/metrics.py"}
    assert RENAMED_PREFIXES == {"sampling/": "draw/"}
    assert current_key("sampling/outcomes") == M.OUTCOMES == "draw/outcomes"
    assert RENAMED_GROUPS == {"sampling": "draw"} and "`draw/*`" in entry("draw")


def test_verifier_is_an_answer_check_and_vf_the_verifiers_package() -> None:
    from rlvr.task_api.imports import VF_PREFIX

    assert VF_PREFIX == "vf:"
    package = {p.stem for p in (ROOT / "rlvr" / "task_api").glob("*.py")}
    assert {"vf_env", "vf_rollout"} <= package and not any("verifier" in m for m in package)
    defined = [
        node.name
        for path in sources("rlvr/task_api")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and "verifier" in node.name.lower()
    ]
    assert defined == []
    text = entry("verifier")
    assert "`rlvr/scoring/verifiers.py`" in text and "`vf:`" in text


def test_each_scenario_is_a_task_and_the_entry_says_what_art_calls_one() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    installed = project["project"]["entry-points"]["rlvr.tasks"].values()
    packages = {p.parent.name for p in (ROOT / "scenarios").glob("*/__init__.py")}
    assert packages == {ref.split(":")[0].removeprefix("scenarios.") for ref in installed}
    text = entry("scenario")
    assert "`scenarios/`" in text and "ART calls one item a *scenario*" in text
    assert "`rlvr.Task`" in entry("task") and "items + rollout + check" in entry("environment")
