"""The packet engine's configuration (:class:`PacketConfig`) and its size bounds.

Units: bytes, packets, seconds. ``mtu_bytes`` is the payload of a full packet; a packet on
the wire is ``payload + header_bytes`` (a trimmed packet or a control packet is
``header_bytes``). Queue capacities and ECN / PFC thresholds are in full packets
(``mtu_bytes + header_bytes`` each), so ``queue_packets = 35`` is ``35 x 4160`` bytes.

Size bound (:func:`check_size`): per data packet the engine keeps a fixed record (receiver
bit, sender state, send time, retransmission link, path; a latency sample; the result's
temporaries: ``SEQ_BYTES`` = 52 B), per flow ``FLOW_BYTES`` = 1,000 B (state, inputs,
outputs and their temporaries) plus 72 B per plane (its round-robin sub-queues), per record
of the packet pool ``POOL_BYTES`` = 170 B with its room in the event queue (the pool holds
twice the sum over flows of ``min(packets, window)`` plus 8 per host, and doubles if a run
overflows it), per link ``LINK_BYTES`` = 550 B (its state and 4 slots of the event wheel),
plus 9.5 MB (the goodput timeline). Against tracemalloc peaks on 32-512-host runs
(all-to-all, permutation, incast; ndp and dctcp) the estimate is 1.05-1.12 of the measured
peak. A run whose data-packet count exceeds ``max_packets`` or whose estimate
exceeds ``max_memory_bytes`` is refused with a ConfigError naming ``flows.bytes`` (the
input that sets it) before any array is allocated.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from trainfabric.config import Config
from trainfabric.errors import ConfigError

SWITCH_MODES = ("lossless", "lossy", "trim")
TRANSPORTS = ("ndp", "dctcp")
SEQ_BYTES = 52
POOL_BYTES = 170
LINK_BYTES = 550
FLOW_BYTES = 1000
FIXED_BYTES = 9.5e6


class PacketConfig(Config):
    """Knobs of :func:`trainfabric.fabric.packet.simulate_packets` (module doc for units).

    Transports (module doc of :mod:`trainfabric.fabric.packet.transport`): ``ndp``
    (receiver-driven, NDP / htsim ``htsim_ndp``) and ``dctcp`` (RoCE-like sender window
    with a DCTCP ECN law). ``switch_mode``: ``lossless`` (PFC pause above
    ``pfc_xoff_packets`` of ingress occupancy, resume below ``pfc_xon_packets``; queues
    never drop), ``lossy`` (drop tail at ``queue_packets``), ``trim`` (above
    ``queue_packets`` the payload is cut and the header goes on at high priority).
    ``adaptive_levels``: adaptive routing compares ports by how many of these occupancy
    thresholds (fractions of ``queue_packets x mtu_bytes``, increasing) they reach, random
    among the least (htsim's ``ecmp_ar`` queue quantisation); ``()`` compares exact bytes.
    ``initial_window_packets``: ``None`` = :func:`auto_window` (1.5 bandwidth-delay
    products); the DCTCP window never exceeds ``max(max_window_packets, initial window)``.
    """

    mtu_bytes: int = Field(4096, gt=0, le=1 << 20)
    header_bytes: int = Field(64, ge=1, le=4096)
    queue_packets: int = Field(35, ge=1, le=1 << 20)
    switch_mode: Literal["lossless", "lossy", "trim"] = "trim"
    transport: Literal["ndp", "dctcp"] = "ndp"
    ecn_kmin_packets: float = Field(8.0, ge=0)
    ecn_kmax_packets: float = Field(24.0, ge=0)
    pfc_xoff_packets: float = Field(24.0, gt=0)
    pfc_xon_packets: float = Field(16.0, ge=0)
    initial_window_packets: int | None = Field(None, ge=1, le=1 << 20)
    max_window_packets: int = Field(256, ge=1, le=1 << 20)
    dctcp_gain: float = Field(1.0 / 16.0, gt=0, le=1)
    rto_s: float = Field(1e-3, gt=0)
    reorder_nack_packets: int = Field(64, ge=1, le=1 << 20)
    spray_paths: int = Field(64, ge=1, le=1024)
    path_retire_s: float = Field(20e-6, ge=0)
    pinning_migrate: bool = True
    flowlet_gap_s: float = Field(50e-6, gt=0)
    adaptive_levels: tuple[float, ...] = Field((0.05, 0.1, 0.2), strict=False, max_length=4)
    reaction_hardware_s: float = Field(5e-6, ge=0)
    reaction_software_s: float = Field(5e-3, ge=0)
    reaction_routing_s: float = Field(1.0, ge=0)
    latency_samples: int = Field(1_000_000, ge=1, le=100_000_000)
    timeline_resolution_s: float = Field(1e-6, gt=0)
    pull_rate_fraction: float = Field(0.99, gt=0, le=1)
    release_on: Literal["delivered", "acked"] = "delivered"
    max_packets: int = Field(50_000_000, ge=1, le=10**12)
    max_memory_bytes: float = Field(8e9, gt=0)

    @model_validator(mode="after")
    def _thresholds(self) -> PacketConfig:
        if self.ecn_kmax_packets < self.ecn_kmin_packets:
            raise ValueError("ecn_kmax_packets must be >= ecn_kmin_packets")
        lev = self.adaptive_levels
        if any(x < 0 for x in lev) or any(b <= a for a, b in zip(lev, lev[1:], strict=False)):
            raise ValueError("adaptive_levels must be increasing and >= 0")
        if self.pfc_xon_packets > self.pfc_xoff_packets:
            raise ValueError("pfc_xon_packets must be <= pfc_xoff_packets")
        return self

    @property
    def wire_bytes(self) -> int:
        """Bytes of a full packet on the wire."""
        return self.mtu_bytes + self.header_bytes


def auto_window(cfg: PacketConfig, nic_rate_bps: float, hop_latency_s: float) -> int:
    """``ceil(1.5 x BDP)`` packets: the bandwidth-delay product of an idle cross-leaf path
    (4 hops of a full packet out, 4 hops of a header back) at the NIC rate. NDP needs an
    initial window of at least one BDP to fill the pipe (htsim's 50 at 100 Gb/s is 1.7)."""
    wire = cfg.wire_bytes * 8.0
    rtt = 4 * (wire / nic_rate_bps + hop_latency_s) + 4 * (
        cfg.header_bytes * 8.0 / nic_rate_bps + hop_latency_s
    )
    return max(1, math.ceil(1.5 * rtt * nic_rate_bps / wire))


def memory_bytes(n_packets: int, n_flows: int, pool: int, n_links: int, planes: int = 1) -> float:
    """Estimated peak bytes of a run (module doc); ``pool``: packet records."""
    flow = (FLOW_BYTES + 72 * planes) * n_flows
    per = SEQ_BYTES * n_packets + POOL_BYTES * pool + flow + LINK_BYTES * n_links
    return per + FIXED_BYTES


def check_size(
    cfg: PacketConfig, n_packets: int, n_flows: int, pool: int, n_links: int, planes: int = 1
) -> None:
    """ConfigError naming ``flows.bytes`` when the run exceeds the bounds (module doc)."""
    if n_packets > cfg.max_packets:
        raise ConfigError(
            "flows.bytes",
            f"{n_packets:,} data packets exceed the packet engine's bound of "
            f"{cfg.max_packets:,} (config.max_packets)",
        )
    need = memory_bytes(n_packets, n_flows, pool, n_links, planes)
    if need > cfg.max_memory_bytes:
        raise ConfigError(
            "flows.bytes",
            f"the packet engine would need about {need / 1e9:.1f} GB, over "
            f"config.max_memory_bytes = {cfg.max_memory_bytes / 1e9:.1f} GB",
        )
