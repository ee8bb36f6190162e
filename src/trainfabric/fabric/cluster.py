"""Clusters: the fabric a user owns or is buying, as one file (``--cluster FILE``).

A cluster file is TOML (presets in ``configs/clusters/``); every key is checked by name, and
a bad one is a one-line ConfigError naming its dotted key (exit 2)::

    name = "spectrum-x-32k"        # optional; default: the file's stem
    description = "..."            # optional
    gpus = 32768                   # GPUs, one NIC each (<= 1,048,576)

    [fabric]
    tiers = 2                      # 2: leaf-spine per plane; 3: single-plane fat-tree
    planes = 4                     # NIC ports per GPU, one per plane (<= 64; 3 tiers: 1)
    switch_radix = 256             # ports per switch (per plane)
    nic_rate_gbps = 800.0          # per GPU, all planes together (Gb/s)
    oversubscription = [1.0]       # per tier, bottom up: leaf/edge host ports : uplinks,
                                   # then (3 tiers) agg down : up ports; default all 1
    rail = false                   # GPU i of every scale-up domain on rail i
    hop_latency_s = 1e-6           # per link: propagation + switching (s)

    [scale_up]                     # optional: GPUs per NVLink-style domain
    gpus = 8                       # must divide gpus
    bandwidth_gbps = 7200.0        # per GPU, one direction (Gb/s)
    latency_s = 1e-6               # GPU to GPU inside the domain (s); default 0

Mapping onto the engines (:func:`topology_config`): ``tiers = 2`` is
:func:`~trainfabric.fabric.topology.multiplane` (``planes = 1``: ``leaf_spine``),
``tiers = 3`` is :func:`~trainfabric.fabric.topology.fat_tree` with
``oversubscription = [edge, agg]``; ``rail`` groups the rails by the scale-up domain
(``gpus_per_server = scale_up.gpus``). Multiplane 3-tier fabrics are not modelled and are
refused (``fabric.planes``). What each command does with ``[scale_up]`` is its own:
``fabric collective`` times transfers inside a domain at its bandwidth
(:mod:`trainfabric.fabric.nccl`); ``fabric job`` places one job pod per domain and keeps
same-pod transfers off the fabric, untimed; ``fabric run`` puts every GPU pair on the fabric.
Those two say so in their notes.

Switch counts (:func:`switch_counts`) come from the builders' own arithmetic
(:func:`~trainfabric.fabric.topology.two_tier_shape`,
:func:`~trainfabric.fabric.topology.fat_tree_shape`), without building the fabric; the
bisection (:func:`bisection_gbps`) is the closed form ``(H/2) · nic · min(1, u/d)``
``· min(1, ua/e)`` (3 tiers) of :func:`~trainfabric.fabric.topology.bisection_closed_form_bps`.

**astra-sim's analytical network YAML** (:func:`astra_cluster`; ``topology``,
``npus_count``, ``bandwidth`` in GB/s with GB = 2^30 B, ``latency`` in ns per link) is read
as a cluster where its topology is one we model, else refused naming ``topology``:

* ``[Switch]`` of ``N`` NPUs: ``N`` GPUs on one leaf of a single-plane leaf-spine of radix
  ``2N`` (every route stays on that leaf, 2 links, as astra-sim's NPU -> switch -> NPU; the
  builder's spine tier carries nothing); NIC rate = the link bandwidth, hop latency = the
  link latency; no scale-up domain.
* ``[Switch, Switch]`` of ``[g, m]`` NPUs (NPU ``i + g j`` is member ``i`` of domain ``j``):
  scale-up domains of ``g`` GPUs at ``bandwidth[0]``, latency ``2 · latency[0]`` (two links);
  dimension 2 is ``g`` rail switches of ``m`` ports, NPU ``i`` of every domain on switch ``i``:
  a rail-optimised leaf-spine whose leaves are the rails (``m`` host ports, ``m`` uplinks;
  it needs ``g <= 2m``). Traffic across rails, which astra-sim routes through the domains,
  crosses the spines here.

``Ring`` and ``FullyConnected`` dimensions (point-to-point links, no switch) and three or more
dimensions are not modelled. The reader takes astra-sim's topology, not its timing: astra-sim's
congestion-unaware backend sends a chunk in ``hops · latency + size / bandwidth`` on a fixed
path, ours shares links max-min.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from trainfabric.config import Config, read_toml, validate
from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.config import MAX_GPUS, MAX_RADIX, TopologyConfig, build_topology
from trainfabric.io import read_file

MAX_RATE_GBPS = 1e6  # a thousand times a 1.6 Tb/s NIC
Ratio = Annotated[float, Field(ge=1, le=1000)]
TIER_NAMES = {2: ("leaf", "spine"), 3: ("edge", "agg", "core")}
PLURAL = {"leaf": "leaves", "spine": "spines", "edge": "edges", "agg": "aggs", "core": "cores"}


class FabricSpec(Config):
    """The scale-out fabric (module doc); defaults: ``fabric job``'s fabric."""

    tiers: Literal[2, 3] = Field(2, description="2: leaf-spine per plane; 3: fat-tree")
    planes: int = Field(4, ge=1, le=64, description="NIC ports per GPU, one per plane")
    switch_radix: int = Field(256, ge=4, le=MAX_RADIX, description="ports per switch per plane")
    nic_rate_gbps: float = Field(
        800.0, gt=0, le=MAX_RATE_GBPS, description="per GPU, all planes (Gb/s)"
    )
    oversubscription: list[Ratio] | None = Field(
        None, description="per tier bottom up (leaf/edge, then agg); default all 1"
    )
    rail: bool = Field(False, description="GPU i of every scale-up domain on rail i")
    hop_latency_s: float = Field(1e-6, ge=0, le=1.0, description="per link (s)")


