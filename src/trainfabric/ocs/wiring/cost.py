"""Smoothed and hard critical path of a task DAG as functions of the pair circuits
(docs/ocs.md §1.5).

Node durations (seconds) under the wiring ``x`` (circuits per unordered pod pair ``e``)::

    t_i(x) = p_i                                   compute node (fixed), barrier: 0
    t_m(x) = a_m + 8 b_m / (B x_e(m) + B0)         comm node m of b_m bytes on pair e(m)

with ``B`` the circuit rate and ``B0 > 0`` the fallback rate (bits/s). Paths ``π ∈ Π`` run from
a root (no predecessor) to a leaf (no successor) — a super-source before every root and a
super-sink after every leaf, both of zero duration; ``L(π) = Σ_{i∈π} t_i``. The smoothed
critical path at inverse temperature ``b2`` (1/s) is the log-sum-exp over all paths::

    U(x) = (1/b2) · log Σ_{π∈Π} exp(b2 · L(π)),      max_π L ≤ U ≤ max_π L + log|Π| / b2,

computed without enumerating paths by two sweeps over the topological numbering
(``α``: soft-longest path ending at ``i``; ``γ``: soft-longest path after ``i``):

* forward   ``α_i = t_i + (1/b2)·LSE_{j∈pred(i)}(b2 α_j)`` (roots: ``α_i = t_i``),
  ``U = (1/b2)·LSE_{i leaf}(b2 α_i)``;
* backward  ``γ_i = (1/b2)·LSE_{k∈succ(i)}(b2 (t_k + γ_k))`` (leaves: ``γ_i = 0``).

``μ_i = exp(b2 (α_i + γ_i − U))`` is the probability that a path drawn from the Gibbs law
``P(π) ∝ exp(b2 L(π))`` visits node ``i``; ``∂U/∂t_i = μ_i`` and, by the chain rule,

    ∂U/∂x_e = − Σ_{m : e(m)=e} μ_m · 8 b_m B / (B x_e + B0)^2        (seconds per circuit).

The backward sweep is run in its adjoint form, which gives the same ``μ``: the Gibbs path is
drawn backwards from the super-sink (leaf ``i`` with probability ``exp(b2 (α_i − U))``, then
predecessor ``j`` of ``i`` with ``P(j|i) = exp(b2 α_j − LSE_{pred(i)} b2 α)``), so
``μ_j = [j leaf]·exp(b2 (α_j − U)) + Σ_{i∈succ(j)} μ_i P(j|i)``. Its local probabilities sum
to 1 to a few ulps at every node, so ``μ`` conserves flow (``Σ_leaves μ = 1``, a phase's
transfers carry exactly its barrier's mass) whatever the size of ``b2 U``, where evaluating
``exp(b2 (α + γ − U))`` would lose ~ eps·b2·U.

The sweeps run on the exact compression of :mod:`.compress`: the parallel comm nodes of a
phase are one bundle node of duration ``LSE_m bt_m`` (hard: ``max_m t_m``), and bundles with
identical contents (the steps of a ring all-reduce) share one type whose value is computed
once. One value-and-gradient costs ``O(K + R)`` — ``K`` type members, ``R`` compressed nodes —
instead of ``O(N + E)``: a compiled pass over the type members (durations, per-type LSE and
normalised weights), the two sweeps over the compressed predecessor CSR (running-max LSE,
adjoint), and a compiled scatter ``∂U/∂x_e = −Σ_{k on e} μ_k 8 b_k B / (B x_e + B0)^2`` with
``μ_k = (Σ_{bundles of its type} μ_b)·exp(bt_k − bt_type)``. The uncompressed sweeps are kept
for arbitrary node durations (:meth:`PathCost.gibbs`) and for the tests, which check the
compressed value and gradient against them to 1e-12. Everything independent of ``x`` is built
once.
``U`` is convex in ``x`` (each ``t_m`` is convex and decreasing, LSE is convex and
non-decreasing in every argument).
"""

from __future__ import annotations

import copy
from functools import cached_property

