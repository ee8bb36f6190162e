"""The experiment registry: a named function of a typed config and a seed returning a table.

An experiment is registered with :func:`register`::

    @register("moe_skew", MoeSkewConfig)
    def moe_skew(config: MoeSkewConfig, seed: int) -> pandas.DataFrame: ...

Experiments are registered by modules named in the ``trainfabric.experiments`` entry-point
group (the built-in ones: :mod:`trainfabric.experiments.library`; a user's package may add its
own). :func:`get` and :func:`names` import those modules on first use, so a freshly spawned
worker process (process pool, Ray) that only knows an experiment's *name* finds it too, and
this layer never imports the layer above it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from trainfabric.config import Config
from trainfabric.errors import ConfigError

ENTRY_POINTS = "trainfabric.experiments"

ExperimentFn = Callable[[Config, int], pd.DataFrame]


@dataclass(frozen=True)
class Experiment:
    """A registered experiment.

    ``function(config, seed)`` must be deterministic in ``(config, seed)``: it draws every
    random number from ``numpy.random.default_rng(seed)`` (or generators derived from it) and
    returns a tidy :class:`pandas.DataFrame`, one row per observation. ``keys`` names the
    table's identifier columns (e.g. a shard index): reports do not treat them as results.
    ``quick`` holds config overrides for a small, fast setting (``experiments run --quick``).
    """

    name: str
    config_model: type[Config]
    function: ExperimentFn
    description: str
    keys: tuple[str, ...] = ()
    quick: Mapping[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, Experiment] = {}
_LOADED = False


def register(
    name: str,
    config_model: type[Config],
    description: str | None = None,
    keys: tuple[str, ...] = (),
    quick: Mapping[str, Any] | None = None,
) -> Callable[[ExperimentFn], ExperimentFn]:
    """Decorator registering ``function(config, seed) -> DataFrame`` as experiment ``name``.

    ``keys`` names identifier columns of the table and ``quick`` the config overrides of its
    small setting (see :class:`Experiment`). ``description``
    defaults to the first paragraph of the function's docstring. Registering a
    different function under a name already taken is a programming error (``ValueError``).
    """
    if not (isinstance(config_model, type) and issubclass(config_model, Config)):
        raise TypeError(f"config model of {name!r} must subclass trainfabric.config.Config")

    def decorator(function: ExperimentFn) -> ExperimentFn:
        previous = _REGISTRY.get(name)
        if previous is not None and _qualname(previous.function) != _qualname(function):
            raise ValueError(
                f"experiment {name!r} is already registered by {_qualname(previous.function)}"
            )
        paragraph = (function.__doc__ or "").strip().split("\n\n")[0]
        _REGISTRY[name] = Experiment(
            name=name,
            config_model=config_model,
            function=function,
            description=description if description is not None else " ".join(paragraph.split()),
            keys=tuple(keys),
            quick=dict(quick or {}),
        )
        return function

    return decorator


def get(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name is a ConfigError listing the known ones."""
    load_library()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(names()) or "none"
        raise ConfigError("experiment", f"unknown experiment {name!r}; known: {known}") from None


def names() -> list[str]:
    """Sorted names of all registered experiments."""
    load_library()
    return sorted(_REGISTRY)


def load_library() -> None:
    """Import every module of the ``trainfabric.experiments`` entry-point group, once per
    process; a module that fails to import is a ConfigError naming its entry point."""
    global _LOADED
    if _LOADED:
        return
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            importlib.import_module(entry.value)
        except ImportError as exc:
            raise ConfigError(
                "experiment", f"entry point {entry.name} = {entry.value!r} fails to import: {exc}"
            ) from None
    _LOADED = True


def _qualname(function: Callable[..., object]) -> str:
    return f"{function.__module__}.{function.__qualname__}"
