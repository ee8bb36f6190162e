"""The DAG-driven engine: a :class:`~trainfabric.fabric.tasks.graph.TaskGraph` run on a fabric.

Timers, count-down barriers and comm tasks (module doc of :mod:`~trainfabric.fabric.tasks.graph`)
on the flow engine's fluid model (:mod:`trainfabric.fabric.flow.engine`): between two events every
flow in flight sends at its max-min fair rate over the routes of its load-balancing mode
(:class:`~trainfabric.fabric.routing.Router`); wire bits are payload x ``(mtu + header) / mtu``;
a flow's last byte arrives ``hops x hop_latency_s`` after it was sent; goodput is
``rate x (1 - lost)`` (bytes sent into a dead link before the mode reacts are lost and re-sent).
Flows exist only while their comm task is in flight: they are created when it starts and
their slots are reused when they finish, so memory follows the flows in flight
(``peak_flows``), not the iteration.

Routes: every flow follows its *connection's* route in the current routing epoch (persistent
connections, as NCCL's queue pairs; under ``flowlet`` a connection re-hashes when it restarts
after an idle gap of ``flowlet_gap_s``, as in the flow engine). Routes are computed lazily, the
first time a connection is used in an epoch (the compiled loop returns to Python for them).
Link events (:class:`~trainfabric.fabric.flow.engine.LinkEvents`): the truth changes at once and
every mechanism of the mode learns it after its reaction time, as in the flow engine; every
change starts an epoch: link loads so far are put on the links, the flows in flight are
re-routed, and later connections are routed on first use. Under ``adaptive`` the epoch's
balanced split is computed for the unfinished traffic (bytes in flight plus the flows of comm
tasks not started yet, per connection).

Outputs (:class:`TaskResult`): per task start, finish, the predecessor that released it (the
last to finish, ties towards the lower index; walk it back for the critical path) and payload
bytes delivered (goodput integrated over time); bits carried per link class (default: tier x
plane) per time bin of ``bin_s`` and per link in total; peak flows in flight.

Snapshots (:meth:`TaskSim.snapshot`): the whole state after the last event at or before ``t``
(tasks released / finished, flows in flight with remaining bits, pending count-downs, the
heap, the routing epoch); :meth:`TaskSim.resume` continues from it with extra link events at
times ``>= t``. Resuming without events repeats the uninterrupted run's operations, so it
gives the same numbers.

Speed, and what is exact:

* *compiled loop* (:mod:`~trainfabric.fabric.tasks.loop`): the Python driver only routes
  connections, applies link events and handles the reuse below;
* *no re-solve when only timers fired*: rates change only when flows join or leave (or an
  epoch starts), so timer and barrier events reuse the last rates (exact);
* *local solves* (single-path modes, whose route slots are single links): when flows
  join, the connected components (of shared links) that hold them are re-solved; when
  flows complete, only the flows that fail the bottleneck test (their recorded bottleneck
  lost load or carries a faster flow, or they are faster than a re-solved flow where that
  one froze), widened round by round until every flow has a valid bottleneck, which
  characterises max-min fairness. Where widening spreads (more than ``widen_flows`` flows
  or 32 rounds: dense all-to-all), the departure rule solves it once instead: every flow at
  or above the smallest departed rate that shares links, transitively through such flows,
  with the departed ones, on the capacity the flows below that rate leave (in progressive
  filling those froze at links the departed flows do not cross). Both are exact; links
  saturating within ``1e-9`` of the same level in different components are no longer
  frozen together, a difference at that level. At 4,096 GPUs (``llama3-70b``) this
  re-solves 6.7 M flows where the departure rule alone re-solved 18.7 M. The split modes
  (``spray``, ``adaptive``) re-solve every flow with the shared-group solver after flows
  join; after flows leave, only when one of the flows in flight froze (its recorded
  bottleneck) on a link the leaving flows used: otherwise every flow keeps a saturated link
  on which none is faster, so the rates stand (``certify_departures``; exact, tested against
  re-solving every departure);
* *reuse of solved flow sets* (``reuse=True``): when flows are released while nothing else
  is in flight (a fresh set: every ring step of a phase-barriered collective, a PP send
  between compute), the set's isolated evolution (per-flow completion times, delivered and
  sent bits, class loads per segment) is computed once by the same statements, keyed by a
  BLAKE2b digest of its connections, wire bits, lost shares and route slots (and pair-group
  contents), and replayed for every later set with the same key. When a flow joins during
  a replay, or a link event comes, the set's state at that time is recomputed by the same
  isolated evolution up to then and the run continues flow by flow. Exact at
  ``batch_rtol = 0`` (tested against ``reuse=False`` to 1e-9); with batching the replayed set
  batches its completions as if alone (a timer event inside a batching window does not
  truncate it), so the batching error differs, still one-sided. Sets that overlap other
  traffic (e.g. the DP rings of two pipeline stages running at once) are simulated event by
  event: their coupling through shared links is real and is not approximated;
* *set-level replays* (``reuse=True``, no flowlets, ``batch_rtol = 0``): once a comm task's
  flow set has been replayed alone in a routing epoch (every flow in flight its own), a
  later start of that set with nothing in flight runs as one event: no flow enters the
  slots; the task's last flow event, its finish (the last arrival), delivered bits and class
  loads come from the set's memo, and its bits per route row are added when link loads are
  read. A comm task starting meanwhile, a link event or a stop (``until_s``, a snapshot)
  *materialises* it: the flows that the isolated evolution completed by then complete, the
  others enter the slots with its remaining bits, and the run goes on flow by flow. The
  memo of a set holds for its routing epoch only (routes and lost shares are fixed within
  one). With one comm task per collective step (the phase nodes of
  :class:`~trainfabric.workloads.dag.PairSets`) a ring that runs alone costs one event per
  step, whatever the number of flows (``set_replays`` counts them; tested against
  ``reuse=False`` to 1e-9).

Exactness: ``batch_rtol = 0`` (default) is the exact fluid model with the flow engine's
completion test (a flow within ``1e-9`` relative of done completes); ``batch_rtol > 0`` batches
completions as :func:`~trainfabric.fabric.flow.engine.simulate` does (one-sided: flows finish late,
never early). Time bins spread each constant-rate segment evenly over the bins it spans.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import time
from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flows import DONE_RTOL, HEADER_BYTES, MTU_BYTES
from trainfabric.fabric.maxmin import link_load
from trainfabric.fabric.result import EngineResult
from trainfabric.fabric.routing import MECHANISMS, Router
from trainfabric.fabric.tasks import loop as L
from trainfabric.fabric.tasks.graph import COMM, TaskGraph
from trainfabric.fabric.tasks.state import (
    Connections,
    EventHeap,
    GraphArrays,
    LinkGroups,
    LoopParams,
    ReplaySegments,
    Routes,
    SetMemo,
    TaskState,
)
from trainfabric.fabric.topology import TIER_NAMES, Topology

DEFAULT_BIN_S = 1e-3
MEMO_BYTES = 1 << 30  # solved flow sets kept for reuse (oldest dropped first)


@dataclass(frozen=True)
class TaskResult(EngineResult):
    """What one run produced (seconds, bits, bytes; ``nan`` / ``-1`` for tasks never run);
    ``makespan_s``, ``unfinished`` (tasks): :class:`~trainfabric.fabric.result.EngineResult`."""

    start_s: np.ndarray
    finish_s: np.ndarray
    released_by: np.ndarray
    delivered_bytes: np.ndarray
    bin_s: float
    bin_bits: np.ndarray  # [bins, classes]
    class_capacity_bps: np.ndarray  # [classes]
    class_names: tuple[str, ...]
    link_bits: np.ndarray  # [links]
    end_s: float
    n_events: int
    n_rate_solves: int
    n_flows_solved: int  # flows whose rates were solved, summed over solves
    # of those, with component-local solving: the solves of whole connected components (after
    # flows joined, or a call's first solve) and the flows they solved; the rest re-solved
    # departures (certified by the bottleneck test)
    n_component_solves: int
    n_component_flows_solved: int
    n_epochs: int
    n_routed: int
    peak_flows: int
    state_bytes: int
    memo_hits: int
    memo_misses: int
    wall_s: float
    set_replays: int = 0  # comm tasks run as one event from their set's memo (module doc)
    route_wall_s: float = 0.0  # of wall_s: routing connections (the router)
    memo_wall_s: float = 0.0  # of wall_s: isolated evolutions of flow sets (memos, materialising)

    def critical_path(self, task: int | None = None) -> np.ndarray:
        """Tasks from a root to ``task`` (default: the last to finish) following
        ``released_by``."""
        i = int(np.nanargmax(self.finish_s)) if task is None else int(task)
        path = [i]
        while self.released_by[path[-1]] >= 0:
            path.append(int(self.released_by[path[-1]]))
        return np.array(path[::-1], np.int64)

    def utilisation(self) -> np.ndarray:
        """``[bins, classes]``: bits carried / (class capacity x bin length)."""
        cap = np.where(self.class_capacity_bps > 0, self.class_capacity_bps, np.inf)
        return self.bin_bits / (cap[None, :] * self.bin_s)

    def top_links(self, topo: Topology, k: int = 10) -> np.ndarray:
        """The ``k`` links with the highest mean utilisation over ``[0, end_s]``."""
        u = self.link_bits / (topo.capacity_bps * max(self.end_s, 1e-300))
        return np.argsort(-u, kind="stable")[:k]


def tier_plane_classes(topo: Topology) -> tuple[np.ndarray, tuple[str, ...]]:
    """The default link classes: ``tier x planes + plane``, named ``tier/p<plane>``."""
    cls = topo.link_tier.astype(np.int64) * topo.planes + topo.link_plane.astype(np.int64)
    names = tuple(f"{t}/p{p}" for t in TIER_NAMES for p in range(topo.planes))
    return cls, names


@dataclass
class Snapshot:
    """The state of a :class:`TaskSim` after its last event at or before ``time_s``."""

    time_s: float
    state: dict
    router: Router

    def flows_in_flight(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(task, connection, groups[k, K], weights[k, K])`` of the flows in flight."""
        st = self.state
        si = st["si"]
        act = si[L.ACT][: st["ic"][L.M]]
        rows = si[L.ROW][act]
        return si[L.TASK][act], si[L.CONN][act], st["routes"].group[rows], st["routes"].weight[rows]

    def links_in_flight(self) -> np.ndarray:
        """Mask of the links that carry some flow in flight."""
        _, _, group, weight = self.flows_in_flight()
        topo = self.router.topo
        ones = np.ones(group.shape[0])
        return link_load(group, weight, self.router.groups, topo.n_links, ones) > 0