class ScaleUpSpec(Config):
    """An NVLink-style domain: ``gpus`` GPUs, each sending at ``bandwidth_gbps`` to the others
    (one direction, through a non-blocking switch), ``latency_s`` GPU to GPU."""

    gpus: int = Field(ge=1, le=4096, description="GPUs per domain (<= 4,096)")
    bandwidth_gbps: float = Field(gt=0, le=MAX_RATE_GBPS, description="per GPU, one direction")
    latency_s: float = Field(0.0, ge=0, le=1.0, description="GPU to GPU inside the domain (s)")


class ClusterConfig(Config):
    """A cluster file (module doc)."""

    name: str = Field("", max_length=200)
    description: str = Field("", max_length=2000)
    gpus: int = Field(ge=2, le=MAX_GPUS, description="GPUs, one NIC each (<= 1,048,576)")
    fabric: FabricSpec = FabricSpec()
    scale_up: ScaleUpSpec | None = None

    @property
    def domain_gpus(self) -> int:
        """GPUs per scale-up domain (1 without ``[scale_up]``)."""
        return self.scale_up.gpus if self.scale_up else 1

    @property
    def oversubscription(self) -> list[float]:
        """One ratio per tier below the top (defaults filled in)."""
        return self.fabric.oversubscription or [1.0] * (self.fabric.tiers - 1)


# -- loading ---------------------------------------------------------------------------------------
def parse_cluster(data: dict, name: str = "") -> ClusterConfig:
    """Validate a cluster mapping (errors name the dotted key), then the checks between keys
    and the fit of ``gpus`` on the fabric; ``name`` fills an absent ``name``."""
    cluster = validate(ClusterConfig, data)
    if not cluster.name and name:
        cluster = cluster.model_copy(update={"name": name})
    _check(cluster)
    return cluster


def load_cluster(path: str | Path) -> ClusterConfig:
    """A cluster file: TOML, or astra-sim's analytical network YAML (``.yml``/``.yaml``)."""
    path = Path(path)
    if path.suffix in (".yml", ".yaml"):
        return astra_cluster(read_astra_yaml(path), path.stem)
    return parse_cluster(read_toml(path, "cluster"), path.stem)


