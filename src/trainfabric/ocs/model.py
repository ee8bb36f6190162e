"""Physical model of s parallel optical circuit switches between pods (spec §1.1-1.2).

* Pods ``v = 0..n-1`` with ``d_v`` uplink ports; ``s`` OCSes with uniform striping (pod ``v``
  has ``p_v = d_v / s`` ports on every OCS, [A1]).
* Duplex circuits [A2]: a wiring is a symmetric non-negative integer matrix ``X`` with zero
  diagonal, stored as the vector ``x`` over unordered pairs ``e = (u < v)`` in
  ``numpy.triu_indices(n, 1)`` order. Every port is used [A4]: ``Σ_u X_uv = d_v``.
* Pair rate, each direction: ``B · X_e + B0`` bits/s (``B`` circuit rate, ``B0 > 0`` fallback
  through the electrical network, [A3]).
* Normalised wiring ``w = x / M`` with ``M = Σ_v d_v / 2`` circuits: a point of the simplex over
  pairs inside the degree slice ``W = {w ≥ 0 : Σ_u w_uv = r_v}``, ``r_v = d_v / M``.

Input checks (each a ConfigError naming the field): an even port total (a loopless multigraph
needs it), no pod with more than half of all ports (else ``W`` is empty), ``s`` divides every
``d_v``; and a size guard naming ``pods``: the planner's memory for the pairs
(:meth:`OcsModel.memory_bytes`) must fit the limit of :func:`trainfabric.limits.check_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.limits import check_memory

# Planner memory per unordered pod pair (pair indices, wiring, prior, gradient and solver
# vectors, rounding state), fitted with tracemalloc on 64-256 pods (tests/ocs/test_size_guards).
PAIR_BYTES = 300


@dataclass(frozen=True, eq=False)
class OcsModel:
    """Pods, ports and OCSes; rates in bits/s."""

    degrees: np.ndarray
    ocs: int = 4
    rate_bps: float = 100e9
    fallback_bps: float = 5e9

    def __post_init__(self) -> None:
        d = np.asarray(self.degrees)
        if d.ndim != 1 or d.size < 2:
            raise ConfigError("pods", "need at least 2 pods")
        if not np.issubdtype(d.dtype, np.integer) or (d < 1).any():
            raise ConfigError("ports", "every pod needs a positive integer number of ports")
        object.__setattr__(self, "degrees", d.astype(np.int64))
        if self.ocs < 1:
            raise ConfigError("ocs", "must be >= 1")
        if (d % self.ocs).any():
            bad = int(np.flatnonzero(d % self.ocs)[0])
            raise ConfigError("ocs", f"must divide every pod's ports (pod {bad} has {d[bad]})")
        if d.sum() % 2:
            raise ConfigError("ports", "the port total must be even")
        if (2 * d > d.sum()).any():
            raise ConfigError("ports", "no pod may own more than half of all ports")
        if not self.rate_bps > 0:
            raise ConfigError("rate_bps", "must be > 0")
        if not self.fallback_bps > 0:
            raise ConfigError("fallback_bps", "must be > 0 (it keeps the cost finite and smooth)")
        check_memory(
            "pods",
            self.memory_bytes(),
            f"an OCS model of {self.n:,} pods ({self.n_pairs:,} pod pairs, "
            f"{self.ocs + 2} dense {self.n:,} x {self.n:,} matrices)",
        )

    def memory_bytes(self) -> float:
        """Bytes the planner needs for the pairs: ``PAIR_BYTES`` per pair plus ``s + 2`` dense
        ``n x n`` float64/int64 matrices (one cross-connect matrix per OCS in the
        decomposition, the projection's Hessian, the full wiring matrix)."""
        n = float(self.n)
        return PAIR_BYTES * self.n_pairs + 8.0 * (self.ocs + 2) * n * n

    @classmethod
    def uniform(cls, pods: int, ports: int, ocs: int, **kw) -> OcsModel:
        """``pods`` pods with ``ports`` ports each."""
        if pods < 2:
            raise ConfigError("pods", "need at least 2 pods")
        return cls(np.full(pods, ports, dtype=np.int64), ocs, **kw)

    @property
    def n(self) -> int:
        return int(self.degrees.size)

    @property
    def n_pairs(self) -> int:
        return self.n * (self.n - 1) // 2

    @property
    def total_circuits(self) -> int:
        """``M = Σ d_v / 2``."""
        return int(self.degrees.sum() // 2)

    @property
    def r(self) -> np.ndarray:
        """Degree row sums of ``W``: ``r_v = d_v / M`` (sums to 2)."""
        return self.degrees / self.total_circuits

    @property
    def ports_per_ocs(self) -> np.ndarray:
        """``p_v = d_v / s``."""
        return self.degrees // self.ocs

    @cached_property
    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(iu, iv)``: the pods of every pair, ``iu < iv``, in ``triu_indices`` order."""
        return np.triu_indices(self.n, 1)

    def pair_index(self, u, v) -> np.ndarray:
        """Pair index of unordered pods ``(u, v)``, ``u != v`` (vectorised)."""
        u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
        a, b = np.minimum(u, v), np.maximum(u, v)
        n = self.n
        return a * n - a * (a + 1) // 2 + (b - a - 1)

    def to_matrix(self, x: np.ndarray) -> np.ndarray:
        """Symmetric ``[n, n]`` matrix of a pair vector (zero diagonal)."""
        x = np.asarray(x)
        m = np.zeros((self.n, self.n), dtype=x.dtype)
        iu, iv = self.pairs
        m[iu, iv] = x
        m[iv, iu] = x
        return m

    def from_matrix(self, m: np.ndarray) -> np.ndarray:
        """Pair vector of a symmetric matrix (upper triangle)."""
        iu, iv = self.pairs
        return np.asarray(m)[iu, iv]

    def pod_degrees(self, x: np.ndarray) -> np.ndarray:
        """``Σ_u x_uv`` per pod."""
        iu, iv = self.pairs
        return np.bincount(iu, x, self.n) + np.bincount(iv, x, self.n)

    def pair_rate_bps(self, x: np.ndarray) -> np.ndarray:
        """Rate of every pair, each direction: ``B · x_e + B0``."""
        return self.rate_bps * np.asarray(x, dtype=float) + self.fallback_bps

    def check_wiring(self, x: np.ndarray) -> None:
        """Raise InfeasibleError unless ``x`` is a non-negative integer wiring, exact degrees."""
        x = np.asarray(x)
        if x.shape != (self.n_pairs,):
            raise InfeasibleError(f"wiring has shape {x.shape}, expected ({self.n_pairs},)")
        if (x < 0).any() or not np.array_equal(x, np.round(x)):
            raise InfeasibleError("wiring must be a non-negative integer vector")
        deg = self.pod_degrees(x)
        if not np.array_equal(deg, self.degrees):
            bad = int(np.flatnonzero(deg != self.degrees)[0])
            raise InfeasibleError(f"pod {bad} uses {deg[bad]:g} ports, has {self.degrees[bad]}")
