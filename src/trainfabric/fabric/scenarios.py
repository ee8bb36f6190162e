"""The four fabric evaluation scenarios, as typed configs and functions returning tables.

A scenario file (TOML) has a ``kind`` and the fields of that kind; every kind shares
``name``, ``seed``, ``modes`` (load-balancing modes compared) and ``[topology]``:

* ``line_rate``: each collective x message size x mode on an idle fabric; busbw as a
  fraction of the NIC rate (NCCL-tests), beside the header-only bound ``4096/4160``.
* ``isolation``: a victim collective alone, then next to an aggressor all-to-all tenant on
  the other hosts; placements interleave both tenants on every leaf (``scattered``), so they
  share leaf uplinks and spines; ``isolation_ratio`` = victim solo time / victim time with the
  aggressor (1 = perfect isolation), per mode and oversubscription.
* ``failures``: a fraction of the leaf-spine cables down (seeded draws). Each figure is named
  for what it is (none of them is "the bisection" by itself):

  - ``mean_permutation_goodput``: the max-min goodput (each mode's routing) of a random
    half-to-half permutation, averaged over its senders, as a fraction of the NIC rate;
  - ``max_concurrent_flow_lp``: the largest ``λ`` such that every flow of that same
    permutation gets ``λ`` x line rate at once (HiGHS LP, :mod:`trainfabric.fabric.mcf`);
  - ``maxflow_bisection``: the true max-flow across the fabric's bisection (the first half of
    the leaves, in leaf order, against the rest: :func:`~trainfabric.fabric.topology.bisection_bps`)
    on the same failure draw, over ``(H/2)`` x NIC rate; a property of the links alone;
  - ``cut_permutation_goodput``: the max-min goodput of a permutation *across that cut*
    (every host of one half sends to a distinct host of the other, both ways);
    ``goodput_over_maxflow`` = ``cut_permutation_goodput / maxflow_bisection``, at most 1
    (every such flow crosses the cut in one direction or the other, and the fabric is
    symmetric) — the F3 target restated: adaptive's ``>= 0.98`` of the max-flow bound;
  - ``ideal_fraction``: the capacity-proportional ideal ``1 - f``.

  ``mean_permutation_goodput`` may exceed ``maxflow_bisection``: a random permutation's
  flows need not cross the leaf-aligned cut. Also the collective's completion time, with
  its increase over no failures.
* ``flaps``: a training-like sequence (compute gap, then the collective, ``iterations``
  times); one run per flap (a host link or the most loaded fabric cable down at ``at_s`` for
  ``duration_s``) and one without. ``impaired_until_s``: from the flap to the last moment
  some active flow of the job still sends into the dead link (the mode's measured
  reaction: its traffic is lost or stuck); ``stall_s``: the longest interval, starting
  during the
  flap, in which the job has started, unfinished flows but zero goodput (stuck, not merely
  slower) — the throughput dip that the mode's reaction time should bound;
  ``iteration_stall_s`` (and ``step_stall_s``): the largest extra duration of one iteration
  (collective step) against the flap-free run, which also counts the slowdown of running on
  ``(P-1)/P`` of a host's bandwidth while its link is down.

* ``iteration`` (:mod:`trainfabric.fabric.iteration`): a training job's iteration on the
  fabric (``[workload]`` where the other kinds have ``[collective]``) per mode and DP overlap
  setting: iteration time, exposed communication per phase category, collectives with
  busbw, utilisation over time per tier and plane, the critical path, the most loaded links;
  ``[tenants]`` (jobs interleaved on leaves, seeded start offsets, slowdown against alone)
  and ``[faults]`` (:mod:`trainfabric.fabric.iteration_faults`). Not one of the four
  evaluation scenarios (:data:`SCENARIOS`); :data:`KINDS` holds every kind.

Engines: ``engine = "flow"`` (default: the fluid max-min engine,
:mod:`trainfabric.fabric.engine`; ``calibration = true`` adds the packet-fitted per-message
start-up of :mod:`trainfabric.fabric.calibration`) or ``"packet"`` (the packet-level
engine, :mod:`trainfabric.fabric.packet`, configured by the ``[packet]`` table). On the
packet engine every step of a collective is simulated (no ring shortcut), line-rate rows add
the measured per-packet latency (p50, p99, p99.9), jitter (p99 - p50) and retransmissions,
failures measure the permutations' goodput and latency from packet runs
(:func:`measured_goodput`), and a flap's effect is the engine's: packets sent into the
dead link are lost, each mechanism reroutes after its reaction time, the transport
recovers the loss (NACKs, timeouts); ``stall_s`` is measured on the delivered bytes.

Size guards: before building any flow, every scenario prices the flows it will simulate
(:func:`trainfabric.fabric.collectives.collective_memory_bytes`: per collective, its flow
count times the per-flow memory of the costliest mode) and, in ``failures``, the
concurrent-flow LP (:func:`trainfabric.fabric.mcf.check_lp_size`), and refuses over the
memory limit with a ConfigError naming the input that sets the size: the collective's
``ranks`` when given (``collectives.<i>.ranks``, ``victim.ranks``, ``aggressor.ranks``,
``collective.ranks``), else ``topology.gpus``. The topology itself is priced per link
(:func:`topology_links`) before it is built.

Units: bytes, seconds; rates in Gb/s in files (``nic_rate_gbps``), bits/s inside.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from trainfabric.config import Config, read_toml, validate
from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.fabric.packet.config import PacketConfig
from trainfabric.io import write_json
from trainfabric.limits import check_memory
from trainfabric.progress import track
from trainfabric.runs.store import now, write_run_manifest

LBMode = Literal["ecmp", "flowlet", "pinning", "spray", "adaptive"]
ALL_MODES: tuple[str, ...] = ("ecmp", "flowlet", "pinning", "spray", "adaptive")
MiB = 1024**2
Fraction = Annotated[float, Field(ge=0, lt=1)]
Positive = Annotated[float, Field(gt=0)]


MAX_GPUS = 1_048_576  # ten times the largest clusters built


class TopologyConfig(Config):
    """A fabric: ``multiplane`` (P planes of 2-tier leaf-spine), ``leaf_spine`` or ``fat_tree``
    (``gpus`` <= 1,048,576, ``planes`` <= 64)."""

    kind: Literal["multiplane", "leaf_spine", "fat_tree"] = "multiplane"
    gpus: int = Field(64, ge=2, le=MAX_GPUS, description="hosts (one NIC per GPU)")
    planes: int = Field(4, ge=1, le=64, description="planes (multiplane only)")
    switch_radix: int = Field(16, ge=4, description="ports per switch per plane")
    nic_rate_gbps: float = Field(800.0, gt=0, description="NIC total rate, all planes")
    oversubscription: float = Field(1.0, ge=1, description="leaf host ports : uplinks")
    rail: bool = Field(False, description="rail-optimised host placement")
    hop_latency_s: float = Field(1e-6, ge=0, description="propagation + switching per hop")


class CollectiveConfig(Config):
    """One collective: kind, algorithm, ranks and their placement, per-rank buffer."""

    kind: Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "permutation"] = (
        "all_reduce"
    )
    algorithm: Literal["ring", "halving_doubling"] = "ring"
    ranks: int | None = Field(None, ge=2, description="ranks (default: all available hosts)")
    size_bytes: float = Field(256 * MiB, gt=0, description="per-rank buffer S (NCCL-tests)")
    placement: Literal["packed", "scattered", "random"] = "random"
    step_latency_s: float = Field(2e-6, ge=0, description="software latency per step")
    sync: Literal["rank", "step"] = "rank"
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per rank pair")
    connections: Literal["persistent", "per_message"] = Field(
        "persistent",
        description="persistent: one queue pair per peer for every step (NCCL); per_message: "
        "a new connection (hash) per step, as htsim's generators",
    )


class _Scenario(Config):
    name: str = ""
    seed: int = Field(0, ge=0)
    modes: list[LBMode] = Field(default_factory=lambda: list(ALL_MODES), min_length=1)
    topology: TopologyConfig = TopologyConfig()
    engine: Literal["flow", "packet"] = Field(
        "flow", description="flow: fluid max-min engine; packet: packet-level engine"
    )
    packet: PacketConfig = Field(
        default_factory=PacketConfig, description="the packet engine's knobs (engine = packet)"
    )
    calibration: bool = Field(
        False,
        description="flow engine only: add the packet-fitted per-message start-up and "
        "first-window loss (trainfabric.fabric.calibration.FITTED); off by default",
    )


class LineRateScenario(_Scenario):
    """(a) Line rate per collective x message size x mode (sizes override ``size_bytes``)."""

    kind: Literal["line_rate"] = "line_rate"
    collectives: list[CollectiveConfig] = Field(
        default_factory=lambda: [
            CollectiveConfig(kind="all_reduce", sync="step"),
            CollectiveConfig(kind="all_to_all"),
        ],
        min_length=1,
    )
    sizes_bytes: list[Positive] = Field(
        default_factory=lambda: [1.0 * MiB, 16.0 * MiB, 256.0 * MiB, 4096.0 * MiB], min_length=1
    )


class IsolationScenario(_Scenario):
    """(b) Victim alone vs next to an aggressor tenant (per oversubscription and fraction of
    failed leaf-spine cables; the same failures in the solo and the shared run)."""

    kind: Literal["isolation"] = "isolation"
    victim: CollectiveConfig = CollectiveConfig(kind="all_reduce", placement="scattered")
    aggressor: CollectiveConfig = CollectiveConfig(
        kind="all_to_all", placement="scattered", size_bytes=1024 * MiB
    )
    victim_fraction: float = Field(0.5, gt=0, lt=1, description="share of hosts for the victim")
    oversubscription: list[Annotated[float, Field(ge=1)]] = Field(
        default_factory=lambda: [1.0, 2.0], min_length=1
    )
    failed_fractions: list[Fraction] = Field(default_factory=lambda: [0.0, 0.1], min_length=1)


class FailuresScenario(_Scenario):
    """(c) Fabric-link failures: permutation throughput vs LP vs 1 - f; collective time;
    estimated packet latency under an offered background load."""

    kind: Literal["failures"] = "failures"
    fractions: list[Fraction] = Field(default_factory=lambda: [0.0, 0.05, 0.1, 0.2], min_length=1)
    draws: int = Field(3, ge=1, le=100, description="failure sets x permutations per fraction")
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per host pair")
    collective: CollectiveConfig = CollectiveConfig(kind="all_reduce")
    lp: bool = Field(True, description="solve the max-concurrent-flow LP (HiGHS) per draw")
    offered_load: float = Field(
        0.5, gt=0, lt=1, description="background load of the latency estimate (of line rate)"
    )


class FlapConfig(Config):
    """One flap: a host link (rank 0's NIC, plane 0) or a fabric cable down for a while.

    ``at_s``: when it goes down; default: 10% into the collective of ``iteration`` in the
    mode's flap-free run, so that it hits while the job communicates.
    """

    link: Literal["host", "fabric"]
    at_s: float | None = Field(None, ge=0)
    iteration: int = Field(2, ge=0, description="iteration hit when at_s is not given")
    duration_s: float = Field(gt=0)


class FlapsScenario(_Scenario):
    """(d) Host and fabric link flaps during a training-like collective sequence."""

    kind: Literal["flaps"] = "flaps"
    collective: CollectiveConfig = CollectiveConfig(kind="all_reduce", ranks=16)
    iterations: int = Field(20, ge=2, le=10_000)
    compute_s: float = Field(0.1, ge=0, description="compute between collectives")
    flaps: list[FlapConfig] = Field(
        default_factory=lambda: [
            FlapConfig(link="host", duration_s=1.5),
            FlapConfig(link="fabric", duration_s=1.5),
        ],
        min_length=1,
    )


class WorkloadConfig(Config):
    """The job of an ``iteration`` scenario (:mod:`trainfabric.fabric.iteration`): a preset
    name, a job TOML or a task-DAG JSON; each pod is a server of ``gpus_per_pod`` GPUs."""

    name: str = Field("llama3-70b", min_length=1, description="preset, job .toml or DAG .json")
    pods: int | None = Field(None, ge=2, le=65_536, description="servers (re-maps a preset)")
    gpus_per_pod: int = Field(8, ge=1, le=4096, description="GPUs per pod of a task-DAG JSON")
    layers: int | None = Field(None, ge=1, description="cut the model to this many layers")
    placement: Literal["packed", "scattered", "random"] = "random"
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per GPU pair")
    overlap: list[Literal["none", "bucketed"]] = Field(
        default_factory=lambda: ["none", "bucketed"], min_length=1
    )
    bucket_mb: float | None = Field(
        None,
        gt=0,
        description="gradient bucket (MiB per GPU) of bucketed overlap; default "
        "Megatron-LM's size (PyTorch DDP uses 25)",
    )


class TenantsConfig(Config):
    """Several jobs on one fabric, servers interleaved on leaves; ``iterations`` back to back
    per job, each job starting at a seeded offset in ``[0, its solo iteration)``; ``draws``
    offset draws (the spread)."""

    jobs: list[WorkloadConfig] = Field(default_factory=list)
    iterations: int = Field(2, ge=1, le=100)
    draws: int = Field(3, ge=1, le=100, description="seeded draws of the start offsets")


class FaultsConfig(Config):
    """Faults during the iteration (run by :mod:`trainfabric.fabric.iteration_faults`):
    static failed leaf-spine cables (``failed_fractions``, ``failure_draws`` seeded draws
    each) and link flaps (``flap_draws`` per mode, spread over ``flap_durations_s`` x
    ``flap_sides``); empty lists / 0 draws switch a part off."""

    failed_fractions: list[Fraction] = Field(default_factory=lambda: [0.1])
    failure_draws: int = Field(20, ge=1, le=10_000)
    flap_durations_s: list[Positive] = Field(default_factory=lambda: [1e-3, 1e-2, 1.0])
    flap_sides: list[Literal["nic", "fabric"]] = Field(default_factory=lambda: ["nic", "fabric"])
    flap_draws: int = Field(500, ge=0, le=1_000_000)


class IterationScenario(_Scenario):
    """(e) A training job's iteration on the fabric per mode and overlap setting; optional
    tenants and faults (:mod:`trainfabric.fabric.iteration`)."""

    kind: Literal["iteration"] = "iteration"
    topology: TopologyConfig = TopologyConfig(gpus=256, switch_radix=64)
    workload: WorkloadConfig = WorkloadConfig()
    tenants: TenantsConfig = TenantsConfig()
    faults: FaultsConfig | None = None
    bin_s: float | None = Field(None, gt=0, description="utilisation bin (default: 1/100 of it)")
    top_links: int = Field(10, ge=1, le=1000, description="most loaded links reported")


SCENARIOS: dict[str, type[_Scenario]] = {
    "line_rate": LineRateScenario,
    "isolation": IsolationScenario,
    "failures": FailuresScenario,
    "flaps": FlapsScenario,
}
# Every kind `fabric run` reads: the four evaluation scenarios (each also a registered
# experiment, experiments.fabric_studies) and a job's iteration on the fabric.
KINDS: dict[str, type[_Scenario]] = {**SCENARIOS, "iteration": IterationScenario}
Scenario = (
    LineRateScenario | IsolationScenario | FailuresScenario | FlapsScenario | IterationScenario
)


def parse_scenario(data: dict, prefix: str = "") -> Scenario:
    """Validate a scenario mapping; errors name the dotted field (``kind`` first)."""
    if not isinstance(data, dict):
        raise ConfigError(prefix.rstrip(".") or "scenario", "must be a table")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConfigError(f"{prefix}kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return validate(KINDS[kind], data, prefix)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    return parse_scenario(read_toml(path))


# -- building blocks -------------------------------------------------------------------------------
HEADER_BOUND = 4096 / 4160  # payload share of the wire with 64 B headers per 4096 B MTU


LINK_BYTES = 120  # per directed link of a topology (tables, capacities, ids): 100-115 measured


def topology_links(cfg: TopologyConfig, oversubscription: float) -> float:
    """Directed links of ``cfg``: per plane of a 2-tier fabric, 2 per host (up and down) and
    ``2 / oversubscription`` per host between leaves and spines; a 3-tier fat tree, 6 per host."""
    if cfg.kind == "fat_tree":
        return 6.0 * cfg.gpus
    planes = cfg.planes if cfg.kind == "multiplane" else 1
    return planes * cfg.gpus * (2.0 + 2.0 / oversubscription)


def build_topology(
    cfg: TopologyConfig, oversubscription: float | None = None, gpus_per_server: int = 8
):
    """The topology of ``cfg``; builder errors are re-labelled ``topology.<field>``. Refuses
    first a topology whose links (:func:`topology_links` x ``LINK_BYTES``) exceed the memory
    limit (ConfigError naming ``topology.gpus``). ``gpus_per_server``: the rails of
    ``rail = true`` (GPU ``i`` of every server on rail ``i``)."""
    from trainfabric.fabric import topology as T

    over = cfg.oversubscription if oversubscription is None else oversubscription
    links = topology_links(cfg, over)
    check_memory("topology.gpus", LINK_BYTES * links, f"a {cfg.kind} fabric of {links:,.0f} links")
    kw = dict(
        switch_radix=cfg.switch_radix,
        nic_rate_bps=cfg.nic_rate_gbps * 1e9,
        oversubscription=over,
        hop_latency_s=cfg.hop_latency_s,
        gpus_per_server=gpus_per_server,
    )
    try:
        if cfg.kind == "multiplane":
            return T.multiplane(cfg.gpus, planes=cfg.planes, rail=cfg.rail, **kw)
        if cfg.kind == "leaf_spine":
            return T.leaf_spine(cfg.gpus, **kw)
        return T.fat_tree(cfg.gpus, **kw)
    except ConfigError as exc:
        raise ConfigError(f"topology.{exc.field}", exc.message) from None


def _router(topo, mode: str, seed: int):
    from trainfabric.fabric.routing import Router

    return Router(topo, mode, seed=seed)


def _hosts(topo, c: CollectiveConfig, seed: int, available=None, field: str = "collective"):
    from trainfabric.fabric.collectives import place

    pool = topo.n_hosts if available is None else len(available)
    n = c.ranks or pool
    if n > pool:
        raise ConfigError(f"{field}.ranks", f"{n} ranks but only {pool} hosts available")
    return place(topo.host_leaf[0], n, c.placement, seed, available)


def _steps(c: CollectiveConfig, n: int, size_bytes: float, seed: int, field: str = "collective"):
    from trainfabric.fabric.collectives import collective_steps

    try:
        return collective_steps(c.kind, n, size_bytes, c.algorithm, seed)
    except ConfigError as exc:
        raise ConfigError(f"{field}.{exc.field}", exc.message) from None


def _size_field(c: CollectiveConfig, prefix: str) -> str:
    """The input that sets a collective's size: its ``ranks`` when given, else the hosts."""
    return f"{prefix}.ranks" if c.ranks else "topology.gpus"


def _check_flows(field: str, topo, modes, parts: list[tuple]) -> None:
    """Refuse (ConfigError naming ``field``) flows over the memory limit. ``parts``: tuples
    ``(kind, ranks, algorithm, sync, channels, repeats, connections)`` simulated together."""
    from trainfabric.fabric.collectives import collective_memory_bytes

    total, flows, labels = 0.0, 0, []
    for kind, n, algorithm, sync, channels, repeats, connections in parts:
        nbytes, f = collective_memory_bytes(
            kind,
            n,
            algorithm=algorithm,
            sync=sync,
            channels=channels,
            planes=topo.planes,
            modes=tuple(modes),
            connections=connections,
        )
        total += repeats * nbytes
        flows += repeats * f
        labels.append(f"{kind} over {n:,} ranks" + (f" x {repeats:,}" if repeats > 1 else ""))
    check_memory(field, total, f"{' + '.join(labels)} ({flows:,} flows)")


def _collective_part(c: CollectiveConfig, n: int, repeats: int = 1, sync: str | None = None):
    return (c.kind, n, c.algorithm, sync or c.sync, c.channels, repeats, c.connections)


def _flow_options(c: CollectiveConfig, seed: int, job: int = 0) -> dict:
    return dict(
        job=job,
        step_latency_s=c.step_latency_s,
        sync=c.sync,
        channels=c.channels,
        connections=c.connections,
        seed=seed,
    )


def _kind_label(c: CollectiveConfig) -> str:
    ring = c.kind in ("all_reduce", "reduce_scatter", "all_gather")
    return f"{c.kind}/{c.algorithm}" if ring else c.kind


# -- engines ---------------------------------------------------------------------------------------
PACKET_KEYS = (
    "p50_latency_us",
    "p99_latency_us",
    "p999_latency_us",
    "jitter_us",
    "retransmit_fraction",
    "dropped",
    "trimmed",
    "timeouts",
    "reorder_max",
    "queue_max_bytes",
)


def _packet_metrics(res) -> dict:
    """The packet engine's per-run figures (:data:`PACKET_KEYS` of its summary); ``{}`` for
    a flow-engine result."""
    if not hasattr(res, "summary"):
        return {}
    summary = res.summary()
    return {k: summary[k] for k in PACKET_KEYS}


def _simulate(sc, topo, flows, mode: str, seed: int, field: str, *, link_up=None, events=None):
    """``flows`` on the scenario's engine (``sc.engine``); both results have ``start_s``,
    ``finish_s``, ``makespan_s``, ``unfinished``, ``n_events`` and ``wall_s``. The packet
    engine's size refusal (``flows.bytes``) is re-labelled ``field`` (the scenario input
    that sets the bytes)."""
    if sc.engine == "flow":
        from trainfabric.fabric.calibration import FITTED, simulate_calibrated
        from trainfabric.fabric.engine import simulate

        router = _router(topo, mode, seed)
        if sc.calibration:
            return simulate_calibrated(topo, flows, router, FITTED, events=events, link_up=link_up)
        return simulate(topo, flows, router, events=events, link_up=link_up)
    from trainfabric.fabric.packet import simulate_packets

    try:
        return simulate_packets(
            topo, flows, mode, config=sc.packet, events=events, link_up=link_up, seed=seed
        )
    except ConfigError as exc:
        if exc.field != "flows.bytes":
            raise ConfigError(f"packet.{exc.field}", exc.message) from None
        raise ConfigError(field, exc.message) from None


@dataclass(frozen=True)
class _Run:
    """A collective on the scenario's engine: ``time_s`` from release to the last byte,
    steps simulated, flows, events, wall time, and the packet engine's figures."""

    time_s: float
    n_steps: int
    steps_simulated: int
    n_flows: int
    n_events: int
    wall_s: float
    packet: dict

    @property
    def shortcut(self) -> bool:
        return self.steps_simulated < self.n_steps


def _run_collective(sc, topo, mode, steps, hosts, c, seed, field, link_up=None) -> _Run:
    """``steps`` of collective ``c`` on ``hosts``: the flow engine with the ring shortcut
    (:func:`~trainfabric.fabric.collectives.run_collective`), or every step on the packet
    engine."""
    from trainfabric.fabric.collectives import collective_flows, run_collective

    if sc.engine == "flow" and sc.calibration:
        return _calibrated_collective(sc, topo, mode, steps, hosts, c, seed, link_up)
    if sc.engine == "flow":
        router = _router(topo, mode, seed)
        run = run_collective(topo, router, steps, hosts, link_up=link_up, **_flow_options(c, seed))
        return _Run(
            run.time_s, run.n_steps, run.steps_simulated, run.n_flows, run.n_events, run.wall_s, {}
        )
    cf = collective_flows(steps, hosts, **_flow_options(c, seed))
    res = _simulate(sc, topo, cf.flows, mode, seed, field, link_up=link_up)
    if res.unfinished:
        raise InfeasibleError(f"{res.unfinished} flows of the collective never finished")
    n = len(steps)
    return _Run(res.makespan_s, n, n, cf.flows.n, res.n_events, res.wall_s, _packet_metrics(res))


def _calibrated_collective(sc, topo, mode, steps, hosts, c, seed, link_up) -> _Run:
    """The flow engine with the calibration (:mod:`trainfabric.fabric.calibration`), with the
    ring shortcut where it applies (every step then pays the same start-up)."""
    from trainfabric.fabric.calibration import FITTED, simulate_calibrated
    from trainfabric.fabric.collectives import collective_flows, identical_steps, shortcut_applies

    use = (
        shortcut_applies(c.sync, mode, c.connections) and len(steps) > 1 and identical_steps(steps)
    )
    cf = collective_flows(steps[:1] if use else steps, hosts, **_flow_options(c, seed))
    router = _router(topo, mode, seed)
    res = simulate_calibrated(topo, cf.flows, router, FITTED, link_up=link_up)
    if res.unfinished:
        raise InfeasibleError(f"{res.unfinished} flows of the collective never finished")
    n = len(steps)
    steps_run = 1 if use else n
    time_s = res.makespan_s * (n if use else 1)
    return _Run(time_s, n, steps_run, cf.flows.n, res.n_events, res.wall_s, {})


# -- (a) line rate --------------------------------------------------------------------------------
def run_line_rate(sc: LineRateScenario, seed: int | None = None) -> pd.DataFrame:
    """One row per collective x size x mode: time, busbw, fraction of line rate."""
    from trainfabric.fabric.collectives import bus_factor, ideal_time_s

    seed = sc.seed if seed is None else seed
    topo = build_topology(sc.topology)
    rows = []
    for i, c in enumerate(sc.collectives):
        hosts = _hosts(topo, c, seed + i, field=f"collectives.{i}")
        n = hosts.size
        field = _size_field(c, f"collectives.{i}")
        _check_flows(field, topo, sc.modes, [_collective_part(c, n)])
        for size in sc.sizes_bytes:
            steps = _steps(c, n, size, seed + i, field=f"collectives.{i}")
            for mode in sc.modes:
                run = _run_collective(
                    sc, topo, mode, steps, hosts, c, seed, f"collectives.{i}.ranks"
                )
                busbw_bps = 8 * size / run.time_s * bus_factor(c.kind, n)
                rows.append(
                    {
                        "collective": _kind_label(c),
                        "placement": c.placement,
                        "ranks": n,
                        "size_bytes": float(size),
                        "mode": mode,
                        "time_s": run.time_s,
                        "ideal_time_s": ideal_time_s(c.kind, n, size, topo.nic_rate_bps),
                        "busbw_gbps": busbw_bps / 1e9,
                        "line_rate_fraction": busbw_bps / topo.nic_rate_bps,
                        "header_bound": HEADER_BOUND,
                        "n_steps": run.n_steps,
                        "steps_simulated": run.steps_simulated,
                        "ring_shortcut": run.shortcut,
                        "n_flows": run.n_flows,
                        "n_events": run.n_events,
                        "sim_wall_s": run.wall_s,
                        "engine": sc.engine,
                        "connections": c.connections,
                        **run.packet,
                    }
                )
    return pd.DataFrame(rows)


def line_rate_summary(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per mode, at the largest size: the lowest line-rate fraction over the collectives
    and, from the packet engine, the highest p99 latency and jitter (us)."""
    big = table[table["size_bytes"] == table["size_bytes"].max()].groupby("mode", sort=False)
    out = {m: {"line_rate_fraction": float(v)} for m, v in big["line_rate_fraction"].min().items()}
    for key in ("p99_latency_us", "jitter_us"):
        if key in table.columns:
            for mode, v in big[key].max().items():
                out[mode][key] = float(v)
    return out


# -- (b) isolation ---------------------------------------------------------------------------------
def run_isolation(sc: IsolationScenario, seed: int | None = None) -> pd.DataFrame:
    """One row per oversubscription x failed fraction x mode: victim solo / shared times."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.collectives import collective_flows
    from trainfabric.fabric.flows import FlowTable

    seed = sc.seed if seed is None else seed
    rows = []
    for over in sc.oversubscription:
        topo = build_topology(sc.topology, oversubscription=over)
        n_v = sc.victim.ranks or max(2, int(round(sc.victim_fraction * topo.n_hosts)))
        if n_v > topo.n_hosts - 2:
            raise ConfigError(
                "victim.ranks", f"leaves < 2 of {topo.n_hosts} hosts to the aggressor"
            )
        v_hosts = _hosts(topo, sc.victim.model_copy(update={"ranks": n_v}), seed, field="victim")
        rest = np.setdiff1d(np.arange(topo.n_hosts), v_hosts)
        a_hosts = _hosts(topo, sc.aggressor, seed + 1, available=rest, field="aggressor")
        parts = [_collective_part(sc.victim, v_hosts.size)]
        parts.append(_collective_part(sc.aggressor, a_hosts.size))
        _check_flows(_size_field(sc.aggressor, "aggressor"), topo, sc.modes, parts)
        victim = collective_flows(
            _steps(sc.victim, v_hosts.size, sc.victim.size_bytes, seed, "victim"),
            v_hosts,
            **_flow_options(sc.victim, seed, job=0),
        ).flows
        aggressor = collective_flows(
            _steps(sc.aggressor, a_hosts.size, sc.aggressor.size_bytes, seed + 1, "aggressor"),
            a_hosts,
            **_flow_options(sc.aggressor, seed, job=1),
        ).flows
        both = FlowTable.concat([victim, aggressor])
        is_v = both.job == 0
        for frac, mode in ((f, m) for f in sc.failed_fractions for m in sc.modes):
            up = T.fail_links(topo, frac, seed=seed)
            solo = _simulate(sc, topo, victim, mode, seed, "victim.size_bytes", link_up=up)
            shared = _simulate(sc, topo, both, mode, seed, "aggressor.size_bytes", link_up=up)
            solo_s = solo.makespan_s
            shared_s = float(np.nanmax(shared.finish_s[is_v]))
            aggr_s = float(np.nanmax(shared.finish_s[~is_v]))
            rows.append(
                {
                    "oversubscription": float(over),
                    "failed_fraction": float(frac),
                    "mode": mode,
                    "victim": _kind_label(sc.victim),
                    "aggressor": _kind_label(sc.aggressor),
                    "victim_ranks": int(v_hosts.size),
                    "aggressor_ranks": int(a_hosts.size),
                    "victim_solo_s": solo_s,
                    "victim_shared_s": shared_s,
                    "aggressor_s": aggr_s,
                    "isolation_ratio": solo_s / shared_s,
                    "victim_slowdown": shared_s / solo_s - 1,
                    "aggressor_covers_victim": aggr_s >= shared_s,
                    "n_events": int(shared.n_events),
                    "sim_wall_s": float(solo.wall_s + shared.wall_s),
                    "engine": sc.engine,
                    **_packet_metrics(shared),
                }
            )
    return pd.DataFrame(rows)


def isolation_summary(table: pd.DataFrame) -> dict[str, float]:
    """Per mode: the isolation ratio at the lowest oversubscription, without failures."""
    low = table[table["oversubscription"] == table["oversubscription"].min()]
    low = low[low["failed_fraction"] == low["failed_fraction"].min()]
    return low.groupby("mode", sort=False)["isolation_ratio"].min().to_dict()


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
    from trainfabric.fabric.topology import bisection_bps

    return bisection_bps(topo, link_up) / (topo.n_hosts // 2 * topo.nic_rate_bps)


def permutation_flows(src, dst, channels: int, nbytes: float = 1e6):
    """``channels`` parallel flows (distinct entropies) per host pair ``src -> dst``."""
    from trainfabric.fabric.flows import FlowTable, mix64

    src, dst = np.repeat(src, channels), np.repeat(dst, channels)
    qp = np.tile(np.arange(channels), src.size // channels)
    return FlowTable.simple(src, dst, nbytes, entropy=mix64(src, dst, qp, seed=11), channel=qp)


def permutation_throughput(topo, router, flows, link_up) -> float:
    """Max-min goodput of all ``flows`` at once / (hosts sending x NIC rate)."""
    from trainfabric.fabric.engine import static_goodput

    senders = np.unique(flows.src).size
    return float(static_goodput(topo, flows, router, link_up).sum() / (senders * topo.nic_rate_bps))


def _routed_figures(topo, router, flows, load: float, link_up) -> dict[str, float]:
    """One routing of the permutation ``flows`` (every mechanism knows ``link_up``): its
    max-min goodput (:func:`permutation_throughput`'s figure) and the estimated packet
    latency (M/M/1, :mod:`trainfabric.fabric.latency`) when each host offers ``load`` x
    its NIC rate. One epoch for both (the adaptive mode solves its split LP once)."""
    from trainfabric.fabric.latency import routed_latency_s
    from trainfabric.fabric.maxmin import max_min_rates
    from trainfabric.fabric.routing import MECHANISMS

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
    from trainfabric.fabric.mcf import check_lp_size

    field = _size_field(sc.collective, "collective")
    _check_flows(field, topo, sc.modes, [_collective_part(sc.collective, ranks)])
    perm = ("permutation", topo.n_hosts, "ring", "rank", sc.channels, 1, "persistent")
    _check_flows("topology.gpus", topo, sc.modes, [perm])
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
        router = _router(topo, mode, seed)
        return {
            **_routed_figures(topo, router, flows, sc.offered_load, link_up),
            "cut_permutation_goodput": permutation_throughput(topo, router, cut, link_up),
        }
    wire = sc.packet.wire_bytes / sc.packet.mtu_bytes
    out = {}
    for key, fl in (("mean_permutation_goodput", flows), ("cut_permutation_goodput", cut)):
        fl = replace(fl, bytes=np.full(fl.n, PACKET_PERMUTATION_BYTES))
        res = _simulate(sc, topo, fl, mode, seed, "topology.gpus", link_up=link_up)
        out[key] = measured_goodput(res, fl, topo, wire) if not res.unfinished else 0.0
        if key == "mean_permutation_goodput":
            m = _packet_metrics(res)
            out |= {"latency_p50_us": m["p50_latency_us"], "latency_p99_us": m["p99_latency_us"]}
            out |= {"jitter_us": m["jitter_us"], "retransmit_fraction": m["retransmit_fraction"]}
    return out


def run_failures(sc: FailuresScenario, seed: int | None = None) -> pd.DataFrame:
    """One row per failed fraction x draw x mode (columns: module doc)."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.mcf import max_concurrent_flow

    seed = sc.seed if seed is None else seed
    topo = build_topology(sc.topology)
    c = sc.collective
    hosts = _hosts(topo, c, seed)
    _check_failures_size(sc, topo, hosts.size)
    steps = _steps(c, hosts.size, c.size_bytes, seed)
    field = _size_field(c, "collective")
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
                run = _run_collective(sc, topo, mode, steps, hosts, c, seed, field, link_up)
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
                        "collective": _kind_label(c),
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


# -- (d) flaps -------------------------------------------------------------------------------------
def _iteration_steps(sc: FlapsScenario, n: int, seed: int):
    """The collective's steps repeated ``iterations`` times; per-step delays (compute first)."""
    one = _steps(sc.collective, n, sc.collective.size_bytes, seed)
    delay = np.full(len(one), sc.collective.step_latency_s)
    delay[0] += sc.compute_s
    return one * sc.iterations, np.tile(delay, sc.iterations), len(one)


def _flap_links(topo, link: str, host: int, flows, seed: int) -> np.ndarray:
    """Both directions of the flapped cable: ``host``'s NIC link on plane 0, or the fabric
    cable carrying the most of the job's bytes under ECMP (the same cable for every mode)."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.maxmin import link_load

    if link == "host":
        return np.array([topo.host_up[0, host], topo.host_down[0, host]])
    router = _router(topo, "ecmp", seed)
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
    (:meth:`~trainfabric.fabric.engine.SimResult.stalls`): bins of the run's recorded
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
    from trainfabric.fabric.routing import Reaction, Router

    if sc.engine == "flow":
        return _router(topo, mode, seed)
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
    from trainfabric.fabric.collectives import collective_flows
    from trainfabric.fabric.engine import LinkEvents

    seed = sc.seed if seed is None else seed
    topo = build_topology(sc.topology)
    hosts = _hosts(topo, sc.collective, seed)
    part = _collective_part(sc.collective, hosts.size, sc.iterations, sync="rank")  # no shortcut
    field = _size_field(sc.collective, "collective")
    _check_flows(field, topo, sc.modes, [part])
    steps, delay, per_iter = _iteration_steps(sc, hosts.size, seed)
    opts = _flow_options(sc.collective, seed) | {"step_latency_s": delay}
    cf = collective_flows(steps, hosts, **opts)
    iteration = cf.step // per_iter
    rows = []
    for mode in sc.modes:
        base = _simulate(sc, topo, cf.flows, mode, seed, field)
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
            res = _simulate(sc, topo, cf.flows, mode, seed, field, events=events)
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


# -- running scenarios into run directories -------------------------------------------------------
STEMS = {
    "line_rate": "fabric_line_rate",
    "isolation": "fabric_isolation",
    "failures": "fabric_failures",
    "flaps": "fabric_flaps",
    "iteration": "fabric_iteration",
}
TIMELINE_STEM = "fabric_flap_timeline"


def _keyed(summary, key: str):
    """A per-mode summary ``{mode: value}`` as ``{mode: {key: value}}``."""

    def keyed(table: pd.DataFrame) -> dict[str, dict[str, float]]:
        return {mode: {key: float(v)} for mode, v in summary(table).items()}

    return keyed


def _iteration_tables(sc: IterationScenario) -> dict[str, pd.DataFrame]:
    from trainfabric.fabric.iteration_scenario import scenario_tables

    return scenario_tables(sc)


def _iteration_summary(tables: dict[str, pd.DataFrame]) -> dict[str, dict[str, float]]:
    from trainfabric.fabric.iteration_scenario import scenario_summary

    return scenario_summary(tables)


RUNNERS = {
    "iteration": (_iteration_tables, _iteration_summary),
    "line_rate": (run_line_rate, line_rate_summary),
    "isolation": (run_isolation, _keyed(isolation_summary, "isolation_ratio")),
    "failures": (run_failures, failures_summary),
    "flaps": (run_flaps, _keyed(flaps_summary, "flap_recovery_s")),
}
FAILURE_KEYS = tuple(f"{k}_at_10pct_failures" for k in FAILURE_FIGURES)
HEADLINE = ("line_rate_fraction", "isolation_ratio", *FAILURE_KEYS, "flap_recovery_s")


def run_scenario(sc: Scenario) -> dict[str, pd.DataFrame]:
    """The scenario's tables, keyed by file stem (flaps add the goodput timeline)."""
    run, _ = RUNNERS[sc.kind]
    if sc.kind == "iteration":  # several tables (fabric.iteration.STEMS)
        return run(sc)
    if sc.kind != "flaps":
        return {STEMS[sc.kind]: run(sc)}
    timeline: list = []
    table = run(sc, timeline=timeline)
    return {STEMS["flaps"]: table, TIMELINE_STEM: pd.DataFrame(timeline)}


def summarize(kind: str, tables: dict[str, pd.DataFrame]) -> dict[str, dict[str, float]]:
    """``{mode: {headline metric: value}}`` of one scenario's tables."""
    _, summary = RUNNERS[kind]
    return summary(tables if kind == "iteration" else tables[STEMS[kind]])


def _write_tables(run_dir: Path, tables: dict[str, pd.DataFrame]) -> None:
    from trainfabric.io import write_parquet

    for stem, table in tables.items():
        write_parquet(run_dir / f"{stem}.parquet", table)


def _write_manifest(
    run_dir: Path, name: str, config: dict, started: str, seed: int, engine: str = "flow"
) -> None:
    description = f"trainfabric fabric scenarios ({engine}-level engine)"
    write_run_manifest(run_dir, name, description, config, [seed], started)


def _render(run_dir: Path) -> Path:
    from trainfabric.runs import render_report  # figures: experiments.fabric_studies

    return render_report(run_dir)


def run_to_dir(sc: Scenario, run_dir: str | Path, console=None) -> dict:
    """Run one scenario, write its tables, manifest and report; per-mode headline figures."""
    run_dir = Path(run_dir)
    started, t0 = now(), time.perf_counter()
    if console is not None:
        console.print(f"scenario {sc.name or sc.kind} ({sc.kind}), modes {', '.join(sc.modes)}")
    tables = run_scenario(sc)
    _write_tables(run_dir, tables)
    config = sc.model_dump(mode="json")
    _write_manifest(run_dir, f"fabric-{sc.kind}", config, started, sc.seed, sc.engine)
    result = {
        "scenario": sc.name or sc.kind,
        "kind": sc.kind,
        "engine": sc.engine,
        "run_dir": str(run_dir),
        "modes": summarize(sc.kind, tables),
        "rows": tables[STEMS[sc.kind]].to_dict(orient="records"),
        "wall_s": time.perf_counter() - t0,
    }
    write_json(run_dir / "summary.json", result)  # the report's headline
    return result | {"report": str(_render(run_dir))}


# -- topologies side by side ---------------------------------------------------------------------
def topology_comparison(cfg: TopologyConfig, gpus: list[int]) -> pd.DataFrame:
    """The multiplane fabric of ``cfg`` beside the hierarchical builds of the same switch ASIC
    (radix ``R·P`` per plane becomes ``R`` ports at the full NIC rate): a single 2-tier plane
    and the 3-tier fat-tree, at each GPU count; a build that does not fit gets ``fits=False``."""
    from trainfabric.fabric import topology as T

    nic = cfg.nic_rate_gbps * 1e9
    flat_radix = max(2, cfg.switch_radix // cfg.planes)
    builds = {
        "multiplane": lambda n: T.multiplane(n, cfg.planes, cfg.switch_radix, nic),
        "leaf_spine": lambda n: T.leaf_spine(n, flat_radix, nic),
        "fat_tree": lambda n: T.fat_tree(n, flat_radix, nic),
    }
    rows = []
    for n in gpus:
        for kind, build in builds.items():
            try:
                rows.append({"gpus": n, "build": kind, "fits": True, **build(n).summary()})
            except ConfigError as exc:
                rows.append({"gpus": n, "build": kind, "fits": False, "note": exc.message})
    return pd.DataFrame(rows)


# -- the evaluation and the demo -------------------------------------------------------------------
def eval_scenarios(quick: bool, seed: int = 0, engine: str = "flow") -> list[Scenario]:
    """The four scenarios of ``fabric eval`` on ``engine``: 64 GPUs (quick) or 512 GPUs, 4
    planes, 800G NICs (the packet engine's sizes: :func:`packet_eval_scenarios`).

    Quick: radix 16 per plane (8 leaves x 4 spines per plane, 2 parallel cables per
    leaf-spine pair); full: radix 32 (32 leaves x 16 spines per plane), as htsim's 512-host
    reference fabric but multiplane. The collectives of the full evaluation run on groups
    placed at random (isolation: interleaved) over the whole fabric, so their flows cross
    every spine; the permutations and failure draws use every host.

    Full sizes (chosen to finish in about 3 minutes on 2 cores; they took about 10 minutes
    before, almost all of it in the isolation and flap runs): line rate on 64-rank groups, 8
    sizes from 256 KiB to 4 GiB; isolation on a 32-rank victim all-reduce next to a 32-rank
    aggressor all-to-all (were 64 + 64: the aggressor's 16k concurrent flows made every
    victim step a 16k-flow max-min solve). The aggressor sends 1 GiB per rank: the ECMP
    and flowlet victims outlast it (``aggressor_covers_victim`` False); 2 GiB covers them
    but costs 40 s more (every victim step then re-solves the aggressor's flows) and leaves
    their ratio at 1 (their bottlenecks are their own collisions). Failures: 2 draws per
    fraction (were 5; a draw costs about 5 concurrent-flow LPs over 512 hosts: the figure
    itself and the adaptive mode's split for the collective and for both permutations) and
    a 32-rank all-to-all (was 64). Flaps: a 16-rank all-reduce (was 64), 8 iterations of
    0.25 s of compute (were 20 of 0.1 s), so that the 1.5 s flaps still cover several
    iterations and outlast the routing reaction (1 s).
    """
    if engine == "packet":
        return packet_eval_scenarios(quick, seed)
    if engine != "flow":
        raise ConfigError("engine", f"must be flow or packet, got {engine!r}")
    topo = TopologyConfig(gpus=64 if quick else 512, switch_radix=16 if quick else 32)
    common = dict(seed=seed, topology=topo)
    sizes = [1.0 * MiB, 16.0 * MiB, 256.0 * MiB, 4096.0 * MiB]
    if not quick:
        sizes = [2.0**k * MiB for k in range(-2, 13, 2)]
    group = dict(ranks=None if quick else 64)
    small = dict(ranks=None if quick else 32)
    flaps = {} if quick else dict(iterations=8, compute_s=0.25)
    return [
        LineRateScenario(
            name="line-rate",
            sizes_bytes=sizes,
            collectives=[
                CollectiveConfig(kind="all_reduce", sync="step", **group),
                CollectiveConfig(kind="all_to_all", **group),
            ],
            **common,
        ),
        IsolationScenario(
            name="isolation",
            victim=CollectiveConfig(kind="all_reduce", placement="scattered", **small),
            aggressor=CollectiveConfig(
                kind="all_to_all", placement="scattered", size_bytes=1024 * MiB, **small
            ),
            **common,
        ),
        FailuresScenario(
            name="failures",
            draws=2,
            collective=CollectiveConfig(kind="all_to_all", size_bytes=64 * MiB, **small),
            **common,
        ),
        FlapsScenario(
            name="flaps",
            collective=CollectiveConfig(kind="all_reduce", ranks=16),
            **flaps,
            **common,
        ),
    ]


def packet_eval_scenarios(quick: bool, seed: int = 0) -> list[Scenario]:
    """The four scenarios on the packet engine (``engine = "packet"``, default
    :class:`~trainfabric.fabric.packet.PacketConfig`: trimming switches, NDP-like transport).

    It simulates every packet (about 10 events each), so the sizes are those it runs in
    seconds: 32 GPUs (quick; radix 16: 4 leaves x 2 spines per plane, 4 parallel cables per
    pair) or 64 GPUs (full; 8 leaves x 4 spines per plane), 4 planes, 800G NICs. Line rate:
    a ring all-reduce (global barrier per step) and an all-to-all over 8 random ranks,
    per-rank buffers of 1 and 16 MiB (quick; full adds 64 MiB): with more ranks the ring's
    per-step latency (about 7 us) dominates the buffers the engine can afford. Isolation:
    a victim all-reduce of 4 MiB on 8 ranks next to an aggressor all-to-all of 16 MiB on 8
    others, interleaved on every leaf (quick: no oversubscription). Failures: 0, 10 and 20%
    of the cables down, one draw (quick) or two; permutations of 512 KiB per connection
    (:data:`PACKET_PERMUTATION_BYTES`, goodput measured while every flow is active:
    :func:`measured_goodput`) and a 1 MiB all-to-all over every host.
    Flaps: an 8-rank all-reduce of 4 MiB, 6 iterations of 20 ms of compute, a host and a
    fabric link down for 50 ms each (the flap, its detection and the recovery of the lost
    packets are the engine's: keep-alive-free, by missing acknowledgements and each
    mechanism's reaction time).
    """
    topo = TopologyConfig(gpus=32 if quick else 64, switch_radix=16)
    common = dict(seed=seed, topology=topo, engine="packet")
    sizes = [1.0 * MiB, 16.0 * MiB] if quick else [1.0 * MiB, 16.0 * MiB, 64.0 * MiB]
    return [
        LineRateScenario(
            name="line-rate",
            sizes_bytes=sizes,
            collectives=[
                CollectiveConfig(kind="all_reduce", sync="step", ranks=8),
                CollectiveConfig(kind="all_to_all", ranks=8),
            ],
            **common,
        ),
        IsolationScenario(
            name="isolation",
            victim=CollectiveConfig(
                kind="all_reduce", placement="scattered", ranks=8, size_bytes=4 * MiB
            ),
            aggressor=CollectiveConfig(
                kind="all_to_all", placement="scattered", ranks=8, size_bytes=16 * MiB
            ),
            oversubscription=[1.0] if quick else [1.0, 2.0],
            **common,
        ),
        FailuresScenario(
            name="failures",
            fractions=[0.0, 0.1, 0.2],
            draws=1 if quick else 2,
            collective=CollectiveConfig(kind="all_to_all", size_bytes=1 * MiB),
            **common,
        ),
        FlapsScenario(
            name="flaps",
            collective=CollectiveConfig(kind="all_reduce", ranks=8, size_bytes=4 * MiB),
            iterations=6,
            compute_s=0.02,
            flaps=[
                FlapConfig(link="host", duration_s=0.05),
                FlapConfig(link="fabric", duration_s=0.05),
            ],
            **common,
        ),
    ]


def eval_name(quick: bool, engine: str = "flow") -> str:
    """The run name of ``fabric eval``: ``fabric-eval[-packet][-quick]``."""
    return "fabric-eval" + ("-packet" if engine == "packet" else "") + ("-quick" if quick else "")


def run_eval(
    run_dir: str | Path,
    quick: bool = False,
    seed: int = 0,
    console=None,
    progress=None,
    engine: str = "flow",
    calibrated: bool = False,
) -> dict:
    """All four scenarios on ``engine`` into one run directory with a report; headline
    figures per mode.

    ``progress``: a rich Progress advanced once per scenario (:func:`trainfabric.progress.track`).
    """
    run_dir = Path(run_dir)
    started, t0 = now(), time.perf_counter()
    scenarios = eval_scenarios(quick, seed, engine)
    if calibrated:
        scenarios = [sc.model_copy(update={"calibration": True}) for sc in scenarios]
    modes: dict[str, dict[str, float]] = {}
    walls = {}
    for sc in track(scenarios, "scenarios", progress):
        t = time.perf_counter()
        if console is not None:
            console.print(f"fabric eval ({engine} engine): {sc.kind} ...")
        tables = run_scenario(sc)
        _write_tables(run_dir, tables)
        for mode, row in summarize(sc.kind, tables).items():
            modes.setdefault(mode, {}).update(row)
        walls[sc.kind] = time.perf_counter() - t
    topo = scenarios[0].topology
    production = TopologyConfig(gpus=32768, switch_radix=256)  # 256 x 200G per plane, 4 planes
    builds = [
        topology_comparison(topo, [topo.gpus]),
        topology_comparison(production, [8192, 32768]),
    ]
    _write_tables(run_dir, {"fabric_topologies": pd.concat(builds, ignore_index=True)})
    config = {sc.kind: sc.model_dump(mode="json") for sc in scenarios}
    _write_manifest(run_dir, eval_name(quick, engine), config, started, seed, engine)
    result = {
        "run_dir": str(run_dir),
        "quick": quick,
        "engine": engine,
        "calibrated": calibrated,
        "modes": modes,
        "f3": f3_check(modes),
        "header_bound": HEADER_BOUND,
        "wall_s": time.perf_counter() - t0,
        "scenario_wall_s": walls,
    }
    write_json(run_dir / "summary.json", result)  # the report's headline
    return result | {"report": str(_render(run_dir))}


def f3_check(modes: dict[str, dict[str, float]]) -> dict:
    """F3 restated: adaptive's cut-permutation goodput over the max-flow bisection at 10%
    failures against :data:`MAXFLOW_TARGET` (empty without an adaptive failures row)."""
    key = "goodput_over_maxflow_at_10pct_failures"
    ratio = modes.get("adaptive", {}).get(key)
    if ratio is None:
        return {}
    return {
        "adaptive_over_maxflow": ratio,
        "target": MAXFLOW_TARGET,
        "met": ratio >= MAXFLOW_TARGET,
    }


def demo_scenarios(seed: int = 0) -> list[Scenario]:
    """Short versions of the four scenarios (32 GPUs, radix 16, 4 planes) for ``make demo``."""
    topo = TopologyConfig(gpus=32, switch_radix=16)
    common = dict(seed=seed, topology=topo, modes=["ecmp", "pinning", "spray", "adaptive"])
    return [
        LineRateScenario(name="line-rate", sizes_bytes=[1.0 * MiB, 256.0 * MiB], **common),
        IsolationScenario(name="isolation", oversubscription=[1.0], **common),
        FailuresScenario(
            name="failures",
            fractions=[0.0, 0.1, 0.2],
            draws=1,
            collective=CollectiveConfig(kind="all_to_all", size_bytes=64 * MiB),
            **common,
        ),
        FlapsScenario(
            name="flaps",
            collective=CollectiveConfig(kind="all_reduce", ranks=8),
            iterations=12,
            compute_s=0.15,
            **common,
        ),
    ]


def fabric_demo(run_dir: str | Path, console) -> dict:
    """Demo step: the short scenarios' tables into ``run_dir`` (no manifest, no report), a
    per-mode table on ``console``; returns ``{"modes": {mode: headline figures}}``."""
    from rich.table import Table

    run_dir = Path(run_dir)
    modes: dict[str, dict[str, float]] = {}
    for sc in demo_scenarios():
        tables = run_scenario(sc)
        _write_tables(run_dir, tables)
        for mode, row in summarize(sc.kind, tables).items():
            modes.setdefault(mode, {}).update(row)
    keys = HEADLINE
    heads = (
        "busbw/line rate",
        "isolation",
        "perm. goodput @10% failed",
        "max-flow bisection @10%",
        "goodput/max-flow @10%",
        "flap stall (s)",
    )
    t = Table("mode", *heads, title="fabric: 32 GPUs, 4 planes x 200G, radix 16 (flow level)")
    for mode, row in modes.items():
        t.add_row(mode, *(f"{row.get(k, float('nan')):.4g}" for k in keys))
    console.print(t)
    return {"modes": modes}