def _check(c: ClusterConfig) -> None:
    f = c.fabric
    if f.tiers == 3 and f.planes != 1:
        raise ConfigError(
            "fabric.planes",
            "a 3-tier fabric is a single-plane fat-tree here; multiplane "
            "3-tier fabrics are not modelled (use planes = 1, or tiers = 2)",
        )
    if f.oversubscription is not None and len(f.oversubscription) != f.tiers - 1:
        tiers = ", ".join(TIER_NAMES[f.tiers][:-1])
        raise ConfigError(
            "fabric.oversubscription",
            f"give one ratio per tier below the top ({tiers}): {f.tiers - 1} for "
            f"{f.tiers} tiers, got {len(f.oversubscription)}",
        )
    if c.gpus % c.domain_gpus:
        raise ConfigError("scale_up.gpus", f"must divide gpus ({c.gpus}), got {c.domain_gpus}")
    if f.rail and c.scale_up is None:
        raise ConfigError("fabric.rail", "rails need [scale_up]: GPU i of every domain on rail i")
    _shape(c)


# The builders' field names -> the cluster file's keys.
KEYS = {
    "gpus": "gpus",
    "switch_radix": "fabric.switch_radix",
    "planes": "fabric.planes",
    "oversubscription": "fabric.oversubscription",
    "agg_oversubscription": "fabric.oversubscription",
    "gpus_per_server": "scale_up.gpus",
    "nic_rate_bps": "fabric.nic_rate_gbps",
    "hop_latency_s": "fabric.hop_latency_s",
}


def _relabel(exc: ConfigError) -> ConfigError:
    """``exc`` with its builder field (``topology.``-prefixed or not) named as its key."""
    field = exc.field.removeprefix("topology.")
    return ConfigError(KEYS.get(field, field), exc.message)


def _shape(c: ClusterConfig) -> T.TwoTierShape | T.FatTreeShape:
    """The shape of ``c``'s fabric (per plane); errors name the cluster's keys."""
    over = c.oversubscription
    try:
        if c.fabric.tiers == 2:
            return T.two_tier_shape(c.gpus, c.fabric.switch_radix, over[0])
        return T.fat_tree_shape(c.gpus, c.fabric.switch_radix, over[0], over[1])
    except ConfigError as exc:
        raise _relabel(exc) from None


# -- onto the engines ------------------------------------------------------------------------------
def topology_config(c: ClusterConfig) -> TopologyConfig:
    """``c``'s fabric as a scenario's ``[topology]`` (module doc)."""
    f, over = c.fabric, c.oversubscription
    kind = "fat_tree" if f.tiers == 3 else "multiplane" if f.planes > 1 else "leaf_spine"
    return TopologyConfig(
        kind=kind,
        gpus=c.gpus,
        planes=f.planes,
        switch_radix=f.switch_radix,
        nic_rate_gbps=f.nic_rate_gbps,
        oversubscription=over[0],
        agg_oversubscription=over[1] if f.tiers == 3 else 1.0,
        rail=f.rail,
        gpus_per_server=c.domain_gpus,
        hop_latency_s=f.hop_latency_s,
    )


def build_cluster(c: ClusterConfig) -> T.Topology:
    """The fabric of ``c`` (errors, the memory guard's included, name the cluster's keys)."""
    try:
        return build_topology(topology_config(c))
    except ConfigError as exc:
        raise _relabel(exc) from None


# -- what it is made of ----------------------------------------------------------------------------
def switch_counts(c: ClusterConfig) -> dict[str, int]:
    """Switches per tier, bottom up (``leaf``, ``spine`` or ``edge``, ``agg``, ``core``), over
    all planes: ``planes x (L, S)`` (2 tiers) or ``(edges, aggs, cores)`` (module doc)."""
    s = _shape(c)
    if isinstance(s, T.TwoTierShape):
        p = c.fabric.planes
        return {"leaf": p * s.leaves, "spine": p * s.spines}
    return {"edge": s.edges, "agg": s.aggs, "core": s.cores}


def switch_line(c: ClusterConfig) -> str:
    """One sentence of the switch counts, as the presets' comments give them, e.g.
    ``switches: 4 planes x (256 leaves + 128 spines) = 1,536``."""
    counts = switch_counts(c)
    total = sum(counts.values())
    p = c.fabric.planes
    per = " + ".join(f"{n // p:,} {tier if n == p else PLURAL[tier]}" for tier, n in counts.items())
    if p == 1:
        return f"switches: {per} = {total:,}"
    return f"switches: {p} planes x ({per}) = {total:,}"


