"""The ``iteration`` scenario kind, tenants, and the ``fabric job`` command.

* :func:`scenario_tables`: per DP overlap setting and mode one iteration
  (:func:`~trainfabric.fabric.iteration.run.run_iteration`) and its tables
  (:func:`~trainfabric.fabric.iteration.report.iteration_tables`); faults per mode on the
  first overlap setting (:mod:`trainfabric.fabric.iteration.faults`); tenants; with
  ``engine = "packet"`` the packet engine beside the flow engine
  (:mod:`trainfabric.fabric.iteration.packet`).
* Tenants (:func:`run_tenants`): several jobs on one fabric, their servers interleaved on
  leaves (:func:`~trainfabric.fabric.iteration.run.interleaved_pools`) so they share uplinks;
  each job alone, then all together for ``iterations`` back to back with seeded start
  offsets; slowdown = iteration time together / alone, per iteration and offset draw.
* :func:`job_command`: ``trainfabric fabric job`` on the CLARIFICATIONS fabric
  (:data:`~trainfabric.fabric.iteration.run.JOB_FABRIC`) or on a cluster
  (:mod:`trainfabric.fabric.cluster`: the whole cluster is built and the job's pods are placed
  on its scale-up domains, one pod per domain).
"""

from __future__ import annotations

import numpy as np

from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.cluster import ClusterConfig, build_cluster, job_notes, topology_config
from trainfabric.fabric.config import FaultsConfig, TopologyConfig, build_topology
from trainfabric.fabric.iteration import faults as IF
from trainfabric.fabric.iteration.packet import packet_iteration
from trainfabric.fabric.iteration.report import iteration_tables
from trainfabric.fabric.iteration.run import (
    JOB_FABRIC,
    LATENCY_NOTE,
    IterationRun,
    JobOnHosts,
    LoadedJob,
    build_job,
    concat_graphs,
    default_bin_s,
    interleaved_pools,
    job_graph,
    load_job,
    make_router,
    place_servers,
    repeat_graph,
    resolve_job,
    run_iteration,
)
from trainfabric.fabric.routing import check_mode
from trainfabric.fabric.tasks.engine import run_tasks


# -- the one-job command ---------------------------------------------------------------------------
def job_fabric(pods: int, gpus_per_pod: int, rail: bool = False, **overrides):
    """The CLI's fabric (:data:`JOB_FABRIC`) sized for ``pods`` servers of ``gpus_per_pod``
    GPUs; a pod count the fabric cannot hold is a ConfigError naming ``pods``."""

    cfg = validate(TopologyConfig, {**JOB_FABRIC, **overrides, "gpus": pods * gpus_per_pod})
    cfg = cfg.model_copy(update={"rail": rail})
    try:
        return build_topology(cfg, gpus_per_server=gpus_per_pod)
    except ConfigError as exc:
        if exc.field != "topology.gpus":
            raise
        raise ConfigError("pods", f"{pods} servers of {gpus_per_pod} GPUs: {exc.message}") from None


def cluster_fabric(cluster: ClusterConfig, pods: int, gpus_per_pod: int) -> T.Topology:
    """The whole of ``cluster`` for a job of ``pods`` pods of ``gpus_per_pod`` GPUs, one pod
    per scale-up domain: a domain of another size is a ConfigError naming ``scale_up.gpus``,
    too many pods one naming ``pods``."""
    if cluster.domain_gpus != gpus_per_pod:
        raise ConfigError(
            "scale_up.gpus",
            f"is {cluster.domain_gpus} but the job's pods have {gpus_per_pod} GPUs: fabric job "
            "places one pod per scale-up domain",
        )
    domains = cluster.gpus // gpus_per_pod
    if pods > domains:
        raise ConfigError(
            "pods",
            f"{pods} servers of {gpus_per_pod} GPUs do not fit: {cluster.name} holds {domains:,}",
        )
    return build_cluster(cluster)


def _job_topology(pods: int, gpus_per_pod: int, rail: bool, cluster: ClusterConfig | None):
    if cluster is None:
        return job_fabric(pods, gpus_per_pod, rail)
    return cluster_fabric(cluster, pods, gpus_per_pod)


