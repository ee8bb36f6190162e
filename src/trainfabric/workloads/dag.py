"""Task DAGs as compact arrays.

A :class:`TaskDAG` has three node kinds:

* ``COMPUTE`` on pod ``pod`` for ``duration_s`` seconds (intra-pod work, including tensor
  parallelism and intra-pod collectives: the scale-up domain is not on the inter-pod network);
* ``COMM`` moving ``bytes`` from pod ``pod`` (source) to pod ``dst`` (``pod != dst``), taking
  ``latency_s + bytes / rate`` once a rate is given (one-hop model of the OCS spec, §1.4);
* ``BARRIER`` of zero duration: the entry/exit joins of a communication *phase* (the comm
  nodes of one concurrent step of a collective sit in parallel between them, so the phase
  lasts as long as its slowest pod pair).

Invariant: nodes are numbered in a topological order (every edge goes from a lower to a
higher index), so a longest-path sweep is one pass over the nodes. Successors are stored as
CSR (``indptr``, ``indices``). Comm nodes and phase barriers carry the index of their phase
in ``phase`` (-1 elsewhere); ``phases`` names them.

**GPU transfers** (optional, :class:`GpuTransfers`): the GPU-level transfers a comm node
aggregates, as (source GPU index within the source pod, destination GPU index within the
destination pod, share of the node's bytes). Comm nodes with the same transfers (a ring's
steps, the pod pairs of one boundary) share one *pattern*: ``pattern[node]`` indexes a CSR
table of distinct patterns, so a 16,384-GPU DAG holds 4 bytes per node plus a few patterns.

**Phase nodes** (optional, :class:`PairSets`, for the fabric at scale): a phase of several pod
pairs may be one COMM node (``pod = dst = -1``, ``bytes`` the phase's total) whose pairs sit
in an interned *pair set* instead of one comm node per pair between an entry and an exit
barrier. The two forms finish together (a phase ends with its slowest pair either way), but
a ring's steps over ``n`` pods cost one node each instead of ``n + 2``: a 131,072-GPU job's
DP rings are 33 thousand nodes, not 134 million. Only the fabric's engines read pair sets;
everything else builds the per-pair form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numba
import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError, FormatError

if TYPE_CHECKING:
    import networkx as nx

COMPUTE, COMM, BARRIER = 0, 1, 2
KIND_NAMES = ("compute", "comm", "barrier")


@dataclass(frozen=True)
class Phase:
    """One concurrent communication step: ``kind`` (e.g. ``pp_fwd``), a unique ``name``, and
    the bytes of the step that stayed inside pods (not on the inter-pod network).

    Collective metadata (set by the builder; defaults mean unknown, e.g. a DAG read from
    JSON): ``group`` names the collective the step belongs to (all steps of one ring
    reduce-scatter share it; empty = the phase is its own group), ``op`` is the collective
    (``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all``, ``send_recv``),
    ``n_ranks`` the ranks of one collective (``n`` of NCCL-tests) and ``n_collectives`` how
    many such collectives run at once in it (TP ranks, EP groups, DP replicas of a send).
    """

    kind: str
    name: str
    intra_pod_bytes: float = 0.0
    group: str = ""
    op: str = ""
    n_ranks: int = 0
    n_collectives: int = 0

    @property
    def group_name(self) -> str:
        return self.group or self.name


@dataclass(frozen=True, eq=False)
class GpuTransfers:
    """GPU-level transfers of each comm node of a :class:`TaskDAG` (module doc).

    ``pattern`` int32 [N]: per DAG node, its pattern (-1 for non-comm nodes); pattern ``q``
    holds transfers ``indptr[q]:indptr[q+1]`` of ``src_gpu`` -> ``dst_gpu`` (int16, GPU index
    within its pod, ``0 .. gpus_per_pod-1``) carrying ``share`` (float64, sums to 1 per
    pattern) of the node's bytes. Same-pod transfers are not here (``Phase.intra_pod_bytes``).
    ``assumed_even_split``: the transfers are the even-split assumption (GPU k -> GPU k,
    ``1/g`` each, :func:`even_split`), not the job's real ones.
    """

    gpus_per_pod: int
    pattern: np.ndarray
    indptr: np.ndarray
    src_gpu: np.ndarray
    dst_gpu: np.ndarray
    share: np.ndarray
    assumed_even_split: bool = False

    @property
    def n_patterns(self) -> int:
        return int(self.indptr.size - 1)

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (bytes)."""
        return sum(
            a.nbytes for a in (self.pattern, self.indptr, self.src_gpu, self.dst_gpu, self.share)
        )

    def transfers(self, node: int, node_bytes: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src_gpu, dst_gpu, bytes)`` of comm ``node`` carrying ``node_bytes`` in total."""
        q = int(self.pattern[node])
        if q < 0:
            raise ValueError(f"node {node} is not a comm node")
        lo, hi = self.indptr[q], self.indptr[q + 1]
        return self.src_gpu[lo:hi], self.dst_gpu[lo:hi], node_bytes * self.share[lo:hi]

    def counts(self) -> np.ndarray:
        """Transfers per node (0 for non-comm nodes)."""
        sizes = np.diff(self.indptr)
        return np.where(self.pattern >= 0, sizes[np.maximum(self.pattern, 0)], 0)


def even_split(dag: TaskDAG, gpus_per_pod: int) -> GpuTransfers:
    """The even-split *assumption* for a DAG without GPU transfers (e.g. read from JSON):
    every comm node's bytes go GPU k -> GPU k, ``1/g`` each, over the pod's ``g`` NICs.

    Exact when the job's TP group fills the pod (``tp == gpus_per_pod``: every inter-pod flow
    joins equal TP ranks); for ``tp < gpus_per_pod`` it hides cross-rail pairs (a DP ring
    hop of a ``tp = 1`` job is one GPU pair). The result says so: ``assumed_even_split``.
    """
    if gpus_per_pod < 1:
        raise ConfigError("gpus_per_pod", f"must be >= 1, got {gpus_per_pod}")
    k = np.arange(gpus_per_pod, dtype=np.int16)
    return GpuTransfers(
        gpus_per_pod=gpus_per_pod,
        pattern=np.where(dag.kind == COMM, 0, -1).astype(np.int32),
        indptr=np.array([0, gpus_per_pod], dtype=np.int64),
        src_gpu=k,
        dst_gpu=k.copy(),
        share=np.full(gpus_per_pod, 1.0 / gpus_per_pod),
        assumed_even_split=True,
    )


def gpu_transfers(dag: TaskDAG, gpus_per_pod: int) -> GpuTransfers:
    """The DAG's own GPU transfers when it has them, else the even split (an assumption,
    flagged ``assumed_even_split``)."""
    if dag.gpu is None:
        return even_split(dag, gpus_per_pod)
    if dag.gpu.gpus_per_pod != gpus_per_pod:
        raise ConfigError(
            "gpus_per_pod",
            f"the DAG's GPU transfers are for {dag.gpu.gpus_per_pod} GPUs per pod, "
            f"not {gpus_per_pod}",
        )
    return dag.gpu


class PatternTable:
    """Interns GPU-transfer patterns (rows of (src GPU, dst GPU, share)) while building."""

    def __init__(self, gpus_per_pod: int):
        self.gpus_per_pod = gpus_per_pod
        self._ids: dict[bytes, int] = {}
        self._rows: list[np.ndarray] = []

    def intern(self, first, counts, src_gpu, dst_gpu, share) -> np.ndarray:
        """Pattern ids of pod pairs whose transfers are ``first[i] : first[i] + counts[i]``
        of the (src_gpu, dst_gpu, share) arrays; equal patterns get equal ids."""
        ids = np.empty(first.size, dtype=np.int32)
        table = np.stack([src_gpu, dst_gpu, share], axis=1).astype(float)
        for c in np.unique(counts):
            sel = np.flatnonzero(counts == c)
            rows = table[first[sel, None] + np.arange(c)].reshape(sel.size, 3 * c)
            uniq, inv = np.unique(rows, axis=0, return_inverse=True)
            local = np.array([self._id(row) for row in uniq], dtype=np.int32)
            ids[sel] = local[inv.ravel()]
        return ids

    def _id(self, row: np.ndarray) -> int:
        key = row.tobytes()
        if key not in self._ids:
            self._ids[key] = len(self._rows)
            self._rows.append(row.reshape(-1, 3))
        return self._ids[key]

    def freeze(self, pattern: np.ndarray) -> GpuTransfers:
        rows = self._rows or [np.zeros((0, 3))]
        flat = np.concatenate(rows)
        sizes = [r.shape[0] for r in self._rows]
        return GpuTransfers(
            gpus_per_pod=self.gpus_per_pod,
            pattern=pattern.astype(np.int32),
            indptr=np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64),
            src_gpu=flat[:, 0].astype(np.int16),
            dst_gpu=flat[:, 1].astype(np.int16),
            share=flat[:, 2].copy(),
        )


@dataclass(frozen=True, eq=False)
class PairSets:
    """The pod pairs of phase nodes (module doc): node ``i`` with ``node_set[i] = q >= 0``
    moves ``bytes[k]`` from pod ``src[k]`` to pod ``dst[k]`` for ``k`` in
    ``ptr[q]:ptr[q+1]``, with GPU-transfer pattern ``pattern[k]`` (-1 without GPU
    transfers); ``node_set[i] = -1`` for every other node."""

    node_set: np.ndarray  # int32 [N]
    ptr: np.ndarray  # int64 [S+1]
    src: np.ndarray  # int32 [P]
    dst: np.ndarray  # int32 [P]
    bytes: np.ndarray  # float64 [P]
    pattern: np.ndarray  # int32 [P]

    @property
    def n_sets(self) -> int:
        return int(self.ptr.size - 1)

    def rows(self, nodes: np.ndarray, dag: TaskDAG) -> tuple[np.ndarray, ...]:
        """The pod pairs of ``nodes`` (comm nodes, in the order given; a plain comm node
        is its own single pair): ``(node, src, dst, bytes, pattern)`` per pair, grouped by
        node. ``pattern`` of a plain node is its ``dag.gpu`` pattern (-1 without)."""
        nodes = np.asarray(nodes, np.int64)
        q = self.node_set[nodes]
        own = q >= 0
        sizes = np.ones(nodes.size, np.int64)
        sizes[own] = np.diff(self.ptr)[q[own]]
        node = np.repeat(nodes, sizes)
        first = np.full(nodes.size, -1, np.int64)
        first[own] = self.ptr[q[own]]
        k = np.repeat(first - np.cumsum(np.r_[0, sizes[:-1]]), sizes) + np.arange(sizes.sum())
        plain = np.repeat(q < 0, sizes)
        src, dst = dag.pod[node].astype(np.int64), dag.dst[node].astype(np.int64)
        nbytes = dag.bytes[node].copy()
        pattern = dag.gpu.pattern[node] if dag.gpu is not None else np.full(node.size, -1)
        pattern = pattern.astype(np.int64)
        kk = k[~plain]
        src[~plain], dst[~plain] = self.src[kk], self.dst[kk]
        nbytes[~plain], pattern[~plain] = self.bytes[kk], self.pattern[kk]
        return node, src, dst, nbytes, pattern


class PairSetTable:
    """Interns the pair sets of phase nodes while building (equal sets, one id)."""

    def __init__(self):
        self._ids: dict[bytes, int] = {}
        self._rows: list[tuple[np.ndarray, ...]] = []

    def intern(self, src, dst, nbytes, pattern) -> int:
        arrays = (
            np.asarray(src, np.int32),
            np.asarray(dst, np.int32),
            np.asarray(nbytes, np.float64),
            np.asarray(pattern, np.int32),
        )
        key = b"".join(a.tobytes() for a in arrays)
        if key not in self._ids:
            self._ids[key] = len(self._rows)
            self._rows.append(arrays)
        return self._ids[key]

    def freeze(self, node_set: np.ndarray) -> PairSets:
        rows = self._rows or [tuple(np.zeros(0, d) for d in (np.int32, np.int32, float, np.int32))]
        cols = [np.concatenate([r[j] for r in rows]) for j in range(4)]
        sizes = [r[0].size for r in self._rows]
        return PairSets(
            node_set=node_set.astype(np.int32),
            ptr=np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64),
            src=cols[0],
            dst=cols[1],
            bytes=cols[2],
            pattern=cols[3],
        )


@dataclass(frozen=True, eq=False)
class TaskDAG:
    """A training iteration as a node-weighted DAG over ``n_pods`` pods (see module doc)."""

    n_pods: int
    kind: np.ndarray  # int8 [N]
    pod: np.ndarray  # int32 [N], compute pod or comm source, -1 for barriers
    dst: np.ndarray  # int32 [N], comm destination, -1 elsewhere
    duration_s: np.ndarray  # float64 [N], compute time (0 elsewhere)
    bytes: np.ndarray  # float64 [N], comm bytes (0 elsewhere)
    latency_s: np.ndarray  # float64 [N], comm start-up latency (0 elsewhere)
    phase: np.ndarray  # int32 [N], phase index of comm nodes and phase barriers, else -1
    indptr: np.ndarray  # int64 [N+1], successor CSR
    indices: np.ndarray  # int32 [E]
    phases: tuple[Phase, ...] = ()
    names: tuple[str, ...] = field(default=(), repr=False)
    gpu: GpuTransfers | None = field(default=None, repr=False)
    pairs: PairSets | None = field(default=None, repr=False)

    @property
    def n_nodes(self) -> int:
        return int(self.kind.size)

    @property
    def n_edges(self) -> int:
        return int(self.indices.size)

    @cached_property
    def edges(self) -> np.ndarray:
        """Edge list ``[E, 2]`` (from, to)."""
        src = np.repeat(np.arange(self.n_nodes, dtype=np.int32), np.diff(self.indptr))
        return np.stack([src, self.indices], axis=1)

    @cached_property
    def comm_nodes(self) -> np.ndarray:
        return np.flatnonzero(self.kind == COMM)

    def comm_bytes(self) -> float:
        """Total bytes on the inter-pod network in one iteration."""
        return float(self.bytes.sum())

    def durations(self, rate_bps: float | np.ndarray) -> np.ndarray:
        """Node durations (s) with every comm node at ``rate_bps`` (a scalar, or per node)."""
        rate = np.broadcast_to(np.asarray(rate_bps, dtype=float), self.kind.shape)
        t = self.duration_s.copy()
        m = self.kind == COMM
        t[m] = self.latency_s[m] + 8.0 * self.slowest_pair_bytes()[m] / rate[m]
        return t

    def slowest_pair_bytes(self) -> np.ndarray:
        """Per node, the bytes of its largest pod pair: its own bytes, or the largest of a
        phase node's pair set (the pair that sets the phase's time at a uniform rate)."""
        if self.pairs is None:
            return self.bytes
        p = self.pairs
        out = self.bytes.copy()
        q = p.node_set
        sets = np.flatnonzero(np.diff(p.ptr) > 0)
        big = np.zeros(p.n_sets)
        big[sets] = np.maximum.reduceat(p.bytes, p.ptr[sets])
        out[q >= 0] = big[q[q >= 0]]
        return out

    def critical_path(self, durations_s: np.ndarray) -> float:
        """Length (s) of the longest source-to-sink path under the given node durations."""
        return float(_longest_finish(self.indptr, self.indices, durations_s).max(initial=0.0))

    def critical_path_at(self, rate_bps: float) -> float:
        """Hard critical path (s) with every pod pair at the uniform rate ``rate_bps``."""
        return self.critical_path(self.durations(rate_bps))

    def compute_time(self) -> float:
        """Critical path (s) with infinitely fast communication (comm latency kept)."""
        return self.critical_path(self.durations(np.inf))

    def phase_nodes(self) -> list[np.ndarray]:
        """For each phase, the indices of its comm nodes."""
        comm = self.comm_nodes
        order = np.argsort(self.phase[comm], kind="stable")
        split = np.searchsorted(self.phase[comm][order], np.arange(1, len(self.phases)))
        return np.split(comm[order], split)

    def relabel(self, perm, n_pods: int | None = None) -> TaskDAG:
        """The same DAG on ``n_pods`` pods (default ``self.n_pods``) with pod ``v`` renamed
        ``perm[v]``: compute pods, comm sources and destinations (barriers keep ``-1``).

        ``perm`` [self.n_pods]: distinct integers in ``0..n_pods-1`` (a permutation when
        ``n_pods`` is the DAG's own), else a ConfigError naming ``perm``. Durations, bytes,
        latencies, phases, names and GPU transfers (GPU indices within a pod) are unchanged;
        the nodes are renumbered topologically by :func:`from_arrays`."""
        n = self.n_pods if n_pods is None else int(n_pods)
        perm = np.asarray(perm, dtype=np.int64)
        distinct = np.unique(perm).size == perm.size
        if perm.shape != (self.n_pods,) or not distinct or ((perm < 0) | (perm >= n)).any():
            raise ConfigError(
                "perm", f"must map the {self.n_pods} pods to distinct pods in 0..{n - 1}"
            )
        pod, dst = (
            np.where(a >= 0, perm[np.maximum(a, 0)], a).astype(np.int32)
            for a in (self.pod, self.dst)
        )
        edges = self.edges.astype(np.int64)
        pairs = self.pairs
        if pairs is not None:
            pairs = replace(
                pairs, src=perm[pairs.src].astype(np.int32), dst=perm[pairs.dst].astype(np.int32)
            )
        return from_arrays(
            n,
            kind=self.kind,
            pod=pod,
            dst=dst,
            duration_s=self.duration_s,
            nbytes=self.bytes,
            latency_s=self.latency_s,
            phase=self.phase,
            edge_src=edges[:, 0],
            edge_dst=edges[:, 1],
            phases=self.phases,
            names=self.names,
            gpu=self.gpu,
            pairs=pairs,
        )

    def to_networkx(self) -> nx.DiGraph:
        """The DAG as a networkx DiGraph with node attributes (for inspection and tests)."""
        import networkx as nx  # here, not at module level: it costs start-up time

        g = nx.DiGraph()
        for i in range(self.n_nodes):
            attrs = {"kind": KIND_NAMES[self.kind[i]], "phase": int(self.phase[i])}
            if self.kind[i] == COMPUTE:
                attrs.update(pod=int(self.pod[i]), duration_s=float(self.duration_s[i]))
            elif self.kind[i] == COMM:
                attrs.update(
                    src=int(self.pod[i]),
                    dst=int(self.dst[i]),
                    bytes=float(self.bytes[i]),
                    latency_s=float(self.latency_s[i]),
                )
            if self.names:
                attrs["name"] = self.names[i]
            g.add_node(i, **attrs)
        g.add_edges_from(map(tuple, self.edges.tolist()))
        return g


@numba.njit(cache=True)
def _longest_finish(indptr, indices, dur):  # pragma: no cover - compiled
    n = dur.size
    start = np.zeros(n)
    finish = np.empty(n)
    for i in range(n):
        finish[i] = start[i] + dur[i]
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            if finish[i] > start[j]:
                start[j] = finish[i]
    return finish


class DagBuilder:
    """Accumulates nodes, edges and phases in any order; :meth:`build` sorts them topologically."""

    def __init__(self, n_pods: int, gpus_per_pod: int | None = None, phase_nodes: bool = False):
        """``gpus_per_pod`` given: comm nodes carry GPU-transfer patterns; ``phase_nodes``:
        a phase of several pairs is one node with a pair set (module doc)."""
        self.n_pods = n_pods
        self._cols: dict[str, list] = {
            k: [] for k in ("kind", "pod", "dst", "dur", "bytes", "lat", "phase", "pat", "set")
        }
        self.pair_sets = PairSetTable() if phase_nodes else None
        self._names: list[str] = []
        self._src: list[int] = []
        self._dst: list[int] = []
        self.phases: list[Phase] = []
        self.patterns = None if gpus_per_pod is None else PatternTable(gpus_per_pod)

    def _node(self, kind, pod, dst, dur, nbytes, lat, phase, name, pattern=-1, pair_set=-1) -> int:
        c = self._cols
        values = (kind, pod, dst, dur, nbytes, lat, phase, pattern, pair_set)
        for key, val in zip(c, values, strict=True):
            c[key].append(val)
        self._names.append(name)
        return len(self._names) - 1

    def compute(self, pod: int, duration_s: float, name: str = "") -> int:
        return self._node(COMPUTE, pod, -1, duration_s, 0.0, 0.0, -1, name)

    def barrier(self, phase: int = -1, name: str = "") -> int:
        return self._node(BARRIER, -1, -1, 0.0, 0.0, 0.0, phase, name)

    def comm(
        self,
        src: int,
        dst: int,
        nbytes: float,
        latency_s: float,
        phase: int,
        name: str = "",
        pattern: int = -1,
    ) -> int:
        return self._node(COMM, src, dst, 0.0, nbytes, latency_s, phase, name, pattern)

    def _comm_nodes(self, k, name, pair_src, pair_dst, pair_bytes, latency_s, pair_pattern):
        """Append the comm nodes of phase ``k`` in bulk (as :meth:`comm` one by one)."""
        src = np.asarray(pair_src, dtype=np.int64).tolist()
        dst = np.asarray(pair_dst, dtype=np.int64).tolist()
        nbytes = np.asarray(pair_bytes, dtype=float).tolist()
        m = len(nbytes)
        if not len(src) == len(dst) == m:
            raise ValueError("pair_src, pair_dst and pair_bytes must have one entry per pair")
        first = len(self._names)
        c = self._cols
        c["kind"] += [COMM] * m
        c["pod"] += src
        c["dst"] += dst
        c["dur"] += [0.0] * m
        c["bytes"] += nbytes
        c["lat"] += [latency_s] * m
        c["phase"] += [k] * m
        c["pat"] += [-1] * m if pair_pattern is None else np.asarray(pair_pattern).tolist()
        c["set"] += [-1] * m
        self._names += [f"{name} {u}->{v}" for u, v in zip(src, dst, strict=True)]
        return list(range(first, first + m))

    def _phase_node(self, k, name, pair_src, pair_dst, pair_bytes, latency_s, pair_pattern):
        """One comm node for all pairs of phase ``k`` (``phase_nodes``, module doc)."""
        nbytes = np.asarray(pair_bytes, dtype=float)
        pattern = np.full(nbytes.size, -1) if pair_pattern is None else pair_pattern
        q = self.pair_sets.intern(pair_src, pair_dst, nbytes, pattern)
        return self._node(COMM, -1, -1, 0.0, float(nbytes.sum()), latency_s, k, name, -1, q)

    def edge(self, u: int, v: int) -> None:
        self._src.append(u)
        self._dst.append(v)

    def edges(self, us, v: int) -> None:
        for u in us:
            self.edge(u, v)

    def phase(
        self,
        kind: str,
        name: str,
        pair_src,
        pair_dst,
        pair_bytes,
        latency_s: float,
        intra_pod_bytes: float,
        preds=(),
        succs=(),
        *,
        meta: Phase | None = None,
        pair_pattern=None,
    ) -> tuple[int, int]:
        """Add a phase of directed pod-pair transfers after ``preds`` and before ``succs``.

        No pair: one barrier; one pair: one comm node; more: entry barrier -> comm nodes in
        parallel -> exit barrier, or with ``phase_nodes`` one node holding the pair set.
        ``meta`` gives the collective fields of :class:`Phase` (group, op, ranks);
        ``pair_pattern`` each pair's GPU-transfer pattern id. Returns the phase's (entry,
        exit) nodes.
        """
        k = len(self.phases)
        base = Phase(kind, name, float(intra_pod_bytes))
        if meta is not None:
            base = replace(meta, kind=kind, name=name, intra_pod_bytes=float(intra_pod_bytes))
        self.phases.append(base)
        if self.pair_sets is not None and len(pair_bytes) > 1:
            node = self._phase_node(
                k, name, pair_src, pair_dst, pair_bytes, latency_s, pair_pattern
            )
            self.edges(preds, node)
            for s in succs:
                self.edge(node, s)
            return node, node
        comms = self._comm_nodes(k, name, pair_src, pair_dst, pair_bytes, latency_s, pair_pattern)
        if len(comms) == 1:
            entry = exit_ = comms[0]
        else:
            entry = exit_ = self.barrier(k, f"{name} join")
            if comms:
                exit_ = self.barrier(k, f"{name} exit")
                self._src += [entry] * len(comms) + comms
                self._dst += comms + [exit_] * len(comms)
        self.edges(preds, entry)
        for s in succs:
            self.edge(exit_, s)
        return entry, exit_

    def build(self) -> TaskDAG:
        """Freeze into a :class:`TaskDAG` numbered in topological order."""
        c = self._cols
        n = len(self._names)
        src = np.asarray(self._src, dtype=np.int64)
        dst = np.asarray(self._dst, dtype=np.int64)
        return from_arrays(
            self.n_pods,
            kind=np.asarray(c["kind"], dtype=np.int8).reshape(n),
            pod=np.asarray(c["pod"], dtype=np.int32).reshape(n),
            dst=np.asarray(c["dst"], dtype=np.int32).reshape(n),
            duration_s=np.asarray(c["dur"], dtype=float).reshape(n),
            nbytes=np.asarray(c["bytes"], dtype=float).reshape(n),
            latency_s=np.asarray(c["lat"], dtype=float).reshape(n),
            phase=np.asarray(c["phase"], dtype=np.int32).reshape(n),
            edge_src=src,
            edge_dst=dst,
            phases=tuple(self.phases),
            names=tuple(self._names),
            gpu=None
            if self.patterns is None
            else self.patterns.freeze(np.asarray(c["pat"], dtype=np.int32).reshape(n)),
            pairs=None
            if self.pair_sets is None
            else self.pair_sets.freeze(np.asarray(c["set"], dtype=np.int32).reshape(n)),
        )


def topological_order(n: int, edge_src: np.ndarray, edge_dst: np.ndarray, names=()) -> np.ndarray:
    """Kahn's order of ``n`` nodes (ties by index); a cycle raises FormatError naming a node."""
    order = _kahn(n, edge_src.astype(np.int64), edge_dst.astype(np.int64))
    if order.size < n:
        seen = np.zeros(n, dtype=bool)
        seen[order] = True
        bad = int(np.flatnonzero(~seen)[0])
        label = names[bad] if names else bad
        raise FormatError(f"nodes[{label}]", "is on a cycle: a task DAG must be acyclic")
    return order


@numba.njit(cache=True)
def _kahn(n, src, dst):  # pragma: no cover - compiled
    indeg = np.zeros(n, dtype=np.int64)
    for k in range(src.size):
        indeg[dst[k]] += 1
    order_e = np.argsort(src, kind="mergesort")
    ptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(src.size):
        ptr[src[k] + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    queue = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for i in range(n):
        if indeg[i] == 0:
            queue[tail] = i
            tail += 1
    while head < tail:
        i = queue[head]
        head += 1
        for k in range(ptr[i], ptr[i + 1]):
            j = dst[order_e[k]]
            indeg[j] -= 1
            if indeg[j] == 0:
                queue[tail] = j
                tail += 1
    return queue[:tail]


def from_arrays(
    n_pods: int,
    *,
    kind,
    pod,
    dst,
    duration_s,
    nbytes,
    latency_s,
    phase,
    edge_src,
    edge_dst,
    phases=(),
    names=(),
    gpu: GpuTransfers | None = None,
    pairs: PairSets | None = None,
) -> TaskDAG:
    """Build a TaskDAG from unordered arrays: renumber topologically, drop duplicate edges
    (``gpu`` and ``pairs``, if given, are indexed by the unordered node ids and renumbered
    with them)."""
    n = kind.size
    order = topological_order(n, edge_src, edge_dst, names)
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    adj = sp.coo_matrix(
        (np.ones(edge_src.size, dtype=np.int8), (new_id[edge_src], new_id[edge_dst])), shape=(n, n)
    ).tocsr()
    adj.sum_duplicates()
    adj.sort_indices()
    return TaskDAG(
        n_pods=n_pods,
        kind=kind[order],
        pod=pod[order],
        dst=dst[order],
        duration_s=duration_s[order],
        bytes=nbytes[order],
        latency_s=latency_s[order],
        phase=phase[order],
        indptr=adj.indptr.astype(np.int64),
        indices=adj.indices.astype(np.int32),
        phases=tuple(phases),
        names=tuple(names[i] for i in order) if names else (),
        gpu=None if gpu is None else replace(gpu, pattern=gpu.pattern[order]),
        pairs=None if pairs is None else replace(pairs, node_set=pairs.node_set[order]),
    )
