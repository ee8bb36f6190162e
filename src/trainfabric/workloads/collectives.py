"""GPU-level flow lists of collectives, as sequences of concurrent steps.

Each collective over a group of ``n`` ranks returns a list of :class:`Step`; a step is a set
of flows that run concurrently (arrays ``src``, ``dst``, ``bytes``), and step ``k+1`` starts
when step ``k`` has finished. ``size`` is the per-rank buffer in bytes: the data each rank
holds before an all-reduce or reduce-scatter, or receives in total from an all-gather.
Textbook byte counts (per rank, sent), for a buffer ``S``:

==========================  ==========================  =====================
collective                  steps                       bytes sent per rank
==========================  ==========================  =====================
ring all-reduce             ``2 (n-1)``, ``S/n`` each    ``2 (n-1)/n · S``
halving-doubling all-reduce ``2 log2 n``                 ``2 (n-1)/n · S``
ring reduce-scatter         ``n-1``, ``S/n`` each        ``(n-1)/n · S``
ring all-gather             ``n-1``, ``S/n`` each        ``(n-1)/n · S``
all-to-all (concurrent)     1 step, ``n (n-1)`` flows    ``(n-1)/n · S``
all-to-all (stepped)        ``n-1`` shifted permutations ``(n-1)/n · S``
==========================  ==========================  =====================

Halving-doubling: reduce-scatter by recursive halving (step ``j`` exchanges ``S/2^{j+1}`` with
the partner ``i XOR n/2^{j+1}``), then all-gather by recursive doubling in reverse order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError


@dataclass(frozen=True)
class Step:
    """Concurrent flows ``src[i] -> dst[i]`` of ``bytes[i]`` bytes (rank ids)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray

    @property
    def total_bytes(self) -> float:
        return float(self.bytes.sum())


def _ranks(ranks) -> np.ndarray:
    r = np.asarray(ranks, dtype=np.int64)
    if r.ndim != 1 or r.size < 1:
        raise ConfigError("ranks", "must be a non-empty 1-D list of rank ids")
    if (np.diff(np.sort(r)) == 0).any():  # a sort: np.unique's hash table costs ~1 ms
        raise ConfigError("ranks", "must not repeat a rank")
    return r


def _shift_step(r: np.ndarray, shift: int, nbytes: float) -> Step:
    return Step(r, np.roll(r, -shift), np.full(r.size, float(nbytes)))


def ring_reduce_scatter(ranks, size: float) -> list[Step]:
    """``n-1`` steps; in each, rank ``i`` sends ``size/n`` to its ring successor.

    The steps are one shared (immutable) :class:`Step`, so a ring over ``n`` ranks costs
    ``O(n)`` memory, not ``O(n^2)``.
    """
    r = _ranks(ranks)
    return [_shift_step(r, 1, size / r.size)] * (r.size - 1)


def ring_all_gather(ranks, size: float) -> list[Step]:
    """``n-1`` steps of ``size/n`` to the ring successor (``size`` = gathered output)."""
    return ring_reduce_scatter(ranks, size)


def ring_all_reduce(ranks, size: float) -> list[Step]:
    """Reduce-scatter then all-gather on a ring: ``2(n-1)`` steps of ``size/n``."""
    return ring_reduce_scatter(ranks, size) + ring_all_gather(ranks, size)


def _check_power_of_two(n: int) -> None:
    if n & (n - 1):
        raise ConfigError("ranks", f"halving-doubling needs a power-of-two group, got {n}")


def halving_doubling_reduce_scatter(ranks, size: float) -> list[Step]:
    """Recursive halving: step ``j`` sends ``size/2^{j+1}`` to partner ``i XOR n/2^{j+1}``."""
    r = _ranks(ranks)
    n = r.size
    _check_power_of_two(n)
    idx = np.arange(n)
    steps, dist, chunk = [], n // 2, size / 2
    while dist >= 1:
        steps.append(Step(r, r[idx ^ dist], np.full(n, chunk)))
        dist //= 2
        chunk /= 2
    return steps


def halving_doubling_all_gather(ranks, size: float) -> list[Step]:
    """Recursive doubling: the reduce-scatter's steps in reverse order."""
    return halving_doubling_reduce_scatter(ranks, size)[::-1]


def halving_doubling_all_reduce(ranks, size: float) -> list[Step]:
    """Rabenseifner's all-reduce: ``2 log2 n`` steps, ``2(n-1)/n · size`` sent per rank."""
    return halving_doubling_reduce_scatter(ranks, size) + halving_doubling_all_gather(ranks, size)


def all_to_all(ranks, size: float | None = None, matrix=None, stepped: bool = False) -> list[Step]:
    """All-to-all: uniform (``size/n`` per ordered pair) or from a ``[n, n]`` byte ``matrix``.

    The diagonal (data a rank keeps) is never sent. ``stepped`` gives ``n-1`` shifted
    permutations ``i -> i+k``; otherwise one step with all ``n(n-1)`` flows.
    """
    r = _ranks(ranks)
    n = r.size
    if (size is None) == (matrix is None):
        raise ConfigError("all_to_all", "give exactly one of size and matrix")
    m = np.full((n, n), size / n) if matrix is None else np.asarray(matrix, dtype=float)
    if m.shape != (n, n):
        raise ConfigError("matrix", f"must be {n}x{n}, got {m.shape}")
    if (m < 0).any():
        raise ConfigError("matrix", "bytes must be non-negative")
    i = np.arange(n)
    shifts = [(i, (i + k) % n) for k in range(1, n)]
    steps = [Step(r[a], r[b], m[a, b]) for a, b in shifts]
    if stepped:
        return steps
    if not steps:
        return [Step(r[:0], r[:0], np.zeros(0))]
    return [
        Step(*(np.concatenate([getattr(s, f) for s in steps]) for f in ("src", "dst", "bytes")))
    ]


def point_to_point(src: int, dst: int, size: float) -> list[Step]:
    """One flow of ``size`` bytes."""
    if src == dst:
        raise ConfigError("dst", "point-to-point needs src != dst")
    return [Step(np.array([src]), np.array([dst]), np.array([float(size)]))]


ALL_REDUCE = {"ring": ring_all_reduce, "halving_doubling": halving_doubling_all_reduce}
REDUCE_SCATTER = {"ring": ring_reduce_scatter, "halving_doubling": halving_doubling_reduce_scatter}
ALL_GATHER = {"ring": ring_all_gather, "halving_doubling": halving_doubling_all_gather}