def job_command(
    workload: str,
    *,
    pods: int | None = None,
    mode: str = "ecmp",
    failures: float | None = None,
    draws: int = 20,
    placement: str = "random",
    channels: int = 4,
    overlap: str = "none",
    gpus_per_pod: int = 8,
    layers: int | None = None,
    rail: bool = False,
    seed: int = 0,
    top_links: int = 10,
    cluster: ClusterConfig | None = None,
) -> dict:
    """What ``trainfabric fabric job`` prints: the iteration of ``workload`` on the CLI's
    fabric, or on ``cluster``, under ``mode`` (errors name the option's field)."""

    check_mode(mode)
    if failures is not None and not 0 <= failures < 1:
        raise ConfigError("failures", f"must be a fraction in [0, 1), got {failures}")
    if channels < 1:
        raise ConfigError("channels", "must be >= 1")
    if cluster is not None and rail:
        raise ConfigError("rail", "the cluster file places the rails (fabric.rail)")
    job = resolve_job(workload, pods=pods, layers=layers, overlap=overlap)
    if job is not None:  # refuse a job the fabric cannot hold before building its DAG
        gpus_per_pod = job.placement.gpus_per_pod
        topo = _job_topology(job.placement.pods, gpus_per_pod, rail, cluster)
    loaded = build_job(workload, job, pods=pods, gpus_per_pod=gpus_per_pod, seed=seed)
    if job is None:
        topo = _job_topology(loaded.pods, loaded.gpus_per_pod, rail, cluster)
    servers = place_servers(topo, loaded.pods, loaded.gpus_per_pod, placement, seed)
    jh = JobOnHosts(loaded, servers, channels, seed=seed)
    run = run_iteration(jh, topo, mode, seed=seed)
    tables = iteration_tables(run, top_links)
    out = {
        "workload": loaded.name,
        "servers": loaded.pods,
        "gpus": loaded.pods * loaded.gpus_per_pod,
        "mode": mode,
        "placement": placement,
        "channels": channels,
        "overlap": overlap,
        "seed": seed,
        "fabric": _fabric_fields(topo, rail, cluster),
        **tables["summary"],
        "phase_kinds": tables["phase_kinds"],
        "most_loaded_links": tables["top_links"],
        "notes": [LATENCY_NOTE, *loaded.assumptions, *(job_notes(cluster) if cluster else [])],
    }
    if failures is not None:
        out["failures"] = _failure_figures(run, failures, draws, seed)
    return out


def _fabric_fields(topo: T.Topology, rail: bool, cluster: ClusterConfig | None) -> dict:
    """The fabric the job ran on: the CLI's (sized to the job) or the cluster's."""
    if cluster is None:
        return {**JOB_FABRIC, "gpus": topo.n_hosts, "rail": rail}
    return {"cluster": cluster.name, **topology_config(cluster).model_dump()}


def _failure_figures(run: IterationRun, fraction: float, draws: int, seed: int) -> dict:
    """Static failed cables (:mod:`trainfabric.fabric.iteration.faults`): the median and
    worst slowdown of the iteration over ``draws`` seeded failure sets."""

    faults = validate(
        FaultsConfig,
        {"failed_fractions": [fraction], "failure_draws": draws, "flap_draws": 0},
        prefix="failures -> ",
    )
    table = IF.run_failures(run, faults, seed)
    return {"fraction": fraction, "draws": draws, **IF.failures_summary(table)[run.mode]}


# -- tenants ---------------------------------------------------------------------------------------
def _iteration_bounds(res, first: int, n: int, iterations: int) -> np.ndarray:
    """``[iterations + 1]`` boundaries of a job laid out by :func:`repeat_graph` at task
    ``first``: the end of its offset timer, then each iteration's closing barrier."""
    ends = first + (np.arange(iterations) + 1) * (n + 1)
    return np.r_[res.finish_s[first], res.finish_s[ends]]


