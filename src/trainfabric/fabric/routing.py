"""Load-balancing modes: how each flow's traffic is split over planes and paths.

A route is a short list of *slots* per flow, ``(group, weight)``: flow ``f`` at rate ``x_f``
puts ``x_f · weight · coef`` on every link of the group. Groups ``g < n_links`` are single
links (coef 1); the others are spreads over many links (CSR :class:`Groups`): the static
ones of the topology (a leaf's uplinks, the spine cables into a leaf, ...) and per-epoch
pair groups built when failures break the symmetry. This factorisation keeps a sprayed
all-to-all at ``O(flows · planes)`` entries instead of ``O(flows · paths)``.

Modes (``MODES``), each with what it models and what it cannot:

* ``ecmp`` — classic per-flow hashing: a seeded 64-bit hash of the connection picks the plane
  (among planes whose host links are up), the leaf uplink, then the spine's cable (among
  next hops with a path to the destination). One path per connection for its lifetime, so
  collisions persist. Not modelled: resilient hashing (a next-hop change re-hashes every
  flow of the group), hash polarisation.
* ``flowlet`` — ECMP that re-hashes a connection whenever it restarts after being idle for
  ``flowlet_gap_s`` (default 50 us; the engine counts the flowlets). Not modelled: flowlets
  inside one continuously backlogged transfer (RDMA flows rarely pause), load-aware flowlet
  placement (CONGA).
* ``pinning`` — software plane load balancing (``swplb``): the host stack pins the parallel
  connections (QPs) of a host pair to planes round-robin (channel ``c`` to the
  ``(h + c) mod k``-th of the ``k`` usable planes, ``h`` a hash of the pair), learning
  host-link failures after the *software* reaction time; ECMP inside the plane. It cannot
  split one connection over planes.
* ``spray`` — oblivious per-packet spraying: the NIC sprays evenly over the planes whose local
  port is up (hardware reaction) and whose remote end is reachable (routing), the leaf over its
  uplinks with a path to the destination, the spine over its cables to it. It never looks
  at load; remote failures are avoided only after routing convergence.
* ``adaptive`` — hardware load balancing (``hwplb`` + per-packet adaptive routing): every
  failure is avoided after the *hardware* reaction time, and the split over planes and
  spines equalises path load. On a healthy 2-tier plane the even split is already optimal
  (every uplink of a leaf carries exactly ``1/U`` of its traffic, every cable into a leaf
  ``1/U`` of that leaf's), so it equals ``spray``. Once the hardware knows of failures, the
  split over (plane, spine) of every host pair (leaf pair for large traffic matrices) is
  the most even split within ``1e-3`` of the minimum congestion of the unfinished traffic
  (:func:`trainfabric.fabric.mcf.balanced_split`, HiGHS), recomputed at every link-state
  change, not at every arrival: an idealised equaliser, not a model of queue-by-queue
  decisions. On the 3-tier tree it sprays over the paths alive in the hardware view (no
  load feedback). Beyond ``mcf.MAX_LP_VARIABLES`` (a 131,072-GPU fabric's leaf pairs) the
  split comes from the priced decomposition (:func:`trainfabric.fabric.mcf.priced_split`),
  whose gap to the LP is certified per instance instead of being zero by construction.

Plane symmetry: on a healthy multiplane fabric (every plane whole in the truth and in the
views the mode uses) the even split of ``spray`` / ``adaptive`` is written as four
plane-wide groups per flow (host links of every plane, ``1/P`` each; leaf uplinks and
spine cables of every plane, ``1/(P U)`` each) instead of four per plane: the same link
loads (tested against the per-plane slots), ``P`` times fewer slots, so 8.3 M flows of a
131,072-GPU expert-parallel all-to-all fit in a few GB.

Emergent behaviour worth knowing: under ``flowlet`` a barrier-synchronised collective
concentrates load. Connections on a congested path finish last and restart at once (no
idle gap, no re-hash), while the fast ones idle, re-hash and may land on the hot path, so
hot spots only grow from step to step.

Failures: ``truth`` is the real link state, a *view* is what a mechanism knows; view
``m`` equals the truth ``reaction[m]`` seconds ago (hardware 5 us, host software 5 ms,
routing 1 s by default). Split traffic sent into a link that is down in truth is lost
there: it loads the links before it, not after, and ``lost[f]`` is that fraction. A
single-path flow whose path is cut, or a flow with no usable path, is stalled: it sends
nothing (``lost = 1``) until its mode reacts. Transports are assumed loss-tolerant
(selective retransmission, as MRC/hwplb), so a split flow keeps its rate on the surviving
share. Single-path modes choose the plane from host-link state only: a connection hashed
onto a plane whose fabric cannot reach the destination stays stalled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.flows import FlowTable, mix64

MODES = ("ecmp", "flowlet", "pinning", "spray", "adaptive")
MECHANISMS = ("hardware", "software", "routing")
# (plane choice, local / remote host link) and fabric next hops: which view each mode uses
_VIEWS = {
    "ecmp": ("routing", "routing", "routing"),
    "flowlet": ("routing", "routing", "routing"),
    "pinning": ("software", "software", "routing"),
    "spray": ("hardware", "routing", "routing"),
    "adaptive": ("hardware", "hardware", "hardware"),
}
SPLIT_MODES = ("spray", "adaptive")


@dataclass(frozen=True)
class Reaction:
    """Seconds after a link changes state until each mechanism knows it."""

    hardware_s: float = 5e-6
    software_s: float = 5e-3
    routing_s: float = 1.0

    def of(self, mechanism: str) -> float:
        return {"hardware": self.hardware_s, "software": self.software_s}.get(
            mechanism, self.routing_s
        )


@dataclass(frozen=True)
class Groups:
    """Spread groups as CSR: group ``offset + i`` puts ``coef[ptr[i]:ptr[i+1]]`` on
    ``link[ptr[i]:ptr[i+1]]``."""

    offset: int
    ptr: np.ndarray
    link: np.ndarray
    coef: np.ndarray

    @property
    def n(self) -> int:
        return self.ptr.size - 1

    @classmethod
    def from_rows(cls, offset: int, rows_links: np.ndarray, rows_coef: np.ndarray) -> Groups:
        """Dense rows ``[n, m]`` (all groups of the same size)."""
        n, m = rows_links.shape
        return cls(
            offset, np.arange(n + 1, dtype=np.int64) * m, rows_links.ravel(), rows_coef.ravel()
        )

    @classmethod
    def concat(cls, parts: list[Groups], offset: int) -> Groups:
        ptr = [np.zeros(1, np.int64)]
        for g in parts:
            ptr.append(g.ptr[1:] + ptr[-1][-1])
        return cls(
            offset,
            np.concatenate(ptr),
            np.concatenate([g.link for g in parts]).astype(np.int64, copy=False),
            np.concatenate([g.coef for g in parts]).astype(float, copy=False),
        )


@dataclass(frozen=True)
class Routes:
    """Routes of ``n`` flows: slots ``group[n, K]`` (-1 = unused), ``weight[n, K]``;
    ``lost`` fraction dropped at dead links; ``hops`` links on the longest path used."""

    group: np.ndarray
    weight: np.ndarray
    lost: np.ndarray
    hops: np.ndarray


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(
            "mode", f"unknown load-balancing mode {mode!r}; known: {', '.join(MODES)}"
        )
    return mode


class Router:
    """Routes flows on ``topo`` under ``mode``; one epoch per link-state change.

    Call :meth:`begin_epoch` with the truth and the views whenever either changes (the
    engine does), then :meth:`route` for any set of flows.
    """

    def __init__(
        self,
        topo: T.Topology,
        mode: str,
        *,
        seed: int = 0,
        reaction: Reaction | None = None,
        flowlet_gap_s: float = 50e-6,
    ):
        self.topo = topo
        self.mode = check_mode(mode)
        self.seed = int(seed)
        self.reaction = reaction or Reaction()
        self.flowlet_gap_s = float(flowlet_gap_s) if mode == "flowlet" else None
        self.plane_view, self.remote_view, self.fabric_view = _VIEWS[mode]
        self.split = mode in SPLIT_MODES
        self.static = _static_groups(topo)
        self._groups = self.static
        self._epoch: _Epoch | None = None

    @property
    def groups(self) -> Groups:
        """The static groups and the pair groups built in this epoch (concatenated once per
        batch of new pair groups, when asked for)."""
        ep = self._epoch
        if ep is not None and ep.rows_joined < len(ep.rows):
            self._groups = Groups.concat([self.static, *ep.rows], self.static.offset)
            ep.rows_joined = len(ep.rows)
        return self._groups

    # -- reaction times ---------------------------------------------------------------------
    @property
    def mechanisms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.plane_view, self.remote_view, self.fabric_view)))

    def reaction_s(self, links) -> np.ndarray:
        """Seconds until this mode routes around a failure of each of ``links``."""
        links = np.asarray(links, np.int64)
        tier = self.topo.link_tier[links]
        host = (tier == T.HOST_UP) | (tier == T.HOST_DOWN)
        r = self.reaction.of
        host_s = max(r(self.plane_view), r(self.remote_view))
        return np.where(host, host_s, r(self.fabric_view))

    # -- epochs -----------------------------------------------------------------------------
    def begin_epoch(
        self,
        truth: np.ndarray,
        views: dict[str, np.ndarray],
        demand: FlowTable | None = None,
        demand_bytes: np.ndarray | None = None,
    ) -> None:
        """Fix the link states for the following :meth:`route` calls.

        ``demand`` (flows) and ``demand_bytes`` (their unfinished bytes) give the traffic
        matrix that ``adaptive`` balances when fabric links are down.
        """
        topo = self.topo
        truth = np.array(truth, bool)
        ep = _Epoch(
            truth=truth,
            plane=np.array(views[self.plane_view], bool),
            remote=np.array(views[self.remote_view], bool),
            fabric=np.array(views[self.fabric_view], bool),
        )
        fabric = topo.fabric
        ep.healthy = bool(truth[fabric].all() and ep.fabric[fabric].all())
        ep.cache = {}
        ep.rows = []
        ep.next_id = self.static.offset + self.static.n
        view_failed = not ep.fabric[fabric].all() or not ep.plane[~fabric].all()
        if self.mode == "adaptive" and view_failed and topo.kind != "fat_tree":
            ep.balance = _balance_for(topo, ep, demand, demand_bytes)
        self._epoch = ep
        self._groups = self.static

    def route(self, flows: FlowTable, idx: np.ndarray, flowlet: np.ndarray | None = None) -> Routes:
        """Routes of flows ``idx`` in the current epoch (``flowlet``: per-flow re-hash count)."""
        if self._epoch is None:
            up = np.ones(self.topo.n_links, bool)
            self.begin_epoch(up, {m: up for m in MECHANISMS})
        idx = np.asarray(idx, np.int64)
        ent = flows.entropy[idx]
        if flowlet is not None:
            ent = mix64(ent, flowlet, seed=7)
        src, dst = flows.src[idx], flows.dst[idx]
        if self.split:
            return self._route_split(src, dst)
        return self._route_single(src, dst, ent, flows.channel[idx])

    # -- single path (ecmp, flowlet, pinning) ------------------------------------------------
    def _route_single(self, src, dst, ent, channel) -> Routes:
        topo, ep = self.topo, self._epoch
        usable = ep.plane[topo.host_up[:, src]].T & ep.remote[topo.host_down[:, dst]].T
        if self.mode == "pinning":
            h_plane = mix64(src, dst, seed=self.seed + 1) + channel.astype(np.uint64)
        else:
            h_plane = mix64(ent, seed=self.seed + 1)
        plane = _pick(usable, h_plane)
        h1 = mix64(ent, seed=self.seed + 2)
        h2 = mix64(ent, seed=self.seed + 3)
        t = topo.tables
        if topo.kind == "fat_tree":
            kernel, width = _paths_3tier, 6
            tables = (
                t["edge_up"],
                t["agg_down"],
                t["agg_up"],
                t["core_down"],
                int(t["edges_per_pod"]),
            )
        else:
            kernel, width = _paths_2tier, 4
            tables = (t["leaf_up"], t["spine_down"])
        slots = np.full((src.size, width), -1, np.int64)
        hops = np.zeros(src.size, np.int64)
        common = (plane, src, dst, topo.host_leaf[0], h1, h2, topo.host_up, topo.host_down)
        kernel(*common, *tables, ep.fabric, slots, hops)
        used = slots >= 0
        dead = used & ~ep.truth[np.where(used, slots, 0)]
        lost = (dead.any(axis=1) | (hops == 0)).astype(float)
        weight = used.astype(float)
        return Routes(slots, weight, lost, hops)

    # -- split (spray, adaptive) ------------------------------------------------------------
    def _route_split(self, src, dst) -> Routes:
        topo, ep = self.topo, self._epoch
        a, b = topo.leaf_of(src), topo.leaf_of(dst)
        if self._plane_symmetric():
            return self._split_symmetric(src, dst, a, b)
        usable = ep.plane[topo.host_up[:, src]].T & ep.remote[topo.host_down[:, dst]].T
        if topo.kind == "fat_tree":
            return self._split_3tier(src, dst, a, b, usable)
        if not ep.fabric[topo.fabric].all():  # the remote end must be reachable on the plane
            usable &= (a == b)[:, None] | self._leaf_reach()[:, a, b].T
        return self._split_2tier(src, dst, a, b, usable)

    def _plane_symmetric(self) -> bool:
        """Every plane identical and fully alive (truth and every view this mode uses) on a
        2-tier multiplane fabric: every split route is the even one (module doc)."""
        ep, topo = self._epoch, self.topo
        if ep.symmetric is None:
            host = ~topo.fabric
            ep.symmetric = bool(
                topo.kind != "fat_tree"
                and topo.planes > 1
                and ep.healthy
                and ep.balance is None
                and ep.truth[host].all()
                and ep.plane[host].all()
                and ep.remote[host].all()
            )
        return ep.symmetric

    def _split_symmetric(self, src, dst, a, b) -> Routes:
        """The even split over planes, uplinks and spine cables as four plane-wide groups
        (``HUP(src)``, ``UP(a)``, ``DOWN(b)``, ``HDOWN(dst)``, coefficients ``1/P`` and
        ``1/(P U)``): the same link loads as the per-plane slots, with 4 slots instead of
        ``4 P``."""
        topo = self.topo
        L, H = topo.tables["leaf_up"].shape[1], topo.n_hosts
        base = self.static.offset + 2 * topo.planes * L  # after the per-plane groups
        cross = a != b
        group = np.empty((src.size, 4), np.int64)
        group[:, 0] = base + 2 * L + src
        group[:, 1] = np.where(cross, base + a, -1)
        group[:, 2] = np.where(cross, base + L + b, -1)
        group[:, 3] = base + 2 * L + H + dst
        weight = (group >= 0).astype(float)
        return Routes(group, weight, np.zeros(src.size), np.where(cross, 4, 2))

    def _leaf_reach(self) -> np.ndarray:
        """``[P, L, L]``: leaf ``a`` reaches leaf ``b`` through some spine of plane ``p``
        (fabric view)."""
        ep = self._epoch
        if ep.reach is None:
            t = self.topo.tables
            P, L, U = t["leaf_up"].shape
            S = t["spine_down"].shape[1]
            up = ep.fabric[t["leaf_up"]].reshape(P, L, U // S, S).any(axis=2)  # [P, L, S]
            down = ep.fabric[t["spine_down"]].any(axis=3)  # [P, S, L]
            ep.reach = (up.astype(np.int64) @ down.astype(np.int64)) > 0
        return ep.reach

    def _plane_weights(self, src, dst, usable) -> tuple[np.ndarray, np.ndarray | None]:
        """Plane shares ``[n, P]`` over the usable planes (even, or the balanced split's),
        and each flow's balanced commodity (``None`` without a balance)."""
        w = usable.astype(float)
        bal = self._epoch.balance
        cls = None
        if bal is not None:
            cls = bal.class_of(src, dst)
            has = cls >= 0
            w[has] *= bal.plane_weight[cls[has]]
        total = w.sum(axis=1, keepdims=True)
        return np.divide(w, total, out=np.zeros_like(w), where=total > 0), cls

    def _split_2tier(self, src, dst, a, b, usable) -> Routes:
        topo, ep = self.topo, self._epoch
        P = topo.planes
        L = topo.tables["leaf_up"].shape[1]
        n = src.size
        w, cls = self._plane_weights(src, dst, usable)
        group = np.full((n, P, 4), -1, np.int64)
        weight = np.zeros((n, P, 4))
        lost = np.ones(n)
        hops = np.where(a == b, 2, 4)
        off = self.static.offset
        for p in range(P):
            on = w[:, p] > 0
            if not on.any():
                continue
            hu, hd = topo.host_up[p, src], topo.host_down[p, dst]
            hu_ok, hd_ok = ep.truth[hu], ep.truth[hd]
            surv = np.where(a == b, 1.0, 0.0)
            cross = on & (a != b)
            clean = self._clean_2tier(p, a, b) & cross
            group[clean, p, 1] = off + p * L + a[clean]
            group[clean, p, 2] = off + P * L + p * L + b[clean]
            surv[clean] = 1.0
            dirty = np.flatnonzero(cross & ~clean)
            if dirty.size:
                gid, s = self._pair_groups(
                    p, a[dirty], b[dirty], None if cls is None else cls[dirty]
                )
                group[dirty, p, 1] = gid
                surv[dirty] = s
            wp = np.where(on & hu_ok, w[:, p], 0.0)
            group[:, p, 0] = np.where(wp > 0, hu, -1)
            weight[:, p, 0] = wp
            weight[:, p, 1] = np.where(group[:, p, 1] >= 0, wp, 0.0)
            weight[:, p, 2] = np.where(group[:, p, 2] >= 0, wp, 0.0)
            delivered = wp * surv
            group[:, p, 3] = np.where((delivered > 0) & hd_ok, hd, -1)
            weight[:, p, 3] = np.where(group[:, p, 3] >= 0, delivered, 0.0)
            lost -= np.where(hd_ok, delivered, 0.0)
        lost = np.clip(lost, 0.0, 1.0)
        lost[lost < 1e-12] = 0.0
        return Routes(group.reshape(n, 4 * P), weight.reshape(n, 4 * P), lost, hops)

    def _clean_2tier(self, p: int, a, b) -> np.ndarray:
        """Flows whose leaf uplinks (at ``a``) and spine cables (into ``b``) on plane ``p``
        are all up in the truth and in the view and that follow the even split: the static
        groups apply."""
        ep = self._epoch
        if ep.healthy:
            return np.ones(a.size, bool)
        if ep.balance is not None:
            return np.zeros(a.size, bool)
        if ep.clean_up is None:
            t = self.topo.tables
            ok = ep.truth & ep.fabric
            ep.clean_up = ok[t["leaf_up"]].all(axis=2)  # [P, L]
            ep.clean_down = ok[t["spine_down"]].all(axis=(1, 3))  # [P, L]
        return ep.clean_up[p, a] & ep.clean_down[p, b]

    def _pair_groups(self, p: int, a, b, cls) -> tuple[np.ndarray, np.ndarray]:
        """Group ids and survival of the pair groups of plane ``p``, one per leaf pair
        (spray) or balanced commodity (adaptive), built once per epoch."""
        ep, topo = self._epoch, self.topo
        L = topo.tables["leaf_up"].shape[1]
        key = (a * L + b if cls is None else cls) * topo.planes + p
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        ids = np.array([ep.cache.get(int(k), -1) for k in uniq], np.int64)
        new = ids < 0
        if new.any():
            sel = first[new]
            pa, pb = a[sel], b[sel]
            if cls is None:
                spine_w = self._spray_weights(p, pa, pb)
            else:
                spine_w = ep.balance.spine_weight(p, cls[sel])
            t = topo.tables
            ptr, link, coef, surv = _pair_rows_2tier(
                p, pa, pb, spine_w, t["leaf_up"], t["spine_down"], ep.fabric, ep.truth
            )
            self._add_groups(uniq[new], ids, new, Groups(ep.next_id, ptr, link, coef), surv)
        surv = np.array([ep.surv[int(i)] for i in ids])
        return ids[inv], surv[inv]

    def _add_groups(self, keys, ids, new, rows: Groups, surv) -> None:
        """Register freshly built pair groups (ids written into ``ids[new]``)."""
        ep = self._epoch
        ids[new] = rows.offset + np.arange(rows.n)
        ep.next_id += rows.n
        for k, i, s in zip(keys.tolist(), ids[new].tolist(), surv.tolist(), strict=True):
            ep.cache[k] = i
            ep.surv[i] = s
        ep.rows.append(rows)

    def _spray_weights(self, p: int, a, b) -> np.ndarray:
        """[pairs, S]: each spine's share when the leaf sprays evenly over its uplinks that
        have a path to the destination leaf (view)."""
        ep = self._epoch
        t = self.topo.tables
        up_ok = ep.fabric[t["leaf_up"][p, a]]  # [n, U]
        down_any = ep.fabric[t["spine_down"][p][:, b]].any(axis=2).T  # [n, S]
        S = down_any.shape[1]
        usable = up_ok & np.tile(down_any, (1, up_ok.shape[1] // S))
        counts = usable.reshape(a.size, -1, S).sum(axis=1).astype(float)  # per spine
        total = counts.sum(axis=1, keepdims=True)
        return np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)

    def _split_3tier(self, src, dst, a, b, usable) -> Routes:
        topo, ep = self.topo, self._epoch
        t = topo.tables
        e_pod = int(t["edges_per_pod"])
        E = t["edge_up"].shape[0]
        pods = t["core_down"].shape[1]
        n = src.size
        ok = usable[:, 0]
        hu, hd = topo.host_up[0, src], topo.host_down[0, dst]
        hu_ok, hd_ok = ep.truth[hu], ep.truth[hd]
        group = np.full((n, 6), -1, np.int64)
        qa, qb = a // e_pod, b // e_pod
        same_pod = qa == qb
        hops = np.where(a == b, 2, np.where(same_pod, 4, 6))
        off = self.static.offset
        surv = np.ones(n)
        cross = ok & (a != b)
        if ep.healthy:
            group[cross, 1] = off + a[cross]
            group[cross, 4] = off + E + b[cross]
            far = cross & ~same_pod
            group[far, 2] = off + 2 * E + qa[far]
            group[far, 3] = off + 2 * E + pods + qb[far]
        elif cross.any():
            gid, s = self._pair_groups_3tier(a[cross], b[cross])
            group[cross, 1] = gid
            surv[cross] = s
        w = np.where(ok & hu_ok, 1.0, 0.0)
        group[:, 0] = np.where(w > 0, hu, -1)
        weight = np.zeros((n, 6))
        weight[:, 0] = w
        for k in (1, 2, 3, 4):
            weight[:, k] = np.where(group[:, k] >= 0, w, 0.0)
        delivered = w * surv
        group[:, 5] = np.where((delivered > 0) & hd_ok, hd, -1)
        weight[:, 5] = np.where(group[:, 5] >= 0, delivered, 0.0)
        lost = 1.0 - np.where(hd_ok, delivered, 0.0)
        lost[lost < 1e-12] = 0.0
        return Routes(group, weight, lost, hops)

    def _pair_groups_3tier(self, a, b) -> tuple[np.ndarray, np.ndarray]:
        ep, topo = self._epoch, self.topo
        E = topo.tables["edge_up"].shape[0]
        uniq, inv = np.unique(a * E + b, return_inverse=True)
        ids = np.array([ep.cache.get(int(k), -1) for k in uniq], np.int64)
        new = ids < 0
        if new.any():
            kk = uniq[new]
            t = topo.tables
            ptr, link, coef, surv = _pair_rows_3tier(
                kk // E,
                kk % E,
                t["edge_up"],
                t["agg_down"],
                t["agg_up"],
                t["core_down"],
                int(t["edges_per_pod"]),
                ep.fabric,
                ep.truth,
            )
            self._add_groups(kk, ids, new, Groups(ep.next_id, ptr, link, coef), surv)
        surv = np.array([ep.surv[int(i)] for i in ids])
        return ids[inv], surv[inv]


class _Epoch:
    """Link states of one epoch and the pair groups built in it."""

    def __init__(self, truth, plane, remote, fabric):
        self.truth, self.plane, self.remote, self.fabric = truth, plane, remote, fabric
        self.healthy = True
        self.balance: _Balance | None = None
        self.clean_up = self.clean_down = None
        self.reach: np.ndarray | None = None
        self.symmetric: bool | None = None
        self.cache: dict[int, int] = {}
        self.surv: dict[int, float] = {}
        self.rows: list[Groups] = []
        self.rows_joined = 0
        self.next_id = 0


def _pick(usable: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Index of the ``(h mod count)``-th True of every row of ``usable``; -1 when none."""
    count = usable.sum(axis=1)
    r = np.where(count > 0, h % np.maximum(count, 1).astype(np.uint64), 0).astype(np.int64)
    rank = np.cumsum(usable, axis=1) - 1
    hit = usable & (rank == r[:, None])
    return np.where(count > 0, hit.argmax(axis=1), -1)


# -- static spread groups -------------------------------------------------------------------------
def _static_groups(topo: T.Topology) -> Groups:
    """2-tier: ``UP(p, a)`` (leaf a's uplinks, 1/U each) then ``DOWN(p, b)`` (the spine cables
    into leaf b, 1/U each); with several planes also the plane-wide ``UP(a)``, ``DOWN(b)``
    (all planes' uplinks of leaf a / cables into leaf b, 1/(P U) each), ``HUP(h)`` and
    ``HDOWN(h)`` (host h's links on every plane, 1/P each). Fat-tree: ``EUP(e)``,
    ``ADOWN(e)``, ``AUP(pod)``, ``CDOWN(pod)``."""
    off = topo.n_links
    t = topo.tables
    if topo.kind == "fat_tree":
        eu, ad, au, cd = t["edge_up"], t["agg_down"], t["agg_up"], t["core_down"]
        E, u = eu.shape
        e_pod = int(t["edges_per_pod"])
        pods = cd.shape[1]
        e = np.arange(E)
        adown = ad[(e // e_pod)[:, None] * u + np.arange(u)[None, :], (e % e_pod)[:, None]]
        aup = au.reshape(pods, -1)
        cdown = cd.T
        rows = [(eu, 1 / u), (adown, 1 / u), (aup, 1 / aup.shape[1]), (cdown, 1 / cdown.shape[1])]
    else:
        lu, sd = t["leaf_up"], t["spine_down"]
        P, L, U = lu.shape
        up = lu.reshape(P * L, U)
        down = sd.transpose(0, 2, 1, 3).reshape(P * L, U)
        rows = [(up, 1 / U), (down, 1 / U)]
        if P > 1:  # plane-wide groups of the symmetric (healthy, even) split
            up_all = lu.transpose(1, 0, 2).reshape(L, P * U)
            down_all = down.reshape(P, L, U).transpose(1, 0, 2).reshape(L, P * U)
            rows += [(up_all, 1 / (P * U)), (down_all, 1 / (P * U))]
            rows += [(topo.host_up.T, 1 / P), (topo.host_down.T, 1 / P)]
    parts = [Groups.from_rows(0, r, np.full(r.shape, c)) for r, c in rows]
    return Groups.concat(parts, off)


# -- numba kernels ---------------------------------------------------------------------------------
@numba.njit(cache=True)
def _usable_up(p, a, b, j, leaf_up, spine_down, view):
    if not view[leaf_up[p, a, j]]:
        return False
    s = j % spine_down.shape[1]
    for k in range(spine_down.shape[3]):  # noqa: SIM110 (numba: no any() over a generator)
        if view[spine_down[p, s, b, k]]:
            return True
    return False


@numba.njit(cache=True)
def _paths_2tier(
    plane, src, dst, leaf, h1, h2, host_up, host_down, leaf_up, spine_down, view, slots, hops
):
    """One path per flow: hash-chosen usable uplink, then usable cable down (view)."""
    U = leaf_up.shape[2]
    S = spine_down.shape[1]
    C = spine_down.shape[3]
    for i in range(plane.size):
        p = plane[i]
        if p < 0:
            continue
        a, b = leaf[src[i]], leaf[dst[i]]
        slots[i, 0] = host_up[p, src[i]]
        slots[i, 3] = host_down[p, dst[i]]
        if a == b:
            hops[i] = 2
            continue
        cnt = 0
        for j in range(U):
            if _usable_up(p, a, b, j, leaf_up, spine_down, view):
                cnt += 1
        if cnt == 0:
            slots[i, 0] = -1
            slots[i, 3] = -1
            continue
        r = np.int64(h1[i] % np.uint64(cnt))
        jj = -1
        for j in range(U):
            if _usable_up(p, a, b, j, leaf_up, spine_down, view):
                if r == 0:
                    jj = j
                    break
                r -= 1
        s = jj % S
        cnt = 0
        for k in range(C):
            if view[spine_down[p, s, b, k]]:
                cnt += 1
        r = np.int64(h2[i] % np.uint64(cnt))
        for k in range(C):
            if view[spine_down[p, s, b, k]]:
                if r == 0:
                    slots[i, 2] = spine_down[p, s, b, k]
                    break
                r -= 1
        slots[i, 1] = leaf_up[p, a, jj]
        hops[i] = 4


@numba.njit(cache=True)
def _core_ok(j, m, q, qb, ib, agg_up, core_down, agg_down, u, view):
    """Agg j of pod q reaches edge ib of pod qb through core (j, m)."""
    ua = agg_up.shape[1]
    if not view[agg_up[q * u + j, m]]:
        return False
    if not view[core_down[j * ua + m, qb]]:
        return False
    return view[agg_down[qb * u + j, ib]]


@numba.njit(cache=True)
def _agg_ok(e, j, qb, ib, same_pod, edge_up, agg_up, core_down, agg_down, u, view):
    """Edge e reaches edge (qb, ib) through its agg j."""
    if not view[edge_up[e, j]]:
        return False
    q = e // agg_down.shape[1]
    if same_pod:
        return view[agg_down[q * u + j, ib]]
    for m in range(agg_up.shape[1]):
        if _core_ok(j, m, q, qb, ib, agg_up, core_down, agg_down, u, view):
            return True
    return False


@numba.njit(cache=True)
def _paths_3tier(
    plane,
    src,
    dst,
    leaf,
    h1,
    h2,
    host_up,
    host_down,
    edge_up,
    agg_down,
    agg_up,
    core_down,
    e_pod,
    view,
    slots,
    hops,
):
    """One up-down path per flow on the fat-tree (hash per hop among usable next hops)."""
    u = edge_up.shape[1]
    ua = agg_up.shape[1]
    for i in range(plane.size):
        if plane[i] < 0:
            continue
        a, b = leaf[src[i]], leaf[dst[i]]
        slots[i, 0] = host_up[0, src[i]]
        slots[i, 5] = host_down[0, dst[i]]
        if a == b:
            hops[i] = 2
            continue
        q, qb, ib = a // e_pod, b // e_pod, b % e_pod
        same = q == qb
        cnt = 0
        for j in range(u):
            if _agg_ok(a, j, qb, ib, same, edge_up, agg_up, core_down, agg_down, u, view):
                cnt += 1
        if cnt == 0:
            slots[i, 0] = -1
            slots[i, 5] = -1
            continue
        r = np.int64(h1[i] % np.uint64(cnt))
        jj = 0
        for j in range(u):
            if _agg_ok(a, j, qb, ib, same, edge_up, agg_up, core_down, agg_down, u, view):
                if r == 0:
                    jj = j
                    break
                r -= 1
        slots[i, 1] = edge_up[a, jj]
        slots[i, 4] = agg_down[qb * u + jj, ib]
        if same:
            hops[i] = 4
            continue
        cnt = 0
        for m in range(ua):
            if _core_ok(jj, m, q, qb, ib, agg_up, core_down, agg_down, u, view):
                cnt += 1
        r = np.int64(h2[i] % np.uint64(cnt))
        for m in range(ua):
            if _core_ok(jj, m, q, qb, ib, agg_up, core_down, agg_down, u, view):
                if r == 0:
                    slots[i, 2] = agg_up[q * u + jj, m]
                    slots[i, 3] = core_down[jj * ua + m, qb]
                    break
                r -= 1
        hops[i] = 6


def _pair_rows_2tier(p, a, b, spine_w, leaf_up, spine_down, view, truth):
    """Pair groups on plane ``p``: spine ``s`` gets ``spine_w[i, s]``, split evenly over the
    view-alive uplinks to it, then over the view-alive cables from it into ``b``. Traffic
    reaching a link that is down in truth is dropped there (survival = delivered share).
    The plane's tables and link states are gathered into contiguous arrays first (leaf-major
    cables into each leaf), then :func:`_pair_rows_plane` counts and fills exactly."""
    lu = np.ascontiguousarray(leaf_up[p])  # [L, U]
    ld = np.ascontiguousarray(spine_down[p].transpose(1, 0, 2))  # [L(b), S, C]
    return _pair_rows_plane(a, b, spine_w, lu, ld, view[lu], truth[lu], view[ld], truth[ld])


@numba.njit(cache=True)
def _pair_rows_plane(a, b, spine_w, lu, ld, uv, ut, dv, dt):
    U, S, C = lu.shape[1], ld.shape[1], ld.shape[2]
    n = a.size
    ptr = np.zeros(n + 1, np.int64)
    for sweep in range(2):  # count, then fill
        if sweep == 1:
            link = np.empty(ptr[n], np.int64)
            coef = np.empty(ptr[n])
        else:
            link = np.empty(0, np.int64)
            coef = np.empty(0)
        surv = np.zeros(n)
        e = 0
        for i in range(n):
            ai, bi = a[i], b[i]
            for s in range(S):
                w = spine_w[i, s]
                if w <= 0.0:
                    continue
                n_up = 0
                for j in range(s, U, S):
                    if uv[ai, j]:
                        n_up += 1
                n_dn = 0
                for k in range(C):
                    if dv[bi, s, k]:
                        n_dn += 1
                if n_up == 0 or n_dn == 0:
                    continue
                arrived = 0.0
                for j in range(s, U, S):
                    if uv[ai, j] and ut[ai, j]:
                        if sweep == 1:
                            link[e] = lu[ai, j]
                            coef[e] = w / n_up
                        arrived += w / n_up
                        e += 1
                for k in range(C):
                    if dv[bi, s, k] and dt[bi, s, k]:
                        if sweep == 1:
                            link[e] = ld[bi, s, k]
                            coef[e] = arrived / n_dn
                        surv[i] += arrived / n_dn
                        e += 1
            ptr[i + 1] = e
    return ptr, link, coef, surv


@numba.njit(cache=True)
def _pair_rows_3tier(a, b, edge_up, agg_down, agg_up, core_down, e_pod, view, truth):
    """Fat-tree pair groups: even split over the usable aggs (view), then over the usable
    cores; traffic reaching a link down in truth is dropped there."""
    n = a.size
    u = edge_up.shape[1]
    ua = agg_up.shape[1]
    ptr = np.zeros(n + 1, np.int64)
    link = np.empty(n * (2 * u + 2 * u * ua), np.int64)
    coef = np.empty(n * (2 * u + 2 * u * ua))
    surv = np.zeros(n)
    e = 0
    for i in range(n):
        q, qb, ib = a[i] // e_pod, b[i] // e_pod, b[i] % e_pod
        same = q == qb
        n_agg = 0
        for j in range(u):
            if _agg_ok(a[i], j, qb, ib, same, edge_up, agg_up, core_down, agg_down, u, view):
                n_agg += 1
        if n_agg == 0:
            ptr[i + 1] = e
            continue
        for j in range(u):
            if not _agg_ok(a[i], j, qb, ib, same, edge_up, agg_up, core_down, agg_down, u, view):
                continue
            w = 1.0 / n_agg
            lk = edge_up[a[i], j]
            if not truth[lk]:
                continue
            link[e] = lk
            coef[e] = w
            e += 1
            if not same:
                n_core = 0
                for m in range(ua):
                    if _core_ok(j, m, q, qb, ib, agg_up, core_down, agg_down, u, view):
                        n_core += 1
                arrived = 0.0
                for m in range(ua):
                    if not _core_ok(j, m, q, qb, ib, agg_up, core_down, agg_down, u, view):
                        continue
                    l1 = agg_up[q * u + j, m]
                    l2 = core_down[j * ua + m, qb]
                    if not truth[l1]:
                        continue
                    link[e] = l1
                    coef[e] = w / n_core
                    e += 1
                    if not truth[l2]:
                        continue
                    link[e] = l2
                    coef[e] = w / n_core
                    e += 1
                    arrived += w / n_core
                w = arrived
            lk = agg_down[qb * u + j, ib]
            if truth[lk] and w > 0:
                link[e] = lk
                coef[e] = w
                e += 1
                surv[i] += w
        ptr[i + 1] = e
    return ptr, link[:e], coef[:e], surv


# -- adaptive: load-equalising split --------------------------------------------------------------
class _Balance:
    """The minimum-congestion split of the unfinished traffic (:func:`mcf.balanced_split`):
    ``y[c, p, s]`` per commodity (host pair or leaf pair)."""

    def __init__(self, topo: T.Topology, keys: np.ndarray, y: np.ndarray, granularity: str):
        self.topo, self.keys, self.y = topo, keys, y
        self.host = granularity == "host"
        self.plane_weight = y.sum(axis=2)

    def class_of(self, src, dst) -> np.ndarray:
        """Commodity of each flow, -1 for flows outside the balanced traffic matrix."""
        topo = self.topo
        if self.host:
            key = src * topo.n_hosts + dst
        else:
            key = topo.leaf_of(src) * topo.tables["leaf_up"].shape[1] + topo.leaf_of(dst)
        i = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return np.where(self.keys[i] == key, i, -1)

    def spine_weight(self, p: int, cls: np.ndarray) -> np.ndarray:
        y = self.y[cls, p, :]
        total = y.sum(axis=1, keepdims=True)
        return np.divide(y, total, out=np.zeros_like(y), where=total > 0)


def _balance_for(topo: T.Topology, ep: _Epoch, flows, nbytes) -> _Balance | None:
    from trainfabric.fabric.mcf import balanced_split

    if flows is None or nbytes is None:
        return None
    live = nbytes > 0
    if not live.any():
        return None
    keys, y, granularity = balanced_split(  # on what the hardware knows, not the truth
        topo, flows.src[live], flows.dst[live], nbytes[live], ep.fabric
    )
    return _Balance(topo, keys, y, granularity)
