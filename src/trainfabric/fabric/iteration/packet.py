"""A job's iteration on the packet engine (:mod:`trainfabric.fabric.packet`), which runs a
:class:`~trainfabric.fabric.flows.FlowTable` with dependencies and has no timer tasks: the
DAG is translated (:func:`dag_flow_table`) and run beside the flow engine on the same table
and the task engine on the exact DAG (:func:`packet_iteration`).
"""

from __future__ import annotations

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.flows import FlowTable, mix64
from trainfabric.fabric.iteration.run import JobOnHosts, make_router, run_iteration
from trainfabric.workloads.dag import COMM, TaskDAG


# -- the packet engine (a small configuration) -----------------------------------------------------
def dag_flow_table(jh: JobOnHosts, topo: T.Topology) -> tuple[FlowTable, np.ndarray]:
    """The job as a :class:`~trainfabric.fabric.flows.FlowTable` with dependencies (the
    input of the packet engine, which has no timer tasks) and each flow's DAG node (-1 for
    relays).

    Compute becomes delays. ``F(c)`` maps each *comm ancestor* ``a`` of comm node ``c``
    reached through compute and barrier nodes only to the longest compute time on such a
    path, ``R(c)`` is the longest compute path from a source, and ``c`` starts at
    ``max(R(c), max_a finish_a + F(c)[a])``. With ``D = min F(c)``: ``c``'s flows depend on
    the flows of the ancestors with ``F = D`` and have ``delay_s = D``, ``release_s =
    max(R(c) - D, 0)``; each other value ``F > D`` gets a *relay*, a 1-byte flow between two
    GPUs of one leaf that depends on those ancestors' flows with ``delay_s = F - D - 2 x
    hop_latency`` (its two hops), on which ``c``'s flows depend. The start rule is then
    exact up to the relay's serialisation (a 65-byte packet per hop) and its share of a busy
    NIC; relays are shared by the comm nodes with the same ancestors (a phase). Edges grow as
    (flows per phase)^2: for small configurations (``channels = 1``).
    """
    dag = jh.dag
    near, root = _comm_ancestors(dag)
    nodes = np.flatnonzero(dag.kind == COMM)
    fl = jh.flows(nodes)
    first = np.searchsorted(fl["node"], nodes, side="left")
    last = np.searchsorted(fl["node"], nodes, side="right")
    pos = {int(c): i for i, c in enumerate(nodes.tolist())}
    relay_src, relay_dst = _relay_pair(jh, topo)
    flight = 2 * topo.hop_latency_s
    rows: list[tuple] = []  # (start index in fl or -1 for a relay, count, deps, delay, release)
    new_id: dict[int, np.ndarray] = {}  # comm node -> its flows' ids in the table
    relays: dict[tuple, int] = {}
    n_out = 0
    for c in nodes.tolist():
        anc = near[c]
        d0 = min(anc.values(), default=0.0)
        deps = [new_id[a] for a, f in anc.items() if f == d0]
        for f in sorted({f for f in anc.values() if f > d0}):
            group = tuple(sorted(a for a, v in anc.items() if v == f))
            key = (group, f - d0)
            if key not in relays:
                dep = np.concatenate([new_id[a] for a in group])
                rows.append((-1, 1, dep, max(f - d0 - flight, 0.0), 0.0))
                relays[key] = n_out
                n_out += 1
            deps.append(np.array([relays[key]], np.int64))
        i = pos[c]
        count = int(last[i] - first[i])
        release = max(root[c] - d0, 0.0) if np.isfinite(root[c]) else 0.0
        dep = np.concatenate(deps) if deps else np.zeros(0, np.int64)
        rows.append((int(first[i]), count, dep, d0, release))
        new_id[c] = n_out + np.arange(count)
        n_out += count
    return _assemble(jh, fl, rows, relay_src, relay_dst)


def _relay_pair(jh: JobOnHosts, topo: T.Topology) -> tuple[int, int]:
    """Two hosts of the job on one leaf (a relay's two hops)."""
    hosts = jh.hosts()
    leaf = topo.leaf_of(hosts)
    for h in hosts.tolist():
        mates = hosts[(leaf == topo.leaf_of([h])[0]) & (hosts != h)]
        if mates.size:
            return int(h), int(mates[0])
    raise ConfigError("topology", "relays need two GPUs of the job on one leaf")