def run_tenants(
    topo: T.Topology,
    jobs: list[JobOnHosts],
    mode: str,
    *,
    iterations: int = 2,
    draws: int = 3,
    seed: int = 0,
    bin_s: float | None = None,
) -> list[dict]:
    """Tenants on one fabric: each job alone (its iteration time ``alone_s``), then all
    together, ``iterations`` back to back each, job ``j`` starting after an offset drawn
    uniformly in ``[0, alone_s_j)`` (draw ``d``: ``numpy.random.default_rng([seed, d])``).
    Rows: job, draw, offset_s, iteration, iteration_s, alone_s, slowdown (= iteration_s /
    alone_s)."""

    graphs = [job_graph(jh) for jh in jobs]
    alone = [
        run_iteration(jh, topo, mode, seed=seed, graph=g, bin_s=bin_s).iteration_s
        for jh, g in zip(jobs, graphs, strict=True)
    ]
    bin_s = bin_s or min(default_bin_s(jh, topo) for jh in jobs)
    rows = []
    for d in range(draws):
        offsets = np.random.default_rng([seed, d]).uniform(0.0, alone)
        reps = [repeat_graph(g, iterations, o) for g, o in zip(graphs, offsets, strict=True)]
        combined, firsts = concat_graphs(reps)
        res = run_tasks(topo, combined, make_router(topo, mode, seed), bin_s=bin_s)
        for j, g in enumerate(graphs):
            t = np.diff(_iteration_bounds(res, int(firsts[j]), g.n, iterations))
            rows += [
                {
                    "job": j,
                    "draw": d,
                    "offset_s": float(offsets[j]),
                    "iteration": i,
                    "iteration_s": float(t[i]),
                    "alone_s": alone[j],
                    "slowdown": float(t[i] / alone[j]),
                }
                for i in range(iterations)
            ]
    return rows


# -- the `iteration` scenario ----------------------------------------------------------------------
STEM = "fabric_iteration"
PACKET_STEM = "fabric_iteration_packet"
STEMS = {
    "collectives": "fabric_iteration_collectives",
    "utilisation": "fabric_iteration_utilisation",
    "critical": "fabric_iteration_critical",
    "top_links": "fabric_iteration_links",
    "tenants": "fabric_iteration_tenants",
}


def _load(w, seed: int, overlap: str, field: str) -> LoadedJob:
    """The job of a :class:`~trainfabric.fabric.scenarios.WorkloadConfig` (errors name
    ``field.<option>``)."""
    try:
        return load_job(
            w.name,
            pods=w.pods,
            gpus_per_pod=w.gpus_per_pod,
            layers=w.layers,
            overlap=overlap,
            bucket_mb=w.bucket_mb,
            seed=seed,
        )
    except ConfigError as exc:
        name = "name" if exc.field == "workload" else exc.field
        raise ConfigError(f"{field}.{name}", exc.message) from None


def scenario_tables(sc) -> dict:
    """Tables of an ``iteration`` scenario (:class:`~trainfabric.fabric.scenarios.
    IterationScenario`): per overlap setting and mode the iteration's tables, faults (first
    overlap setting) and tenants, keyed by file stem."""
    import pandas as pd

    w = sc.workload
    first = _load(w, sc.seed, w.overlap[0], "workload")
    servers_gpus = sc.topology.gpus_per_server
    if servers_gpus is not None and servers_gpus != first.gpus_per_pod:
        raise ConfigError(
            "topology.gpus_per_server",
            f"is {servers_gpus} (a cluster's scale_up.gpus) but the job's pods have "
            f"{first.gpus_per_pod} GPUs",
        )
    topo = build_topology(sc.topology, gpus_per_server=first.gpus_per_pod)
    servers = place_servers(
        topo, first.pods, first.gpus_per_pod, w.placement, sc.seed, field="workload.pods"
    )
    out: dict[str, list] = {STEM: [], **{s: [] for s in STEMS.values()}, PACKET_STEM: []}
    faults: dict[str, list] = {}
    for overlap in w.overlap:
        loaded = first if overlap == w.overlap[0] else _load(w, sc.seed, overlap, "workload")
        jh = JobOnHosts(loaded, servers, w.channels, seed=sc.seed)
        graph = job_graph(jh)
        for mode in sc.modes:
            run = run_iteration(jh, topo, mode, seed=sc.seed, graph=graph, bin_s=sc.bin_s)
            tables = iteration_tables(run, sc.top_links)
            key = {"job": loaded.name, "mode": mode, "overlap": overlap}
            out[STEM].append({**key, **tables["summary"]})
            for part, stem in STEMS.items():
                out[stem] += [{**key, **row} for row in tables.get(part, [])]
            if sc.faults is not None and overlap == w.overlap[0]:
                _fault_tables(run, sc.faults, sc.seed, faults)
    if sc.tenants.jobs:
        out[STEMS["tenants"]] = _tenant_rows(sc, topo)
    if sc.engine == "packet":  # the first overlap setting, one channel (dag_flow_table)
        jh = JobOnHosts(first, servers, 1, seed=sc.seed)
        out[PACKET_STEM] = [
            {"job": first.name, **packet_iteration(jh, topo, m, seed=sc.seed, config=sc.packet)}
            for m in sc.modes
        ]
    frames = {stem: pd.DataFrame(rows) for stem, rows in out.items() if rows}
    frames.update({stem: pd.concat(parts, ignore_index=True) for stem, parts in faults.items()})
    return frames