class TaskSim:
    """One run of ``graph`` on ``topo`` under ``router`` (module doc).

    ``link_up``: links down from the start (every mechanism knows); ``events``: timed link
    state changes; ``bin_s``: time bin of the link-load record; ``link_class`` (default tier x
    plane) with ``class_names``; ``widen_flows``: the size past which the certified re-solve
    after a departure stops widening and the departure rule solves it (module doc; a speed
    knob only: every value gives the same rates); ``certify_departures``: in the split
    modes, skip the re-solve after departures that certifiably change no rate (module doc;
    ``False`` re-solves every one, the same rates).
    """

    def __init__(
        self,
        topo: Topology,
        graph: TaskGraph,
        router: Router,
        *,
        events: LinkEvents | None = None,
        link_up: np.ndarray | None = None,
        bin_s: float = DEFAULT_BIN_S,
        link_class: np.ndarray | None = None,
        class_names: tuple[str, ...] | None = None,
        batch_rtol: float = 0.0,
        mtu_bytes: int = MTU_BYTES,
        header_bytes: int = HEADER_BYTES,
        reuse: bool = True,
        widen_flows: int = L.WIDEN_FLOWS,
        certify_departures: bool = True,
    ):
        if router.topo is not topo:
            raise ConfigError("router", "the router was built for another topology")
        if graph.n_conns and max(graph.conn_src.max(), graph.conn_dst.max()) >= topo.n_hosts:
            raise ConfigError("tasks.conn_dst", f"hosts must be < {topo.n_hosts}")
        if mtu_bytes <= 0 or header_bytes < 0:
            raise ConfigError("mtu_bytes", "MTU must be > 0 and headers >= 0")
        if not 0 <= batch_rtol < 1:
            raise ConfigError("batch_rtol", "must be in [0, 1)")
        if not bin_s > 0:
            raise ConfigError("bin_s", "must be > 0")
        if int(widen_flows) != widen_flows or widen_flows < 0:
            raise ConfigError("widen_flows", "must be an integer >= 0")
        self.widen_flows = int(widen_flows)
        self.certify_departures = bool(certify_departures)
        self.topo, self.graph = topo, graph
        self.router = copy.copy(router)
        self.wire_factor = (mtu_bytes + header_bytes) / mtu_bytes
        self.batch_rtol = float(batch_rtol)
        self.reuse = bool(reuse)
        self.memo: dict[bytes, tuple] = {}
        self.vmemo: dict[int, tuple] = {}  # flow set -> its sorted flows' memo (this epoch)
        self.memo_hits = self.memo_misses = self.set_replays = 0
        self.route_wall_s = self.memo_wall_s = 0.0
        self.bin_s = float(bin_s)
        if link_class is None:
            link_class, class_names = tier_plane_classes(topo)
        self.link_class = np.asarray(link_class, np.int64)
        if self.link_class.shape != (topo.n_links,) or self.link_class.min(initial=0) < 0:
            raise ConfigError(
                "link_class", f"must give a class >= 0 for each of {topo.n_links} links"
            )
        n_cls = int(self.link_class.max(initial=0)) + 1
        self.class_names = tuple(class_names or (str(c) for c in range(n_cls)))
        self.class_capacity = np.bincount(self.link_class, topo.capacity_bps, minlength=n_cls)
        self.flow_wire = graph.flow_bytes * self.wire_factor * 8.0
        self.conns = graph.conn_table()
        self._gclass_n = -1
        self.wall_s = 0.0
        self.n_epochs = 0
        self.n_routed = 0
        self.s = self._initial_state(n_cls)
        truth = np.ones(topo.n_links, bool) if link_up is None else np.array(link_up, bool)
        if truth.shape != (topo.n_links,):
            raise ConfigError("link_up", f"must have one entry per link ({topo.n_links})")
        self.truth = truth
        self.views = {m: truth.copy() for m in MECHANISMS}
        self.pending_events: list[tuple[float, int, str, int, bool]] = []
        self._seq = 0
        self.add_events(events)
        self._begin_epoch()

    # -- state ------------------------------------------------------------------------------
    def _initial_state(self, n_cls: int) -> dict:
        g = self.graph
        n = g.n
        pending = np.diff(g.predecessors()[0])
        hcap = 2 * n + 1
        s = {
            "pending": pending.astype(np.int64),
            "ready": np.zeros(n),
            "rel_by": np.full(n, -1, np.int64),
            "tstart": np.full(n, np.nan),
            "tfinish": np.full(n, np.nan),
            "left": np.zeros(n, np.int64),
            "arrive": np.zeros(n),
            "tbits": np.zeros(n),
            "ht": np.empty(hcap),
            "hs": np.empty(hcap, np.int64),
            "hf": np.empty(hcap, np.int64),
            "conn_row": np.full(g.n_conns, -1, np.int64),
            "idle": np.full(g.n_conns, -np.inf),
            "flowlet": np.zeros(g.n_conns, np.int64),
            "ic": np.zeros(L.N_COUNTERS, np.int64),
            "fc": np.zeros(2),
            "bins": np.zeros((1, n_cls)),
            "link_bits": np.zeros(self.topo.n_links),
            "ldirty": np.zeros(self.topo.n_links, np.bool_),
            "R": 0,
        }
        s["si"] = np.zeros((len(L.INT_FIELDS), 0), np.int64)
        s["sf"] = np.zeros((len(L.REAL_FIELDS), 0))
        s["rp_seg_t"], s["rp_seg_b"] = np.zeros(1), np.zeros((0, n_cls))
        s["rp_set"] = None
        s["vm"] = _empty_set_memo(g.set_ptr.size - 1, n_cls)
        s["routes"] = self._empty_routes(1, 1)
        roots = np.flatnonzero(pending == 0)
        ic = s["ic"]
        for i in roots:
            ic[L.HSIZE] = L.heap_push(
                s["ht"], s["hs"], s["hf"], ic[L.HSIZE], g.latency_s[i], ic[L.HSEQ], i
            )
            ic[L.HSEQ] += 1
        return s

    @staticmethod
    def _empty_routes(K: int, W: int, R: int = 16) -> Routes:
        return Routes(
            group=np.full((R, K), -1, np.int64),
            weight=np.zeros((R, K)),
            lost=np.ones(R),
            hops=np.zeros(R, np.int64),
            cls=np.full((R, W), -1, np.int64),
            clw=np.zeros((R, W)),
            bits=np.zeros(R),
        )

    @property
    def time_s(self) -> float:
        return float(self.s["fc"][0])

    # -- link events and epochs ---------------------------------------------------------------
    def add_events(self, events: LinkEvents | None) -> None:
        """Schedule link state changes (times must not be before the current time)."""
        if events is None or events.time_s.size == 0:
            return
        if np.any(events.link < 0) or np.any(events.link >= self.topo.n_links):
            raise ConfigError("events.link", f"link ids must be in 0..{self.topo.n_links - 1}")
        if events.time_s[0] < self.time_s:
            raise ConfigError("events.time_s", f"must be >= the current time {self.time_s}")
        for t, link, up in zip(events.time_s, events.link, events.up, strict=True):
            heapq.heappush(self.pending_events, (float(t), self._seq, "truth", int(link), bool(up)))
            self._seq += 1

    def _apply_events(self, t: float) -> None:
        """Apply every truth / view change due at ``t`` and start one epoch."""
        if self.s["ic"][L.RP] == 1:
            self._materialize()
        elif self.s["ic"][L.RP] == 2:
            self._materialize_virtual()
        while self.pending_events and self.pending_events[0][0] <= t:
            _, _, what, link, up = heapq.heappop(self.pending_events)
            if what == "truth":
                self.truth[link] = up
                for m in self.router.mechanisms:
                    heapq.heappush(
                        self.pending_events,
                        (t + self.router.reaction.of(m), self._seq, m, link, up),
                    )
                    self._seq += 1
            else:
                self.views[what][link] = up
        self._flush_link_bits()
        self._begin_epoch()

    def _begin_epoch(self) -> None:
        s = self.s
        failed = not self.truth.all() or not all(v.all() for v in self.views.values())
        demand = self._demand() if self.router.mode == "adaptive" and failed else None
        self.router.begin_epoch(self.truth, self.views, self.conns, demand)
        self.n_epochs += 1
        s["conn_row"][:] = -1
        s["vm"].ok[:] = False  # set memos hold this epoch's routes
        s["R"] = 0
        self._gclass_n = -1
        act = s["si"][L.ACT][: s["ic"][L.M]]
        if act.size:  # re-route the flows in flight
            conn = s["si"][L.CONN][act]
            fl = s["si"][L.FLOWLET][act]
            key = conn.astype(np.int64) * (int(fl.max()) + 1) + fl
            _, first, inv = np.unique(key, return_index=True, return_inverse=True)
            rows = self._route(conn[first], fl[first] if self._flowlet else None)
            r = rows[inv.ravel()]
            si, sf = s["si"], s["sf"]
            si[L.ROW][act] = r
            routes = s["routes"]
            sf[L.LOST][act] = routes.lost[r]
            si[L.HOPS][act] = routes.hops[r]
            cur = fl[first] == s["flowlet"][conn[first]]
            s["conn_row"][conn[first][cur]] = rows[cur]

    @property
    def _flowlet(self) -> bool:
        return self.router.flowlet_gap_s is not None

    def _demand(self) -> np.ndarray:
        """Unfinished wire bits per connection: in flight plus comm tasks not started."""
        g, s = self.graph, self.s
        si, sf = s["si"], s["sf"]
        act = si[L.ACT][: s["ic"][L.M]]
        d = np.zeros(g.n_conns)
        np.add.at(d, si[L.CONN][act], sf[L.REM][act])
        todo = (g.kind == COMM) & np.isnan(s["tstart"])
        if todo.any():
            per_set = np.bincount(g.flow_set[todo], minlength=g.set_ptr.size - 1)
            set_of = np.repeat(np.arange(per_set.size), np.diff(g.set_ptr))
            d += np.bincount(g.flow_conn, self.flow_wire * per_set[set_of], minlength=g.n_conns)
        return d

    def _flush_link_bits(self) -> None:
        s = self.s
        vm = s["vm"]
        for q in np.flatnonzero(vm.count):  # the set-level replays' bits, per route row
            rows, bits = self.vmemo[int(q)][0], self.vmemo[int(q)][4]
            np.add.at(s["routes"].bits, rows, vm.count[q] * bits)
            self.set_replays += int(vm.count[q])
            vm.count[q] = 0
        R = s["R"]
        if R:
            rsg, rsw, rbits = s["routes"].group, s["routes"].weight, s["routes"].bits
            s["link_bits"] += link_load(
                rsg[:R], rsw[:R], self.router.groups, self.topo.n_links, rbits[:R]
            )
            rbits[:R] = 0.0

    # -- routing ------------------------------------------------------------------------------
    def _route(self, conns: np.ndarray, flowlet: np.ndarray | None) -> np.ndarray:
        """Route ``conns`` in the current epoch; returns their new route rows."""
        s = self.s
        t0 = time.perf_counter()
        r = self.router.route(self.conns, conns, flowlet)
        self.route_wall_s += time.perf_counter() - t0
        self.n_routed += conns.size
        cls, clw = self._class_rows(r.group, r.weight)
        routes, R, k = s["routes"], s["R"], conns.size
        K, W = r.group.shape[1], cls.shape[1]
        if R == 0 and (routes.group.shape[1] != K):
            routes = self._empty_routes(K, W, max(16, k))
        if routes.cls.shape[1] < W:
            routes = routes._replace(cls=_widen(routes.cls, W, -1), clw=_widen(routes.clw, W, 0.0))
        if R + k > routes.group.shape[0]:
            size = max(2 * routes.group.shape[0], R + k)
            routes = Routes(*(_grow_rows(a, size) for a in routes))
        Wr = routes.cls.shape[1]
        routes.group[R : R + k] = r.group
        routes.weight[R : R + k] = r.weight
        routes.lost[R : R + k] = r.lost
        routes.hops[R : R + k] = r.hops
        routes.cls[R : R + k, :W] = cls
        routes.cls[R : R + k, W:Wr] = -1
        routes.clw[R : R + k, :W] = clw
        routes.bits[R : R + k] = 0.0
        s["routes"], s["R"] = routes, R + k
        return np.arange(R, R + k, dtype=np.int64)

    def _class_rows(self, group: np.ndarray, weight: np.ndarray):
        """Per route row, the share of its rate on each link class (padded ``-1``)."""
        groups = self.router.groups
        if self._gclass_n != groups.n:
            owner = np.repeat(np.arange(groups.n), np.diff(groups.ptr))
            C = self.class_capacity.size
            key = owner * C + self.link_class[groups.link]
            u, inv = np.unique(key, return_inverse=True)
            val = np.bincount(inv.ravel(), groups.coef, minlength=u.size)
            ptr = np.zeros(groups.n + 1, np.int64)
            np.add.at(ptr, u // C + 1, 1)
            self._gclass = (np.cumsum(ptr), u % C, val)
            self._gclass_n = groups.n
        ptr, gc, gv = self._gclass
        return L.class_rows(
            group, weight, groups.offset, self.link_class, ptr, gc, gv, self.class_capacity.size
        )

    # -- reuse of solved flow sets ------------------------------------------------------------
    def _memo_key(self, order: np.ndarray, act: np.ndarray) -> bytes:
        """Digest of a fresh flow set: per flow (sorted by connection, then bits) its
        connection, wire bits, lost share and route slots. Pair groups are numbered per epoch,
        so a set routed on any pair group is keyed to its epoch as well."""
        s = self.s
        si, sf = s["si"], s["sf"]
        rows = si[L.ROW][act[order]]
        h = hashlib.blake2b(digest_size=32)
        for a in (si[L.CONN][act[order]], sf[L.WIRE][act[order]], sf[L.LOST][act[order]]):
            h.update(np.ascontiguousarray(a).tobytes())
        rsg = s["routes"].group[rows]
        h.update(np.ascontiguousarray(rsg).tobytes())
        h.update(np.ascontiguousarray(s["routes"].weight[rows]).tobytes())
        static = getattr(self.router, "static", None)  # duck-typed routers: single links
        if static is not None and rsg.max(initial=-1) >= static.offset + static.n:
            g = self.router.groups
            lo = g.ptr[static.n]
            for a in (g.ptr[static.n :] - lo, g.link[lo:], g.coef[lo:]):
                h.update(np.ascontiguousarray(a).tobytes())
        return h.digest()

    def _evolve(self, rows, wire, lost, tau: float):
        routes = self.s["routes"]
        t0 = time.perf_counter()
        out = L.evolve(
            rows,
            wire,
            lost,
            routes.group,
            routes.weight,
            routes.cls,
            routes.clw,
            self.class_capacity.size,
            self._link_groups(),
            self.batch_rtol,
            DONE_RTOL,
            1e-9,
            float(tau),
            self._single_links(),
            self.certify_departures,
        )
        self.memo_wall_s += time.perf_counter() - t0
        if out[-1]:
            raise ValueError("a flow in flight crosses no link")
        return out

    def _replay(self) -> None:
        """The flows in flight form a fresh set (all started now, nothing else in flight):
        take its isolated evolution from the memo (computing it on a miss) and replay it."""
        s = self.s
        si, sf, ic, t = s["si"], s["sf"], s["ic"], self.time_s
        act = si[L.ACT][: ic[L.M]].copy()
        order = np.lexsort((sf[L.WIRE][act], si[L.CONN][act]))
        key = self._memo_key(order, act)
        f = act[order]
        rows, wire, lost = si[L.ROW][f].copy(), sf[L.WIRE][f].copy(), sf[L.LOST][f].copy()
        entry = self.memo.get(key)
        if entry is None:
            self.memo_misses += 1
            out = self._evolve(rows, wire, lost, np.inf)
            entry = out[0], out[1], out[2], out[3], out[5], out[6]
            ic[L.SOLVES] += out[8]
            self._memo_store(key, entry)
        else:
            self.memo_hits += 1
        event_t, sent_t, deliv, sent_bits, seg_t, seg_b = entry
        self._memo_set(f, entry)
        si[L.RP_IDX][f] = np.arange(f.size)
        sf[L.RP_EVENT][f] = t + event_t
        sf[L.RP_SENT][f] = t + sent_t
        sf[L.RP_DELIV][f] = deliv
        sf[L.RP_BITS][f] = sent_bits
        s["rp_seg_t"], s["rp_seg_b"] = t + seg_t, seg_b
        s["rp_set"] = (rows, wire, lost, t)
        ic[L.RP], ic[L.RP_LEFT], ic[L.RP_SEG] = 1, f.size, 0

    def _memo_set(self, f: np.ndarray, entry: tuple) -> None:
        """Keep the evolution of the fresh flows ``f`` (sorted as in the memo) for later
        set-level replays, when they are exactly the flows of one comm task's flow set
        (none of zero bytes) and this run can replay sets (module doc)."""
        s, g = self.s, self.graph
        si, sf = s["si"], s["sf"]
        tasks = si[L.TASK][f]
        q = int(g.flow_set[tasks[0]])
        lo, hi = g.set_ptr[q], g.set_ptr[q + 1]
        vm = s["vm"]
        if (
            not self.reuse
            or self._flowlet
            or self.batch_rtol > 0
            or vm.ok[q]
            or (tasks != tasks[0]).any()
            or hi - lo != f.size
            or (self.flow_wire[lo:hi] <= 0).any()
        ):
            return
        event_t, sent_t, deliv, sent_bits, seg_t, seg_b = entry
        rows = si[L.ROW][f].copy()
        hops = s["routes"].hops[rows]
        arrival = sent_t + hops * float(self.topo.hop_latency_s)
        last = int(np.argmax(arrival))
        self.vmemo[q] = (
            rows,
            sf[L.WIRE][f].copy(),
            sf[L.LOST][f].copy(),
            si[L.CONN][f].copy(),
            sent_bits,
            event_t,
            sent_t,
            deliv,
            hops,
        )
        vm = _append_segments(vm, q, seg_t, seg_b)
        vm.ok[q] = True
        vm.end[q] = event_t.max()
        vm.last_sent[q], vm.last_hops[q] = sent_t[last], hops[last]
        vm.tbits[q] = deliv.sum()
        vm.n_flows[q] = f.size
        s["vm"] = vm

    def _materialize_virtual(self) -> None:
        """Leave a set-level replay at the current time: its flows that completed in the
        isolated evolution complete now, the others enter the slots with the remaining
        bits of the evolution up to now (the same computation that made the memo)."""
        s, g = self.s, self.graph
        si, sf, ic, fc, t = s["si"], s["sf"], s["ic"], s["fc"], self.time_s
        i = int(ic[L.VTASK])
        q = int(g.flow_set[i])
        t0 = float(fc[1])
        rows, wire, lost, conn, bits, event_t, sent_t, deliv, hops = self.vmemo[q]
        out = self._evolve(rows, wire, lost, t - t0)
        done = t0 + event_t <= t
        hop_s = float(self.topo.hop_latency_s)
        if done.any():
            s["arrive"][i] = max(s["arrive"][i], ((t0 + sent_t[done]) + hops[done] * hop_s).max())
            s["tbits"][i] += deliv[done].sum()
            np.add.at(s["routes"].bits, rows[done], bits[done])
        keep = np.flatnonzero(~done)
        k = keep.size
        s["left"][i] = k
        ic[L.FLOWS_DONE] += int(done.sum())
        if ic[L.NFREE] < k:
            S_old = si.shape[1]
            si, sf, S = L._grow_slots(si, sf, k)
            free = si[L.FREE]
            free[ic[L.NFREE] : ic[L.NFREE] + S - S_old] = np.arange(S_old, S)
            ic[L.NFREE] += S - S_old
        slots = si[L.FREE][ic[L.NFREE] - k : ic[L.NFREE]][::-1].copy()
        ic[L.NFREE] -= k
        r = rows[keep]
        c = conn[keep]
        ints = {
            L.ROW: r,
            L.TASK: i,
            L.CONN: c,
            L.HOPS: hops[keep],
            L.FLOWLET: s["flowlet"][c],
            L.RP_IDX: -1,
        }
        reals = {
            L.REM: out[4][keep],
            L.WIRE: wire[keep],
            L.START: t0,
            L.DELIV: out[2][keep],
            L.LOST: lost[keep],
            L.TL: t,
            L.RATE: -1.0,
            L.PROJ: np.inf,
            L.DUE: np.inf,
        }
        for arr, fields in ((si, ints), (sf, reals)):
            for col, val in fields.items():
                arr[col, slots] = val
        np.add.at(s["routes"].bits, r, out[3][keep])
        m = int(ic[L.M])
        si[L.ACT][m : m + k] = slots
        ic[L.M] = m + k
        ic[L.RP] = 0
        s["si"], s["sf"] = si, sf

    def _memo_store(self, key: bytes, entry: tuple) -> None:
        size = sum(a.nbytes for a in entry)
        self.memo_bytes = getattr(self, "memo_bytes", 0) + size
        self.memo[key] = entry
        while self.memo_bytes > MEMO_BYTES and len(self.memo) > 1:
            old = next(iter(self.memo))
            self.memo_bytes -= sum(a.nbytes for a in self.memo.pop(old))

    def _materialize(self) -> None:
        """Leave a replay at the current time: the remaining bits of its flows from the
        isolated evolution up to now (the same computation that made the memo)."""
        s = self.s
        si, sf, ic = s["si"], s["sf"], s["ic"]
        rows, wire, lost, t0 = s["rp_set"]
        out = self._evolve(rows, wire, lost, self.time_s - t0)
        act = si[L.ACT][: ic[L.M]]
        f = act[si[L.RP_IDX][act] >= 0]
        k = si[L.RP_IDX][f]
        sf[L.REM][f] = out[4][k]
        sf[L.DELIV][f] = out[2][k]
        sf[L.TL][f] = self.time_s  # settled now; the loop solves their rates again
        sf[L.RATE][f] = -1.0
        np.add.at(s["routes"].bits, si[L.ROW][f], out[3][k])
        si[L.RP_IDX][f] = -1
        ic[L.RP], ic[L.RP_LEFT] = 0, 0
        s["rp_set"] = None

    # -- running ------------------------------------------------------------------------------
    def _loop(self, until_s: float, advance: bool) -> int:
        s, g, topo = self.s, self.graph, self.topo
        routes, gap = s["routes"], self.router.flowlet_gap_s
        need = np.empty(max(g.n_conns, 1), np.int64)
        status, si, sf, bins = L.run_loop(
            GraphArrays(
                kind=g.kind,
                duration_s=g.duration_s,
                latency_s=g.latency_s,
                succ_ptr=g.succ_ptr,
                succ=g.succ,
                flow_set=g.flow_set,
                set_ptr=g.set_ptr,
                flow_conn=g.flow_conn,
                flow_wire=self.flow_wire,
            ),
            TaskState(*(s[k] for k in TaskState._fields)),
            EventHeap(time=s["ht"], seq=s["hs"], item=s["hf"]),
            Connections(row=s["conn_row"], idle=s["idle"], flowlet=s["flowlet"]),
            routes,
            s["si"],
            s["sf"],
            s["bins"],
            s["ic"],
            s["fc"],
            need,
            self._link_groups(),
            LoopParams(
                hop_s=float(topo.hop_latency_s),
                until_s=float(until_s),
                advance=bool(advance),
                batch_rtol=self.batch_rtol,
                done_rtol=DONE_RTOL,
                rtol=1e-9,
                flowlet_gap_s=-1.0 if gap is None else float(gap),
                bin_s=self.bin_s,
                memo=self.reuse,
                local=self._single_links(),
                widen=self.widen_flows,
                certify=self.certify_departures,
            ),
            ReplaySegments(seg_t=s["rp_seg_t"], seg_b=s["rp_seg_b"]),
            s["ldirty"],
            s["vm"],
        )
        s["si"], s["sf"], s["bins"] = si, sf, bins
        if status == L.FRESH:
            self._replay()
        elif status == L.MATERIALIZE:
            self._materialize()
        elif status == L.VMATERIALIZE:
            self._materialize_virtual()
        if status == L.NEED_ROUTES:
            conns = need[: s["ic"][L.NEED]].copy()
            fl = s["flowlet"][conns] if self._flowlet else None
            s["conn_row"][conns] = self._route(conns, fl)
        elif status == L.UNCONSTRAINED:
            raise ValueError("a flow in flight crosses no link")
        return int(status)

    def _link_groups(self) -> LinkGroups:
        """Link capacities (bits/s) and the router's link groups, as the loop reads them."""
        groups = self.router.groups
        return LinkGroups(
            capacity_bps=np.ascontiguousarray(self.topo.capacity_bps, np.float64),
            offset=int(groups.offset),
            ptr=groups.ptr,
            link=groups.link,
            coef=groups.coef,
        )

    def _single_links(self) -> bool:
        """Every route slot is one link (single-path modes): rates can be re-solved per
        connected component of the flows in flight."""
        R = self.s["R"]
        return bool(R == 0 or self.s["routes"].group[:R].max() < self.router.groups.offset)

    def _drive(self, until_s: float, advance: bool) -> None:
        wall0 = time.perf_counter()
        resumable = (L.NEED_ROUTES, L.FRESH, L.MATERIALIZE, L.VMATERIALIZE)  # call again
        while True:
            if self.pending_events and self.pending_events[0][0] <= until_s:
                t_ev = self.pending_events[0][0]
                status = self._loop(t_ev, True)
                if status in resumable:
                    continue
                if status == L.DONE:
                    break  # nothing left to run: later link events change nothing
                self._apply_events(t_ev)
                continue
            if self._loop(until_s, advance) not in resumable:
                break
        if self.s["ic"][L.RP] == 2:  # stopped inside a set-level replay: its flows in flight
            self._materialize_virtual()
        self.wall_s += time.perf_counter() - wall0

    def run(self, until_s: float = np.inf) -> TaskResult:
        """Run until every task finished (or ``until_s``) and return the result so far."""
        self._drive(float(until_s), True)
        return self.result()

    def snapshot(self, at_s: float) -> Snapshot:
        """Run up to the last event at or before ``at_s`` and return a copy of the state."""
        if at_s < self.time_s:
            raise ConfigError("at_s", f"the run is already at {self.time_s} s")
        self._drive(float(at_s), False)
        state = {k: _copy(v) for k, v in self.s.items()}
        state["_truth"] = self.truth.copy()
        state["_views"] = {m: v.copy() for m, v in self.views.items()}
        state["_pending"] = list(self.pending_events)
        state["_seq"] = self._seq
        state["_vmemo"] = dict(self.vmemo)
        state["_counts"] = (
            self.n_epochs,
            self.n_routed,
            self.wall_s,
            self.memo_hits,
            self.memo_misses,
            self.set_replays,
        )
        return Snapshot(self.time_s, state, _fork_router(self.router))

    @classmethod
    def resume(cls, snap: Snapshot, template: TaskSim, events: LinkEvents | None = None) -> TaskSim:
        """A run continuing from ``snap`` (taken from ``template`` or a run of the same
        graph, fabric and options), with extra link ``events`` at times ``>= snap.time_s``."""
        sim = copy.copy(template)
        st = snap.state
        sim.s = {k: _copy(v) for k, v in st.items() if not k.startswith("_")}
        sim.truth = st["_truth"].copy()
        sim.views = {m: v.copy() for m, v in st["_views"].items()}
        sim.pending_events = list(st["_pending"])
        sim._seq = st["_seq"]
        sim.vmemo = dict(st["_vmemo"])
        counts = st["_counts"]
        sim.n_epochs, sim.n_routed, sim.wall_s, sim.memo_hits, sim.memo_misses = counts[:5]
        sim.set_replays = counts[5]
        sim.router = _fork_router(snap.router)
        sim._gclass_n = -1
        sim.add_events(events)
        return sim

    def result(self) -> TaskResult:
        self._flush_link_bits()
        s = self.s
        nb = int(np.ceil(max(self.time_s, 0.0) / self.bin_s)) or 1
        bins = s["bins"][:nb].copy()
        if bins.shape[0] < nb:
            bins = np.vstack([bins, np.zeros((nb - bins.shape[0], bins.shape[1]))])
        fin = s["tfinish"]
        state_bytes = s["si"].nbytes + s["sf"].nbytes + sum(a.nbytes for a in s["routes"])
        return TaskResult(
            start_s=s["tstart"].copy(),
            finish_s=fin.copy(),
            released_by=np.where(np.isnan(s["tstart"]), -1, s["rel_by"]),
            delivered_bytes=s["tbits"] / (8.0 * self.wire_factor),
            bin_s=self.bin_s,
            bin_bits=bins,
            class_capacity_bps=self.class_capacity,
            class_names=self.class_names,
            link_bits=s["link_bits"].copy(),
            end_s=float(np.nanmax(fin)) if np.isfinite(fin).any() else 0.0,
            n_events=int(s["ic"][L.EVENTS]),
            n_rate_solves=int(s["ic"][L.SOLVES]),
            n_flows_solved=int(s["ic"][L.SOLVED]),
            n_component_solves=int(s["ic"][L.COMP_SOLVES]),
            n_component_flows_solved=int(s["ic"][L.COMP_SOLVED]),
            n_epochs=self.n_epochs,
            n_routed=self.n_routed,
            peak_flows=int(s["ic"][L.PEAK]),
            state_bytes=int(state_bytes),
            memo_hits=self.memo_hits,
            memo_misses=self.memo_misses,
            wall_s=self.wall_s,
            set_replays=self.set_replays,
            route_wall_s=self.route_wall_s,
            memo_wall_s=self.memo_wall_s,
        )


def run_tasks(topo: Topology, graph: TaskGraph, router: Router, **options) -> TaskResult:
    """Run ``graph`` to completion (:class:`TaskSim` options)."""
    return TaskSim(topo, graph, router, **options).run()


def _copy(v):
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, tuple):  # the slot arrays, or a named tuple of arrays (Routes)
        copied = [_copy(a) for a in v]
        return type(v)(*copied) if hasattr(v, "_fields") else tuple(copied)
    return v


