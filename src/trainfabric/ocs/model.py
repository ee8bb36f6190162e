"""Physical model of s parallel optical circuit switches between pods (docs/ocs.md §1.1-1.2).

* Pods ``v = 0..n-1`` with ``d_v`` uplink ports; ``s`` OCSes with uniform striping (pod ``v``
  has ``p_v = d_v / s`` ports on every OCS, [A1]).
* Duplex circuits [A2]: a wiring is a symmetric non-negative integer matrix ``X`` with zero
  diagonal, stored as the vector ``x`` over unordered pairs ``e = (u < v)`` in
  ``numpy.triu_indices(n, 1)`` order. At most ``d_v`` ports of pod ``v`` carry a circuit [A4]:
  ``Σ_u X_uv ≤ d_v``; the others stay dark (more circuits never slow a transfer, so a wiring
  that can be completed to exact degrees is completed by the planner, but a skewed optimum may
  need dark ports: at 4 pods exact degrees force ``X01 = X23``, ``X02 = X13``, ``X03 = X12``).
* Pair rate, each direction: ``B · X_e + B0`` bits/s (``B`` circuit rate, ``B0 > 0`` fallback
  through the electrical network, [A3]).
* Normalised wiring ``w = x / M`` with ``M = Σ_v d_v / 2`` circuits: a point of the simplex over
  pairs inside the degree polytope ``W = {w ≥ 0 : Σ_u w_uv ≤ r_v}``, ``r_v = d_v / M``
  (``M = ⌊Σ_v d_v / 2⌋``; with dark ports ``w`` may sum to less than 1).

Input checks (each a ConfigError naming the field): at least 2 pods, positive integer ports,
``s`` divides every ``d_v``, positive rates; and a size guard naming ``pods``: the planner's
memory for the pairs (:meth:`OcsModel.memory_bytes`) must fit the limit of
:func:`trainfabric.limits.check_memory`. With dark ports every degree vector is a legal
instance (``X = 0`` is a wiring), so two former checks are gone: an odd port total leaves at
least one port dark, and a pod with more than half of all ports keeps its surplus dark (no
wiring can use more than ``Σ_{u≠v} d_u`` of its ports). Whether every port *can* carry a
circuit is :attr:`OcsModel.completable` (``Σ d`` even and ``2 max d ≤ Σ d``, the condition for a
loopless multigraph with degrees exactly ``d``); :attr:`OcsModel.max_circuits` is the most
circuits any wiring carries.
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
        """``M = ⌊Σ d_v / 2⌋``, the normalisation of ``w = x / M``."""
        return int(self.degrees.sum() // 2)

    @property
    def completable(self) -> bool:
        """Some wiring uses every port (``Σ_u X_uv = d_v`` for all ``v``): ``Σ d`` even and no
        pod above half of all ports (Hakimi's condition for loopless multigraphs; for 2 pods
        it reads ``d_0 = d_1``)."""
        d = self.degrees
        return bool(d.sum() % 2 == 0 and 2 * d.max() <= d.sum())

    @property
    def max_circuits(self) -> int:
        """Most circuits a wiring can carry: ``min(⌊Σ d / 2⌋, Σ d − max d)`` (two ports per
        circuit; every circuit of the largest pod ends at another pod; the bound is attained
        by joining the two pods with the most free ports, one circuit at a time)."""
        d = self.degrees
        return int(min(d.sum() // 2, d.sum() - d.max()))

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

    def free_ports(self, x: np.ndarray) -> np.ndarray:
        """Dark ports per pod, ``d_v − Σ_u x_uv`` (int64 [n]; negative where ``x`` overuses)."""
        return self.degrees - np.rint(self.pod_degrees(x)).astype(np.int64)

    def check_wiring(self, x: np.ndarray, exact: bool = False) -> None:
        """Raise InfeasibleError unless ``x`` is a non-negative integer wiring [P] with
        ``Σ_u x_uv ≤ d_v`` (dark ports allowed), or ``= d_v`` when ``exact``."""
        x = np.asarray(x)
        if x.shape != (self.n_pairs,):
            raise InfeasibleError(f"wiring has shape {x.shape}, expected ({self.n_pairs},)")
        if (x < 0).any() or not np.array_equal(x, np.round(x)):
            raise InfeasibleError("wiring must be a non-negative integer vector")
        deg = self.pod_degrees(x)
        bad = deg != self.degrees if exact else deg > self.degrees
        if bad.any():
            v = int(np.flatnonzero(bad)[0])
            raise InfeasibleError(f"pod {v} uses {deg[v]:g} ports, has {self.degrees[v]}")
