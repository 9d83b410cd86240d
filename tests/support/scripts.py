"""The project's scripts (scripts/*.py), loaded as modules for the tests that check them.

Input: a script's name. Output: the module, freshly executed (scripts/ is not a package).
Rule: nothing here runs a script's main; a test calls the functions it checks. The module
is in sys.modules while it runs (dataclasses look their module up there).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as a module named NAME."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
