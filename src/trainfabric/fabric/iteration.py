"""A training job's iteration on the fabric: job -> servers -> GPU flows -> the task engine.

Mapping (issue 18, item 3), every choice stated once:

* **Servers.** Each pod of the job is a server whose ``g`` GPUs (``g`` = the job's
  ``gpus_per_pod``) each have one NIC: GPU ``i`` of topology server ``s`` is host
  ``s g + i`` (the topology is built with ``gpus_per_server = g``, so with ``rail = true``
  GPU ``i`` of every server sits on rail ``i``). A pod is placed on a server by the
  existing placement names (:func:`~trainfabric.fabric.collectives.place` over the servers'
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

Pair mesh (:func:`pair_mesh`, :class:`MeshRouter`): the conversion check's fabric, each
directed server pair its own link of rate ``r`` (no NIC, no shared link), one hop of
``hop_latency_s``; with headers 0 and ``hop_latency_s`` = the DAG's ``latency_s``, a comm
node takes ``latency_s + 8 bytes / r`` exactly as in the DAG.
"""

from __future__ import annotations

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.collectives import PLACEMENTS, place
from trainfabric.fabric.routing import Groups, Reaction, Routes

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
def utilisation_by_tier_plane(topo: T.Topology, bin_bits: np.ndarray, bin_s: float) -> list[dict]:
    """Rows ``(bin, t_s, tier, plane, utilisation)`` from ``bin_bits[B, L]`` (bits each link
    carried in each bin of ``bin_s`` seconds): per tier and plane, the bits of its links over
    their summed capacity x ``bin_s`` (the mean utilisation of that tier's links in the bin)."""
    key = topo.link_tier.astype(np.int64) * topo.planes + topo.link_plane
    n_keys = int(key.max(initial=0)) + 1
    cap = np.bincount(key, topo.capacity_bps, minlength=n_keys)
    rows = []
    for b in range(bin_bits.shape[0]):
        bits = np.bincount(key, bin_bits[b], minlength=n_keys)
        for k in np.flatnonzero(cap > 0).tolist():
            rows.append(
                {
                    "bin": b,
                    "t_s": b * bin_s,
                    "bin_s": bin_s,
                    "tier": T.TIER_NAMES[k // topo.planes],
                    "plane": k % topo.planes,
                    "utilisation": float(bits[k] / (cap[k] * bin_s)),
                }
            )
    return rows


def most_loaded_links(topo: T.Topology, link_bits: np.ndarray, span_s: float, k: int) -> list:
    """The ``k`` links with the highest mean utilisation (bits carried / (capacity x
    ``span_s``)), highest first, with their tier, plane and end nodes."""
    util = link_bits / (topo.capacity_bps * max(span_s, 1e-300))
    top = np.argsort(-util, kind="stable")[:k]
    return [
        {
            "link": int(link),
            "tier": T.TIER_NAMES[int(topo.link_tier[link])],
            "plane": int(topo.link_plane[link]),
            "src_node": int(topo.link_src[link]),
            "dst_node": int(topo.link_dst[link]),
            "utilisation": float(util[link]),
        }
        for link in top.tolist()
    ]


def busy_time(start_s: np.ndarray, finish_s: np.ndarray) -> float:
    """Length of the union of the intervals ``[start_s[i], finish_s[i]]``."""
    if start_s.size == 0:
        return 0.0
    order = np.argsort(start_s, kind="stable")
    s, f = start_s[order], np.maximum.accumulate(finish_s[order])
    gap = np.maximum(s[1:] - f[:-1], 0.0)
    return float(f[-1] - s[0] - gap.sum())
