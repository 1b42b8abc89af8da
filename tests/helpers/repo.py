"""The repository's own files as the tests read them, from any folder under tests/: its root, the
recorded runs in tests/data/, and the names a package's `__init__.py` declares for type checkers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def type_checking_imports(init: Path = ROOT / "rlvr" / "__init__.py") -> dict[str, str]:
    """name -> module of the imports under `if TYPE_CHECKING:` in a package's `__init__.py`
    (rlvr's own by default)."""
    tree = ast.parse(init.read_text())
    [block] = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.name: node.module or ""
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
