"""(d) Link flaps during a training-like sequence of collectives: the impaired time, the
stall of the collective step and of the iteration, per mode and flap.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.config import build_topology
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flow.collectives import collective_flows
from trainfabric.fabric.maxmin import link_load
from trainfabric.fabric.routing import Reaction, Router
from trainfabric.fabric.scenarios.common import (
    check_flows,
    collective_part,
    flow_options,
    place_ranks,
    scenario_router,
    simulate_flows,
    size_field,
    steps_for,
)
from trainfabric.fabric.scenarios.config import FlapsScenario


# -- (d) flaps -------------------------------------------------------------------------------------
def _iteration_steps(sc: FlapsScenario, n: int, seed: int):
    """The collective's steps repeated ``iterations`` times; per-step delays (compute first)."""
    one = steps_for(sc.collective, n, sc.collective.size_bytes, seed)
    delay = np.full(len(one), sc.collective.step_latency_s)
    delay[0] += sc.compute_s
    return one * sc.iterations, np.tile(delay, sc.iterations), len(one)


def _flap_links(topo, link: str, host: int, flows, seed: int) -> np.ndarray:
    """Both directions of the flapped cable: ``host``'s NIC link on plane 0, or the fabric
    cable carrying the most of the job's bytes under ECMP (the same cable for every mode)."""

    if link == "host":
        return np.array([topo.host_up[0, host], topo.host_down[0, host]])
    router = scenario_router(topo, "ecmp", seed)
    routes = router.route(flows, np.arange(flows.n))
    load = link_load(routes.group, routes.weight, router.groups, topo.n_links, flows.bytes)
    load[topo.link_tier != T.UP1] = -1
    best = int(np.argmax(load))
    return np.array([best, int(topo.reverse[best])])


def _within(intervals: np.ndarray, until_s: float) -> np.ndarray:
    """The intervals that start by ``until_s``."""
    return intervals[intervals[:, 0] <= until_s]


