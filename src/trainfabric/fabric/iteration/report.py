"""What one iteration on the fabric reports (:mod:`trainfabric.fabric.iteration.run` runs it).

Definitions (exposed communication, its walk-back split, collective groups, ``S`` and
busbw) are :mod:`trainfabric.workloads.attribution`'s; here they are applied to the task
engine's start and finish of every DAG node. Added: per phase category the time at least
one of its collectives was in flight (``busy_s``, the union of their intervals); the
critical path as bars (consecutive nodes of one category merged); utilisation per tier
and plane per time bin (the engine's link classes); the most loaded links by mean
utilisation over the iteration.
"""

from __future__ import annotations

import numpy as np

from trainfabric.fabric import topology as T
from trainfabric.fabric.iteration.run import IterationRun
from trainfabric.workloads.dag import COMM


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


# -- tables ---------------------------------------------------------------------------------------
def _node_times(run: IterationRun) -> tuple[np.ndarray, np.ndarray]:
    n = run.jh.dag.n_nodes
    return run.result.start_s[:n], run.result.finish_s[:n]


def phase_kind_rows(exposed, rows) -> list[dict]:
    """One row per phase category (PP, DP, EP, other): exposed seconds (the walk-back split
    of :func:`~trainfabric.workloads.attribution.exposed_comm`), the critical path's own
    time in it, the time at least one of its collectives was in flight (``busy_s``), its
    collectives, bytes and the phase kinds it holds."""
    from trainfabric.workloads.attribution import CATEGORIES, category

    out = []
    for cat in CATEGORIES:
        mine = [c for c in rows if category(c.kind) == cat]
        out.append(
            {
                "kind": cat,
                "exposed_s": exposed.by_category[cat],
                "path_s": exposed.path_s[cat],
                "busy_s": busy_time(
                    np.array([c.start_s for c in mine]), np.array([c.finish_s for c in mine])
                ),
                "collectives": len(mine),
                "bytes": float(sum(c.bytes for c in mine)),
                "phase_kinds": sorted({c.kind for c in mine}),
            }
        )
    return out


def critical_segments(run: IterationRun, path: np.ndarray) -> list[dict]:
    """The walked-back critical path as bars: consecutive path nodes of one category
    (compute, PP, DP, EP, other) merged into ``(start_s, finish_s, category)``; each node
    owns ``(finish of its releasing predecessor, its finish]``."""
    from trainfabric.workloads.attribution import category

    dag = run.jh.dag
    _, finish = _node_times(run)
    bars: list[dict] = []
    prev = 0.0
    for v in path.tolist():
        k = int(dag.phase[v])
        cat = (
            "compute"
            if dag.kind[v] != COMM and k < 0
            else category(dag.phases[k].kind)
            if k >= 0
            else "other"
        )
        if bars and bars[-1]["category"] == cat:
            bars[-1]["finish_s"] = float(finish[v])
        else:
            bars.append({"start_s": prev, "finish_s": float(finish[v]), "category": cat})
        prev = float(finish[v])
    return bars


def iteration_tables(run: IterationRun, top_links: int = 10) -> dict:
    """Everything one run reports (module doc of :mod:`trainfabric.workloads.attribution`
    for the definitions): ``summary`` (a dict), ``phase_kinds``, ``collectives``,
    ``utilisation``, ``critical`` and ``top_links`` (lists of rows)."""
    from trainfabric.workloads.attribution import (
        category,
        collectives,
        exposed_comm,
        phase_groups,
    )

    start, finish = _node_times(run)
    dag, res = run.jh.dag, run.result
    e = exposed_comm(dag, start, finish)
    rows = collectives(dag, start, finish)
    on_path = set(dag.phase[e.path][dag.phase[e.path] >= 0].tolist())
    gid = phase_groups(dag).group_of_phase
    path_groups = {int(gid[k]) for k in on_path}
    coll = [
        {
            "group": i,
            "name": c.name,
            "kind": c.kind,
            "category": category(c.kind),
            "op": c.op,
            "start_s": c.start_s,
            "finish_s": c.finish_s,
            "bytes": c.bytes,
            "size_bytes": c.size_bytes,
            "busbw_gbps": None if c.busbw_GBps is None else 8.0 * c.busbw_GBps,
            "on_critical_path": i in path_groups,
        }
        for i, c in enumerate(rows)
    ]
    util = res.utilisation()
    utilisation = [
        {
            "t_s": b * res.bin_s,
            "bin_s": res.bin_s,
            "tier": name.split("/")[0],
            "plane": int(name.split("/p")[1]),
            "utilisation": float(util[b, k]),
        }
        for b in range(util.shape[0])
        for k, name in enumerate(res.class_names[: res.class_capacity_bps.size])
        if res.class_capacity_bps[k] > 0
    ]
    delivered = float(res.delivered_bytes[: dag.n_nodes].sum())
    summary = {
        "iteration_s": e.iteration_s,
        "compute_only_s": e.compute_only_s,
        "exposed_comm_s": e.exposed_comm_s,
        "exposed_comm_fraction": e.exposed_fraction,
        **{f"exposed_{k}_s": v for k, v in e.by_category.items()},
        "comm_bytes": float(dag.bytes.sum()),
        "delivered_bytes": delivered,
        "flows_peak": int(res.peak_flows),
        "events": int(res.n_events),
        "wall_s": float(res.wall_s),
    }
    return {
        "summary": summary,
        "phase_kinds": phase_kind_rows(e, rows),
        "collectives": coll,
        "utilisation": utilisation,
        "critical": critical_segments(run, e.path),
        "top_links": most_loaded_links(run.topo, res.link_bits, res.end_s, top_links),
    }
