"""Lazy package exports (PEP 562): a public name's submodule is imported on first use.

A package lists ``{name: submodule}`` and binds ``__getattr__, __dir__ = exports(__name__,
EXPORTS)``, so ``from trainfabric.runs import RunDir`` imports only the run store, and the
command line's start-up does not pay for pandas, numba or matplotlib it will not use.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def exports(
    package: str, names: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` exporting ``names`` (name -> submodule)."""
    namespace = vars(sys.modules[package])

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted([*namespace, *names])

    return getattr_, dir_
