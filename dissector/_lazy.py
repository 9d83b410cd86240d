"""Public names imported on first use (PEP 562), for the package's `__init__` modules.

Input: a package's name, its namespace, and which public name comes from which module.
Output: the package's `__getattr__` and `__dir__`.
Rule: a package re-exports names whose modules are costly to import (pyarrow, pandas, the
protobuf runtime) without importing them until one is used; `from dissector import X`,
`dissector.X` and `dir(dissector)` work as with eager imports. Type checkers see the eager
imports (under TYPE_CHECKING) instead, so a misspelt name stays an error for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, namespace: dict[str, Any], origins: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: a name of `origins` is imported from its
    module on first access and kept in `namespace` (later accesses are plain lookups)."""

    def __getattr__(name: str) -> Any:
        where = origins.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *origins})

    return __getattr__, __dir__
