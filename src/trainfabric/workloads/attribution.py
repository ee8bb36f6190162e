"""Where an iteration's time goes: exposed communication and per-collective bandwidth.

Inputs: a :class:`~trainfabric.workloads.dag.TaskDAG` and each node's ``start`` and
``finish`` (s) from any engine — the fabric's, or the DAG's own longest path at a rate
(:func:`asap_times`). Compute nodes must keep their DAG durations (an engine delays them,
never stretches them).

**Compute-only critical path** ``CP0``: the DAG's longest path with every comm node (and
its latency) taking zero time — what the iteration would take on an infinitely fast network.

**Exposed communication** ``X = T - CP0`` (``T`` = the latest finish minus the earliest
start ``t0``, so an iteration started at an offset is measured from it). Its split by phase
category (``pp_*`` -> PP, ``dp_*`` and ``dp_expert_*`` -> DP, ``moe_*`` -> EP, anything else
-> other) walks back the critical path: from the node that finishes last, repeatedly to its
*releasing predecessor* (the predecessor that finishes last; ties go to the lower node
index, the earlier node in topological order) until a node without predecessors. Each path
node ``v`` with releasing predecessor ``u`` owns the segment ``(finish(u), finish(v)]``
(``finish(u) = t0`` at the source), so the segments tile ``[t0, t0 + T]``. A compute node's
segment splits into its duration (compute) and the wait before it (category other); a comm
node's or a phase barrier's whole segment goes to its phase's category. Hence
``T = C_path + sum_k W_k`` with ``C_path`` the compute on the path and ``W_k`` the path's
time in category ``k``. Since ``C_path <= CP0`` (``CP0`` is the longest compute-only path),
``sum_k W_k >= X``, and ``X`` is split in proportion:
``X_k = X * W_k / sum_k W_k`` — the ``X_k`` sum to ``X`` (to rounding; exactly ``X`` is
returned as the total), and ``W_k`` is reported beside them as the path's own time.

**Collectives.** A collective group is the set of phases with the same
:attr:`~trainfabric.workloads.dag.Phase.group_name` (all steps of one ring reduce-scatter;
one micro-batch's PP send; one all-to-all). Per group: start (earliest start of its nodes),
finish (latest finish), bytes ``B`` (inter-pod comm bytes plus ``intra_pod_bytes``), and the
NCCL-tests bandwidths (``doc/PERFORMANCE.md`` of nccl-tests) with ``t = finish - start``,
``c`` concurrent collectives of ``n`` ranks each and ``S`` per collective:

============== ========================= ===========================
op             ``S`` (bytes)             busbw = algbw x
============== ========================= ===========================
all_reduce     ``B / (2 c (n-1))``       ``2 (n-1) / n``
reduce_scatter ``B / (c (n-1))``         ``(n-1) / n``
all_gather     ``B / (c (n-1))``         ``(n-1) / n``
all_to_all     ``B / (c (n-1))``         ``(n-1) / n``
send_recv      ``B / c``                 ``1``
============== ========================= ===========================

``S`` is NCCL-tests' size: the per-rank buffer of an all-reduce, the whole array of a
reduce-scatter or all-gather (``n`` x the per-rank part), a rank's send buffer of an
all-to-all (its ``n`` chunks, the one it keeps included — for a skewed all-to-all, the
uniform one that moves the same ``B``; ``B`` includes the intra-pod bytes), the message of a
send. ``algbw = S / t``. The bandwidths are None (JSON null) where ``t = 0`` (a phase kept
inside pods) or ``n``/``c``/``op`` are unknown (a DAG read from JSON without them).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numba
import numpy as np

from trainfabric.workloads.dag import BARRIER, COMM, COMPUTE, TaskDAG

CATEGORIES = ("PP", "DP", "EP", "other")
_STEP_SUFFIX = re.compile(r"\s+k\d+$")
_BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
_SIZE_DIVISOR = {  # S = B / (c * divisor(n))
    "all_reduce": lambda n: 2.0 * (n - 1),
    "reduce_scatter": lambda n: n - 1.0,
    "all_gather": lambda n: n - 1.0,
    "all_to_all": lambda n: n - 1.0,
    "send_recv": lambda n: 1.0,
}


def category(kind: str) -> str:
    """Phase kind -> ``PP``, ``DP``, ``EP`` or ``other`` (module doc)."""
    if kind.startswith("pp_"):
        return "PP"
    if kind.startswith("dp_"):
        return "DP"
    if kind.startswith("moe_"):
        return "EP"
    return "other"


def asap_times(dag: TaskDAG, durations_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(start, finish)`` of every node when each starts as soon as its predecessors end
    (the DAG's own one-hop schedule, e.g. with ``dag.durations(rate)``)."""
    d = np.asarray(durations_s, dtype=float)
    start = _earliest_start(dag.indptr, dag.indices, d)
    return start, start + d


