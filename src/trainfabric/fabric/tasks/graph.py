"""A fabric-level task graph: the input of the DAG-driven engine
(:mod:`~trainfabric.fabric.tasks.engine`).

Task ``i`` is one of

* ``TIMER`` (compute): busy for ``duration_s[i]`` seconds, no network;
* ``COMM``: the flows of flow set ``flow_set[i]`` (CSR ``set_ptr``), each ``flow_bytes[k]``
  payload bytes on connection ``flow_conn[k]``; it finishes when its last flow's last byte
  arrives (a task without flows finishes when it starts);
* ``BARRIER``: a count-down join of zero duration.

Release rule (count-down, no n^2 edges): a task is *released* when its last predecessor
finishes; it *starts* ``latency_s[i]`` later:

    start_i = max_{p ∈ pred(i)} finish_p + latency_s[i]       (0 + latency_s[i] for roots)

Successors are CSR (``succ_ptr``, ``succ``) and every edge goes from a lower to a higher task
index (a topological numbering, as in :class:`~trainfabric.workloads.dag.TaskDAG`), so the
graph has no cycle. Tasks of one collective step that end in one barrier need one edge each,
not one per pair of flows.

Connections (``conn_src``, ``conn_dst`` hosts; ``conn_key`` the 64-bit ECMP / flowlet hash
input; ``conn_channel`` the QP index for plane pinning) persist across tasks, as NCCL keeps its
queue pairs: every flow on connection ``c`` follows ``c``'s route in the current routing epoch.
Flow sets let many tasks share one list of flows (successive ring steps of one pod pair), so
the graph's size does not grow with steps x flows. Zero-byte flows, flow sets without flows and
zero-duration timers are legal. ``job`` tags tasks with a tenant (default 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric.flows import FlowTable, coerce_arrays

TIMER, COMM, BARRIER = 0, 1, 2  # the numbering of workloads.dag's COMPUTE / COMM / BARRIER
KIND_NAMES = ("timer", "comm", "barrier")
_TASK_DTYPES = {
    "kind": np.int8,
    "duration_s": np.float64,
    "latency_s": np.float64,
    "succ_ptr": np.int64,
    "succ": np.int64,
    "flow_set": np.int64,
    "set_ptr": np.int64,
    "flow_conn": np.int64,
    "flow_bytes": np.float64,
    "conn_src": np.int64,
    "conn_dst": np.int64,
    "conn_key": np.uint64,
    "conn_channel": np.int64,
    "job": np.int64,
}


@dataclass(frozen=True, eq=False)
class TaskGraph:
    """Tasks, their successors, flow sets and connections as arrays (module doc)."""

    kind: np.ndarray
    duration_s: np.ndarray
    latency_s: np.ndarray
    succ_ptr: np.ndarray
    succ: np.ndarray
    flow_set: np.ndarray
    set_ptr: np.ndarray
    flow_conn: np.ndarray
    flow_bytes: np.ndarray
    conn_src: np.ndarray
    conn_dst: np.ndarray
    conn_key: np.ndarray
    conn_channel: np.ndarray
    job: np.ndarray | None = None
    n: int = field(init=False)

    def __post_init__(self):
        coerce_arrays(self, _TASK_DTYPES, length="kind", optional="job")
        self._check()

    @property
    def n_conns(self) -> int:
        return int(self.conn_src.size)

    @property
    def n_edges(self) -> int:
        return int(self.succ.size)

    def task_flows(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(conn, bytes)`` of the flows of task ``i`` (empty unless a comm task)."""
        s = self.flow_set[i]
        if s < 0:
            return np.zeros(0, np.int64), np.zeros(0)
        lo, hi = self.set_ptr[s], self.set_ptr[s + 1]
        return self.flow_conn[lo:hi], self.flow_bytes[lo:hi]

    def task_bytes(self) -> np.ndarray:
        """Payload bytes of every task (0 for timers and barriers)."""
        per_set = np.add.reduceat(np.r_[self.flow_bytes, 0.0], self.set_ptr[:-1])
        per_set[np.diff(self.set_ptr) == 0] = 0.0
        out = np.zeros(self.n)
        comm = self.flow_set >= 0
        out[comm] = per_set[self.flow_set[comm]]
        return out

    def predecessors(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of the predecessors (in increasing task index)."""
        owner = np.repeat(np.arange(self.n), np.diff(self.succ_ptr))
        order = np.argsort(self.succ, kind="stable")
        ptr = np.zeros(self.n + 1, np.int64)
        np.add.at(ptr, self.succ + 1, 1)
        return np.cumsum(ptr), owner[order]

    def conn_table(self) -> FlowTable:
        """The connections as a :class:`FlowTable` of one unit flow each (what the router
        routes: a route is a function of a connection's endpoints, key and channel)."""
        return FlowTable.simple(
            self.conn_src,
            self.conn_dst,
            1.0,
            entropy=self.conn_key,
            channel=self.conn_channel,
        )

    def _check(self) -> None:
        n, C = self.n, self.conn_src.size
        for name in ("duration_s", "latency_s", "flow_set", "job"):
            if getattr(self, name).shape != (n,):
                raise ConfigError(f"tasks.{name}", f"must have {n} entries like kind")
        if np.any((self.kind < TIMER) | (self.kind > BARRIER)):
            raise ConfigError("tasks.kind", "must be 0 (timer), 1 (comm) or 2 (barrier)")
        for name in ("duration_s", "latency_s"):
            v = getattr(self, name)
            if np.any(v < 0) or not np.all(np.isfinite(v)):
                raise ConfigError(f"tasks.{name}", "must be finite and >= 0")
        _check_csr("tasks.succ_ptr", self.succ_ptr, self.succ.size, n)
        owner = np.repeat(np.arange(n), np.diff(self.succ_ptr))
        if np.any(self.succ <= owner) or np.any(self.succ >= n):
            raise ConfigError("tasks.succ", "every edge must go to a higher task index (< n)")
        S = self.set_ptr.size - 1
        _check_csr("tasks.set_ptr", self.set_ptr, self.flow_conn.size, S)
        comm = self.kind == COMM
        if np.any(self.flow_set[~comm] != -1):
            raise ConfigError("tasks.flow_set", "must be -1 for timers and barriers")
        if np.any((self.flow_set[comm] < 0) | (self.flow_set[comm] >= S)):
            raise ConfigError("tasks.flow_set", f"comm tasks need a flow set in 0..{S - 1}")
        if self.flow_bytes.shape != self.flow_conn.shape:
            raise ConfigError("tasks.flow_bytes", "must have one entry per flow like flow_conn")
        if np.any(self.flow_bytes < 0) or not np.all(np.isfinite(self.flow_bytes)):
            raise ConfigError("tasks.flow_bytes", "must be finite and >= 0")
        if np.any((self.flow_conn < 0) | (self.flow_conn >= C)):
            raise ConfigError("tasks.flow_conn", f"connection ids must be in 0..{C - 1}")
        for name in ("conn_dst", "conn_key", "conn_channel"):
            if getattr(self, name).shape != (C,):
                raise ConfigError(f"tasks.{name}", f"must have {C} entries like conn_src")
        if np.any(self.conn_src < 0) or np.any(self.conn_dst < 0):
            raise ConfigError("tasks.conn_src", "host ids must be >= 0")
        if np.any(self.conn_src == self.conn_dst):
            raise ConfigError("tasks.conn_dst", "a connection needs src != dst")
        if np.any(self.conn_channel < 0):
            raise ConfigError("tasks.conn_channel", "must be >= 0")

    # -- builders -------------------------------------------------------------------------------
    @classmethod
    def from_edges(
        cls,
        kind,
        duration_s,
        edges,
        *,
        latency_s=None,
        flow_set=None,
        set_ptr=None,
        flow_conn=None,
        flow_bytes=None,
        conn_src=(),
        conn_dst=(),
        conn_key=None,
        conn_channel=None,
        job=None,
    ) -> TaskGraph:
        """A graph from an edge list ``[(u, v), ...]`` (``u < v``); connections default to
        key = index and channel 0; flow sets default to none."""
        kind = np.asarray(kind, np.int8)
        n = kind.size
        e = np.asarray(edges, np.int64).reshape(-1, 2)
        order = np.lexsort((e[:, 1], e[:, 0]))
        e = e[order]
        ptr = np.zeros(n + 1, np.int64)
        np.add.at(ptr, e[:, 0] + 1, 1)
        C = np.asarray(conn_src).size
        return cls(
            kind=kind,
            duration_s=np.broadcast_to(np.asarray(duration_s, float), (n,)),
            latency_s=np.zeros(n) if latency_s is None else np.broadcast_to(latency_s, (n,)),
            succ_ptr=np.cumsum(ptr),
            succ=e[:, 1],
            flow_set=np.full(n, -1) if flow_set is None else flow_set,
            set_ptr=np.zeros(1, np.int64) if set_ptr is None else set_ptr,
            flow_conn=np.zeros(0, np.int64) if flow_conn is None else flow_conn,
            flow_bytes=np.zeros(0) if flow_bytes is None else flow_bytes,
            conn_src=np.asarray(conn_src, np.int64),
            conn_dst=np.asarray(conn_dst, np.int64),
            conn_key=np.arange(C, dtype=np.uint64) if conn_key is None else conn_key,
            conn_channel=np.zeros(C, np.int64) if conn_channel is None else conn_channel,
            job=job,
        )

    @classmethod
    def from_flow_table(cls, flows: FlowTable) -> TaskGraph:
        """The flow table as a task graph with the same start rule: flow ``f`` is comm task
        ``2f + 1`` (one flow, latency ``delay_s[f]``), preceded by a timer ``2f`` of
        ``release_s[f]`` and by the comm tasks of its dependencies, so
        ``start = max(release_s, finish of deps) + delay_s`` as in the flow engine."""
        n = flows.n
        kind = np.tile(np.array([TIMER, COMM], np.int8), n)
        dur = np.zeros(2 * n)
        dur[0::2] = flows.release_s
        lat = np.zeros(2 * n)
        lat[1::2] = flows.delay_s
        owner = np.repeat(np.arange(n), np.diff(flows.deps_ptr))
        edges = np.r_[
            np.c_[2 * np.arange(n), 2 * np.arange(n) + 1],
            np.c_[2 * flows.deps + 1, 2 * owner + 1],
        ]
        cols = np.stack([flows.src, flows.dst, flows.channel, flows.entropy.view(np.int64)], 1)
        uniq, conn = np.unique(cols, axis=0, return_inverse=True)
        flow_set = np.full(2 * n, -1, np.int64)
        flow_set[1::2] = np.arange(n)
        return cls.from_edges(
            kind,
            dur,
            edges,
            latency_s=lat,
            flow_set=flow_set,
            set_ptr=np.arange(n + 1, dtype=np.int64),
            flow_conn=conn.ravel(),
            flow_bytes=flows.bytes,
            conn_src=uniq[:, 0],
            conn_dst=uniq[:, 1],
            conn_key=uniq[:, 3].view(np.uint64),
            conn_channel=uniq[:, 2],
            job=np.repeat(flows.job, 2),
        )


def _check_csr(name: str, ptr: np.ndarray, size: int, rows: int) -> None:
    if ptr.shape != (rows + 1,) or ptr[0] != 0 or ptr[-1] != size or np.any(np.diff(ptr) < 0):
        raise ConfigError(name, f"must be a CSR pointer of {rows + 1} entries from 0 to {size}")
