"""Exact compression of a task DAG for the path-cost sweeps (docs/ocs.md §1.5, "LSE node").

A *plain* comm node has exactly one predecessor and one successor. The plain comm nodes that
share both (the parallel branches of one phase) form a *bundle*; every other comm node is a
bundle of one. A bundle ``b`` becomes one node of the compressed DAG whose scaled duration is
the log-sum-exp of its members' (``bt = b2·t``, members ``m ∈ b``)::

    bt_b = LSE_{m∈b} bt_m,         hard duration  t_b = max_{m∈b} t_m .

This is exact for every quantity the cost needs, because the members have the same single
predecessor ``j`` and successor ``k``: in the forward recursion the members enter ``k``'s LSE
as ``β_j + bt_m``, and ``LSE_m(β_j + bt_m) = β_j + LSE_m bt_m`` (LSE is associative and
shift-equivariant); paths through the bundle are counted ``|b|`` times, i.e. ``LSE`` of zeros
is ``log |b|``; the adjoint sweep gives the bundle its marginal ``μ_b`` and each member
``μ_m = μ_b · exp(bt_m − bt_b)`` (its share of the bundle's Gibbs mass). For the hard path,
``max_m (f_j + t_m) = f_j + max_m t_m`` holds exactly in floating point (rounding is monotone).

Bundles with identical contents — the same multiset of ``(pair, bits, latency)`` — have the
same duration for every wiring (the ``2(n−1)`` steps of a ring all-reduce are one bundle
repeated), so they share one *type*: the members of each type are stored once, its value is
computed once per evaluation, and the marginals of its bundles are summed before the
gradient is scattered onto pairs. At 1,024 pods (moe) this turns 2.5 M nodes into ~10 k
compressed nodes and ~0.3 M type members.

Edges of the compressed DAG: every original edge between non-plain nodes (kept with its
multiplicity), one edge ``j → b`` per plain bundle, and ``b → k`` where ``k`` is not itself a
plain comm node (otherwise ``k``'s own in-edge already is that edge). A bundle sits at its first
member's position in the topological numbering, which stays topological (``j`` < every member
< ``k``).
"""

from __future__ import annotations

import numpy as np

from trainfabric.workloads.dag import TaskDAG