@numba.njit(cache=True)
def _earliest_start(indptr, indices, dur):  # pragma: no cover - compiled
    start = np.zeros(dur.size)
    for i in range(dur.size):
        f = start[i] + dur[i]
        for k in range(indptr[i], indptr[i + 1]):
            if f > start[indices[k]]:
                start[indices[k]] = f
    return start


def zero_comm_durations(dag: TaskDAG) -> np.ndarray:
    """Node durations with every comm node (latency included) at zero time."""
    return np.where(dag.kind == COMPUTE, dag.duration_s, 0.0)


def compute_only_critical_path(dag: TaskDAG) -> float:
    """``CP0``: the critical path (s) of the same DAG with zero-time communication."""
    return dag.critical_path(zero_comm_durations(dag))


@numba.njit(cache=True)
def _releasing(indptr, indices, finish):  # pragma: no cover - compiled
    n = finish.size
    pred = np.full(n, -1, dtype=np.int64)
    for u in range(n):  # increasing u: a strict '>' keeps the earlier node on ties
        for k in range(indptr[u], indptr[u + 1]):
            v = indices[k]
            if pred[v] < 0 or finish[u] > finish[pred[v]]:
                pred[v] = u
    return pred


def releasing_predecessors(dag: TaskDAG, finish: np.ndarray) -> np.ndarray:
    """Per node, the predecessor that finishes last (ties: lower index); -1 at sources."""
    return _releasing(dag.indptr, dag.indices, np.asarray(finish, dtype=float))


def node_categories(dag: TaskDAG) -> np.ndarray:
    """Per node, the index in :data:`CATEGORIES` of its phase's category (int8; -1 for
    compute nodes and barriers outside phases)."""
    per_phase = np.array([CATEGORIES.index(category(p.kind)) for p in dag.phases], dtype=np.int8)
    out = np.full(dag.n_nodes, -1, dtype=np.int8)
    on = dag.phase >= 0
    out[on] = per_phase[dag.phase[on]]
    return out


def critical_path_nodes(
    dag: TaskDAG, finish: np.ndarray, pred: np.ndarray | None = None
) -> np.ndarray:
    """Nodes of the walked-back critical path, source first (module doc); ``pred``: an
    engine's own releasing predecessor per node (-1 at sources), else computed from
    ``finish`` (:func:`releasing_predecessors`)."""
    finish = np.asarray(finish, dtype=float)
    if finish.size == 0:
        return np.zeros(0, dtype=np.int64)
    if pred is None:
        pred = releasing_predecessors(dag, finish)
    path = [int(np.argmax(finish))]  # argmax: the first (earliest) node on ties
    while pred[path[-1]] >= 0:
        path.append(int(pred[path[-1]]))
    return np.asarray(path[::-1], dtype=np.int64)


@dataclass(frozen=True)
class ExposedComm:
    """Exposed communication of one iteration (module doc). Times in seconds.

    ``by_category[k]`` = ``X_k`` (sums to ``exposed_comm_s``); ``path_s[k]`` = ``W_k``, the
    walked critical path's own time in category ``k``; ``path_compute_s`` = ``C_path``.
    """

    iteration_s: float
    compute_only_s: float
    exposed_comm_s: float
    by_category: dict[str, float]
    path_s: dict[str, float]
    path_compute_s: float
    path: np.ndarray

    @property
    def exposed_fraction(self) -> float:
        return self.exposed_comm_s / self.iteration_s if self.iteration_s > 0 else 0.0


def _path_segments(dag: TaskDAG, path, start, finish, t0) -> tuple[float, dict[str, float]]:
    """``C_path`` and ``W_k`` of the walked path from time ``t0`` (module doc)."""
    wait: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
    compute = 0.0
    prev_finish = t0
    for v in path.tolist():
        seg = float(finish[v] - prev_finish)
        if dag.kind[v] == COMPUTE:
            dur = float(finish[v] - start[v])
            compute += dur
            wait["other"] += seg - dur
        else:
            k = dag.phase[v]
            cat = category(dag.phases[k].kind) if k >= 0 else "other"
            wait[cat] += seg
        prev_finish = float(finish[v])
    return compute, wait


def exposed_comm(
    dag: TaskDAG, start: np.ndarray, finish: np.ndarray, pred: np.ndarray | None = None
) -> ExposedComm:
    """Iteration time, ``CP0``, exposed communication and its split (module doc); ``pred``
    as in :func:`critical_path_nodes`."""
    start = np.asarray(start, dtype=float)
    finish = np.asarray(finish, dtype=float)
    t0 = float(start.min()) if start.size else 0.0
    t = float(finish.max(initial=0.0)) - t0
    cp0 = compute_only_critical_path(dag)
    x = float(t - cp0)
    path = critical_path_nodes(dag, finish, pred)
    c_path, w = _path_segments(dag, path, start, finish, t0)
    total_w = sum(w.values())
    if total_w > 0:
        split = {k: x * w[k] / total_w for k in CATEGORIES}
    else:  # no communication or wait on the path: X is rounding noise around 0
        split = {**dict.fromkeys(CATEGORIES, 0.0), "other": x}
    return ExposedComm(t, cp0, x, split, w, c_path, path)