def _empty_set_memo(n_sets: int, n_cls: int) -> SetMemo:
    z = np.zeros(n_sets)
    zi = np.zeros(n_sets, np.int64)
    return SetMemo(
        ok=np.zeros(n_sets, np.bool_),
        end=z.copy(),
        last_sent=z.copy(),
        last_hops=zi.copy(),
        tbits=z.copy(),
        n_flows=zi.copy(),
        count=zi.copy(),
        seg_t_lo=zi.copy(),
        seg_b_lo=zi.copy(),
        n_seg=zi.copy(),
        seg_t=np.zeros(16),
        seg_b=np.zeros((16, n_cls)),
    )


def _append_segments(vm: SetMemo, q: int, seg_t: np.ndarray, seg_b: np.ndarray) -> SetMemo:
    """``vm`` with the segments of set ``q`` appended (its arrays grown by doubling)."""
    nt = int((vm.seg_t_lo + vm.n_seg + (vm.n_seg > 0)).max(initial=0))
    nb = int((vm.seg_b_lo + vm.n_seg).max(initial=0))
    k = seg_b.shape[0]
    seg_t_all, seg_b_all = vm.seg_t, vm.seg_b
    if nt + k + 1 > seg_t_all.size:
        seg_t_all = np.concatenate([seg_t_all, np.zeros(max(seg_t_all.size, k + 1))])
    if nb + k > seg_b_all.shape[0]:
        grow = np.zeros((max(seg_b_all.shape[0], k), seg_b_all.shape[1]))
        seg_b_all = np.concatenate([seg_b_all, grow])
    seg_t_all[nt : nt + k + 1] = seg_t[: k + 1]
    seg_b_all[nb : nb + k] = seg_b
    vm.seg_t_lo[q], vm.seg_b_lo[q], vm.n_seg[q] = nt, nb, k
    return vm._replace(seg_t=seg_t_all, seg_b=seg_b_all)


def _widen(a: np.ndarray, W: int, fill) -> np.ndarray:
    out = np.full((a.shape[0], W), fill, a.dtype)
    out[:, : a.shape[1]] = a
    return out


def _grow_rows(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, *a.shape[1:]), a.dtype)
    out[: a.shape[0]] = a
    return out


def _fork_router(router: Router) -> Router:
    """A copy of ``router`` in the same epoch whose later pair groups and epochs do not touch
    the original (the epoch's group cache is copied, its arrays shared read-only)."""
    r = copy.copy(router)
    ep = getattr(r, "_epoch", None)  # the routing epoch: the state a snapshot must keep
    if ep is not None:
        ep2 = copy.copy(ep)
        ep2.cache, ep2.surv, ep2.rows = dict(ep.cache), dict(ep.surv), list(ep.rows)
        r._epoch = ep2  # noqa: SLF001
    return r
