"""A training job's iteration on the fabric: job -> servers -> GPU flows -> the task engine.

Mapping (issue 18, item 3), every choice stated once:

* **Servers.** Each pod of the job is a server whose ``g`` GPUs (``g`` = the job's
  ``gpus_per_pod``) each have one NIC: GPU ``i`` of topology server ``s`` is host
  ``s g + i`` (the topology is built with ``gpus_per_server = g``, so with ``rail = true``
  GPU ``i`` of every server sits on rail ``i``). A pod is placed on a server by the
  existing placement names (:func:`~trainfabric.fabric.flow.collectives.place` over the servers'
  leaves): ``packed`` (lowest server ids), ``scattered`` (round-robin over leaves) or
  ``random`` (seeded).
* **Flows.** A comm node of the DAG carries its GPU-level transfers (source GPU in the
  source pod, destination GPU in the destination pod, bytes; :mod:`trainfabric.workloads`);
  a DAG without them (a task-DAG JSON) gets the even split GPU ``k`` -> GPU ``k`` over the
  ``g`` NICs, and the output names that assumption. Every transfer is split into
  ``channels`` connections of ``bytes / channels`` (NCCL's channels / queue pairs). Same-server
  transfers never reach the fabric (the DAG keeps them as ``intra_pod_bytes``).
* **Hashing.** The ECMP / flowlet hash input of a connection is the seeded 64-bit mix of
  (job, source GPU host, destination GPU host, channel)
  (:func:`~trainfabric.fabric.flows.mix64`, as ``collectives.collective_flows`` with
  persistent connections): a connection keeps its path across phases, as NCCL keeps its
  queue pairs, so an ECMP collision persists for the whole iteration.
* **Latency.** On the fabric a flow's last byte arrives ``hops x hop_latency_s`` after it
  left (the engine's propagation); the DAG's own ``latency_s`` (the one-hop model's
  per-transfer latency) is **not** added: the fabric's per-hop latency replaces it.
* **Barriers.** A phase ends when its last flow has arrived (the DAG's exit barrier), as in
  the DAG.

Running: :func:`job_graph` turns the placed job into the task engine's input
(:mod:`trainfabric.fabric.tasks.graph`), :func:`run_iteration` runs it
(:func:`trainfabric.fabric.tasks.engine.run_tasks`). Reports are
:mod:`~trainfabric.fabric.iteration.report`'s, the scenario kind, tenants and ``fabric job``
are :mod:`~trainfabric.fabric.iteration.scenario`'s, the packet engine's run is
:mod:`~trainfabric.fabric.iteration.packet`'s, faults are
:mod:`~trainfabric.fabric.iteration.faults`'s.

Pair mesh (:func:`pair_mesh`, :class:`MeshRouter`): the conversion check's fabric, each
directed server pair its own link of rate ``r`` (no NIC, no shared link), one hop of
``hop_latency_s``; with headers 0 and ``hop_latency_s`` = the DAG's ``latency_s``, a comm
node takes ``latency_s + 8 bytes / r`` exactly as in the DAG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainfabric.config import read_toml, validate
from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.flow.collectives import PLACEMENTS, place
from trainfabric.fabric.flows import mix64
from trainfabric.fabric.routing import Groups, Reaction, Routes
from trainfabric.limits import check_memory
from trainfabric.workloads.dag import COMM, GpuTransfers, TaskDAG
from trainfabric.workloads.job import Job

if TYPE_CHECKING:
    from trainfabric.fabric.tasks.graph import TaskGraph

# The CLI's fabric (CLARIFICATIONS "Fabric" defaults): 4 planes of 2-tier leaf-spine,
# 256 ports of 200 Gb/s per switch per plane, 800 Gb/s NICs, no oversubscription.
JOB_FABRIC = dict(
    kind="multiplane",
    planes=4,
    switch_radix=256,
    nic_rate_gbps=800.0,
    oversubscription=1.0,
    hop_latency_s=1e-6,
)


# -- servers and placement ------------------------------------------------------------------------
def server_count(topo: T.Topology, gpus_per_server: int) -> int:
    """Servers of ``gpus_per_server`` GPUs (hosts) the topology holds."""
    return topo.n_hosts // gpus_per_server


def server_leaf(topo: T.Topology, gpus_per_server: int) -> np.ndarray:
    """Leaf of every server: the leaf of its GPU 0 (without rails a server's GPUs share a
    leaf when ``gpus_per_server`` divides the leaf's host ports)."""
    n = server_count(topo, gpus_per_server)
    return topo.host_leaf[0][np.arange(n) * gpus_per_server]


def place_servers(
    topo: T.Topology,
    pods: int,
    gpus_per_server: int,
    placement: str = "random",
    seed: int = 0,
    available: np.ndarray | None = None,
    field: str = "pods",
) -> np.ndarray:
    """Server id of every pod ``0..pods-1`` under ``placement`` (module doc), among
    ``available`` servers (default all); too many pods is a ConfigError naming ``field``."""
    if placement not in PLACEMENTS:
        raise ConfigError("placement", f"unknown {placement!r}; known: {', '.join(PLACEMENTS)}")
    pool = server_count(topo, gpus_per_server) if available is None else len(available)
    if pods > pool:
        raise ConfigError(
            field,
            f"{pods} servers of {gpus_per_server} GPUs do not fit: the fabric holds {pool}",
        )
    return place(server_leaf(topo, gpus_per_server), pods, placement, seed, available)


def interleaved_pools(topo: T.Topology, gpus_per_server: int, sizes: list[int]) -> list:
    """Disjoint server pools for tenants, interleaved on every leaf so they share uplinks:
    servers are taken leaf by leaf and dealt to the jobs in turn (server ``k`` of a leaf to
    job ``k mod J`` among the jobs still short of servers); pool ``j`` keeps leaf order."""
    leaf = server_leaf(topo, gpus_per_server)
    need = np.asarray(sizes, np.int64)
    if need.sum() > leaf.size:
        raise ConfigError(
            "tenants.jobs", f"{int(need.sum())} servers wanted, the fabric holds {leaf.size}"
        )
    order = np.lexsort((np.arange(leaf.size), leaf))
    pools: list[list[int]] = [[] for _ in sizes]
    turn = 0
    for s in order.tolist():
        if all(len(p) == n for p, n in zip(pools, sizes, strict=True)):
            break
        while len(pools[turn % len(sizes)]) == sizes[turn % len(sizes)]:
            turn += 1
        pools[turn % len(sizes)].append(s)
        turn += 1
    return [np.asarray(p, np.int64) for p in pools]


# -- the pair mesh (conversion check) ------------------------------------------------------------
def pair_mesh(
    servers: int, gpus_per_server: int, rate_bps: float, hop_latency_s: float
) -> T.Topology:
    """Every directed server pair ``(u, v)`` its own link ``u (S-1) + v - (v > u)`` of
    ``rate_bps``; hosts are the GPUs (``s g + i``), with no NIC links: a flow crosses only its
    server pair's link (one hop)."""
    if servers < 2:
        raise ConfigError("servers", "a mesh needs >= 2 servers")
    u, v = np.nonzero(~np.eye(servers, dtype=bool))
    n = u.size
    hosts = servers * gpus_per_server
    rev = v * (servers - 1) + u - (u > v)
    return T.Topology(
        kind="pair_mesh",
        n_hosts=hosts,
        planes=1,
        nic_rate_bps=float(rate_bps),
        switch_radix=servers - 1,
        hosts_per_leaf=gpus_per_server,
        hop_latency_s=float(hop_latency_s),
        n_switches=servers,
        switch_tier=np.zeros(servers, np.int8),
        switch_plane=np.zeros(servers, np.int16),
        link_src=hosts + u,
        link_dst=hosts + v,
        capacity_bps=np.full(n, float(rate_bps)),
        link_tier=np.full(n, T.UP1, np.int8),
        link_plane=np.zeros(n, np.int16),
        reverse=rev.astype(np.int64),
        host_up=np.full((1, hosts), -1, np.int64),
        host_down=np.full((1, hosts), -1, np.int64),
        host_leaf=(np.arange(hosts) // gpus_per_server)[None, :],
        tables={"gpus_per_server": np.array(gpus_per_server)},
    )


class MeshRouter:
    """The :class:`~trainfabric.fabric.routing.Router` interface on a :func:`pair_mesh`: a
    flow's one route is its server pair's link (single path, no spread groups, no failures)."""

    mode = "ecmp"
    split = False
    flowlet_gap_s = None
    seed = 0

    def __init__(self, topo: T.Topology):
        if topo.kind != "pair_mesh":
            raise ConfigError("topology", "MeshRouter needs a pair_mesh topology")
        self.topo = topo
        self.reaction = Reaction()
        self.static = Groups(
            topo.n_links, np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)
        )
        self.groups = self.static
        self._g = int(topo.tables["gpus_per_server"])
        self._s = topo.n_switches

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return ("routing",)

    def reaction_s(self, links) -> np.ndarray:
        return np.full(np.asarray(links).shape, self.reaction.routing_s)

    def begin_epoch(self, truth, views, demand=None, demand_bytes=None) -> None:
        """Static routes: the link states do not change them (the mesh has no failures)."""

    def link_of(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        u, v = np.asarray(src) // self._g, np.asarray(dst) // self._g
        if np.any(u == v):
            raise ConfigError("flows.dst", "a same-server transfer never reaches the mesh")
        return u * (self._s - 1) + v - (v > u)

    def route(self, flows, idx: np.ndarray, flowlet=None) -> Routes:
        idx = np.asarray(idx, np.int64)
        link = self.link_of(flows.src[idx], flows.dst[idx])
        m = idx.size
        return Routes(
            link[:, None].astype(np.int64), np.ones((m, 1)), np.zeros(m), np.ones(m, np.int64)
        )


# -- reports that need only link loads and intervals ----------------------------------------------
# -- the job ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class LoadedJob:
    """A job's DAG with the GPU transfers of its comm nodes; ``job`` is None for a task-DAG
    JSON; ``assumptions`` lists what the mapping assumed (the even split)."""

    name: str
    dag: TaskDAG
    gpu: GpuTransfers
    job: Job | None
    assumptions: tuple[str, ...]

    @property
    def gpus_per_pod(self) -> int:
        return self.gpu.gpus_per_pod

    @property
    def pods(self) -> int:
        return self.dag.n_pods


def cut_layers(job: Job, layers: int) -> Job:
    """``job`` with its model cut to ``layers`` layers; PP shrinks to at most ``layers``
    stages and DP takes up the GPUs (EP kept when it still divides DP); a job that cannot be
    cut is a ConfigError naming ``layers``."""
    par = job.parallelism
    pp = min(par.pp, layers)
    gpus = par.gpus
    if gpus % (par.tp * pp):
        raise ConfigError("layers", f"{gpus} GPUs are not a multiple of TP x PP = {par.tp * pp}")
    data = job.model_dump()
    m = data["model"]
    m["layers"] = layers
    m["first_dense_layers"] = min(m["first_dense_layers"], layers)
    data["parallelism"].update(pp=pp, dp=gpus // (par.tp * pp))
    return validate(Job, data, prefix="layers -> ")


def load_job(
    workload: str,
    *,
    pods: int | None = None,
    gpus_per_pod: int = 8,
    layers: int | None = None,
    overlap: str = "none",
    bucket_mb: float | None = None,
    seed: int = 0,
    phase_nodes: bool = True,
) -> LoadedJob:
    """A preset name, a job TOML or a task-DAG JSON as a :class:`LoadedJob` (``pods``
    re-maps presets and jobs; ``layers`` cuts the model, :func:`cut_layers`; ``overlap``:
    the DP gradients' overlap with the backward pass, none or bucketed of ``bucket_mb``;
    ``phase_nodes``: :func:`build_job`)."""
    job = resolve_job(workload, pods=pods, layers=layers, overlap=overlap, bucket_mb=bucket_mb)
    return build_job(
        workload, job, pods=pods, gpus_per_pod=gpus_per_pod, seed=seed, phase_nodes=phase_nodes
    )


def resolve_job(
    workload: str,
    *,
    pods: int | None = None,
    layers: int | None = None,
    overlap: str = "none",
    bucket_mb: float | None = None,
) -> Job | None:
    """The :class:`Job` of a preset or job TOML (cheap: nothing built yet); None for a
    task-DAG JSON (which takes neither ``layers`` nor ``overlap``)."""
    from trainfabric.workloads.workload import is_file_spec

    if is_file_spec(workload) and not workload.endswith(".toml"):
        if layers is not None or overlap != "none":
            raise ConfigError("layers" if layers else "overlap", "needs a preset or a job TOML")
        return None
    job = _job_of(workload, pods)
    if layers is not None:
        job = cut_layers(job, layers)
    return with_overlap(job, overlap, bucket_mb)


def build_job(
    workload: str,
    job: Job | None,
    *,
    pods=None,
    gpus_per_pod: int = 8,
    seed: int = 0,
    phase_nodes: bool = True,
) -> LoadedJob:
    """The DAG with GPU transfers of ``job`` (:func:`resolve_job`), of an imported trace
    (its ranks in pods of ``gpus_per_pod``), or of the task-DAG JSON ``workload`` when
    ``job`` is None (the even split, named as an assumption). ``phase_nodes`` (jobs only):
    each communication phase is one node holding its pod pairs
    (:class:`~trainfabric.workloads.dag.PairSets`), the same iteration with ``n + 2``
    times fewer nodes per ring step; False keeps one node per pod pair."""
    from trainfabric.workloads.build import build_dag
    from trainfabric.workloads.dag import gpu_transfers
    from trainfabric.workloads.workload import load_workload

    if job is not None:
        dag = build_dag(job, seed, gpu_flows=True, phase_nodes=phase_nodes)
        return LoadedJob(job.name, dag, gpu_transfers(dag, job.placement.gpus_per_pod), job, ())
    w = load_workload(workload, pods, seed, gpus_per_pod)
    if w.dag.gpu is not None:  # an imported trace: its own GPU transfers
        return LoadedJob(w.name, w.dag, w.dag.gpu, None, ())
    gpu = gpu_transfers(w.dag, gpus_per_pod)
    note = (
        f"assumption: the task DAG has no GPU transfers; each comm node is split evenly "
        f"GPU k -> GPU k over the {gpus_per_pod} NICs of its pod (exact only when TP fills "
        "the pod)"
    )
    return LoadedJob(w.name, w.dag, gpu, None, (note,))


OVERLAPS = ("none", "bucketed")


def with_overlap(job: Job, overlap: str, bucket_mb: float | None = None) -> Job:
    """``job`` with its DP gradient overlap set: ``none``, or ``bucketed`` in buckets of
    ``bucket_mb`` MiB of gradients per GPU (None: Megatron-LM's default size; see
    :mod:`trainfabric.workloads.buckets`)."""
    if overlap not in OVERLAPS:
        raise ConfigError("overlap", f"unknown {overlap!r}; known: {', '.join(OVERLAPS)}")
    data = job.model_dump()
    data["parallelism"].update(overlap=overlap, bucket_mb=bucket_mb)
    return validate(Job, data, prefix="overlap -> ")


def _job_of(workload: str, pods: int | None) -> Job:
    from trainfabric.workloads.job import remap_onto_pods
    from trainfabric.workloads.presets import get_preset

    if not workload.endswith(".toml"):
        return get_preset(workload, pods)
    try:
        data = read_toml(workload)
    except ConfigError as exc:
        raise ConfigError("workload", exc.message) from None
    job = validate(Job, data)
    if pods is not None and pods != job.placement.pods:
        job = remap_onto_pods(job, pods)
    return job


# -- the job on hosts ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class JobOnHosts:
    """A :class:`LoadedJob` placed on servers: pod ``p`` is server ``servers[p]``, GPU ``i``
    of server ``s`` is host ``s g + i``; every GPU transfer of a comm node becomes
    ``channels`` flows (module doc); ``job_id`` tags its flows (tenants) and its hashes."""

    loaded: LoadedJob
    servers: np.ndarray
    channels: int
    job_id: int = 0
    seed: int = 0

    @property
    def dag(self) -> TaskDAG:
        return self.loaded.dag

    @property
    def g(self) -> int:
        return self.loaded.gpus_per_pod

    def hosts(self) -> np.ndarray:
        """Every host (GPU) of the job, server by server."""
        return (self.servers[:, None] * self.g + np.arange(self.g)).ravel()

    def pair_rows(self, nodes: np.ndarray) -> tuple[np.ndarray, ...]:
        """The pod pairs of comm ``nodes``, grouped by node in the order given (a phase
        node's pair set, a plain comm node itself): ``(node, src pod, dst pod, bytes, GPU
        pattern)`` per pair."""
        dag = self.dag
        nodes = np.asarray(nodes, np.int64)
        if dag.pairs is not None:
            return dag.pairs.rows(nodes, dag)
        pattern = self.loaded.gpu.pattern[nodes].astype(np.int64)
        return nodes, dag.pod[nodes], dag.dst[nodes], dag.bytes[nodes], pattern

    def _pair_transfers(self, pattern: np.ndarray) -> np.ndarray:
        sizes = np.diff(self.loaded.gpu.indptr)
        return np.where(pattern >= 0, sizes[np.maximum(pattern, 0)], 0)

    def transfer_counts(self, nodes: np.ndarray) -> np.ndarray:
        """GPU transfers of each of ``nodes`` (comm nodes, in the order given)."""
        nodes = np.asarray(nodes, np.int64)
        _, _, _, _, q = self.pair_rows(nodes)
        owner = np.repeat(np.arange(nodes.size), self._pairs_per_node(nodes))
        return np.bincount(owner, self._pair_transfers(q), nodes.size).astype(np.int64)

    def _pairs_per_node(self, nodes: np.ndarray) -> np.ndarray:
        pairs = self.dag.pairs
        if pairs is None:
            return np.ones(nodes.size, np.int64)
        q = pairs.node_set[nodes]
        out = np.ones(nodes.size, np.int64)
        out[q >= 0] = np.diff(pairs.ptr)[q[q >= 0]]
        return out

    def flows(self, nodes: np.ndarray) -> dict[str, np.ndarray]:
        """The flows of comm ``nodes``, grouped by node in the order given: ``node``, ``src``,
        ``dst`` (hosts), ``bytes`` (payload), ``channel``, ``entropy`` (the connection's hash
        input: seeded mix of job, source host, destination host, channel)."""
        gpu, c = self.loaded.gpu, self.channels
        node, su, sv, nb, q = self.pair_rows(nodes)
        counts = self._pair_transfers(q)
        first = gpu.indptr[np.maximum(q, 0)]
        k = np.repeat(first - np.cumsum(np.r_[0, counts[:-1]]), counts) + np.arange(counts.sum())
        src = self.servers[np.repeat(su, counts)] * self.g + gpu.src_gpu[k]
        dst = self.servers[np.repeat(sv, counts)] * self.g + gpu.dst_gpu[k]
        nbytes = np.repeat(nb, counts) * gpu.share[k] / c
        node = np.repeat(node, counts)
        chan = np.tile(np.arange(c, dtype=np.int64), node.size)
        src, dst = np.repeat(src, c), np.repeat(dst, c)
        job = np.full(src.size, self.job_id, np.int64)
        return {
            "node": np.repeat(node, c),
            "src": src,
            "dst": dst,
            "bytes": np.repeat(nbytes, c),
            "channel": chan,
            "entropy": mix64(job, src, dst, chan, seed=self.seed),
        }


# -- the task graph of E's engine ------------------------------------------------------------------
def job_graph(jh: JobOnHosts) -> TaskGraph:
    """The job's DAG as a :class:`~trainfabric.fabric.tasks.graph.TaskGraph`, task ``i`` =
    DAG node ``i`` (compute -> timer, comm -> comm, barrier -> barrier; the same edges).

    Comm tasks share flow sets: nodes with the same (source pod, destination pod, GPU
    pattern, bytes) — a ring's successive steps of one pod pair — or the same pair set (a
    phase node, :class:`~trainfabric.workloads.dag.PairSets`: a ring's successive steps)
    point to one set, so the graph holds the distinct transfers, not steps x transfers.
    Connections are the distinct (source host, destination host, channel) of the job; a
    task's ``latency_s`` is 0 (the fabric's per-hop latency replaces the DAG's, module doc).
    A graph whose flows (:func:`task_flows`, :data:`TASK_FLOW_BYTES` each) exceed the memory
    limit is refused before they are built (ConfigError naming ``pods``).
    """
    from trainfabric.fabric.tasks.graph import TaskGraph

    dag = jh.dag
    comm = dag.comm_nodes
    reps, set_of = _flow_sets(jh)
    sizes = jh.transfer_counts(reps) * jh.channels
    flows = int(sizes.sum())
    check_memory("pods", TASK_FLOW_BYTES * float(flows), f"a task graph of {flows:,} flows")
    fl = jh.flows(reps)
    set_ptr = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    cols = np.stack([fl["src"], fl["dst"], fl["channel"]], axis=1)
    uniq, first_c, conn = np.unique(cols, axis=0, return_index=True, return_inverse=True)
    flow_set = np.full(dag.n_nodes, -1, np.int64)
    flow_set[comm] = set_of.ravel()
    return TaskGraph(
        kind=dag.kind,
        duration_s=np.where(dag.kind == COMM, 0.0, dag.duration_s),
        latency_s=np.zeros(dag.n_nodes),
        succ_ptr=dag.indptr,
        succ=dag.indices,
        flow_set=flow_set,
        set_ptr=set_ptr,
        flow_conn=conn.ravel(),
        flow_bytes=fl["bytes"],
        conn_src=uniq[:, 0],
        conn_dst=uniq[:, 1],
        conn_key=fl["entropy"][first_c],
        conn_channel=uniq[:, 2],
        job=np.full(dag.n_nodes, jh.job_id, np.int64),
    )


TASK_FLOW_BYTES = 160  # per flow of a task graph, its build's temporaries included (140 measured)


def _flow_sets(jh: JobOnHosts) -> tuple[np.ndarray, np.ndarray]:
    """``(reps, set_of)``: one representative comm node per distinct flow set (:func:`job_graph`)
    and each comm node's set."""
    dag = jh.dag
    comm = dag.comm_nodes
    pair_set = dag.pairs.node_set[comm] if dag.pairs is not None else np.full(comm.size, -1)
    key = np.stack(
        [
            dag.pod[comm].astype(np.int64),
            dag.dst[comm].astype(np.int64),
            jh.loaded.gpu.pattern[comm].astype(np.int64),
            dag.bytes[comm].view(np.int64),
            pair_set.astype(np.int64),
        ],
        axis=1,
    )
    _, first, set_of = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return comm[first], set_of


def task_flows(jh: JobOnHosts) -> int:
    """The flows :func:`job_graph` would hold (distinct flow sets x their GPU transfers x
    channels), counted without building them."""
    reps, _ = _flow_sets(jh)
    return int((jh.transfer_counts(reps) * jh.channels).sum())


def _roots_and_sinks(g: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    has_pred = np.zeros(g.n, bool)
    has_pred[g.succ] = True
    return np.flatnonzero(~has_pred), np.flatnonzero(np.diff(g.succ_ptr) == 0)


def repeat_graph(g: TaskGraph, iterations: int, offset_s: float = 0.0) -> TaskGraph:
    """``iterations`` copies of ``g`` back to back after a timer of ``offset_s``: the timer
    precedes the roots of copy 0, and a barrier after every copy's sinks precedes the next
    copy's roots (one iteration ends before the next starts, as the optimiser step does).
    Task layout: ``[timer] [copy 0] [barrier 0] [copy 1] [barrier 1] ...``; copy ``i`` task
    ``t`` is ``1 + i (n + 1) + t``, its barrier ``(i + 1)(n + 1)``."""
    from trainfabric.fabric.tasks.graph import BARRIER, TIMER, TaskGraph

    n = g.n
    roots, sinks = _roots_and_sinks(g)
    base = 1 + np.arange(iterations) * (n + 1)
    kind = np.r_[TIMER, np.tile(np.r_[g.kind, BARRIER], iterations)]
    dur = np.r_[offset_s, np.tile(np.r_[g.duration_s, 0.0], iterations)]
    lat = np.r_[0.0, np.tile(np.r_[g.latency_s, 0.0], iterations)]
    fset = np.r_[-1, np.tile(np.r_[g.flow_set, -1], iterations)]
    owner = np.repeat(np.arange(n), np.diff(g.succ_ptr))
    edges = [np.c_[np.zeros(roots.size, np.int64), 1 + roots]]
    for i, b in enumerate(base.tolist()):
        edges.append(np.c_[b + owner, b + g.succ])
        edges.append(np.c_[b + sinks, np.full(sinks.size, b + n)])
        if i + 1 < iterations:
            edges.append(np.c_[np.full(roots.size, b + n), b + n + 1 + roots])
    e = np.concatenate(edges)
    e = e[np.lexsort((e[:, 1], e[:, 0]))]
    total = kind.size
    ptr = np.zeros(total + 1, np.int64)
    np.add.at(ptr, e[:, 0] + 1, 1)
    job = np.full(total, int(g.job[0]) if g.n else 0, np.int64)
    return TaskGraph(
        kind=kind,
        duration_s=dur,
        latency_s=lat,
        succ_ptr=np.cumsum(ptr),
        succ=e[:, 1],
        flow_set=fset,
        set_ptr=g.set_ptr,
        flow_conn=g.flow_conn,
        flow_bytes=g.flow_bytes,
        conn_src=g.conn_src,
        conn_dst=g.conn_dst,
        conn_key=g.conn_key,
        conn_channel=g.conn_channel,
        job=job,
    )


def concat_graphs(graphs: list[TaskGraph]) -> tuple[TaskGraph, np.ndarray]:
    """The disjoint union of ``graphs`` (tenants on one fabric) and each graph's first task
    index; tasks, flow sets and connections are renumbered, ``job`` kept."""
    from trainfabric.fabric.tasks.graph import TaskGraph

    t_off = np.cumsum([0] + [g.n for g in graphs])
    s_off = np.cumsum([0] + [g.set_ptr.size - 1 for g in graphs])
    f_off = np.cumsum([0] + [g.flow_conn.size for g in graphs])
    c_off = np.cumsum([0] + [g.n_conns for g in graphs])
    e_off = np.cumsum([0] + [g.succ.size for g in graphs])
    cat = np.concatenate
    return (
        TaskGraph(
            kind=cat([g.kind for g in graphs]),
            duration_s=cat([g.duration_s for g in graphs]),
            latency_s=cat([g.latency_s for g in graphs]),
            succ_ptr=np.r_[
                0, cat([g.succ_ptr[1:] + e for g, e in zip(graphs, e_off, strict=False)])
            ],
            succ=cat([g.succ + t for g, t in zip(graphs, t_off, strict=False)]),
            flow_set=cat(
                [
                    np.where(g.flow_set >= 0, g.flow_set + s, -1)
                    for g, s in zip(graphs, s_off, strict=False)
                ]
            ),
            set_ptr=np.r_[0, cat([g.set_ptr[1:] + f for g, f in zip(graphs, f_off, strict=False)])],
            flow_conn=cat([g.flow_conn + c for g, c in zip(graphs, c_off, strict=False)]),
            flow_bytes=cat([g.flow_bytes for g in graphs]),
            conn_src=cat([g.conn_src for g in graphs]),
            conn_dst=cat([g.conn_dst for g in graphs]),
            conn_key=cat([g.conn_key for g in graphs]),
            conn_channel=cat([g.conn_channel for g in graphs]),
            job=cat([g.job for g in graphs]),
        ),
        t_off[:-1],
    )


# -- running ---------------------------------------------------------------------------------------
LATENCY_NOTE = (
    "latency: the fabric's per-hop latency (hops x hop_latency_s per flow) replaces the "
    "DAG's per-transfer latency_s on the fabric (never both)"
)


def make_router(topo: T.Topology, mode: str, seed: int = 0):
    """The router of ``mode`` on ``topo`` (a :class:`MeshRouter` on a pair mesh)."""
    from trainfabric.fabric.routing import Router

    if topo.kind == "pair_mesh":
        return MeshRouter(topo)
    return Router(topo, mode, seed=seed)


def default_bin_s(jh: JobOnHosts, topo: T.Topology) -> float:
    """About 1/100 of the iteration: the DAG's one-hop critical path with every pod pair at
    a server's total NIC rate (``g x nic_rate``), over 100."""
    rate = jh.g * topo.nic_rate_bps
    return max(jh.dag.critical_path_at(rate) / 100.0, 1e-6)


@dataclass(frozen=True, eq=False)
class IterationRun:
    """One iteration of a placed job on a fabric under one load-balancing mode: the task
    graph run by :func:`trainfabric.fabric.tasks.engine.run_tasks` (``result``; task ``i`` = DAG
    node ``i``)."""

    jh: JobOnHosts
    topo: T.Topology
    graph: TaskGraph
    mode: str
    seed: int
    result: object  # trainfabric.fabric.tasks.engine.TaskResult

    @property
    def iteration_s(self) -> float:
        return float(self.result.makespan_s)


def run_iteration(
    jh: JobOnHosts,
    topo: T.Topology,
    mode: str,
    *,
    seed: int = 0,
    bin_s: float | None = None,
    graph: TaskGraph | None = None,
    **options,
) -> IterationRun:
    """Run one iteration of ``jh`` on ``topo`` under ``mode`` (``options``: those of
    :class:`trainfabric.fabric.tasks.engine.TaskSim`, e.g. ``link_up``, ``events``,
    ``header_bytes``); refuses hosts outside the fabric."""
    from trainfabric.errors import InfeasibleError
    from trainfabric.fabric.tasks.engine import run_tasks

    graph = job_graph(jh) if graph is None else graph
    bin_s = default_bin_s(jh, topo) if bin_s is None else bin_s
    res = run_tasks(topo, graph, make_router(topo, mode, seed), bin_s=bin_s, **options)
    if res.unfinished:
        raise InfeasibleError(f"{res.unfinished} tasks of the iteration never finished")
    return IterationRun(jh, topo, graph, mode, seed, res)
