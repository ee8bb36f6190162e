"""Size guards: refuse, before allocating, work that would not fit the machine.

Every engine estimates the memory its inputs need (pods, flows, windows, seeds, cells) and
calls :func:`check_memory` before building anything large. The limit is the one set by the
command's ``--max-memory-gb`` (:func:`memory_limit`), else the ``TRAINFABRIC_MAX_MEMORY_GB``
environment variable (how a sweep hands each worker process its share, :func:`worker_share`),
else the machine's available memory (``MemAvailable`` of ``/proc/meminfo``, or physical
memory where that is not readable). A refusal is a :class:`~trainfabric.errors.ConfigError`
naming the input that drives the size, the estimate and the limit, so the CLI prints one
line and exits 2.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from trainfabric.errors import ConfigError

GB = 1e9
ENV = "TRAINFABRIC_MAX_MEMORY_GB"
_LIMIT_BYTES: ContextVar[float | None] = ContextVar("trainfabric_memory_limit", default=None)


def available_memory_bytes() -> float:
    """Memory the machine can still give (bytes): ``MemAvailable``, else physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def memory_limit_bytes() -> float:
    """The limit in force: ``--max-memory-gb`` when a command set it, else what is free."""
    limit = _LIMIT_BYTES.get()
    if limit is not None:
        return limit
    inherited = os.environ.get(ENV)
    return float(inherited) * GB if inherited else available_memory_bytes()


def set_memory_limit(max_memory_gb: float | None) -> None:
    """Set the limit for the rest of this context (the CLI runs each command in its own)."""
    _LIMIT_BYTES.set(None if max_memory_gb is None else max_memory_gb * GB)


@contextmanager
def memory_limit(max_memory_gb: float | None) -> Iterator[None]:
    """Within the block, :func:`check_memory` uses ``max_memory_gb`` (None: what is free)."""
    token = _LIMIT_BYTES.set(None if max_memory_gb is None else max_memory_gb * GB)
    try:
        yield
    finally:
        _LIMIT_BYTES.reset(token)


@contextmanager
def worker_share(workers: int) -> Iterator[None]:
    """Within the block, processes started by this one inherit 1/``workers`` of the limit in
    force (through :data:`ENV`), so ``workers`` of them together stay within it."""
    previous = os.environ.get(ENV)
    os.environ[ENV] = repr(memory_limit_bytes() / max(workers, 1) / GB)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous


def check_memory(field: str, estimate_bytes: float, what: str) -> None:
    """Raise a ConfigError naming ``field`` when ``estimate_bytes`` exceeds the limit.

    ``what`` says what the estimate counts (e.g. ``"a 1,000,000-pod pair matrix"``).
    """
    limit = memory_limit_bytes()
    if not estimate_bytes <= limit:
        raise ConfigError(
            field,
            f"too large: {what} needs about {_gb(estimate_bytes)} of memory, "
            f"over the limit of {_gb(limit)} (--max-memory-gb)",
        )


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / GB:,.3g} GB" if n_bytes < 1e18 else f"{n_bytes:.3g} bytes"