def phase_bundles(dag: TaskDAG, comm_nodes: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(src, dst, pred, succ, plain, bundle)`` of a DAG's comm nodes (sorted node ids).

    ``src``/``dst`` [E]: the edge list; ``pred``/``succ`` [N]: a node's predecessor and
    successor where it has exactly one (else an arbitrary one or -1); ``plain`` [n_comm]: the
    comm node has one predecessor and one successor; ``bundle`` [n_comm]: comm nodes with the
    same single predecessor and successor (the parallel transfers of one phase) share an id,
    every other comm node has its own; ids ``0..B-1`` in the order of the keys
    ``(pred, succ)`` (non-plain nodes first, by decreasing node id)."""
    n = dag.n_nodes
    src, dst = edge_list(dag)
    indeg = np.bincount(dst, minlength=n)
    outdeg = np.diff(dag.indptr)
    pred = np.full(n, -1, dtype=np.int64)
    pred[dst] = src  # the predecessor where there is exactly one
    succ = np.full(n, -1, dtype=np.int64)
    succ[src] = dst
    plain = (indeg[comm_nodes] == 1) & (outdeg[comm_nodes] == 1)
    key = np.where(plain, pred[comm_nodes] * n + succ[comm_nodes], -1 - comm_nodes)
    _, bundle = np.unique(key, return_inverse=True)
    return src, dst, pred, succ, plain, bundle


def edge_list(dag: TaskDAG) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` [E] (int64): the DAG's edges in CSR order."""
    src = np.repeat(np.arange(dag.n_nodes, dtype=np.int64), np.diff(dag.indptr))
    return src, dag.indices.astype(np.int64)


class CompressedDag:
    """The compressed DAG and bundle types of a TaskDAG (see module doc).

    Compressed nodes ``r = 0..R-1`` (topological): ``fixed`` [R] duration (s) of non-comm
    nodes (0 for bundles), ``rtype`` [R] type of a bundle node (-1 elsewhere), predecessor CSR
    ``pindptr``/``pindices``, successor CSR ``indptr``/``indices``, ``leaves``. Types
    ``T = 0..n_types-1``: member CSR ``t_ptr`` [n_types+1] over ``m_pair``, ``m_bits``,
    ``m_latency`` (the members of each type, stored once). Maps back to the original DAG:
    ``node_r`` [N] compressed node of every node, ``comm_member`` [n_comm] (in the order of
    ``comm_nodes``) the type member that stands for each comm node, ``comm_bundle``
    [n_comm] its bundle (:func:`phase_bundles`: the phase of a plain comm node).
    """

    def __init__(self, dag: TaskDAG, comm_nodes: np.ndarray, comm_pair: np.ndarray):
        n = dag.n_nodes
        src, dst, pred, succ, plain, bundle = phase_bundles(dag, comm_nodes)
        n_bundles = int(bundle.max()) + 1 if comm_nodes.size else 0
        self.comm_bundle = bundle
        bits = 8.0 * dag.bytes[comm_nodes].astype(float)
        lat = dag.latency_s[comm_nodes].astype(float)
        order = np.lexsort((lat, bits, comm_pair, bundle))
        b_ptr = np.searchsorted(bundle[order], np.arange(n_bundles + 1))
        btype, t_first = _dedupe(b_ptr, comm_pair[order], bits[order], lat[order])
        sizes = np.diff(b_ptr)[t_first]
        self.t_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        members = np.repeat(b_ptr[t_first] - self.t_ptr[:-1], sizes) + np.arange(self.t_ptr[-1])
        self.m_pair = comm_pair[order][members].astype(np.int64)
        self.m_bits = bits[order][members]
        self.m_latency = lat[order][members]
        # member of each comm node: same rank inside its bundle as inside the type's copy
        rank = np.empty(comm_nodes.size, dtype=np.int64)
        rank[order] = np.arange(comm_nodes.size) - b_ptr[bundle[order]]
        self.comm_member = self.t_ptr[btype[bundle]] + rank

        # compressed numbering: non-comm nodes at their id, bundles at their first member
        first = np.full(n_bundles, n, dtype=np.int64)
        np.minimum.at(first, bundle, comm_nodes)
        is_comm = np.zeros(n, dtype=bool)
        is_comm[comm_nodes] = True
        other = np.flatnonzero(~is_comm)
        pos = np.concatenate([other, first])
        rank_of = np.empty(pos.size, dtype=np.int64)
        rank_of[np.argsort(pos, kind="stable")] = np.arange(pos.size)
        self.node_r = np.empty(n, dtype=np.int64)
        self.node_r[other] = rank_of[: other.size]
        bundle_r = rank_of[other.size :]
        self.node_r[comm_nodes] = bundle_r[bundle]
        n_r = pos.size
        self.fixed = np.zeros(n_r)
        self.fixed[self.node_r[other]] = dag.duration_s[other]
        self.rtype = np.full(n_r, -1, dtype=np.int64)
        self.rtype[bundle_r] = btype

        plain_node = np.zeros(n, dtype=bool)
        plain_node[comm_nodes[plain]] = True
        keep = ~plain_node[src] & ~plain_node[dst]
        pb = np.flatnonzero(np.bincount(bundle[plain], minlength=n_bundles) > 0)
        rep = np.full(n_bundles, -1, dtype=np.int64)
        rep[bundle[plain]] = comm_nodes[plain]
        rep = rep[pb]
        out = ~plain_node[succ[rep]]
        es = np.concatenate([self.node_r[src[keep]], self.node_r[pred[rep]], bundle_r[pb[out]]])
        ed = np.concatenate([self.node_r[dst[keep]], bundle_r[pb], self.node_r[succ[rep[out]]]])
        self.pindptr, self.pindices = _csr(ed, es, n_r)
        self.indptr, self.indices = _csr(es, ed, n_r)
        self.leaves = np.flatnonzero(np.diff(self.indptr) == 0).astype(np.int64)

    @property
    def n_nodes(self) -> int:
        return int(self.fixed.size)

    @property
    def n_types(self) -> int:
        return int(self.t_ptr.size - 1)

    def bundle_nodes(self) -> np.ndarray:
        """Compressed nodes that are bundles."""
        return np.flatnonzero(self.rtype >= 0)


def _csr(row: np.ndarray, col: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (``indptr``, ``indices``) of the edges ``row → col`` over ``n`` nodes, each row's
    entries sorted, multiplicities kept."""
    order = np.lexsort((col, row))
    indptr = np.searchsorted(row[order], np.arange(n + 1)).astype(np.int64)
    return indptr, col[order].astype(np.int64)


def _dedupe(b_ptr, pair, bits, lat) -> tuple[np.ndarray, np.ndarray]:
    """Type of every bundle (bundles with identical sorted member contents share one) and
    the first bundle of every type. Contents are compared exactly, as bytes."""
    types: dict[bytes, int] = {}
    btype = np.empty(b_ptr.size - 1, dtype=np.int64)
    first = []
    for b in range(b_ptr.size - 1):
        lo, hi = b_ptr[b], b_ptr[b + 1]
        sig = pair[lo:hi].tobytes() + bits[lo:hi].tobytes() + lat[lo:hi].tobytes()
        t = types.setdefault(sig, len(types))
        if t == len(first):
            first.append(b)
        btype[b] = t
    return btype, np.asarray(first, dtype=np.int64)