def bisection_gbps(c: ClusterConfig) -> float:
    """Closed-form bisection (Gb/s, module doc): ``(H/2) · nic`` times each tier's
    ``min(1, up / down)``."""
    s = _shape(c)
    full = c.gpus / 2 * c.fabric.nic_rate_gbps
    factor = min(1.0, s.up / s.down)
    if isinstance(s, T.FatTreeShape):
        factor *= min(1.0, s.agg_up / s.edges_per_pod)
    return full * factor


def cluster_summary(c: ClusterConfig) -> dict:
    """What ``fabric cluster show`` prints: the keys, per-tier switch counts, ports per leaf
    (edge), the bisection (Gb/s and as a fraction of ``(H/2) · nic``)."""
    s = _shape(c)
    full = c.gpus / 2 * c.fabric.nic_rate_gbps
    return {
        "name": c.name,
        "description": c.description,
        "gpus": c.gpus,
        **c.fabric.model_dump(),
        "oversubscription": c.oversubscription,
        "port_rate_gbps": c.fabric.nic_rate_gbps / c.fabric.planes,
        "scale_up": c.scale_up.model_dump() if c.scale_up else None,
        "host_ports_per_leaf": s.down,
        "uplinks_per_leaf": s.up,
        "switches_per_tier": switch_counts(c),
        "switches": sum(switch_counts(c).values()),
        "switch_line": switch_line(c),
        "bisection_gbps": bisection_gbps(c),
        "bisection_fraction": bisection_gbps(c) / full,
    }


# -- astra-sim's analytical network YAML -----------------------------------------------------------
ASTRA_KEYS = ("topology", "npus_count", "bandwidth", "latency")
ASTRA_GB = 2**30  # astra-sim's GB/s: 2^30 bytes per second (common/NetworkFunction.cpp)
MAX_ASTRA_BYTES = 1_000_000
_LINE = re.compile(r"^([A-Za-z_]\w*)\s*:\s*(.*)$")


