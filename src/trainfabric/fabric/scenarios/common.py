"""Building blocks of the evaluation scenarios: routers, placements, collective steps, size
guards, and one collective run on either engine (flow, calibrated flow, packet).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.fabric.flow.calibration import FITTED, simulate_calibrated
from trainfabric.fabric.flow.collectives import (
    collective_flows,
    collective_memory_bytes,
    collective_steps,
    identical_steps,
    place,
    run_collective,
    shortcut_applies,
)
from trainfabric.fabric.flow.engine import simulate
from trainfabric.fabric.packet import simulate_packets
from trainfabric.fabric.routing import Router
from trainfabric.fabric.scenarios.config import CollectiveConfig
from trainfabric.limits import check_memory

# -- building blocks -------------------------------------------------------------------------------
HEADER_BOUND = 4096 / 4160  # payload share of the wire with 64 B headers per 4096 B MTU


def scenario_router(topo, mode: str, seed: int):

    return Router(topo, mode, seed=seed)


def place_ranks(topo, c: CollectiveConfig, seed: int, available=None, field: str = "collective"):

    pool = topo.n_hosts if available is None else len(available)
    n = c.ranks or pool
    if n > pool:
        raise ConfigError(f"{field}.ranks", f"{n} ranks but only {pool} hosts available")
    return place(topo.host_leaf[0], n, c.placement, seed, available)


def steps_for(c: CollectiveConfig, n: int, size_bytes: float, seed: int, field: str = "collective"):

    try:
        return collective_steps(c.kind, n, size_bytes, c.algorithm, seed)
    except ConfigError as exc:
        raise ConfigError(f"{field}.{exc.field}", exc.message) from None


def size_field(c: CollectiveConfig, prefix: str) -> str:
    """The input that sets a collective's size: its ``ranks`` when given, else the hosts."""
    return f"{prefix}.ranks" if c.ranks else "topology.gpus"


def check_flows(field: str, topo, modes, parts: list[tuple]) -> None:
    """Refuse (ConfigError naming ``field``) flows over the memory limit. ``parts``: tuples
    ``(kind, ranks, algorithm, sync, channels, repeats, connections)`` simulated together."""

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


def collective_part(c: CollectiveConfig, n: int, repeats: int = 1, sync: str | None = None):
    return (c.kind, n, c.algorithm, sync or c.sync, c.channels, repeats, c.connections)


def flow_options(c: CollectiveConfig, seed: int, job: int = 0) -> dict:
    return dict(
        job=job,
        step_latency_s=c.step_latency_s,
        sync=c.sync,
        channels=c.channels,
        connections=c.connections,
        seed=seed,
    )


def kind_label(c: CollectiveConfig) -> str:
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


def packet_metrics(res) -> dict:
    """The packet engine's per-run figures (:data:`PACKET_KEYS` of its summary); ``{}`` for
    a flow-engine result."""
    if not hasattr(res, "summary"):
        return {}
    summary = res.summary()
    return {k: summary[k] for k in PACKET_KEYS}


def simulate_flows(sc, topo, flows, mode: str, seed: int, field: str, *, link_up=None, events=None):
    """``flows`` on the scenario's engine (``sc.engine``); both results have ``start_s``,
    ``finish_s``, ``makespan_s``, ``unfinished``, ``n_events`` and ``wall_s``. The packet
    engine's size refusal (``flows.bytes``) is re-labelled ``field`` (the scenario input
    that sets the bytes)."""
    if sc.engine == "flow":
        router = scenario_router(topo, mode, seed)
        if sc.calibration:
            return simulate_calibrated(topo, flows, router, FITTED, events=events, link_up=link_up)
        return simulate(topo, flows, router, events=events, link_up=link_up)

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


def run_steps(sc, topo, mode, steps, hosts, c, seed, field, link_up=None) -> _Run:
    """``steps`` of collective ``c`` on ``hosts``: the flow engine with the ring shortcut
    (:func:`~trainfabric.fabric.flow.collectives.run_collective`), or every step on the packet
    engine."""

    if sc.engine == "flow" and sc.calibration:
        return calibrated_steps(sc, topo, mode, steps, hosts, c, seed, link_up)
    if sc.engine == "flow":
        router = scenario_router(topo, mode, seed)
        run = run_collective(topo, router, steps, hosts, link_up=link_up, **flow_options(c, seed))
        return _Run(
            run.time_s, run.n_steps, run.steps_simulated, run.n_flows, run.n_events, run.wall_s, {}
        )
    cf = collective_flows(steps, hosts, **flow_options(c, seed))
    res = simulate_flows(sc, topo, cf.flows, mode, seed, field, link_up=link_up)
    if res.unfinished:
        raise InfeasibleError(f"{res.unfinished} flows of the collective never finished")
    n = len(steps)
    return _Run(res.makespan_s, n, n, cf.flows.n, res.n_events, res.wall_s, packet_metrics(res))


def calibrated_steps(sc, topo, mode, steps, hosts, c, seed, link_up) -> _Run:
    """The flow engine with the calibration (:mod:`trainfabric.fabric.flow.calibration`), with the
    ring shortcut where it applies (every step then pays the same start-up)."""

    use = (
        shortcut_applies(c.sync, mode, c.connections) and len(steps) > 1 and identical_steps(steps)
    )
    cf = collective_flows(steps[:1] if use else steps, hosts, **flow_options(c, seed))
    router = scenario_router(topo, mode, seed)
    res = simulate_calibrated(topo, cf.flows, router, FITTED, link_up=link_up)
    if res.unfinished:
        raise InfeasibleError(f"{res.unfinished} flows of the collective never finished")
    n = len(steps)
    steps_run = 1 if use else n
    time_s = res.makespan_s * (n if use else 1)
    return _Run(time_s, n, steps_run, cf.flows.n, res.n_events, res.wall_s, {})
