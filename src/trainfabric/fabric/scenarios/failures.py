"""(c) Fabric-link failures: permutation goodput against the max-concurrent-flow LP, the
max-flow bisection and ``1 - f``; the collective's time; the estimated packet latency.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from trainfabric.fabric import topology as T
from trainfabric.fabric.config import build_topology
from trainfabric.fabric.flow.engine import static_goodput
from trainfabric.fabric.flows import FlowTable, mix64
from trainfabric.fabric.latency import routed_latency_s
from trainfabric.fabric.maxmin import max_min_rates
from trainfabric.fabric.mcf import check_lp_size, max_concurrent_flow
from trainfabric.fabric.routing import MECHANISMS
from trainfabric.fabric.scenarios.common import (
    check_flows,
    collective_part,
    kind_label,
    place_ranks,
    run_steps,
    scenario_router,
    simulate_flows,
    size_field,
    steps_for,
)
from trainfabric.fabric.scenarios.config import FailuresScenario
from trainfabric.fabric.topology import bisection_bps


# -- (c) failures ----------------------------------------------------------------------------------
def half_to_half_permutation(n_hosts: int, rng: np.random.Generator):
    """Random halves A, B; every host of A sends to a distinct host of B and vice versa."""
    order = rng.permutation(n_hosts)
    a, b = order[: n_hosts // 2], order[n_hosts // 2 : 2 * (n_hosts // 2)]
    src = np.concatenate([a, b])
    dst = np.concatenate([rng.permutation(b), rng.permutation(a)])
    return src.astype(np.int64), dst.astype(np.int64)


def cut_permutation(topo, rng: np.random.Generator):
    """A half-to-half permutation across the bisection of
    :func:`~trainfabric.fabric.topology.bisection_bps`: halves A (the first ``H/2`` hosts in
    leaf order) and B (the next ``H/2``); every host of A sends to a distinct host of B and
    vice versa (seeded pairing)."""
    order = np.argsort(topo.host_leaf[0], kind="stable")
    half = topo.n_hosts // 2
    a, b = order[:half], order[half : 2 * half]
    src = np.concatenate([a, b])
    dst = np.concatenate([rng.permutation(b), rng.permutation(a)])
    return src.astype(np.int64), dst.astype(np.int64)


def maxflow_bisection(topo, link_up) -> float:
    """Max-flow across the leaf-order bisection (:func:`~trainfabric.fabric.topology.bisection_bps`)
    over ``(H/2)`` x NIC rate: 1 on a healthy full-bisection fabric."""

    return bisection_bps(topo, link_up) / (topo.n_hosts // 2 * topo.nic_rate_bps)


def permutation_flows(src, dst, channels: int, nbytes: float = 1e6):
    """``channels`` parallel flows (distinct entropies) per host pair ``src -> dst``."""

    src, dst = np.repeat(src, channels), np.repeat(dst, channels)
    qp = np.tile(np.arange(channels), src.size // channels)
    return FlowTable.simple(src, dst, nbytes, entropy=mix64(src, dst, qp, seed=11), channel=qp)


def permutation_throughput(topo, router, flows, link_up) -> float:
    """Max-min goodput of all ``flows`` at once / (hosts sending x NIC rate)."""

    senders = np.unique(flows.src).size
    return float(static_goodput(topo, flows, router, link_up).sum() / (senders * topo.nic_rate_bps))


def routed_figures(topo, router, flows, load: float, link_up) -> dict[str, float]:
    """One routing of the permutation ``flows`` (every mechanism knows ``link_up``): its
    max-min goodput (:func:`permutation_throughput`'s figure) and the estimated packet
    latency (M/M/1, :mod:`trainfabric.fabric.latency`) when each host offers ``load`` x
    its NIC rate. One epoch for both (the adaptive mode solves its split LP once)."""

    up = np.asarray(link_up, bool)
    router.begin_epoch(up, {m: up for m in MECHANISMS}, flows, flows.bytes)
    routes = router.route(flows, np.arange(flows.n))
    ok = np.flatnonzero(routes.lost < 1.0)
    rates, _ = max_min_rates(routes.group, routes.weight, router.groups, topo.capacity_bps, ok)
    goodput = float(np.sum(rates * (1.0 - routes.lost[ok])))
    senders = np.unique(flows.src).size
    per_host = np.bincount(flows.src, minlength=topo.n_hosts)[flows.src]
    offered = load * topo.nic_rate_bps / per_host
    lat = routed_latency_s(topo, router, routes, offered, up)
    p50, p99 = np.quantile(lat, [0.5, 0.99], method="inverted_cdf")  # inf = unstable queue
    return {
        "mean_permutation_goodput": goodput / (senders * topo.nic_rate_bps),
        "latency_p50_us_est": float(p50) * 1e6,
        "latency_p99_us_est": float(p99) * 1e6,
        "unstable_flow_fraction_est": float(np.mean(~np.isfinite(lat))),
    }


def _check_failures_size(sc: FailuresScenario, topo, ranks: int) -> None:
    """The collective's flows, the permutation's ``hosts x channels`` flows, and (with
    ``lp`` or the adaptive mode) the concurrent-flow LP over the permutation's host pairs."""

    field = size_field(sc.collective, "collective")
    check_flows(field, topo, sc.modes, [collective_part(sc.collective, ranks)])
    perm = ("permutation", topo.n_hosts, "ring", "rank", sc.channels, 1, "persistent")
    check_flows("topology.gpus", topo, sc.modes, [perm])
    if topo.kind != "fat_tree" and (sc.lp or "adaptive" in sc.modes):
        spines = topo.tables["spine_down"].shape[1]
        check_lp_size(topo.n_hosts, topo.planes, spines, field="topology.gpus")


def measured_goodput(res, flows, topo, wire_factor: float) -> float:
    """A packet run's permutation goodput, the measured analogue of the fluid figure (the
    max-min rates while every flow is active): the payload delivered in the window from the
    last flow start plus the median one-way latency to the first flow finish, in wire bits
    (x ``wire_factor``) per second, over (senders x NIC rate). Where that window is shorter
    than 4 recorded bins, each sender's bytes over its own span (first start to last
    finish), averaged over senders."""
    senders, inv = np.unique(flows.src, return_inverse=True)
    norm = senders.size * topo.nic_rate_bps
    edges, delivered = res.goodput_timeline(res.timeline_res_s)
    lo = float(np.max(res.start_s)) + float(np.median(res.latency_s, overwrite_input=False))
    a = int(np.searchsorted(edges, lo, "left"))
    b = int(np.searchsorted(edges, float(np.min(res.finish_s)), "right")) - 1
    if b - a >= 4:
        bits = delivered[:, a:b].sum() * 8.0 * wire_factor
        return float(bits / (edges[b] - edges[a]) / norm)
    first = np.full(senders.size, np.inf)
    last = np.zeros(senders.size)
    np.minimum.at(first, inv, res.start_s)
    np.maximum.at(last, inv, res.finish_s)
    wire_bits = np.bincount(inv, weights=flows.bytes) * 8.0 * wire_factor
    return float(np.mean(wire_bits / (last - first)) / topo.nic_rate_bps)


PACKET_PERMUTATION_BYTES = 512 * 1024  # per connection, in the packet engine's permutations


def _permutation_figures(sc, topo, mode, seed, flows, cut, link_up) -> dict:
    """Goodput of the random and of the cut permutation under ``mode``, and packet latency:
    max-min rates and the M/M/1 estimate (flow engine), or measured runs (packet engine:
    latency and jitter of the random permutation at full load)."""
    if sc.engine == "flow":
        router = scenario_router(topo, mode, seed)
        return {
            **routed_figures(topo, router, flows, sc.offered_load, link_up),
            "cut_permutation_goodput": permutation_throughput(topo, router, cut, link_up),
        }
    wire = sc.packet.wire_bytes / sc.packet.mtu_bytes
    out = {}
    for key, fl in (("mean_permutation_goodput", flows), ("cut_permutation_goodput", cut)):
        fl = replace(fl, bytes=np.full(fl.n, PACKET_PERMUTATION_BYTES))
        res = simulate_flows(sc, topo, fl, mode, seed, "topology.gpus", link_up=link_up)
        out[key] = measured_goodput(res, fl, topo, wire) if not res.unfinished else 0.0
        if key == "mean_permutation_goodput":
            m = res.packet_metrics()
            out |= {"latency_p50_us": m["p50_latency_us"], "latency_p99_us": m["p99_latency_us"]}
            out |= {"jitter_us": m["jitter_us"], "retransmit_fraction": m["retransmit_fraction"]}
    return out


def run_failures(sc: FailuresScenario, seed: int | None = None) -> pd.DataFrame:
    """One row per failed fraction x draw x mode (columns: module doc)."""

    seed = sc.seed if seed is None else seed
    topo = build_topology(sc.topology)
    c = sc.collective
    hosts = place_ranks(topo, c, seed)
    _check_failures_size(sc, topo, hosts.size)
    steps = steps_for(c, hosts.size, c.size_bytes, seed)
    field = size_field(c, "collective")
    rows = []
    for frac in sc.fractions:
        for d in range(sc.draws):
            rng = np.random.default_rng([seed, d])
            link_up = T.fail_links(topo, frac, seed=int(rng.integers(2**31)))
            src, dst = half_to_half_permutation(topo.n_hosts, rng)
            flows = permutation_flows(src, dst, sc.channels)
            cut = permutation_flows(*cut_permutation(topo, rng), sc.channels)
            maxflow = maxflow_bisection(topo, link_up)
            lp = np.nan
            if sc.lp:
                lp = max_concurrent_flow(topo, src, dst, topo.nic_rate_bps, link_up).lam
            for mode in sc.modes:
                run = run_steps(sc, topo, mode, steps, hosts, c, seed, field, link_up)
                perm = _permutation_figures(sc, topo, mode, seed, flows, cut, link_up)
                rows.append(
                    {
                        "failed_fraction": float(frac),
                        "draw": d,
                        "mode": mode,
                        "failed_links": int((~link_up).sum()),
                        "mean_permutation_goodput": perm.pop("mean_permutation_goodput"),
                        "max_concurrent_flow_lp": lp,
                        "maxflow_bisection": maxflow,
                        "cut_permutation_goodput": perm["cut_permutation_goodput"],
                        "goodput_over_maxflow": perm.pop("cut_permutation_goodput") / maxflow,
                        "ideal_fraction": 1.0 - frac,
                        **perm,
                        "collective": kind_label(c),
                        "connections": c.connections,
                        "collective_s": run.time_s,
                        "sim_wall_s": run.wall_s,
                        "engine": sc.engine,
                    }
                )
    return _increases(pd.DataFrame(rows))


def _increases(table: pd.DataFrame) -> pd.DataFrame:
    """Per mode, the collective time and p50 latency (estimated or measured) over their
    means without failures, minus 1."""
    base = table[table["failed_fraction"] == 0].groupby("mode")
    for col, out in (
        ("collective_s", "collective_increase"),
        ("latency_p50_us_est", "latency_increase_est"),
        ("latency_p50_us", "latency_increase"),
    ):
        if col not in table.columns:
            continue
        ref = table["mode"].map(base[col].mean()) if len(base) else np.nan
        table[out] = table[col] / ref - 1
    return table


FAILURE_FIGURES = ("mean_permutation_goodput", "maxflow_bisection", "goodput_over_maxflow")


MAXFLOW_TARGET = 0.98  # F3 restated: adaptive's goodput >= 0.98 of the max-flow bound


def failures_summary(table: pd.DataFrame, at: float = 0.1) -> dict[str, dict[str, float]]:
    """Per mode: the means over draws of :data:`FAILURE_FIGURES` at the failed fraction
    nearest to ``at``, keyed ``<figure>_at_<f>pct_failures``."""
    fr = table["failed_fraction"].unique()
    near = fr[np.argmin(np.abs(fr - at))]
    means = (
        table[table["failed_fraction"] == near]
        .groupby("mode", sort=False)[list(FAILURE_FIGURES)]
        .mean()
    )
    return {
        mode: {f"{k}_at_{at:.0%}_failures".replace("%", "pct"): float(v) for k, v in row.items()}
        for mode, row in means.iterrows()
    }
