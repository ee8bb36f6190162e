"""Building blocks of the evaluation scenarios: routers, placements, collective steps, size
guards, and one collective run on either engine (flow, calibrated flow, packet).
"""

from __future__ import annotations

from trainfabric.errors import ConfigError
from trainfabric.fabric.flow.calibration import FITTED, simulate_calibrated
from trainfabric.fabric.flow.collectives import (
    CollectiveRun,
    collective_flows,
    collective_memory_bytes,
    collective_steps,
    place,
    run_collective,
)
from trainfabric.fabric.flow.engine import simulate
from trainfabric.fabric.packet import simulate_packets
from trainfabric.fabric.routing import Router
from trainfabric.fabric.scenarios.config import CollectiveConfig
from trainfabric.limits import check_memory

# -- building blocks -------------------------------------------------------------------------------
HEADER_BOUND = 4096 / 4160  # payload share of the wire with 64 B headers per 4096 B MTU


def scenario_router(topo, mode: str, seed: int):
    """The load-balancing ``mode``'s router on ``topo`` (its hashes seeded by ``seed``)."""
    return Router(topo, mode, seed=seed)


def place_ranks(topo, c: CollectiveConfig, seed: int, available=None, field: str = "collective"):
    """Hosts of ``c``'s ranks (all ``available`` hosts when ``ranks`` is not given), placed by
    ``c.placement``; ConfigError naming ``<field>.ranks`` when there are too few."""
    pool = topo.n_hosts if available is None else len(available)
    n = c.ranks or pool
    if n > pool:
        raise ConfigError(f"{field}.ranks", f"{n} ranks but only {pool} hosts available")
    return place(topo.host_leaf[0], n, c.placement, seed, available)


def steps_for(c: CollectiveConfig, n: int, size_bytes: float, seed: int, field: str = "collective"):
    """The steps of ``c`` over ``n`` ranks of ``size_bytes`` each; errors named ``<field>.*``."""
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
    """``c`` over ``n`` ranks, ``repeats`` times, as a part of :func:`check_flows`."""
    return (c.kind, n, c.algorithm, sync or c.sync, c.channels, repeats, c.connections)


def flow_options(c: CollectiveConfig, seed: int, job: int = 0) -> dict:
    """The keyword options of ``collective_flows`` / ``run_collective`` that ``c`` sets."""
    return dict(
        job=job,
        step_latency_s=c.step_latency_s,
        sync=c.sync,
        channels=c.channels,
        connections=c.connections,
        seed=seed,
    )


def kind_label(c: CollectiveConfig) -> str:
    """``kind/algorithm`` for the collectives that have an algorithm, else ``kind``."""
    ring = c.kind in ("all_reduce", "reduce_scatter", "all_gather")
    return f"{c.kind}/{c.algorithm}" if ring else c.kind


# -- engines ---------------------------------------------------------------------------------------
def simulate_flows(sc, topo, flows, mode: str, seed: int, field: str, *, link_up=None, events=None):
    """``flows`` on the scenario's engine (``sc.engine``); every result is an
    :class:`~trainfabric.fabric.result.EngineResult` (``start_s``, ``finish_s``,
    ``makespan_s``, ``unfinished``, ``n_events``, ``wall_s``, ``packet_metrics()``). The packet
    engine's size refusal (``flows.bytes``) is re-labelled ``field`` (the scenario input that
    sets the bytes)."""
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


def run_steps(sc, topo, mode, steps, hosts, c, seed, field, link_up=None) -> CollectiveRun:
    """``steps`` of collective ``c`` on ``hosts``: the flow engine (calibrated when
    ``sc.calibration``) with the ring shortcut
    (:func:`~trainfabric.fabric.flow.collectives.run_collective`), or every step on the packet
    engine."""
    if sc.engine == "flow":
        calibration = FITTED if sc.calibration else None
        return _flow_steps(topo, mode, steps, hosts, c, seed, link_up, calibration)
    cf = collective_flows(steps, hosts, **flow_options(c, seed))
    res = simulate_flows(sc, topo, cf.flows, mode, seed, field, link_up=link_up)
    return CollectiveRun.of(res, len(steps), shortcut=False)


def _flow_steps(topo, mode, steps, hosts, c, seed, link_up, cal) -> CollectiveRun:
    """:func:`~trainfabric.fabric.flow.collectives.run_collective` of ``c``'s options under the
    scenario's router for ``mode``, calibrated by ``cal`` when given."""
    router = scenario_router(topo, mode, seed)
    opts = flow_options(c, seed)
    return run_collective(topo, router, steps, hosts, link_up=link_up, calibration=cal, **opts)