import numba
import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.compress import CompressedDag
from trainfabric.ocs.wiring.prior import uniform_prior
from trainfabric.workloads.dag import COMM, TaskDAG, _longest_finish

# TaskDAG fields that fix the compressed DAG (with the compute nodes' durations)
_STRUCTURE = ("kind", "pod", "dst", "latency_s", "indptr", "indices")


def check_b2(b2) -> float:
    """The inverse temperature ``b2`` (1/s) as a float; ConfigError unless finite and > 0."""
    b2 = float(b2)
    if not (b2 > 0 and np.isfinite(b2)):
        raise ConfigError("b2", f"inverse temperature must be finite and > 0, got {b2}")
    return b2


class PathCost:
    """Smoothed (log-sum-exp over all DAG paths) and hard critical path of a TaskDAG as
    functions of pair circuits ``x`` [P].

    Attributes: ``comm_nodes`` (node ids of the comm nodes, int64 [n_comm]), ``comm_pair``
    (pair index of every comm node, int64 [n_comm]), ``leaves`` (nodes without successors).
    """

    def __init__(self, dag: TaskDAG, model: OcsModel):
        if dag.n_pods != model.n:
            raise ConfigError("pods", f"the DAG has {dag.n_pods} pods, the OCS model {model.n}")
        if dag.n_nodes == 0:
            raise ConfigError("workload", "the task DAG has no nodes")
        self.dag = dag
        self.model = model
        self.comm_nodes = np.flatnonzero(dag.kind == COMM).astype(np.int64)
        src, dst = dag.pod[self.comm_nodes], dag.dst[self.comm_nodes]
        invalid = (src < 0) | (dst < 0) | (src >= model.n) | (dst >= model.n) | (src == dst)
        if invalid.any():
            bad = int(self.comm_nodes[np.flatnonzero(invalid)[0]])
            raise ConfigError("workload", f"comm node {bad} needs two distinct pods in range")
        self.comm_pair = model.pair_index(src, dst).astype(np.int64)
        self._comm_bits = 8.0 * dag.bytes[self.comm_nodes]
        self._comm_latency = dag.latency_s[self.comm_nodes].astype(float)
        self._base = dag.duration_s.astype(float).copy()
        self._base[self.comm_nodes] = 0.0
        self._indptr = dag.indptr.astype(np.int64)
        self._indices = dag.indices.astype(np.int64)
        self.leaves = np.flatnonzero(np.diff(self._indptr) == 0).astype(np.int64)
        self.compressed = c = CompressedDag(dag, self.comm_nodes, self.comm_pair)
        self._bundles = c.bundle_nodes()
        self._bundle_type = c.rtype[self._bundles]
        self._member_type = np.repeat(np.arange(c.n_types), np.diff(c.t_ptr))
        bt = np.zeros(c.n_nodes)
        bt[self._bundles] = np.log(np.diff(c.t_ptr))[self._bundle_type]
        self._log_paths = float(_forward_value(c.pindptr, c.pindices, c.leaves, bt))

    def with_bytes(self, dag: TaskDAG, model: OcsModel) -> PathCost | None:
        """This cost for ``dag`` on ``model`` when ``dag`` differs from ``self.dag`` at most in
        its comm nodes' bytes (a traffic drift) and ``model`` has as many pods (rates may
        differ), reusing the compression; None when either differs in more.

        Bytes enter the compression only through the bundle types (bundles with identical
        ``(pair, bits, latency)`` contents share one type). Every comm node maps to its type
        member ``k = comm_member[c]``; when all comm nodes mapped to one member carry the same
        new bits, the types are still exact and only the members' bits change (the compressed
        DAG, the types and ``log|Π|`` are unchanged). Otherwise (bytes that split a type) the
        compression is no longer valid and None is returned. Costs O(N + E) comparisons.
        """
        old = self.dag
        fixed = old.kind != COMM
        same = (
            model.n == self.model.n
            and dag.n_pods == old.n_pods
            and dag.n_nodes == old.n_nodes
            and all(np.array_equal(getattr(dag, f), getattr(old, f)) for f in _STRUCTURE)
            and np.array_equal(dag.duration_s[fixed], old.duration_s[fixed])
        )
        if not same:
            return None
        bits = 8.0 * dag.bytes[self.comm_nodes]
        k = self.compressed.comm_member
        m_bits = np.empty_like(self.compressed.m_bits)
        m_bits[k] = bits
        if not np.array_equal(m_bits[k], bits):
            return None
        new = copy.copy(self)
        new.dag, new.model = dag, model
        new._comm_bits = bits
        new.compressed = copy.copy(self.compressed)
        new.compressed.m_bits = m_bits
        return new

    @cached_property
    def _pred_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Predecessor CSR of the uncompressed DAG (built on first use: ``_sweeps`` only)."""
        n = self.dag.n_nodes
        adj = sp.csr_matrix(
            (np.ones(self._indices.size, dtype=np.int8), self._indices, self._indptr), shape=(n, n)
        )
        pred = adj.T.tocsr()
        pred.sort_indices()
        return pred.indptr.astype(np.int64), pred.indices.astype(np.int64)

    # -- durations ------------------------------------------------------------------------

    def _check_x(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if x.shape != (self.model.n_pairs,):
            raise ConfigError("x", f"has shape {x.shape}, expected ({self.model.n_pairs},)")
        return x

    def durations(self, x) -> np.ndarray:
        """Node durations ``t(x)`` [N] in seconds (comm: latency + 8·bytes / (B x_e + B0))."""
        x = self._check_x(x)
        rate = self.model.rate_bps * x[self.comm_pair] + self.model.fallback_bps
        t = self._base.copy()
        t[self.comm_nodes] = self._comm_latency + self._comm_bits / rate
        return t

    # -- hard critical path ---------------------------------------------------------------

    def hard(self, x) -> float:
        """Exact critical path ``max_π L(π)`` (s): one longest-path sweep over the compressed
        DAG with every bundle at its slowest member (bit-identical to the full sweep)."""
        c = self.compressed
        x = self._check_x(x)
        t_type = _type_max(c.t_ptr, c.m_pair, c.m_bits, c.m_latency, x, *self._rates())
        dur = c.fixed.copy()
        dur[self._bundles] = t_type[self._bundle_type]
        return float(_longest_finish(c.indptr, c.indices, dur).max())

    def _rates(self) -> tuple[float, float]:
        return float(self.model.rate_bps), float(self.model.fallback_bps)

    def critical_nodes(self, x, rtol: float = 1e-12) -> np.ndarray:
        """Bool [N]: nodes on at least one hard critical path.

        Node ``i`` is critical when its slack ``CP − (f_i + τ_i)`` is at most ``rtol·CP``, with
        ``f_i`` the earliest finish (longest path from a root ending at ``i``) and ``τ_i`` the
        longest tail after ``i`` to a leaf.
        """
        t = self.durations(x)
        finish = _longest_finish(self._indptr, self._indices, t)
        tail = _longest_tail(self._indptr, self._indices, t)
        cp = finish.max()
        return finish + tail >= cp - rtol * abs(cp)

    def log_paths(self) -> float:
        """``log|Π|``: the number of root-to-leaf paths, exact by the counting DP in log space
        (``log c_i = LSE_{j∈pred(i)} log c_j``, roots ``c = 1``, ``|Π| = Σ_leaves c_i``)."""
        return self._log_paths

    # -- smoothed critical path -----------------------------------------------------------

    def _scaled(self, x, b2: float) -> tuple[np.ndarray, tuple]:
        """Scaled durations ``b2·t`` [R] of the compressed nodes and the type state
        ``(rate [K], expo [K], z [T])`` of :func:`_type_lse`."""
        c = self.compressed
        x = self._check_x(x)
        k = c.m_pair.size
        state = (np.empty(k), np.empty(k), np.empty(c.n_types))
        val = _type_lse(c.t_ptr, c.m_pair, c.m_bits, c.m_latency, x, *self._rates(), b2, *state)
        bt = b2 * c.fixed
        bt[self._bundles] = val[self._bundle_type]
        return bt, state

    def smoothed(self, x, b2: float) -> float:
        """``U(x)`` in seconds at inverse temperature ``b2`` (1/s): forward sweep only."""
        b2 = check_b2(b2)
        c = self.compressed
        bt = self._scaled(x, b2)[0]
        return float(_forward_value(c.pindptr, c.pindices, c.leaves, bt)) / b2

    def marginals(self, x, b2: float) -> np.ndarray:
        """Gibbs node marginals ``μ = ∂U/∂t`` [N]: each in [0, 1], summing to 1 over the
        leaves and over the roots (a comm node gets its bundle's mass times its share)."""
        b2 = check_b2(b2)
        c = self.compressed
        bt, (_, expo, z) = self._scaled(x, b2)
        mu_r = _forward_backward(c.pindptr, c.pindices, c.leaves, bt)[1]
        mu = mu_r[c.node_r]
        k = c.comm_member
        mu[self.comm_nodes] *= expo[k] / z[self._member_type[k]]
        return mu

    def flow_weights(self, x, b2: float) -> tuple[float, np.ndarray]:
        """``(C, W)`` of the Gibbs marginals ``μ`` of :meth:`marginals`: ``C = Σ_i μ_i p_i +
        Σ_m μ_m a_m`` (s, compute durations and comm latencies) and ``W_e = Σ_{m on e} μ_m ·
        8 b_m`` [P] (bits), the two linear functionals the certified bound of :mod:`.bound`
        prices a flow by. Summed over the compressed nodes and the type members (a type
        member carries ``(Σ_{bundles of its type} μ_b)·exp(bt_k − bt_type)``) without
        expanding ``μ`` to the ``N`` nodes: ``O(K + R)``."""
        b2 = check_b2(b2)
        c = self.compressed
        bt, (_, expo, z) = self._scaled(x, b2)
        mu_r = _forward_backward(c.pindptr, c.pindices, c.leaves, bt)[1]
        weight = np.bincount(self._bundle_type, mu_r[self._bundles], c.n_types) / z
        mass = weight[self._member_type] * expo
        w = np.bincount(c.m_pair, mass * c.m_bits, minlength=self.model.n_pairs)
        return float(mu_r @ c.fixed + mass @ c.m_latency), w

    def value_and_grad(self, x, b2: float) -> tuple[float, np.ndarray]:
        """``U(x)`` (s) and ``∂U/∂x`` [P] (s per circuit) by the forward-backward sweeps on
        the compressed DAG (module doc)."""
        b2 = check_b2(b2)
        c = self.compressed
        bt, (rate, expo, z) = self._scaled(x, b2)
        u_scaled, mu_r = _forward_backward(c.pindptr, c.pindices, c.leaves, bt)
        weight = np.bincount(self._bundle_type, mu_r[self._bundles], c.n_types) / z
        grad = np.zeros(self.model.n_pairs)
        _scatter_grad(c.t_ptr, c.m_pair, c.m_bits, rate, expo, weight, self.model.rate_bps, grad)
        return u_scaled / b2, grad

    def gibbs(self, durations: np.ndarray, b2: float) -> np.ndarray:
        """Gibbs node marginals [N] for arbitrary node ``durations`` (s) at inverse
        temperature ``b2`` (1/s): a unit flow from the roots to the leaves (the certified
        bound of :mod:`.bound` prices flows under interpolated durations with it)."""
        return self._sweeps(check_b2(b2) * np.asarray(durations, dtype=float))[1]

    def _sweeps(self, bt: np.ndarray) -> tuple[float, np.ndarray]:
        """``(b2 U, μ [N])`` of the uncompressed DAG for arbitrary scaled node durations."""
        return _forward_backward(*self._pred_csr, self.leaves, bt)


def temperatures(
    cost: PathCost, model: OcsModel, b1_rel: float = 1.0, b2_rel: float = 50.0
) -> tuple[float, float, float]:
    """Absolute inverse temperatures from dimensionless knobs: ``(b1, b2, cp0)``.

    ``cost``: a PathCost or any cost with ``hard(x)`` and ``log_paths()`` (e.g. the
    traffic-matrix cost of :mod:`.baselines`).

    ``cp0`` (s) is the hard critical path of the fractional uniform mesh ``x = M q``
    (``q = prior.uniform_prior(model)``); ``b2 = b2_rel · log|Π| / cp0`` (1/s), so that the
    smoothing excess ``U − CP ≤ log|Π| / b2 = cp0 / b2_rel``; ``b1 = b1_rel / cp0`` (1/s). A DAG
    with a single path (``log|Π| = 0``, where ``U = CP`` for every ``b2``) uses ``log|Π| := 1``.
    """
    if not (b1_rel > 0 and b2_rel > 0):
        raise ConfigError("b1_rel" if not b1_rel > 0 else "b2_rel", "must be > 0")
    cp0 = cost.hard(model.total_circuits * uniform_prior(model))
    if not cp0 > 0:
        raise ConfigError("workload", "the critical path of the uniform mesh is zero")
    b2 = b2_rel * max(cost.log_paths(), 1.0) / cp0
    return b1_rel / cp0, b2, cp0


# -- compiled sweeps (all arguments in scaled units bt = b2 · t) ------------------------------


@numba.njit(cache=True, nogil=True)
def _forward(pindptr, pindices, bt):  # pragma: no cover - compiled
    """``β_i = b2 α_i = bt_i + LSE_{j∈pred(i)} β_j`` (roots: ``β_i = bt_i``) by a running-max
    LSE. Also returns each node's shift ``m_i = max_{j∈pred(i)} β_j`` and partition sum
    ``s_i = Σ_{j∈pred(i)} exp(β_j − m_i)`` (roots: 0 and 1)."""
    n = bt.size
    beta = np.empty(n)
    shift = np.zeros(n)
    total = np.ones(n)
    for i in range(n):
        lo = pindptr[i]
        hi = pindptr[i + 1]
        if lo == hi:
            beta[i] = bt[i]
            continue
        m = beta[pindices[lo]]
        z = 1.0
        for k in range(lo + 1, hi):
            v = beta[pindices[k]]
            if v > m:
                z = z * np.exp(m - v) + 1.0
                m = v
            else:
                z += np.exp(v - m)
        beta[i] = bt[i] + m + np.log(z)
        shift[i] = m
        total[i] = z
    return beta, shift, total


@numba.njit(cache=True, nogil=True)
def _type_lse(
    t_ptr, pair, bits, lat, x, rate_bps, fallback_bps, b2, rate, expo, z
):  # pragma: no cover - compiled
    """Per type ``T``: ``bt_T = LSE_{k∈T} b2 t_k`` with ``t_k = lat_k + bits_k / rate_k``,
    ``rate_k = B x_{pair_k} + B0``. Fills ``rate`` [K], ``expo_k = exp(b2 t_k − max_T)`` [K]
    and ``z_T = Σ_{k∈T} expo_k`` [T] (so a member's share is ``expo_k / z_T``); returns
    ``bt`` [T]."""
    n_t = t_ptr.size - 1
    val = np.empty(n_t)
    for t in range(n_t):
        m = -np.inf
        for k in range(t_ptr[t], t_ptr[t + 1]):
            r = rate_bps * x[pair[k]] + fallback_bps
            rate[k] = r
            v = b2 * (lat[k] + bits[k] / r)
            expo[k] = v
            m = max(m, v)
        s = 0.0
        for k in range(t_ptr[t], t_ptr[t + 1]):
            e = np.exp(expo[k] - m)
            expo[k] = e
            s += e
        z[t] = s
        val[t] = m + np.log(s)
    return val


@numba.njit(cache=True, nogil=True)
def _type_max(t_ptr, pair, bits, lat, x, rate_bps, fallback_bps):  # pragma: no cover - compiled
    """Per type: ``max_{k∈T} (lat_k + bits_k / (B x_{pair_k} + B0))`` (s)."""
    n_t = t_ptr.size - 1
    out = np.empty(n_t)
    for t in range(n_t):
        m = -np.inf
        for k in range(t_ptr[t], t_ptr[t + 1]):
            m = max(m, lat[k] + bits[k] / (rate_bps * x[pair[k]] + fallback_bps))
        out[t] = m
    return out


@numba.njit(cache=True, nogil=True)
def _scatter_grad(
    t_ptr, pair, bits, rate, expo, weight, rate_bps, grad
):  # pragma: no cover - compiled
    """``grad[pair_k] −= μ_k · bits_k B / rate_k²`` with ``μ_k = weight_T · expo_k`` (``weight``
    already divided by ``z_T``): ``∂U/∂x`` in seconds per circuit."""
    for t in range(t_ptr.size - 1):
        w = weight[t]
        if w == 0.0:
            continue
        for k in range(t_ptr[t], t_ptr[t + 1]):
            r = rate[k]
            grad[pair[k]] -= w * expo[k] * bits[k] * rate_bps / (r * r)


@numba.njit(cache=True, nogil=True)
def _lse_at(values, idx):  # pragma: no cover - compiled
    """``(LSE_k values[idx_k], max, Σ exp(values[idx] − max))``."""
    m = -np.inf
    for k in range(idx.size):
        m = max(m, values[idx[k]])
    z = 0.0
    for k in range(idx.size):
        z += np.exp(values[idx[k]] - m)
    return m + np.log(z), m, z


@numba.njit(cache=True, nogil=True)
def _forward_value(pindptr, pindices, leaves, bt):  # pragma: no cover - compiled
    """``b2 U = LSE_{i leaf} β_i``."""
    return _lse_at(_forward(pindptr, pindices, bt)[0], leaves)[0]


@numba.njit(cache=True, nogil=True)
def _forward_backward(pindptr, pindices, leaves, bt):  # pragma: no cover - compiled
    """``(b2 U, μ)`` with ``μ = ∂(b2 U)/∂(bt)`` by one reverse sweep (the adjoint of the
    forward one): the super-sink picks leaf ``i`` with probability ``exp(β_i − b2 U)`` and node
    ``i`` picks predecessor ``j`` with ``P(j|i) = exp(β_j − m_i) / s_i``, so
    ``μ_j = [j leaf]·exp(β_j − b2 U) + Σ_{i∈succ(j)} μ_i P(j|i)``.

    This equals ``exp(β_j + b2 γ_j − b2 U)`` with the backward recursion γ of the module doc,
    but the probabilities are formed from differences of sibling values against the same
    shift, so they sum to 1 at every node to a few ulps whatever the magnitude of ``b2 U``
    (the closed form ``exp(β + b2 γ − b2 U)`` loses ~ eps·b2·U absolutely).
    """
    beta, shift, total = _forward(pindptr, pindices, bt)
    u, m_sink, z_sink = _lse_at(beta, leaves)
    mu = np.zeros(bt.size)
    for k in range(leaves.size):
        mu[leaves[k]] = np.exp(beta[leaves[k]] - m_sink) / z_sink
    for i in range(bt.size - 1, -1, -1):
        lo = pindptr[i]
        hi = pindptr[i + 1]
        if lo == hi:
            continue
        w = mu[i] / total[i]
        m = shift[i]
        for k in range(lo, hi):
            j = pindices[k]
            mu[j] += w * np.exp(beta[j] - m)
    return u, mu


@numba.njit(cache=True, nogil=True)
def _longest_tail(indptr, indices, dur):  # pragma: no cover - compiled
    """``τ_i = max_{k∈succ(i)} (t_k + τ_k)``, leaves 0: the longest path after node ``i``."""
    n = dur.size
    tail = np.zeros(n)
    for i in range(n - 1, -1, -1):
        best = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            best = max(best, dur[j] + tail[j])
        tail[i] = best
    return tail
