"""What every fabric scenario file shares: ``[topology]``, the load-balancing modes, ``[faults]``,
the fields common to every kind (:class:`ScenarioConfig`), and the topology they build.

Units: rates in Gb/s in files (``nic_rate_gbps``), bits/s inside; seconds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trainfabric.config import MAX_SEED, Config
from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.packet.config import PacketConfig
from trainfabric.limits import check_memory

LBMode = Literal["ecmp", "flowlet", "pinning", "spray", "adaptive"]


ALL_MODES: tuple[str, ...] = ("ecmp", "flowlet", "pinning", "spray", "adaptive")


MiB = 1024**2
MAX_MESSAGE_BYTES = 2**40  # a collective's largest buffer: 1 TiB, past any GPU's memory


Fraction = Annotated[float, Field(ge=0, lt=1)]


Positive = Annotated[float, Field(gt=0)]


MAX_GPUS = 1_048_576  # ten times the largest clusters built
MAX_RADIX = 65_536  # a hundred times the largest switch ASICs (512 ports)


class TopologyConfig(Config):
    """A fabric: ``multiplane`` (P planes of 2-tier leaf-spine), ``leaf_spine`` or ``fat_tree``
    (``gpus`` <= 1,048,576, ``planes`` <= 64, ``switch_radix`` <= 65,536)."""

    kind: Literal["multiplane", "leaf_spine", "fat_tree"] = "multiplane"
    gpus: int = Field(64, ge=2, le=MAX_GPUS, description="hosts (one NIC per GPU)")
    planes: int = Field(4, ge=1, le=64, description="planes (multiplane only)")
    switch_radix: int = Field(
        16, ge=4, le=MAX_RADIX, description="ports per switch per plane (<= 65,536)"
    )
    nic_rate_gbps: float = Field(800.0, gt=0, description="NIC total rate, all planes")
    oversubscription: float = Field(1.0, ge=1, description="leaf host ports : uplinks")
    agg_oversubscription: float = Field(
        1.0, ge=1, description="fat_tree only: agg down : up ports (1: k/2 edges per pod)"
    )
    rail: bool = Field(False, description="rail-optimised host placement")
    gpus_per_server: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="GPUs per server, whose GPU i sits on rail i (rail = true); default 8, or "
        "the job's pod in an iteration scenario, which it must then equal",
    )
    hop_latency_s: float = Field(1e-6, ge=0, description="propagation + switching per hop")


class ScenarioConfig(Config):
    name: str = ""
    seed: int = Field(0, ge=0, le=MAX_SEED, description="seed (<= 2^63 - 1)")
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
        "first-window loss (trainfabric.fabric.flow.calibration.FITTED); off by default",
    )


class FaultsConfig(Config):
    """Faults during the iteration (run by :mod:`trainfabric.fabric.iteration.faults`):
    static failed leaf-spine cables (``failed_fractions``, ``failure_draws`` seeded draws
    each) and link flaps (``flap_draws`` per mode, spread over ``flap_durations_s`` x
    ``flap_sides``); empty lists / 0 draws switch a part off; ``workers`` processes run the
    failure draws side by side."""

    failed_fractions: list[Fraction] = Field(default_factory=lambda: [0.1])
    failure_draws: int = Field(20, ge=1, le=10_000)
    flap_durations_s: list[Positive] = Field(default_factory=lambda: [1e-3, 1e-2, 1.0])
    flap_sides: list[Literal["nic", "fabric"]] = Field(default_factory=lambda: ["nic", "fabric"])
    flap_draws: int = Field(500, ge=0, le=1_000_000)
    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="local processes running the failure draws side by side (each holds a "
        "copy of the job)",
    )


LINK_BYTES = 120  # per directed link of a topology (tables, capacities, ids): 100-115 measured


def topology_links(cfg: TopologyConfig, oversubscription: float) -> float:
    """Directed links of ``cfg``: per plane of a 2-tier fabric, 2 per host (up and down) and
    ``2 / oversubscription`` per host between leaves and spines; a 3-tier fat tree, 6 per host."""
    if cfg.kind == "fat_tree":
        return 6.0 * cfg.gpus
    planes = cfg.planes if cfg.kind == "multiplane" else 1
    return planes * cfg.gpus * (2.0 + 2.0 / oversubscription)


def build_topology(
    cfg: TopologyConfig, oversubscription: float | None = None, gpus_per_server: int | None = None
):
    """The topology of ``cfg``; builder errors are re-labelled ``topology.<field>``. Refuses
    first a topology whose links (:func:`topology_links` x ``LINK_BYTES``) exceed the memory
    limit (ConfigError naming ``topology.gpus``). ``gpus_per_server``: the rails of
    ``rail = true`` (GPU ``i`` of every server on rail ``i``; default ``cfg.gpus_per_server``,
    else 8)."""

    over = cfg.oversubscription if oversubscription is None else oversubscription
    links = topology_links(cfg, over)
    check_memory("topology.gpus", LINK_BYTES * links, f"a {cfg.kind} fabric of {links:,.0f} links")
    if cfg.kind != "fat_tree" and cfg.agg_oversubscription != 1:
        raise ConfigError("topology.agg_oversubscription", "only a fat_tree has an agg tier")
    kw = dict(
        switch_radix=cfg.switch_radix,
        nic_rate_bps=cfg.nic_rate_gbps * 1e9,
        oversubscription=over,
        hop_latency_s=cfg.hop_latency_s,
        gpus_per_server=gpus_per_server or cfg.gpus_per_server or 8,
        rail=cfg.rail,
    )
    try:
        if cfg.kind == "multiplane":
            return T.multiplane(cfg.gpus, planes=cfg.planes, **kw)
        if cfg.kind == "leaf_spine":
            return T.leaf_spine(cfg.gpus, **kw)
        return T.fat_tree(cfg.gpus, agg_oversubscription=cfg.agg_oversubscription, **kw)
    except ConfigError as exc:
        raise ConfigError(f"topology.{exc.field}", exc.message) from None
