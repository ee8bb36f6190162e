"""Executors: run cells and hand each finished table to ``on_done(cell, table)`` in the parent.

- ``serial``: in this process, one cell after the other (debugging, tests).
- ``local``: a :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start
  method (no forked state; workers import the registry afresh).
- ``ray``: Ray remote tasks, consumed with ``ray.wait`` as they finish. Ray is an optional
  extra and imported only here. Against a cluster (``address``), every node needs the same
  trainfabric version installed.

``on_done`` runs in the parent as each cell finishes, so the caller stores every finished
cell at once; when a cell (or ``on_done``) fails, the cells not yet started are cancelled and
the error is raised. A ConfigError raised by an experiment in a worker reaches the parent as a
ConfigError naming the cell.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import pandas as pd

from trainfabric.errors import ConfigError

if TYPE_CHECKING:
    from trainfabric.runs.sweep import Cell

EXECUTORS = ("local", "ray", "serial")

OnDone = Callable[["Cell", pd.DataFrame], None]


@dataclass(frozen=True)
class _Failure:
    """A ConfigError raised in a worker, carried back as a value (ConfigError's two-argument
    constructor does not survive pickling)."""

    field: str
    message: str


def check_options(executor: str, workers: int | None, address: str | None) -> None:
    """Reject an unknown executor, ``workers < 1``, ``workers`` without ``local`` and
    ``address`` without ``ray`` (ConfigErrors), and a missing Ray for ``ray``."""
    if executor not in EXECUTORS:
        raise ConfigError(
            "executor", f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )
    if workers is not None and executor != "local":
        raise ConfigError("workers", "only applies to the local executor")
    if workers is not None and workers < 1:
        raise ConfigError("workers", "must be >= 1")
    if address is not None and executor != "ray":
        raise ConfigError("address", "only applies to the ray executor")
    if executor == "ray":
        _import_ray()


def execute(
    executor: str,
    cells: Sequence[Cell],
    on_done: OnDone,
    workers: int | None = None,
    address: str | None = None,
) -> None:
    """Run ``cells`` on ``executor`` (see the module docs), calling ``on_done`` per cell."""
    check_options(executor, workers, address)
    if not cells:
        return
    if executor == "serial":
        run_serial(cells, on_done)
    elif executor == "local":
        run_local(cells, workers, on_done)
    else:
        run_ray(cells, address, on_done)


def run_serial(cells: Sequence[Cell], on_done: OnDone) -> None:
    """Run the cells one by one in this process."""
    for cell in cells:
        on_done(cell, _unwrap(cell, _task(cell)))


def run_local(cells: Sequence[Cell], workers: int | None, on_done: OnDone) -> None:
    """Run the cells on a spawn-context process pool of ``workers`` processes (default: one
    per CPU, never more than there are cells)."""
    size = min(workers or os.cpu_count() or 1, len(cells))
    pool = ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context("spawn"))
    try:
        pending = {pool.submit(_task, cell): cell for cell in cells}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                cell = pending.pop(future)
                on_done(cell, _unwrap(cell, future.result()))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_ray(
    cells: Sequence[Cell], address: str | None, on_done: OnDone, num_cpus: int | None = None
) -> None:
    """Run the cells as Ray tasks, one CPU each.

    Uses the Ray session already initialised in this process if there is one; otherwise
    connects to ``address``, or starts a local instance (``num_cpus`` CPUs, default one per
    CPU, no dashboard) when ``address`` is None, and shuts down only what it started.
    """
    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        _init_ray(ray, address, num_cpus)
    try:
        task = ray.remote(num_cpus=1)(_task)
        pending = {task.remote(cell): cell for cell in cells}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    cell = pending.pop(ref)
                    on_done(cell, _unwrap(cell, ray.get(ref)))
        finally:
            for ref in pending:
                ray.cancel(ref)
    finally:
        if started:
            ray.shutdown()


def _task(cell: Cell) -> pd.DataFrame | _Failure:
    """Worker entry point (top level, spawn-safe): the cell's table, or its ConfigError."""
    try:
        return cell.run()
    except ConfigError as exc:
        return _Failure(exc.field, exc.message)


def _unwrap(cell: Cell, outcome: pd.DataFrame | _Failure) -> pd.DataFrame:
    if isinstance(outcome, _Failure):
        raise ConfigError(
            outcome.field,
            f"{outcome.message} (cell {cell.cell_id}: {cell.params}, seed {cell.seed})",
        )
    return outcome


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "executor", "ray is not installed: pip install 'trainfabric[distributed]'"
        ) from None
    return ray


def _init_ray(ray: ModuleType, address: str | None, num_cpus: int | None) -> None:
    if address is None:
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
        return
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError) as exc:
        raise ConfigError("address", f"cannot connect to Ray at {address!r}: {exc}") from None
