"""The `rlvr` package's public names resolve on first use: `import rlvr`, its config and the
command's --help stay light (no ART, torch or transformers), and every public name is the
object its module defines."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
from tests.helpers.repo import type_checking_imports

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("art", "torch", "transformers", "litellm")


def test_every_public_name_is_exported_and_resolves() -> None:
    assert type_checking_imports() == rlvr._EXPORTS  # what editors see is what resolves
    for name, module in rlvr._EXPORTS.items():
        assert getattr(rlvr, name) is getattr(importlib.import_module(module), name), name
    assert set(rlvr.__all__) <= set(dir(rlvr))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'run_trainig'"):
        _ = rlvr.run_trainig  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "code",
    [
        "import rlvr",
        "import rlvr.config; rlvr.config.RunConfig()",
        "import sys; sys.argv = ['rlvr', '--help']; import rlvr.cli.main as c; c.app()",
    ],
    ids=["package", "config", "help"],
)
def test_light_entry_points_import_no_heavy_library(code: str) -> None:
    probe = f"""
import sys
try:
    exec({code!r})
except SystemExit:
    pass
print(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r})))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("outside", ["judges", "scenarios"])
def test_rlvr_never_imports_judges_or_tasks(outside: str) -> None:
    """Judges, tasks and their commands plug in through entry points, as anyone's do."""
    importers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "rlvr").rglob("*.py")
        if any(m == outside or m.startswith(f"{outside}.") for m in imported_modules(path))
    ]
    assert importers == []


def test_no_module_shares_a_name_with_a_standard_module_rlvr_uses() -> None:
    """A reader of `import inspect` beside an `rlvr/inspect.py` cannot tell which one is meant."""
    ours = {p.stem for p in (ROOT / "rlvr").rglob("*.py")}
    used = {
        m.partition(".")[0]
        for path in (ROOT / "rlvr").rglob("*.py")
        for m in imported_modules(path)
        if m.partition(".")[0] in sys.stdlib_module_names
    }
    assert ours & used == set()


def test_a_judged_run_without_a_judge_provider_is_one_line(monkeypatch) -> None:
    from rlvr.config import build_config
    from rlvr.task_api import plugins

    monkeypatch.setattr(plugins, "_entry_points", lambda group: {})
    with pytest.raises(plugins.PluginError, match=r"judge=local: no judge provider is installed"):
        plugins.open_judge(build_config({"task": "math", "judge": "local"}))