# -- collectives ---------------------------------------------------------------------------


def _op_of(kind: str) -> str:
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        if kind.endswith(op):
            return op
    if kind.startswith("moe_"):
        return "all_to_all"
    if kind.startswith("pp_"):
        return "send_recv"
    return ""


@dataclass(frozen=True)
class CollectiveGroups:
    """Phase -> collective group map of a DAG: ``group_of_phase`` int32 [phases]; per group
    its ``names``, ``kinds``, ``ops``, ``n_ranks`` and ``n_collectives`` (0 = unknown)."""

    group_of_phase: np.ndarray
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    ops: tuple[str, ...]
    n_ranks: tuple[int, ...]
    n_collectives: tuple[int, ...]

    @property
    def n_groups(self) -> int:
        return len(self.names)


def phase_groups(dag: TaskDAG) -> CollectiveGroups:
    """Group the DAG's phases into collectives, in order of first appearance.

    The group is :attr:`Phase.group_name`; a phase without builder metadata (read from JSON)
    falls back to its name without a trailing `` k<step>`` (how the builder names the steps
    of one collective), and its op to one inferred from its kind.
    """
    index: dict[str, int] = {}
    rows: list[tuple] = []
    gid = np.empty(len(dag.phases), dtype=np.int32)
    for k, ph in enumerate(dag.phases):
        name = ph.group or _STEP_SUFFIX.sub("", ph.name)
        if name not in index:
            index[name] = len(rows)
            rows.append((name, ph.kind, ph.op or _op_of(ph.kind), ph.n_ranks, ph.n_collectives))
        gid[k] = index[name]
    cols = tuple(zip(*rows, strict=True)) if rows else ((),) * 5
    return CollectiveGroups(gid, *cols)


@dataclass(frozen=True)
class Collective:
    """One collective of an iteration (module doc): times in s, bytes, bandwidths in GB/s
    (1e9 bytes/s, as NCCL-tests prints), None where undefined."""

    name: str
    kind: str
    op: str
    n_ranks: int
    n_collectives: int
    start_s: float
    finish_s: float
    bytes: float
    inter_pod_bytes: float
    size_bytes: float | None
    algbw_GBps: float | None
    busbw_GBps: float | None

    @property
    def duration_s(self) -> float:
        return self.finish_s - self.start_s


def bus_bandwidth(op: str, n: int, c: int, total_bytes: float, t: float):
    """``(S, algbw, busbw)`` in bytes and bytes/s for ``c`` concurrent collectives ``op`` of
    ``n`` ranks moving ``total_bytes`` in ``t`` s (module doc); Nones where undefined."""
    if op not in _BUS_FACTOR or n < 2 or c < 1:
        return None, None, None
    size = total_bytes / (c * _SIZE_DIVISOR[op](n))
    if not t > 0:
        return size, None, None
    algbw = size / t
    return size, algbw, algbw * _BUS_FACTOR[op](n)


def collectives(dag: TaskDAG, start: np.ndarray, finish: np.ndarray) -> list[Collective]:
    """Per collective group (:func:`phase_groups`): start, finish, bytes and bandwidths."""
    groups = phase_groups(dag)
    g = groups.n_groups
    on = (dag.phase >= 0) & ((dag.kind == COMM) | (dag.kind == BARRIER))
    gid = groups.group_of_phase[dag.phase[on]]
    t0 = np.full(g, np.inf)
    t1 = np.full(g, -np.inf)
    np.minimum.at(t0, gid, np.asarray(start, dtype=float)[on])
    np.maximum.at(t1, gid, np.asarray(finish, dtype=float)[on])
    inter = np.bincount(gid, weights=dag.bytes[on], minlength=g)
    intra: dict[int, float] = defaultdict(float)
    for k, ph in enumerate(dag.phases):
        intra[int(groups.group_of_phase[k])] += ph.intra_pod_bytes
    out = []
    for i in range(g):
        total = float(inter[i] + intra[i])
        a, b = (float(t0[i]), float(t1[i])) if np.isfinite(t0[i]) else (0.0, 0.0)
        size, alg, bus = bus_bandwidth(
            groups.ops[i], groups.n_ranks[i], groups.n_collectives[i], total, b - a
        )
        out.append(
            Collective(
                groups.names[i],
                groups.kinds[i],
                groups.ops[i],
                groups.n_ranks[i],
                groups.n_collectives[i],
                a,
                b,
                total,
                float(inter[i]),
                size,
                None if alg is None else alg / 1e9,
                None if bus is None else bus / 1e9,
            )
        )
    return out
