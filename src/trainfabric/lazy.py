"""Lazy package exports (PEP 562), and old module paths that now live elsewhere (PEP 451).

A package lists ``{name: submodule}`` (relative to the package, or a whole dotted path for a
name defined outside it) and binds ``__getattr__, __dir__ = exports(__name__,
EXPORTS)``, so ``from trainfabric.runs import RunDir`` imports only the run store, and the
command line's start-up does not pay for pandas, numba or matplotlib it will not use.

A pillar whose modules moved lists ``{old submodule: new module}`` and calls
``moved(__name__, MOVED)``: importing ``trainfabric.ocs.planner`` then raises a
:class:`DeprecationWarning` naming the new path and gives the new module itself (the same
object, so attributes, ``isinstance`` and monkeypatching behave as before). The table is the one
place an old path is kept; a test imports every entry.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
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
        path = module if module.startswith("trainfabric.") else f"{package}.{module}"
        value = getattr(importlib.import_module(path), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted([*namespace, *names])

    return getattr_, dir_


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of one package and loads each as its new module."""

    def __init__(self, package: str, table: dict[str, str]) -> None:
        self.paths = {f"{package}.{old}": new for old, new in table.items()}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.paths:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # the default module object, replaced in exec_module

    def exec_module(self, module) -> None:
        new = self.paths[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        # The import system returns sys.modules[name] after exec: the new module itself.
        sys.modules[module.__name__] = importlib.import_module(new)


def moved(package: str, table: dict[str, str]) -> None:
    """Keep ``package.OLD`` importable as ``table[OLD]`` (a dotted module path), with a warning."""
    sys.meta_path.append(_Moved(package, table))