def _ends(finish_s: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    ends = np.zeros(n_groups)
    np.maximum.at(ends, group, finish_s)
    return np.maximum.accumulate(ends)


class _PacketStalls:
    """Stall intervals of a packet run, measured like the flow engine's
    (:meth:`~trainfabric.fabric.flow.engine.SimResult.stalls`): bins of the run's recorded
    resolution (``timeline_res_s``, 1 us by default) in which the job has started,
    unfinished flows and delivers no payload byte in order."""

    def __init__(self, res, flows):
        self.res = res
        self.edges, self.delivered = res.goodput_timeline(res.timeline_res_s)
        self.jobs = flows.job

    def stalls(self, job: int = 0, after_s: float = 0.0) -> np.ndarray:
        mine = self.jobs == job
        start = np.sort(self.res.start_s[mine])
        finish = np.sort(np.nan_to_num(self.res.finish_s[mine], nan=np.inf))
        lo, hi = self.edges[:-1], self.edges[1:]
        active = np.searchsorted(start, hi, "left") - np.searchsorted(finish, lo, "right")
        stuck = (active > 0) & (self.delivered[job] <= 0) & (hi > after_s)
        flips = np.diff(np.r_[0, stuck.astype(np.int8), 0])
        a, b = np.flatnonzero(flips == 1), np.flatnonzero(flips == -1)
        return np.c_[np.maximum(self.edges[a], after_s), self.edges[b]]

    def job_goodput_timeline(self, points: int = 500) -> tuple[np.ndarray, np.ndarray]:
        """About ``points`` bins over the run: edges and bits/s per job."""
        span = float(self.edges[-1])
        bin_s = max(self.res.timeline_res_s, span / points)
        edges, delivered = self.res.goodput_timeline(bin_s)
        return edges, delivered * 8.0 / bin_s


def _stall_view(sc, res, flows):
    """What measures stalls and goodput over time: the flow engine's result itself, or
    :class:`_PacketStalls` over a packet run."""
    return res if sc.engine == "flow" else _PacketStalls(res, flows)


def _reaction_router(sc, topo, mode: str, seed: int):
    """The mode's router with the engine's reaction times (the packet engine's come from
    its config)."""

    if sc.engine == "flow":
        return scenario_router(topo, mode, seed)
    p = sc.packet
    reaction = Reaction(p.reaction_hardware_s, p.reaction_software_s, p.reaction_routing_s)
    return Router(topo, mode, seed=seed, reaction=reaction)


def run_flaps(sc: FlapsScenario, seed: int | None = None, timeline: list | None = None):
    """One row per flap x mode: iteration and step stalls against the flap-free run.

    ``timeline`` (a list) receives per-job goodput timeline rows of every run. On the packet
    engine the flap's effect is the engine's (packets on the dead link lost, recovered by
    NACKs and timeouts; each mechanism reroutes after its reaction time): ``stall_s`` is
    measured on the delivered bytes, ``lost_bytes`` is the payload the engine dropped on the
    dead link, ``lost_packets`` / ``timeouts`` the run's extra drops and timeouts, and
    ``impaired_until_s`` (the fluid engine's "still sending into the dead link") is not
    defined (NaN).
    """

    seed = sc.seed if seed is None else seed
    topo = build_topology(sc.topology)
    hosts = place_ranks(topo, sc.collective, seed)
    part = collective_part(sc.collective, hosts.size, sc.iterations, sync="rank")  # no shortcut
    field = size_field(sc.collective, "collective")
    check_flows(field, topo, sc.modes, [part])
    steps, delay, per_iter = _iteration_steps(sc, hosts.size, seed)
    opts = flow_options(sc.collective, seed) | {"step_latency_s": delay}
    cf = collective_flows(steps, hosts, **opts)
    iteration = cf.step // per_iter
    rows = []
    for mode in sc.modes:
        base = simulate_flows(sc, topo, cf.flows, mode, seed, field)
        b_view = _stall_view(sc, base, cf.flows)
        b_iter = _ends(base.finish_s, iteration, sc.iterations)
        b_step = _ends(base.finish_s, cf.step, cf.n_steps)
        _timeline_rows(timeline, b_view, mode, "none")
        for i, flap in enumerate(sc.flaps):
            if flap.iteration >= sc.iterations:
                raise ConfigError(f"flaps.{i}.iteration", f"must be < iterations ({sc.iterations})")
            at = flap.at_s
            if at is None:
                start = float(base.start_s[iteration == flap.iteration].min())  # after compute
                at = start + 0.1 * (b_iter[flap.iteration] - start)
            links = _flap_links(topo, flap.link, int(hosts[0]), cf.flows, seed)
            events = LinkEvents.flap(links, at, at + flap.duration_s)
            res = simulate_flows(sc, topo, cf.flows, mode, seed, field, events=events)
            view = _stall_view(sc, res, cf.flows)
            f_iter = _ends(res.finish_s, iteration, sc.iterations)
            f_step = _ends(res.finish_s, cf.step, cf.n_steps)
            stalls = _within(view.stalls(0, after_s=at), at + flap.duration_s)
            _timeline_rows(timeline, view, mode, f"{flap.link}#{i}")
            rows.append(
                {
                    "flap": f"{flap.link}#{i}",
                    "link": flap.link,
                    "mode": mode,
                    "at_s": at,
                    "duration_s": flap.duration_s,
                    "reaction_s": float(
                        np.max(_reaction_router(sc, topo, mode, seed).reaction_s(links))
                    ),
                    **_impairment(sc, res, base, at, flap.duration_s),
                    "stall_s": float(np.max(np.diff(stalls, axis=1), initial=0.0)),
                    "baseline_stall_s": float(
                        np.max(np.diff(b_view.stalls(0), axis=1), initial=0.0)
                    ),
                    "iteration_stall_s": float(
                        np.max(np.diff(f_iter, prepend=0) - np.diff(b_iter, prepend=0))
                    ),
                    "step_stall_s": float(
                        np.max(np.diff(f_step, prepend=0) - np.diff(b_step, prepend=0))
                    ),
                    "extra_s": float(f_iter[-1] - b_iter[-1]),
                    "iteration_s": float(b_iter[-1] / sc.iterations),
                    "unfinished": int(res.unfinished),
                    "n_events": int(res.n_events),
                    "sim_wall_s": float(res.wall_s),
                    "engine": sc.engine,
                }
            )
    return pd.DataFrame(rows)


def _impairment(sc, res, base, at: float, duration_s: float) -> dict:
    """Flow engine: how long after the flap the job still sent into the dead link. Packet
    engine: the payload bytes lost on the dead link, and the drops, timeouts and
    retransmissions the flap caused (over the flap-free run)."""
    if sc.engine == "flow":
        impaired = _within(res.impaired(0, after_s=at), at + duration_s)
        return {"impaired_until_s": float(impaired[:, 1].max(initial=at) - at)}
    return {
        "impaired_until_s": float("nan"),
        "lost_bytes": float(res.lost_bytes.sum() - base.lost_bytes.sum()),
        "lost_packets": int(res.dropped - base.dropped),
        "timeouts": int(res.timeouts - base.timeouts),
        "retransmitted": int(res.retransmitted - base.retransmitted),
    }


def _timeline_rows(timeline: list | None, view, mode: str, flap: str) -> None:
    if timeline is None:
        return
    t, goodput = view.job_goodput_timeline()
    for k in range(t.size - 1):
        timeline.append(
            {"mode": mode, "flap": flap, "t_s": float(t[k]), "goodput_gbps": goodput[0, k] / 1e9}
        )


def flaps_summary(table: pd.DataFrame) -> dict[str, float]:
    """Per mode: the longest stall (job stuck: started flows, zero goodput) over the flaps."""
    return table.groupby("mode", sort=False)["stall_s"].max().to_dict()
