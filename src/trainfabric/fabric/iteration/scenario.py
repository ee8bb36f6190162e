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
* :func:`run_job` / :func:`job_command`: ``trainfabric fabric job`` on the CLARIFICATIONS
  fabric (:data:`~trainfabric.fabric.iteration.run.JOB_FABRIC`, its knobs overridable) or on
  a cluster (:mod:`trainfabric.fabric.cluster`: the whole cluster is built and the job's pods
  are placed on its scale-up domains, one pod per domain); one or several load-balancing
  modes on the same fabric, placement, task graph and seed, each with its failure draws;
  findings (:mod:`trainfabric.fabric.iteration.findings`) and a run directory
  (:func:`write_job_dir`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.cluster import ClusterConfig, build_cluster, job_notes, topology_config
from trainfabric.fabric.config import FaultsConfig, TopologyConfig, build_topology
from trainfabric.fabric.iteration import faults as IF
from trainfabric.fabric.iteration.findings import differences, job_findings
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

# -- the one-job command: its fabric ---------------------------------------------------------------
KNOBS = ("planes", "switch_radix", "nic_rate_gbps", "oversubscription")  # of TopologyConfig


def job_fabric(pods: int, gpus_per_pod: int, rail: bool = False, **overrides):
    """The CLI's fabric (:data:`JOB_FABRIC`, with ``overrides`` of its fields) sized for
    ``pods`` servers of ``gpus_per_pod`` GPUs; a pod count the fabric cannot hold is a
    ConfigError naming ``pods``, a bad override one naming the field (``planes``,
    ``switch_radix``, ...)."""

    cfg = validate(TopologyConfig, {**JOB_FABRIC, **overrides, "gpus": pods * gpus_per_pod})
    cfg = cfg.model_copy(update={"rail": rail})
    try:
        return build_topology(cfg, gpus_per_server=gpus_per_pod)
    except ConfigError as exc:
        name = exc.field.removeprefix("topology.")
        if name == "gpus":
            msg = f"{pods} servers of {gpus_per_pod} GPUs: {exc.message}"
            raise ConfigError("pods", msg) from None
        if name in KNOBS:
            raise ConfigError(name, exc.message) from None
        raise


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


def _job_topology(pods: int, gpus_per_pod: int, spec: JobSpec) -> T.Topology:
    if spec.cluster is None:
        return job_fabric(pods, gpus_per_pod, spec.rail, **spec.fabric)
    return cluster_fabric(spec.cluster, pods, gpus_per_pod)


def _fabric_fields(topo: T.Topology, spec: JobSpec) -> dict:
    """The fabric the job ran on: the CLI's (sized to the job, with its overrides) or the
    cluster's."""
    if spec.cluster is None:
        return {**JOB_FABRIC, **spec.fabric, "gpus": topo.n_hosts, "rail": spec.rail}
    return {"cluster": spec.cluster.name, **topology_config(spec.cluster).model_dump()}


def parse_modes(mode: str) -> list[str]:
    """``"ecmp,adaptive"`` -> ``["ecmp", "adaptive"]``: known modes, each once (errors name
    ``mode``)."""
    modes = [m.strip() for m in mode.split(",")]
    for m in modes:
        check_mode(m)
    if len(set(modes)) < len(modes):
        raise ConfigError("mode", f"lists a mode twice: {mode!r}")
    return modes


def _check_job(spec: JobSpec) -> None:
    """Refuse, before any work, options that contradict each other or are out of range."""
    if spec.failures is not None and not 0 <= spec.failures < 1:
        raise ConfigError("failures", f"must be a fraction in [0, 1), got {spec.failures}")
    if spec.channels < 1:
        raise ConfigError("channels", "must be >= 1")
    if not 1 <= spec.workers <= 256:
        raise ConfigError("workers", f"must be in [1, 256], got {spec.workers}")
    if spec.cluster is not None and spec.rail:
        raise ConfigError("rail", "the cluster file places the rails (fabric.rail)")
    unknown = sorted(set(spec.fabric) - set(KNOBS))
    if unknown:
        raise ConfigError(unknown[0], f"is not a fabric knob; known: {', '.join(KNOBS)}")
    if spec.cluster is not None and spec.fabric:
        raise ConfigError(next(iter(spec.fabric)), "sets the fabric; not with a cluster file")


# -- the one-job command: progress and time --------------------------------------------------------
ESTIMATE_S = 60.0  # a run expected to take longer says so before it goes on


def duration(seconds: float) -> str:
    """``75.0`` -> ``1 min 15 s``; ``4000.0`` -> ``1 h 6 min``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class _Clock:
    """Progress of a ``fabric job`` run, one step per healthy iteration and per failure draw.

    Time left = healthy iterations left x their mean time so far + draws left x the mean
    time of a draw so far (before the first draw: of a healthy iteration). Shown on
    ``progress`` (a rich Progress, or None) and, when over :data:`ESTIMATE_S`, as a line to
    ``notify`` (the first estimate, and again whenever it has doubled)."""

    def __init__(self, modes: int, draws: int, progress=None, notify=None):
        self.left = {"healthy": modes, "draw": modes * draws}
        self.spent: dict[str, list[float]] = {"healthy": [], "draw": []}
        self.progress, self.notify = progress, notify
        self.task = None if progress is None else progress.add_task("", total=modes * (1 + draws))
        self.said = 0.0
        self.t = time.perf_counter()

    def step(self, kind: str, label: str) -> None:
        now = time.perf_counter()
        self.spent[kind].append(now - self.t)
        self.left[kind] -= 1
        self.t = now
        left = self.time_left()
        if self.task is not None:
            self.progress.update(
                self.task, advance=1, description=f"{label}; {duration(left)} left"
            )
        if self.notify is not None and left > ESTIMATE_S and left > 2 * self.said:
            self.notify(self.estimate(left))
            self.said = left

    def time_left(self) -> float:
        healthy = float(np.mean(self.spent["healthy"]))
        draw = float(np.mean(self.spent["draw"])) if self.spent["draw"] else healthy
        return self.left["healthy"] * healthy + self.left["draw"] * draw

    def estimate(self, left: float) -> str:
        done = f"{np.mean(self.spent['healthy']):.1f} s per healthy iteration"
        if self.spent["draw"]:
            done += f", {np.mean(self.spent['draw']):.1f} s per failure draw"
        runs = self.left["healthy"] + self.left["draw"]
        return (
            f"estimate: about {duration(left)} more for {runs} more simulations ({done} so "
            "far); fewer --draws or modes take less"
        )


# -- the one-job command ---------------------------------------------------------------------------
@dataclass(frozen=True)
class JobSpec:
    """What ``fabric job`` is asked: ``workload`` on ``pods`` servers (None: its own) of
    ``gpus_per_pod`` GPUs (task-DAG files and traces), cut to ``layers``; ``mode``, one
    load-balancing mode or a comma list; ``failures``, a fraction of failed leaf-spine
    cables over ``draws`` seeded draws (on ``workers`` local processes); server
    ``placement``, ``channels`` per GPU pair, DP
    ``overlap``, ``rail`` placement, ``seed``, ``top_links`` reported; ``cluster`` (its
    fabric) or ``fabric`` (overrides of the CLI fabric's :data:`KNOBS`)."""

    workload: str
    pods: int | None = None
    mode: str = "ecmp"
    failures: float | None = None
    draws: int = 20
    workers: int = 1
    placement: str = "random"
    channels: int = 4
    overlap: str = "none"
    gpus_per_pod: int = 8
    layers: int | None = None
    rail: bool = False
    seed: int = 0
    top_links: int = 10
    cluster: ClusterConfig | None = None
    fabric: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JobRun:
    """What ``fabric job`` computed: ``result`` (what ``--json`` prints) and ``tables`` (the
    run directory's rows by file stem, every row keyed by ``mode``)."""

    result: dict
    tables: dict[str, list[dict]]


PHASE_KINDS_STEM = "fabric_iteration_phase_kinds"


def job_command(workload: str, **options) -> dict:
    """What ``trainfabric fabric job --json`` prints (:func:`run_job`'s ``result``)."""
    return run_job(workload, **options).result


def run_job(workload: str, *, progress=None, notify=None, **options) -> JobRun:
    """The iteration of ``workload`` (``options``: the fields of :class:`JobSpec`) under
    each of its modes, run side by side on the same fabric, placement, task graph and seed,
    each with its failure draws (the same cables in every mode). Errors name the option's
    field.

    ``result``: one mode, its flat figures; several, the common fields and ``modes``
    (each mode's flat figures) with ``differences`` against the first mode; both with
    ``findings``. ``wall_s`` is the whole run; ``wall_parts_s`` splits it. ``progress`` (a
    rich Progress) and ``notify`` (a line printer): see :class:`_Clock`."""
    t0 = time.perf_counter()
    spec = JobSpec(workload, **options)
    modes = parse_modes(spec.mode)
    _check_job(spec)
    jh, topo = _placed_job(spec)
    graph = job_graph(jh)
    common = _common_fields(spec, jh, topo)
    setup_s = time.perf_counter() - t0
    draws = 0 if spec.failures is None else spec.draws
    clock = _Clock(len(modes), draws, progress, notify)
    tables: dict[str, list[dict]] = {}
    per_mode = {}
    for m in modes:
        per_mode[m] = {**common, "mode": m, **_one_mode(spec, jh, topo, graph, m, clock, tables)}
    wall_s = time.perf_counter() - t0
    return JobRun(_assemble(common, per_mode, setup_s, wall_s), tables)


def _placed_job(spec: JobSpec) -> tuple[JobOnHosts, T.Topology]:
    """The job on its servers, and the fabric (a job the fabric cannot hold is refused
    before its DAG is built)."""
    job = resolve_job(spec.workload, pods=spec.pods, layers=spec.layers, overlap=spec.overlap)
    gpus_per_pod = spec.gpus_per_pod if job is None else job.placement.gpus_per_pod
    if job is not None:
        topo = _job_topology(job.placement.pods, gpus_per_pod, spec)
    loaded = build_job(
        spec.workload, job, pods=spec.pods, gpus_per_pod=gpus_per_pod, seed=spec.seed
    )
    if job is None:
        topo = _job_topology(loaded.pods, loaded.gpus_per_pod, spec)
    servers = place_servers(topo, loaded.pods, loaded.gpus_per_pod, spec.placement, spec.seed)
    return JobOnHosts(loaded, servers, spec.channels, seed=spec.seed), topo


def _common_fields(spec: JobSpec, jh: JobOnHosts, topo: T.Topology) -> dict:
    """The fields every mode shares: the job, the options, the fabric, the leaves the job's
    GPUs sit on, and the notes."""
    loaded, cluster = jh.loaded, spec.cluster
    return {
        "workload": loaded.name,
        "servers": loaded.pods,
        "gpus": loaded.pods * loaded.gpus_per_pod,
        "mode": spec.mode,
        "placement": spec.placement,
        "channels": spec.channels,
        "overlap": spec.overlap,
        "seed": spec.seed,
        "fabric": _fabric_fields(topo, spec),
        "leaves": int(np.unique(topo.leaf_of(jh.hosts())).size),
        "notes": [LATENCY_NOTE, *loaded.assumptions, *(job_notes(cluster) if cluster else [])],
    }


def _one_mode(spec: JobSpec, jh: JobOnHosts, topo, graph, mode: str, clock, tables) -> dict:
    """One mode's figures (today's flat keys; ``wall_s`` this mode's healthy run and draws,
    ``wall_parts_s`` split, ``engine_s`` the engine's own time); its rows into ``tables``."""
    t0 = time.perf_counter()
    run = run_iteration(jh, topo, mode, seed=spec.seed, graph=graph)
    it = iteration_tables(run, spec.top_links)
    clock.step("healthy", f"{mode}: healthy iteration")
    healthy_s = time.perf_counter() - t0
    _add_rows(tables, {"job": jh.loaded.name, "mode": mode, "overlap": spec.overlap}, it)
    summary = dict(it["summary"])
    engine_s = summary.pop("wall_s")
    out = {
        **summary,
        "phase_kinds": it["phase_kinds"],
        "most_loaded_links": it["top_links"],
    }
    if spec.failures is not None:
        table = _failure_table(run, spec, clock)
        tables.setdefault(IF.FAILURES_STEM, []).extend(table.to_dict(orient="records"))
        out["failures"] = {"fraction": spec.failures, "draws": spec.draws}
        out["failures"].update(IF.failures_summary(table)[mode])
    wall_s = time.perf_counter() - t0
    parts = {"healthy_s": healthy_s, "failure_draws_s": wall_s - healthy_s, "engine_s": engine_s}
    return {**out, "wall_s": wall_s, "wall_parts_s": parts}


def _failure_table(run: IterationRun, spec: JobSpec, clock):
    """Static failed cables (:mod:`trainfabric.fabric.iteration.faults`): one row per seeded
    draw of ``spec.failures`` failed leaf-spine cables, on ``spec.workers`` processes."""
    faults = validate(
        FaultsConfig,
        {"failed_fractions": [spec.failures], "failure_draws": spec.draws, "flap_draws": 0,
         "workers": spec.workers},
        prefix="failures -> ",
    )  # fmt: skip
    label, n = f"{run.mode}: failure draw", spec.draws
    return IF.run_failures(
        run, faults, spec.seed, on_draw=lambda d: clock.step("draw", f"{label} {d + 1}/{n}")
    )


def _add_rows(tables: dict, key: dict, it: dict) -> None:
    """One mode's iteration tables as run-directory rows, each row led by ``key`` (the
    ``iteration`` scenario's stems, and the phase kinds)."""
    tables.setdefault(STEM, []).append({**key, **it["summary"]})
    for part, stem in STEMS.items():
        tables.setdefault(stem, []).extend({**key, **row} for row in it.get(part, []))
    tables.setdefault(PHASE_KINDS_STEM, []).extend(
        {**key, **row, "phase_kinds": ", ".join(row["phase_kinds"])} for row in it["phase_kinds"]
    )


def _assemble(common: dict, per_mode: dict[str, dict], setup_s: float, wall_s: float) -> dict:
    """One mode: its flat figures; several: ``modes`` beside the common fields. Both with
    ``findings`` and the whole run's ``wall_s`` split in ``wall_parts_s``."""
    findings = job_findings(common, per_mode)
    if len(per_mode) == 1:
        (one,) = per_mode.values()
        parts = {"setup_s": setup_s, **one["wall_parts_s"]}
        return {**one, "findings": findings, "wall_s": wall_s, "wall_parts_s": parts}
    return {
        **common,
        "modes": per_mode,
        "baseline_mode": next(iter(per_mode)),
        "differences": differences(per_mode),
        "findings": findings,
        "wall_s": wall_s,
        "wall_parts_s": {
            "setup_s": setup_s,
            "modes_s": {m: r["wall_s"] for m, r in per_mode.items()},
        },
    }


def write_job_dir(run_dir: Path, job: JobRun, started: str) -> dict:
    """``job``'s run directory: its tables (Parquet), ``summary.json`` (the result, with its
    findings), ``manifest.json`` and ``report.html``; the result with ``run_dir`` and
    ``report``."""
    import pandas as pd

    from trainfabric.io import write_json, write_parquet
    from trainfabric.runs import render_report
    from trainfabric.runs.store import write_run_manifest

    for stem, rows in job.tables.items():
        if rows:
            write_parquet(run_dir / f"{stem}.parquet", pd.DataFrame(rows))
    result = {**job.result, "run_dir": str(run_dir)}
    write_json(run_dir / "summary.json", result)
    description = "trainfabric fabric job: one training iteration per load-balancing mode"
    write_run_manifest(
        run_dir, "fabric-job", description, _config(job.result), [job.result["seed"]], started
    )
    return result | {"report": str(render_report(run_dir))}


def _config(result: dict) -> dict:
    keys = ("workload", "servers", "gpus", "mode", "placement", "channels", "overlap", "seed")
    return {k: result[k] for k in keys} | {"fabric": result["fabric"]}


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