def _assemble(jh, fl, rows, relay_src, relay_dst) -> tuple[FlowTable, np.ndarray]:
    """The flow table of :func:`dag_flow_table`'s rows."""
    idx = np.concatenate(
        [np.arange(s, s + n) if s >= 0 else np.full(1, -1) for s, n, *_ in rows]
    ).astype(np.int64)
    relay = idx < 0
    take = np.maximum(idx, 0)
    counts = np.array([n for _, n, *_ in rows])
    deps = [r[2] for r in rows for _ in range(r[1])]
    src = np.where(relay, relay_src, fl["src"][take])
    dst = np.where(relay, relay_dst, fl["dst"][take])
    chan = np.where(relay, 0, fl["channel"][take])
    ent = np.where(relay, mix64(np.arange(idx.size), seed=jh.seed + 99), fl["entropy"][take])
    table = FlowTable(
        src=src,
        dst=dst,
        bytes=np.where(relay, 1.0, fl["bytes"][take]),
        entropy=ent,
        job=np.full(idx.size, jh.job_id),
        deps_ptr=np.r_[0, np.cumsum([d.size for d in deps])].astype(np.int64),
        deps=np.concatenate(deps) if deps else np.zeros(0, np.int64),
        release_s=np.repeat([r[4] for r in rows], counts),
        delay_s=np.repeat([r[3] for r in rows], counts),
        channel=chan,
    )
    return table, np.where(relay, -1, fl["node"][take])


def _comm_ancestors(dag: TaskDAG) -> tuple[list[dict[int, float]], np.ndarray]:
    """``F`` and ``R`` of :func:`dag_flow_table`: per node, its nearest comm ancestors with
    the longest compute time from each, and the longest compute path from a source
    (``-inf`` when every path from a source crosses a comm node)."""
    comm = dag.kind == COMM
    near: list[dict[int, float]] = [{} for _ in range(dag.n_nodes)]
    has_pred = np.zeros(dag.n_nodes, bool)
    has_pred[dag.indices] = True
    root = np.where(has_pred, -np.inf, 0.0)
    for u in range(dag.n_nodes):
        out = {u: 0.0} if comm[u] else {a: d + dag.duration_s[u] for a, d in near[u].items()}
        r = -np.inf if comm[u] else root[u] + dag.duration_s[u]
        for v in dag.indices[dag.indptr[u] : dag.indptr[u + 1]].tolist():
            acc = near[v]
            for a, d in out.items():
                if d > acc.get(a, -1.0):
                    acc[a] = d
            root[v] = max(root[v], r)
    return near, root


def _table_end(dag: TaskDAG, finish: np.ndarray, node: np.ndarray) -> float:
    """The iteration's end from a flow-table run: the latest of every flow's arrival plus
    the compute after its node (:func:`_compute_tail`) and the comm-free compute paths."""
    tail = _compute_tail(dag)
    _, root = _comm_ancestors(dag)
    plain = root + np.where(dag.kind == COMM, -np.inf, dag.duration_s)
    real = node >= 0
    ends = finish[real] + tail[node[real]]
    return float(max(np.nanmax(ends), plain.max(initial=0.0)))


def packet_iteration(
    jh: JobOnHosts, topo: T.Topology, mode: str, *, seed: int = 0, config=None
) -> dict:
    """The iteration on the packet engine (:mod:`trainfabric.fabric.packet`) beside the flow
    engine on the same flow table (:func:`dag_flow_table`) and the task engine on the exact
    DAG: ``packet_s``, ``flow_table_s`` (the same table on the flow engine: the two engines
    compared on equal input), ``task_engine_s`` (the exact DAG on the task engine: the
    translation's effect is ``flow_table_s`` beside it; compute after the last flow is added
    to both table runs), wall times and packet counts."""
    from trainfabric.fabric.flow.engine import simulate
    from trainfabric.fabric.packet import simulate_packets

    table, node = dag_flow_table(jh, topo)
    pkt = simulate_packets(topo, table, mode, config=config, seed=seed)
    flow = simulate(topo, table, make_router(topo, mode, seed))
    task = run_iteration(jh, topo, mode, seed=seed)
    return {
        "mode": mode,
        "flows": int(table.n),
        "packet_s": _table_end(jh.dag, pkt.finish_s, node),
        "flow_table_s": _table_end(jh.dag, flow.finish_s, node),
        "task_engine_s": task.iteration_s,
        "packet_wall_s": float(pkt.wall_s),
        "packets": int(pkt.n_packets),
        "retransmitted": int(pkt.retransmitted),
        "unfinished_flows": int(np.isnan(pkt.finish_s).sum()),
    }


def _compute_tail(dag: TaskDAG) -> np.ndarray:
    """Per node, the longest compute-only path after it to a sink (its own time excluded)."""
    tail = np.zeros(dag.n_nodes)
    dur = np.where(dag.kind == COMM, 0.0, dag.duration_s)
    for u in range(dag.n_nodes - 1, -1, -1):
        succ = dag.indices[dag.indptr[u] : dag.indptr[u + 1]]
        if succ.size:
            tail[u] = float(np.max(dur[succ] + tail[succ]))
    return tail