def read_astra_yaml(path: str | Path) -> dict[str, list]:
    """The keys of an astra-sim network YAML (the subset its files use: top-level ``key:``
    with a flow list ``[a, b]``, a scalar, or a block list of ``- item`` lines; ``#``
    comments). Anything else is a ConfigError naming the line."""
    text = read_file(path, "cluster", "YAML file", max_bytes=MAX_ASTRA_BYTES)
    doc: dict[str, list] = {}
    key = None
    for no, raw in enumerate(text.decode("utf-8", "replace").splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        item = re.match(r"^\s+-\s*(\S.*)$", line)
        if item and key is not None:
            doc[key].append(_scalar(item.group(1)))
            continue
        m = _LINE.match(line)
        if m is None:
            raise ConfigError("cluster", f"{path}: line {no}: not a 'key: value' line: {raw!r}")
        key, value = m.group(1), m.group(2).strip()
        if key in doc:
            raise ConfigError("cluster", f"{path}: line {no}: {key} is given twice")
        if value.startswith("[") != value.endswith("]"):
            raise ConfigError("cluster", f"{path}: line {no}: an unclosed [ ] list: {raw!r}")
        if value.startswith("["):
            doc[key] = [_scalar(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            doc[key] = [_scalar(value)] if value else []
    return doc


def _scalar(text: str) -> str | float:
    text = text.strip().strip("'\"")
    try:
        return float(text)
    except ValueError:
        return text


def astra_cluster(doc: dict[str, list], name: str = "astra") -> ClusterConfig:
    """The cluster of an astra-sim network (module doc); errors name the YAML key."""
    for key in doc:
        if key not in ASTRA_KEYS:
            raise ConfigError(key, f"not an astra-sim analytical key ({', '.join(ASTRA_KEYS)})")
    topo = _astra_list(doc, "topology", str)
    dims = len(topo)
    counts = _astra_list(doc, "npus_count", float, dims)
    if not all(v.is_integer() and 2 <= v <= MAX_GPUS for v in counts):
        raise ConfigError("npus_count", f"must be whole numbers in 2..{MAX_GPUS:,}, got {counts}")
    npus = [int(v) for v in counts]
    bw = _astra_list(doc, "bandwidth", float, dims)
    lat = _astra_list(doc, "latency", float, dims)
    if topo not in (["Switch"], ["Switch", "Switch"]):
        raise ConfigError(
            "topology",
            f"{topo} is not modelled: trainfabric reads [Switch] (one switch) and "
            "[Switch, Switch] (scale-up domains + one switch per rail); Ring and "
            "FullyConnected dimensions are point-to-point links",
        )
    gbps = [b * ASTRA_GB * 8 / 1e9 for b in bw]
    m = npus[-1]
    data: dict = {
        "name": name,
        "description": f"astra-sim network {' x '.join(topo)} of {' x '.join(map(str, npus))} NPUs",
        "gpus": m if dims == 1 else npus[0] * m,
        "fabric": {
            "planes": 1,
            "switch_radix": 2 * m,
            "nic_rate_gbps": gbps[-1],
            "hop_latency_s": lat[-1] * 1e-9,
            "rail": dims == 2,
        },
    }
    if dims == 2:
        if npus[0] > 2 * m:
            raise ConfigError(
                "npus_count",
                f"{npus[0]} rails of {m} GPUs: a leaf-spine of radix {2 * m} "
                f"holds at most {2 * m} rail leaves",
            )
        data["scale_up"] = {"gpus": npus[0], "bandwidth_gbps": gbps[0], "latency_s": 2e-9 * lat[0]}
    try:
        return parse_cluster(data)
    except ConfigError as exc:
        raise ConfigError(ASTRA_FIELDS.get(exc.field, exc.field), exc.message) from None


# The cluster keys an astra-sim file sets -> the YAML key that set them.
ASTRA_FIELDS = {
    "gpus": "npus_count",
    "fabric.switch_radix": "npus_count",
    "scale_up.gpus": "npus_count",
    "fabric.nic_rate_gbps": "bandwidth",
    "scale_up.bandwidth_gbps": "bandwidth",
    "fabric.hop_latency_s": "latency",
    "scale_up.latency_s": "latency",
}


def _astra_list(doc: dict, key: str, kind: type, length: int | None = None) -> list:
    if key not in doc:
        raise ConfigError(key, "missing")
    values = doc[key]
    if not values or not all(isinstance(v, kind) for v in values):
        raise ConfigError(key, f"must be a non-empty list of {kind.__name__}s, got {values}")
    if length is not None and len(values) != length:
        raise ConfigError(key, f"needs one value per dimension ({length}), got {len(values)}")
    if kind is float and not all(v >= 0 for v in values):
        raise ConfigError(key, f"must be >= 0, got {values}")
    return values


# -- what a command leaves out ---------------------------------------------------------------------
def job_notes(c: ClusterConfig) -> list[str]:
    """What ``fabric job`` does not time of ``c``: its scale-up bandwidth and latency."""
    if c.scale_up is None:
        return []
    return [
        f"cluster {c.name}: scale_up.bandwidth_gbps and scale_up.latency_s are not timed: "
        "fabric job places one pod per scale-up domain and keeps same-pod transfers off the "
        "fabric (the job DAG's intra_pod_bytes)"
    ]


def run_notes(c: ClusterConfig, kind: str) -> list[str]:
    """What ``fabric run`` of a scenario ``kind`` does not use of ``c``."""
    if kind == "iteration":
        notes = job_notes(c)
    elif c.scale_up is None:
        notes = []
    else:
        notes = [
            f"cluster {c.name}: [scale_up] is not used by the {kind} scenario: every GPU pair "
            "crosses the fabric, one NIC per GPU (fabric collective times the scale-up)"
        ]
    if kind == "isolation":
        notes.append(
            f"cluster {c.name}: the isolation scenario's own oversubscription list replaces "
            "fabric.oversubscription[0] (the leaf tier)"
        )
    return notes


def default_cluster(gpus: int) -> ClusterConfig:
    """``fabric job``'s fabric (:class:`FabricSpec`'s defaults) sized to ``gpus``, no scale-up
    domain: what ``fabric collective`` runs on without ``--cluster``."""
    return parse_cluster({"name": "the fabric-job fabric", "gpus": gpus})
