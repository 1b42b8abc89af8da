"""How a reference's code is imported: a file (`path/to/file.py`, its folder on sys.path so it
may import its neighbours; one module per path) or an importable module, every failure one
PluginError line naming the reference; and which files a run's specs name (the code a resumed or
re-evaluated run will execute)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from rlvr.task_api.api import PluginError

_FILE_REFERENCE = re.compile(r"([^\s+*>:]+\.py):")
VF_PREFIX = "vf:"  # a verifiers environment: vf:MODULE or vf:path/to/env.py


def referenced_files(*specs: str) -> list[Path]:
    """The Python files that task and scorer specs (`a.py:task`, `verifier*0.5+b.py:s*0.5`,
    `vf:env.py`) name: the code a resumed or re-evaluated run will execute."""
    named = [m for spec in specs for m in _FILE_REFERENCE.findall(spec)]
    environments = [
        spec.removeprefix(VF_PREFIX)
        for spec in specs
        if spec.startswith(VF_PREFIX) and spec.endswith(".py")
    ]
    return [Path(m).expanduser().resolve() for m in [*named, *environments]]


def _import_file(path: Path, ref: str) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"{ref}: no such file {path}")
    # One module per file path, so a file named twice is loaded once.
    module_name = f"rlvr_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{ref}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise PluginError(
            f"{ref}: importing {path} failed: {type(error).__name__}: {error}"
        ) from error
    return module


def import_target(target: str, ref: str) -> Any:
    """The module a reference names: a file (`path/to/file.py`) or an importable module."""
    if target.endswith(".py") or "/" in target or "\\" in target:
        return _import_file(Path(target), ref)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        raise PluginError(f"{ref}: no module named '{error.name}'") from error
    except Exception as error:
        raise PluginError(
            f"{ref}: importing {target} failed: {type(error).__name__}: {error}"
        ) from error
