"""Fabric topologies as plain arrays: multiplane 2-tier leaf-spine and the 3-tier fat-tree.

Nodes: hosts ``0..H-1`` (one NIC per GPU), then switches. Links are *directed* (a cable is two
links, ``reverse[l]`` is the other direction) with ``capacity_bps``, ``link_tier`` and
``link_plane``. Tiers: ``HOST_UP`` (NIC -> leaf), ``UP1`` (leaf -> spine, edge -> agg),
``UP2`` (agg -> core), ``DOWN2`` (core -> agg), ``DOWN1`` (spine -> leaf, agg -> edge),
``HOST_DOWN`` (leaf -> NIC). Fabric links are tiers ``UP1..DOWN1``.

**Multiplane** (:func:`multiplane`): ``P`` planes, each a 2-tier leaf-spine of radix ``R``
(ports per switch per plane) at ``r = nic_rate / P``; host ``h`` has one port on every plane,
to leaf ``host_leaf[p, h]`` (the same leaf index on every plane). A leaf has ``d`` host ports
and ``U = R - d`` uplinks (``d / U`` = oversubscription); uplink ``j`` goes to spine
``j mod S`` as that pair's cable ``j div S``, so every leaf-spine pair has ``C = U / S``
parallel cables. ``leaf_up[p, a, j]`` and ``spine_down[p, s, b, k]`` hold the link ids; the
reverse of ``leaf_up[p, a, j]`` is ``spine_down[p, j mod S, a, j div S]``. A plane holds at
most ``R d`` hosts (``R^2/2`` at full bisection). ``planes = 1`` is the single-plane 2-tier.

**Fat-tree** (:func:`fat_tree`): one plane of radix ``k`` at the NIC rate. An edge has ``d``
hosts and ``u = k - d`` uplinks, one to each of the ``u`` aggs of its pod; an agg has
``ua = ceil(k / (1 + o_agg))`` uplinks and ``e = k - ua`` down ports, so a pod has ``e``
edges (``o_agg`` = ``agg_oversubscription``, ``e / ua`` ≈ ``o_agg`` and never above it;
``o_agg = 1`` gives ``e = k div 2``); agg ``j`` of every pod sends its ``ua`` uplinks to the
``c = ceil(ua · pods / k)`` cores of group ``j`` (uplink ``m`` to core ``(j, m mod c)``, so a
core has ``ua / c`` parallel cables to agg ``j`` of every pod; at most ``k`` pods, and
``c = ua`` then). Tables ``edge_up[e, j]``, ``agg_down[a, i]``, ``agg_up[a, m]`` and
``core_down[j·ua + m, q]`` (the cable down to pod ``q`` of the core that uplink ``m`` of
group ``j`` reaches).

Switch counts without building (:func:`two_tier_shape`, :func:`fat_tree_shape`, which the
builders use): per plane of a 2-tier fabric ``L = ceil(H / d)`` leaves and
``S`` spines, the smallest count ``>= ceil(L · U / R)`` that divides ``U``; a fat-tree has
``ceil(H / d)`` edges, ``pods · u`` aggs (``pods = ceil(H / (e · d))``) and ``u · c`` cores.

**Rail-optimised placement** (``rail=True``): servers of ``gpus_per_server`` GPUs; GPU ``i``
of every server is on rail ``i``; hosts fill leaves rail by rail, so same-rank GPUs of
different servers share leaves (rank-ordered rings then cross leaves only between servers).

Bisection: :func:`bisection_bps` (max-flow across a balanced leaf- or pod-aligned cut,
:func:`scipy.sparse.csgraph.maximum_flow`) against :func:`bisection_closed_form_bps`
``= (H/2) · nic_rate · min(1, U/d)`` (2-tier) and ``· min(1, u/d) · min(1, ua/e)``
(fat-tree, ``ua`` agg uplinks). :func:`path_links`: the links of a shortest route (2 within a
leaf, 4 across leaves of a 2-tier plane or within a pod, 6 across pods).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from trainfabric.errors import ConfigError

HOST_UP, UP1, UP2, DOWN2, DOWN1, HOST_DOWN = range(6)
TIER_NAMES = ("host_up", "up1", "up2", "down2", "down1", "host_down")
KINDS = ("multiplane", "leaf_spine", "fat_tree")


@dataclass(frozen=True, eq=False)
class Topology:
    """A fabric as arrays (module doc); ``tables`` holds the per-tier link-id tables."""

    kind: str
    n_hosts: int
    planes: int
    nic_rate_bps: float
    switch_radix: int
    hosts_per_leaf: int
    hop_latency_s: float
    n_switches: int
    switch_tier: np.ndarray
    switch_plane: np.ndarray
    link_src: np.ndarray
    link_dst: np.ndarray
    capacity_bps: np.ndarray
    link_tier: np.ndarray
    link_plane: np.ndarray
    reverse: np.ndarray
    host_up: np.ndarray
    host_down: np.ndarray
    host_leaf: np.ndarray
    tables: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_links(self) -> int:
        return int(self.link_src.size)

    @property
    def tiers(self) -> int:
        return 3 if self.kind == "fat_tree" else 2

    @property
    def port_rate_bps(self) -> float:
        """Rate of one NIC port (one plane)."""
        return self.nic_rate_bps / self.planes

    @property
    def fabric(self) -> np.ndarray:
        """Mask of fabric (switch-to-switch) links."""
        return (self.link_tier != HOST_UP) & (self.link_tier != HOST_DOWN)

    def leaf_of(self, hosts) -> np.ndarray:
        """Leaf (edge) index of ``hosts`` (the same on every plane)."""
        return self.host_leaf[0][np.asarray(hosts, np.int64)]

    def summary(self) -> dict:
        """Switch, cable and transceiver counts, tiers, cable capacity (all cables and
        switch-to-switch ones, Tb/s one direction), bisection (max-flow and closed form, Gb/s)."""
        per_tier = np.bincount(self.switch_tier, minlength=self.tiers)
        cables = self.n_links // 2
        fabric_cables = int(self.fabric.sum()) // 2
        return {
            "kind": self.kind,
            "hosts": self.n_hosts,
            "planes": self.planes,
            "tiers": self.tiers,
            "switch_radix": self.switch_radix,
            "port_rate_gbps": self.port_rate_bps / 1e9,
            "switches": self.n_switches,
            "switches_per_tier": per_tier.tolist(),
            "cables": cables,
            "fabric_cables": fabric_cables,
            "cable_tbps": float(self.capacity_bps.sum()) / 2 / 1e12,
            "fabric_cable_tbps": float(self.capacity_bps[self.fabric].sum()) / 2 / 1e12,
            "transceivers": 2 * cables,
            "max_switch_hops": 2 * self.tiers - 1,
            "bisection_gbps": float(bisection_bps(self)) / 1e9,
            "bisection_closed_form_gbps": float(bisection_closed_form_bps(self)) / 1e9,
        }


# -- builders -------------------------------------------------------------------------------------
class _Links:
    """Accumulates directed cables (both directions) and returns their link ids."""

    def __init__(self):
        self.src, self.dst, self.tier, self.plane, self.cap = [], [], [], [], []
        self.n = 0

    def cables(self, a, b, up_tier: int, down_tier: int, plane: int, cap: float):
        """Cables ``a[i] <-> b[i]``; returns (ids a->b, ids b->a)."""
        a, b = np.asarray(a, np.int64).ravel(), np.asarray(b, np.int64).ravel()
        m = a.size
        ids_up = self.n + np.arange(m)
        ids_down = self.n + m + np.arange(m)
        self.src += [a, b]
        self.dst += [b, a]
        self.tier += [np.full(m, up_tier), np.full(m, down_tier)]
        self.plane += [np.full(m, plane), np.full(m, plane)]
        self.cap += [np.full(m, cap), np.full(m, cap)]
        self.n += 2 * m
        return ids_up, ids_down

    def arrays(self):
        cat = [np.concatenate(x) for x in (self.src, self.dst, self.tier, self.plane, self.cap)]
        src, dst, tier, plane, cap = cat
        reverse = np.empty(self.n, np.int64)
        start = 0
        for block in self.src[::2]:
            m = block.size
            reverse[start : start + m] = start + m + np.arange(m)
            reverse[start + m : start + 2 * m] = start + np.arange(m)
            start += 2 * m
        return src, dst, tier.astype(np.int8), plane.astype(np.int16), cap.astype(float), reverse


def _split_ports(radix: int, oversubscription: float, field_prefix: str) -> tuple[int, int]:
    """(down, up) ports of a leaf/edge of ``radix`` ports with down/up ≈ oversubscription."""
    if radix < 2:
        raise ConfigError(f"{field_prefix}switch_radix", f"must be >= 2, got {radix}")
    if not oversubscription >= 1:
        raise ConfigError(f"{field_prefix}oversubscription", "must be >= 1")
    up = max(1, round(radix / (1 + oversubscription)))
    down = radix - up
    if down < 1:
        raise ConfigError(f"{field_prefix}switch_radix", f"too small for {oversubscription}:1")
    return down, up


class TwoTierShape(NamedTuple):
    """One 2-tier plane: host ports ``down`` and uplinks ``up`` per leaf, ``leaves``,
    ``spines`` and the parallel ``cables`` of every leaf-spine pair (``up = spines · cables``)."""

    down: int
    up: int
    leaves: int
    spines: int
    cables: int


class FatTreeShape(NamedTuple):
    """A 3-tier fat-tree: per edge ``down`` host ports and ``up`` uplinks (one per agg of its
    pod), per agg ``edges_per_pod`` down ports and ``agg_up`` uplinks; ``pods``, ``edges``,
    ``aggs`` (``pods · up``) and ``cores_per_group`` (``cores = up · cores_per_group``)."""

    down: int
    up: int
    edges_per_pod: int
    agg_up: int
    pods: int
    edges: int
    aggs: int
    cores_per_group: int

    @property
    def cores(self) -> int:
        return self.up * self.cores_per_group


def two_tier_shape(gpus: int, switch_radix: int, oversubscription: float = 1.0) -> TwoTierShape:
    """The plane :func:`multiplane` builds for ``gpus`` hosts (module doc); ConfigError naming
    ``gpus`` when they do not fit a plane of this radix."""
    down, up = _split_ports(switch_radix, oversubscription, "")
    if gpus > switch_radix * down:
        raise ConfigError(
            "gpus",
            f"{gpus} hosts do not fit a 2-tier plane of radix {switch_radix} "
            f"(at most {switch_radix * down}); use a larger radix or kind = fat_tree",
        )
    leaves = -(-gpus // down)
    spines = -(-leaves * up // switch_radix)
    spines = next(s for s in range(spines, up + 1) if up % s == 0)
    return TwoTierShape(down, up, leaves, spines, up // spines)


def fat_tree_shape(
    gpus: int, switch_radix: int, oversubscription: float = 1.0, agg_oversubscription: float = 1.0
) -> FatTreeShape:
    """The fat-tree :func:`fat_tree` builds for ``gpus`` hosts (module doc); ConfigError naming
    ``gpus`` when they need more than ``k`` pods."""
    k = switch_radix
    down, up = _split_ports(k, oversubscription, "")
    if not agg_oversubscription >= 1:
        raise ConfigError("agg_oversubscription", "must be >= 1")
    agg_up = math.ceil(k / (1 + agg_oversubscription))
    edges_per_pod = k - agg_up
    if edges_per_pod < 1:
        raise ConfigError("switch_radix", f"too small for {agg_oversubscription}:1 at the aggs")
    pods = -(-gpus // (edges_per_pod * down))
    if pods > k:
        raise ConfigError(
            "gpus",
            f"{gpus} hosts do not fit a 3-tier fat-tree of radix {k} "
            f"(at most {k * edges_per_pod * down})",
        )
    per_group = -(-agg_up * pods // k)  # cores per agg group, each with <= k ports used
    return FatTreeShape(
        down, up, edges_per_pod, agg_up, pods, -(-gpus // down), pods * up, per_group
    )


def _host_leaf(n_hosts: int, down: int, rail: bool, gpus_per_server: int) -> np.ndarray:
    if not rail:
        return np.arange(n_hosts) // down
    if gpus_per_server < 1 or n_hosts % gpus_per_server:
        raise ConfigError(
            "gpus_per_server", f"must divide gpus ({n_hosts}) for rail-optimised placement"
        )
    order = np.lexsort(
        (np.arange(n_hosts) // gpus_per_server, np.arange(n_hosts) % gpus_per_server)
    )
    leaf = np.empty(n_hosts, np.int64)
    leaf[order] = np.arange(n_hosts) // down
    return leaf


def _check_common(gpus: int, nic_rate_bps: float, hop_latency_s: float) -> None:
    if gpus < 2:
        raise ConfigError("gpus", f"must be >= 2, got {gpus}")
    if not (nic_rate_bps > 0 and math.isfinite(nic_rate_bps)):
        raise ConfigError("nic_rate_bps", "must be finite and > 0")
    if not hop_latency_s >= 0:
        raise ConfigError("hop_latency_s", "must be >= 0")


def multiplane(
    gpus: int,
    planes: int = 4,
    switch_radix: int = 256,
    nic_rate_bps: float = 800e9,
    *,
    oversubscription: float = 1.0,
    rail: bool = False,
    gpus_per_server: int = 8,
    hop_latency_s: float = 1e-6,
) -> Topology:
    """``planes`` parallel 2-tier leaf-spine planes (module doc); one NIC port per plane."""
    _check_common(gpus, nic_rate_bps, hop_latency_s)
    if planes < 1:
        raise ConfigError("planes", f"must be >= 1, got {planes}")
    down, up, n_leaves, spines, cables = two_tier_shape(gpus, switch_radix, oversubscription)
    host_leaf = _host_leaf(gpus, down, rail, gpus_per_server)
    rate = nic_rate_bps / planes
    per_plane = n_leaves + spines
    links = _Links()
    host_up = np.empty((planes, gpus), np.int64)
    host_down = np.empty((planes, gpus), np.int64)
    leaf_up = np.empty((planes, n_leaves, up), np.int64)
    spine_down = np.empty((planes, spines, n_leaves, cables), np.int64)
    j = np.arange(up)
    for p in range(planes):
        leaf0 = gpus + p * per_plane
        spine0 = leaf0 + n_leaves
        host_up[p], host_down[p] = links.cables(
            np.arange(gpus), leaf0 + host_leaf, HOST_UP, HOST_DOWN, p, rate
        )
        a = np.repeat(np.arange(n_leaves), up)
        s = np.tile(j % spines, n_leaves)
        ids_up, ids_down = links.cables(leaf0 + a, spine0 + s, UP1, DOWN1, p, rate)
        leaf_up[p] = ids_up.reshape(n_leaves, up)
        spine_down[p][s, a, np.tile(j // spines, n_leaves)] = ids_down
    src, dst, tier, plane, cap, reverse = links.arrays()
    n_sw = planes * per_plane
    return Topology(
        kind="multiplane" if planes > 1 else "leaf_spine",
        n_hosts=gpus,
        planes=planes,
        nic_rate_bps=float(nic_rate_bps),
        switch_radix=switch_radix,
        hosts_per_leaf=down,
        hop_latency_s=float(hop_latency_s),
        n_switches=n_sw,
        switch_tier=np.tile(np.r_[np.zeros(n_leaves), np.ones(spines)], planes).astype(np.int8),
        switch_plane=np.repeat(np.arange(planes), per_plane).astype(np.int16),
        link_src=src,
        link_dst=dst,
        capacity_bps=cap,
        link_tier=tier,
        link_plane=plane,
        reverse=reverse,
        host_up=host_up,
        host_down=host_down,
        host_leaf=np.tile(host_leaf, (planes, 1)),
        tables={"leaf_up": leaf_up, "spine_down": spine_down},
    )


def leaf_spine(gpus: int, switch_radix: int = 64, nic_rate_bps: float = 800e9, **kw) -> Topology:
    """A single 2-tier plane (``multiplane`` with ``planes = 1``)."""
    return multiplane(gpus, 1, switch_radix, nic_rate_bps, **kw)


def fat_tree(
    gpus: int,
    switch_radix: int = 64,
    nic_rate_bps: float = 800e9,
    *,
    oversubscription: float = 1.0,
    agg_oversubscription: float = 1.0,
    rail: bool = False,
    gpus_per_server: int = 8,
    hop_latency_s: float = 1e-6,
) -> Topology:
    """Single-plane 3-tier fat-tree of radix ``k`` at the NIC rate (module doc):
    ``oversubscription`` at the edges (host ports : uplinks), ``agg_oversubscription`` at the
    aggs (down : up ports)."""
    _check_common(gpus, nic_rate_bps, hop_latency_s)
    k = switch_radix
    shape = fat_tree_shape(gpus, k, oversubscription, agg_oversubscription)
    down, up, edges_per_pod, agg_up, pods, n_edges, n_aggs, per_group = shape
    n_cores = shape.cores
    host_leaf = _host_leaf(gpus, down, rail, gpus_per_server)
    edge0 = gpus
    agg0 = edge0 + n_edges
    core0 = agg0 + n_aggs
    links = _Links()
    host_up, host_down = links.cables(
        np.arange(gpus), edge0 + host_leaf, HOST_UP, HOST_DOWN, 0, nic_rate_bps
    )
    e = np.repeat(np.arange(n_edges), up)
    j = np.tile(np.arange(up), n_edges)
    agg = (e // edges_per_pod) * up + j
    ids_up, ids_down = links.cables(edge0 + e, agg0 + agg, UP1, DOWN1, 0, nic_rate_bps)
    edge_up = ids_up.reshape(n_edges, up)
    agg_down = np.full((n_aggs, edges_per_pod), -1, np.int64)
    agg_down[agg, e % edges_per_pod] = ids_down
    a = np.repeat(np.arange(n_aggs), agg_up)
    m = np.tile(np.arange(agg_up), n_aggs)
    node = (a % up) * per_group + m % per_group  # uplink m of agg j -> core (j, m mod c)
    ids_up, ids_down = links.cables(agg0 + a, core0 + node, UP2, DOWN2, 0, nic_rate_bps)
    agg_up_t = ids_up.reshape(n_aggs, agg_up)
    core_down = np.empty((up * agg_up, pods), np.int64)  # per uplink (j, m): its cable down
    core_down[(a % up) * agg_up + m, a // up] = ids_down
    src, dst, tier, plane, cap, reverse = links.arrays()
    return Topology(
        kind="fat_tree",
        n_hosts=gpus,
        planes=1,
        nic_rate_bps=float(nic_rate_bps),
        switch_radix=k,
        hosts_per_leaf=down,
        hop_latency_s=float(hop_latency_s),
        n_switches=n_edges + n_aggs + n_cores,
        switch_tier=np.r_[np.zeros(n_edges), np.ones(n_aggs), np.full(n_cores, 2)].astype(np.int8),
        switch_plane=np.zeros(n_edges + n_aggs + n_cores, np.int16),
        link_src=src,
        link_dst=dst,
        capacity_bps=cap,
        link_tier=tier,
        link_plane=plane,
        reverse=reverse,
        host_up=host_up[None, :],
        host_down=host_down[None, :],
        host_leaf=host_leaf[None, :],
        tables={
            "edge_up": edge_up,
            "agg_down": agg_down,
            "agg_up": agg_up_t,
            "core_down": core_down,
            "edges_per_pod": np.array(edges_per_pod),
        },
    )


def path_links(topo: Topology, src, dst) -> np.ndarray:
    """Links on a shortest route from hosts ``src`` to ``dst`` (every up-down route of these
    fabrics has this length): 2 within a leaf (edge), 4 across leaves of a 2-tier plane or
    across edges of one pod, 6 across pods."""
    a, b = topo.leaf_of(src), topo.leaf_of(dst)
    if topo.kind != "fat_tree":
        return np.where(a == b, 2, 4)
    e_pod = int(topo.tables["edges_per_pod"])
    return np.where(a == b, 2, np.where(a // e_pod == b // e_pod, 4, 6))


# -- failures -------------------------------------------------------------------------------------
def fail_links(topo: Topology, fraction: float, seed: int = 0, tiers=(UP1,)) -> np.ndarray:
    """Link state (True = up) with ``round(fraction x cables)`` fabric cables down, drawn
    uniformly (seeded) among the cables whose up direction is in ``tiers`` (default the
    leaf-spine / edge-agg cables); both directions of a failed cable are down."""
    if not 0 <= fraction < 1:
        raise ConfigError("fraction", f"must be in [0, 1), got {fraction}")
    candidates = np.flatnonzero(np.isin(topo.link_tier, tiers))
    n_fail = int(round(fraction * candidates.size))
    chosen = np.random.default_rng(seed).choice(candidates, n_fail, replace=False)
    up = np.ones(topo.n_links, bool)
    up[chosen] = False
    up[topo.reverse[chosen]] = False
    return up


def bundle_capacity(topo: Topology, up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Alive cables of a 2-tier fabric's leaf-spine bundles: leaf -> spine ``[P, L, S]`` and
    spine -> leaf ``[P, S, L]`` (``up``: link state)."""
    leaf_up, spine_down = topo.tables["leaf_up"], topo.tables["spine_down"]
    P, L, U = leaf_up.shape
    S = spine_down.shape[1]
    cap_up = up[leaf_up].reshape(P, L, U // S, S).sum(axis=2).astype(float)
    cap_down = up[spine_down].sum(axis=3).astype(float)
    return cap_up, cap_down


# -- bisection ------------------------------------------------------------------------------------
def bisection_closed_form_bps(topo: Topology) -> float:
    """``(H/2) · nic_rate`` times the oversubscription factors of the tiers (module doc)."""
    d = topo.hosts_per_leaf
    if topo.kind == "fat_tree":
        up = topo.tables["edge_up"].shape[1]
        ua = topo.tables["agg_up"].shape[1]
        e_pod = int(topo.tables["edges_per_pod"])
        return topo.n_hosts / 2 * topo.nic_rate_bps * min(1, up / d) * min(1, ua / e_pod)
    up = topo.tables["leaf_up"].shape[2]
    return topo.n_hosts / 2 * topo.nic_rate_bps * min(1, up / d)


def bisection_bps(topo: Topology, link_up: np.ndarray | None = None) -> float:
    """Max-flow from the first half of the hosts (in leaf order) to the other half.

    Capacities are integers in units of the smallest link rate (exact for these fabrics).
    """
    up = np.ones(topo.n_links, bool) if link_up is None else np.asarray(link_up, bool)
    order = np.argsort(topo.host_leaf[0], kind="stable")
    half = topo.n_hosts // 2
    a, b = order[:half], order[half : 2 * half]
    unit = topo.capacity_bps.min()
    n_nodes = topo.n_hosts + topo.n_switches
    s, t = n_nodes, n_nodes + 1
    cap = np.where(up, np.rint(topo.capacity_bps / unit), 0).astype(np.int64)
    big = int(cap.sum()) + 1
    rows = np.r_[topo.link_src, np.full(a.size, s), b]
    cols = np.r_[topo.link_dst, a, np.full(b.size, t)]
    vals = np.r_[cap, np.full(a.size + b.size, big)]
    import scipy.sparse as sp  # lazily: 0.1 s of import that only this function needs
    from scipy.sparse.csgraph import maximum_flow

    graph = sp.csr_matrix((vals.astype(np.int32), (rows, cols)), shape=(n_nodes + 2,) * 2)
    return float(maximum_flow(graph, s, t).flow_value) * unit
