"""rlvr.engine is its own package: it imports nothing of the RL side (the loop, tasks, scoring,
scenarios, judges), its face names exactly what resolves, and importing its light part (what a
judge process serves) does not import ART or PEFT."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr.engine
from tests.helpers.repo import ROOT, type_checking_imports

ENGINE = ROOT / "rlvr" / "engine"
FORBIDDEN = ["rlvr.training", "rlvr.tasks", "rlvr.scoring", "scenarios", "judges"]


def imported_modules(path: Path) -> list[str]:
    """Every module `path` imports, at any depth of its code (functions, TYPE_CHECKING blocks)."""
    modules: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.append(node.module)
            # `from rlvr import training` names the package in the alias, not the module
            modules.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def engine_files() -> list[Path]:
    return sorted(ENGINE.rglob("*.py"))


def test_the_engine_has_its_modules() -> None:
    names = {path.name for path in engine_files()}
    assert {"backend.py", "server.py", "decoding.py", "trainer.py", "process.py"} <= names


@pytest.mark.parametrize("forbidden", FORBIDDEN)
def test_the_engine_imports_nothing_of_the_rl_side(forbidden: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in engine_files()
        for module in imported_modules(path)
        if module == forbidden or module.startswith(forbidden + ".")
    ]
    assert offenders == []


def test_the_boundary_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from rlvr import training\n    import judges.client\n")
    assert {"rlvr.training", "judges.client"} <= set(imported_modules(probe))


def test_every_name_of_the_face_is_exported_and_resolves() -> None:
    assert type_checking_imports(ENGINE / "__init__.py") == rlvr.engine._EXPORTS
    for name, module in rlvr.engine._EXPORTS.items():
        assert getattr(rlvr.engine, name) is getattr(importlib.import_module(module), name), name


def test_no_name_of_the_face_is_also_a_submodule() -> None:
    """Importing a submodule sets the package's attribute of its name: an export of the same name
    would then be the module, not what the face promises, depending on what was imported first."""
    submodules = {m.name for m in pkgutil.iter_modules(rlvr.engine.__path__)}
    assert set(rlvr.engine._EXPORTS) & submodules == set()


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Decodr'"):
        _ = rlvr.engine.Decodr  # type: ignore[attr-defined]


def test_the_frozen_decoder_imports_neither_art_nor_peft() -> None:
    probe = (
        "import sys; import rlvr.engine.frozen; "
        "print(sorted(m for m in ('art', 'peft') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
