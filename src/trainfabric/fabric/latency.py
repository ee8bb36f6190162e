"""Per-packet latency *estimate* from link utilisation (not a packet simulation).

A packet crossing link ``l`` (rate ``c_l``) pays the hop latency, its serialisation
``s_l = (MTU + headers)·8 / c_l`` and, as an M/M/1 queue at utilisation ``ρ_l``, a mean wait
``ρ_l / (1 − ρ_l) · s_l`` (infinite when ``ρ_l ≥ 1``). A flow's mean packet latency is the
sum over links of the share of its packets crossing the link times that link's delay
(``A d``, :func:`trainfabric.fabric.maxmin.path_sum`). Utilisation comes from an *offered*
background load routed by the mode (not from max-min rates, which saturate bottlenecks by
construction). Fluid models have no queues; this estimate exists for latency figures and
is labelled as such wherever it is reported — the packet-level engine is a later issue.
"""

from __future__ import annotations

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric.flows import HEADER_BYTES, MTU_BYTES, FlowTable
from trainfabric.fabric.maxmin import link_load, path_sum
from trainfabric.fabric.routing import MECHANISMS, Router
from trainfabric.fabric.topology import Topology


def mm1_delay_s(utilisation: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """M/M/1 mean waiting time ``ρ/(1−ρ)·s`` (``inf`` for ``ρ ≥ 1``)."""
    rho = np.asarray(utilisation, float)
    with np.errstate(divide="ignore"):
        return np.where(rho < 1.0, rho / np.maximum(1.0 - rho, 1e-300) * service_s, np.inf)


def packet_latency_s(
    topo: Topology,
    router: Router,
    flows: FlowTable,
    offered_bps,
    link_up: np.ndarray | None = None,
) -> np.ndarray:
    """Estimated mean packet latency (s) of every flow when each offers ``offered_bps``
    (failures in ``link_up`` known to every mechanism)."""
    up = np.ones(topo.n_links, bool) if link_up is None else np.asarray(link_up, bool)
    router.begin_epoch(up, {m: up for m in MECHANISMS}, flows, flows.bytes)
    routes = router.route(flows, np.arange(flows.n))
    return routed_latency_s(topo, router, routes, offered_bps, up)


def routed_latency_s(topo: Topology, router: Router, routes, offered_bps, link_up) -> np.ndarray:
    """:func:`packet_latency_s` of flows already routed (``routes`` of ``router``'s current
    epoch, whose view of the failures is ``link_up``): one routing shared with other
    figures of the same flows."""
    offered = np.broadcast_to(np.asarray(offered_bps, float), (routes.lost.size,))
    if np.any(offered < 0):
        raise ConfigError("offered_bps", "must be >= 0")
    up = np.asarray(link_up, bool)
    wire = (MTU_BYTES + HEADER_BYTES) / MTU_BYTES
    load = link_load(routes.group, routes.weight, router.groups, topo.n_links, offered * wire)
    service = (MTU_BYTES + HEADER_BYTES) * 8.0 / topo.capacity_bps
    rho = load / topo.capacity_bps
    delay = topo.hop_latency_s + service + mm1_delay_s(rho, service)
    delay = np.where(up, delay, 0.0)  # dead links carry no share of a routed flow
    with np.errstate(invalid="ignore"):
        latency = path_sum(routes.group, routes.weight, router.groups, delay)
    return np.where(routes.lost < 1.0, latency, np.inf)