def _fault_tables(run: IterationRun, faults, seed: int, acc: dict) -> None:
    if faults.failed_fractions:
        acc.setdefault(IF.FAILURES_STEM, []).append(IF.run_failures(run, faults, seed))
    if faults.flap_draws and faults.flap_durations_s and faults.flap_sides:
        acc.setdefault(IF.FLAPS_STEM, []).append(IF.run_flaps(run, faults, seed))


def _tenant_rows(sc, topo: T.Topology) -> list[dict]:
    loaded = [
        _load(w, sc.seed, w.overlap[0], f"tenants.jobs.{j}") for j, w in enumerate(sc.tenants.jobs)
    ]
    g = loaded[0].gpus_per_pod
    for j, lj in enumerate(loaded):
        if lj.gpus_per_pod != g:
            raise ConfigError(f"tenants.jobs.{j}.gpus_per_pod", f"must equal job 0's ({g})")
    try:
        pools = interleaved_pools(topo, g, [lj.pods for lj in loaded])
    except ConfigError as exc:
        raise ConfigError("tenants.jobs", exc.message) from None
    jobs = [
        JobOnHosts(
            lj,
            place_servers(topo, lj.pods, g, w.placement, sc.seed, pool),
            w.channels,
            job_id=j,
            seed=sc.seed,
        )
        for j, (lj, w, pool) in enumerate(zip(loaded, sc.tenants.jobs, pools, strict=True))
    ]
    rows = []
    for mode in sc.modes:
        for row in run_tenants(
            topo,
            jobs,
            mode,
            iterations=sc.tenants.iterations,
            draws=sc.tenants.draws,
            seed=sc.seed,
            bin_s=sc.bin_s,
        ):
            rows.append({"mode": mode, "workload": loaded[row["job"]].name, **row})
    return rows


def scenario_summary(tables: dict) -> dict[str, dict[str, float]]:
    """Per mode: the iteration time and exposed-communication fraction per overlap setting
    (``_bucketed`` suffix for bucketed), tenants' median and worst slowdown, and the faults'
    figures (:mod:`trainfabric.fabric.iteration.faults`)."""
    main = tables[STEM]
    out: dict[str, dict[str, float]] = {}
    for row in main.to_dict(orient="records"):
        suffix = "" if row["overlap"] == "none" else f"_{row['overlap']}"
        mine = out.setdefault(row["mode"], {})
        mine[f"iteration_s{suffix}"] = row["iteration_s"]
        mine[f"exposed_comm_fraction{suffix}"] = row["exposed_comm_fraction"]
    ten = tables.get(STEMS["tenants"])
    if ten is not None:
        for mode, rows in ten.groupby("mode", sort=False):
            out[mode]["tenant_slowdown_median"] = float(rows["slowdown"].median())
            out[mode]["tenant_slowdown_max"] = float(rows["slowdown"].max())
    _faults_summary(tables, out)
    return out


def _faults_summary(tables: dict, out: dict) -> None:
    for stem, summary in (
        (IF.FAILURES_STEM, IF.failures_summary),
        (IF.FLAPS_STEM, IF.flaps_summary),
    ):
        if stem in tables:
            for mode, figures in summary(tables[stem]).items():
                out.setdefault(mode, {}).update(figures)
