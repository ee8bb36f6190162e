"""The packet engine's configuration (:class:`PacketConfig`) and its size bounds.

Units: bytes, packets, seconds. ``mtu_bytes`` is the payload of a full packet; a packet on
the wire is ``payload + header_bytes`` (a trimmed packet or a control packet is
``header_bytes``). Queue capacities and ECN / PFC thresholds are in full packets
(``mtu_bytes + header_bytes`` each), so ``queue_packets = 35`` is ``35 x 4160`` bytes.

Size bound (:func:`check_size`): the engine keeps per data packet a fixed record (receiver
bitmap, sender state, send time, retransmission link, path slot: ``SEQ_BYTES`` = 24 B) and
per packet in flight a pool entry (``POOL_BYTES`` = 72 B, pool sized to three times the
sum of the flows' windows); a run whose total data-packet count exceeds ``max_packets`` or
whose estimated memory exceeds ``max_memory_bytes`` is refused with a ConfigError naming
``flows.bytes`` (the input that sets it), before any array is allocated.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from trainfabric.config import Config
from trainfabric.errors import ConfigError

SWITCH_MODES = ("lossless", "lossy", "trim")
TRANSPORTS = ("ndp", "dctcp")
SEQ_BYTES = 24
POOL_BYTES = 72
FLOW_BYTES = 256


class PacketConfig(Config):
    """Knobs of :func:`trainfabric.fabric.packet.simulate_packets` (module doc for units).

    Transports (module doc of :mod:`trainfabric.fabric.packet.transport`): ``ndp``
    (receiver-driven, NDP / htsim ``htsim_ndp``) and ``dctcp`` (RoCE-like sender window
    with a DCTCP ECN law). ``switch_mode``: ``lossless`` (PFC pause above
    ``pfc_xoff_packets`` of ingress occupancy, resume below ``pfc_xon_packets``; queues
    never drop), ``lossy`` (drop tail at ``queue_packets``), ``trim`` (above
    ``queue_packets`` the payload is cut and the header goes on at high priority).
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
    initial_window_packets: int = Field(50, ge=1, le=1 << 20)
    max_window_packets: int = Field(256, ge=1, le=1 << 20)
    dctcp_gain: float = Field(1.0 / 16.0, gt=0, le=1)
    rto_s: float = Field(1e-3, gt=0)
    reorder_nack_packets: int = Field(64, ge=1)
    spray_paths: int = Field(64, ge=1, le=1024)
    path_retire_s: float = Field(20e-6, ge=0)
    pinning_migrate: bool = True
    flowlet_gap_s: float = Field(50e-6, gt=0)
    reaction_hardware_s: float = Field(5e-6, ge=0)
    reaction_software_s: float = Field(5e-3, ge=0)
    reaction_routing_s: float = Field(1.0, ge=0)
    latency_samples: int = Field(1_000_000, ge=1, le=100_000_000)
    timeline_resolution_s: float = Field(1e-6, gt=0)
    pull_rate_fraction: float = Field(0.99, gt=0, le=1)
    release_on: Literal["delivered", "acked"] = "delivered"
    max_packets: int = Field(50_000_000, ge=1)
    max_memory_bytes: float = Field(8e9, gt=0)

    @model_validator(mode="after")
    def _thresholds(self) -> PacketConfig:
        if self.ecn_kmax_packets < self.ecn_kmin_packets:
            raise ValueError("ecn_kmax_packets must be >= ecn_kmin_packets")
        if self.pfc_xon_packets > self.pfc_xoff_packets:
            raise ValueError("pfc_xon_packets must be <= pfc_xoff_packets")
        if self.max_window_packets < self.initial_window_packets:
            raise ValueError("max_window_packets must be >= initial_window_packets")
        return self

    @property
    def wire_bytes(self) -> int:
        """Bytes of a full packet on the wire."""
        return self.mtu_bytes + self.header_bytes


def memory_bytes(n_packets: int, n_flows: int, window_packets: int, n_links: int) -> float:
    """Estimated peak bytes of a run (module doc)."""
    pool = 3.0 * n_flows * window_packets + 8 * n_links + 4096
    return SEQ_BYTES * n_packets + POOL_BYTES * pool + FLOW_BYTES * n_flows + 200.0 * n_links


def check_size(cfg: PacketConfig, n_packets: int, n_flows: int, n_links: int) -> None:
    """ConfigError naming ``flows.bytes`` when the run exceeds the bounds (module doc)."""
    if n_packets > cfg.max_packets:
        raise ConfigError(
            "flows.bytes",
            f"{n_packets:,} data packets exceed the packet engine's bound of "
            f"{cfg.max_packets:,} (config.max_packets)",
        )
    window = min(cfg.max_window_packets, max(1, n_packets // max(n_flows, 1) + 1))
    need = memory_bytes(n_packets, n_flows, window, n_links)
    if need > cfg.max_memory_bytes:
        raise ConfigError(
            "flows.bytes",
            f"the packet engine would need about {need / 1e9:.1f} GB, over "
            f"config.max_memory_bytes = {cfg.max_memory_bytes / 1e9:.1f} GB",
        )
