"""nccl-tests tables on the simulated fabric (``trainfabric fabric collective``).

**Rows as nccl-tests computes them** (``src/common.cu`` and ``src/<op>.cu``; float, 4 bytes).
For a requested size ``V`` (``-b``/``-e`` notation, :func:`parse_sizes`) over ``n`` ranks:

* ``all_reduce``, ``broadcast``: ``count = V div 4`` elements per rank and
  ``size = 4 count`` bytes (the buffer ``S``);
* ``all_gather``, ``reduce_scatter``, ``all_to_all``: ``count = (V div 4) div n`` per rank
  (all_gather's send count, reduce_scatter's receive count, all_to_all's count per peer)
  and ``size = 4 n count`` (the gathered output, the reduced input, the send buffer);
* ``time`` (us) is the simulated collective; ``algbw = size / time`` and ``busbw = algbw x``
  ``2(n-1)/n`` (all_reduce), ``(n-1)/n`` (all_gather, reduce_scatter, all_to_all) or ``1``
  (broadcast), in GB/s = 1e9 B/s; ``redop`` is ``sum`` for the reductions, else ``none``;
  ``root`` is 0 for broadcast, else -1. A row of count 0 takes no time (NCCL returns at
  once): time 0, bandwidths 0.

**The model.** Rank ``r`` is GPU ``r`` of the cluster (:mod:`trainfabric.fabric.cluster`), so
the ranks fill scale-up domains of ``g`` GPUs in order. With step latency ``σ`` (software,
per step, default 0):

* ring ``all_reduce`` (``2(n-1)`` steps), ``reduce_scatter`` and ``all_gather`` (``n-1``
  steps): in every step rank ``r`` sends ``S/n`` to ``r+1 mod n``; a step ends when all its
  transfers have arrived, and every step is the same set of transfers, so
  ``t = steps · (σ + max(t_fabric, t_scaleup))``;
* ``all_to_all``: one step, every rank sends ``S/n`` to every other;
  ``t = σ + max(t_fabric, t_scaleup)``;
* ``broadcast``: NCCL's ring broadcast from root 0, the chain ``0 -> 1 -> ... -> n-1``
  pipelined in small chunks, taken to the fluid limit: the stream runs at its slowest edge
  and its last byte crosses every edge's latency, ``t = σ + Σ_k lat_k + max_k τ_k`` (``τ_k``:
  edge ``k``'s sending time of ``S`` at the rate it gets with every edge sending at once).

A transfer between GPUs of one domain goes over the scale-up: every GPU sends to its domain
peers at ``B_su`` (one direction, through a non-blocking switch) after ``L_su``, so
``t_scaleup = L_su + 8 b / B_su`` with ``b`` the most bytes one GPU sends inside its domain in
the step (a ring: ``S/n``; an all-to-all: ``(m-1) S/n`` for ``m`` ranks in a domain; a
broadcast edge: ``S``). A transfer across domains is a flow on the fabric, split into
``channels`` connections under the load-balancing ``mode``, run by the flow engine
(:func:`~trainfabric.fabric.flow.engine.simulate`: max-min rates, 64 B headers per 4096 B,
``links x hop_latency_s`` of propagation): ``t_fabric = max_f (w_f + lat_f)`` over its flows
``f`` (sending time ``w_f``, propagation ``lat_f``).

Not modelled: NCCL's tree, NVLS, CollNet and PAT algorithms, its protocol choice (LL, LL128,
Simple) and its several rings (one per channel, each leaving a server through a different
NIC): one ring visits the GPUs in rank order, so with ``g > 1`` only one GPU of a domain
sends on its NIC in a step. ``flowlet`` is refused: its re-hashing depends on the idle gaps
between steps, which the one simulated step does not have.

**One engine run per table.** The fabric flows of one step start together, with no
dependencies, and rates change only when a flow's last byte leaves; scaling every flow's
bytes by ``α`` scales every sending time by ``α`` and leaves the propagation as it was. So
the step is simulated once, at the largest size of the table, and each row uses
``w_f · size / size_max`` (tests check it against a direct run at each size).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.fabric.cluster import ClusterConfig, build_cluster
from trainfabric.fabric.config import MAX_MESSAGE_BYTES
from trainfabric.fabric.flow.collectives import (
    bus_factor,
    check_collective_size,
    collective_flows,
    collective_steps,
)
from trainfabric.fabric.flow.engine import simulate
from trainfabric.fabric.routing import Router
from trainfabric.fabric.topology import Topology, path_links
from trainfabric.workloads import collectives as wc

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
MODES = ("ecmp", "pinning", "spray", "adaptive")
RING_OPS = ("all_reduce", "reduce_scatter", "all_gather")
PER_RANK_OPS = ("all_gather", "reduce_scatter", "all_to_all")
FLOAT_BYTES = 4
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)


# -- sizes -----------------------------------------------------------------------------------------
def parse_size(text: str, field: str = "sizes") -> int:
    """Bytes of nccl-tests' notation: an integer, optionally followed by ``K``, ``M`` or ``G``
    (``2^10``, ``2^20``, ``2^30``; either case), at most ``2^40``."""
    m = _SIZE.match(text.strip())
    if m is None:
        raise ConfigError(field, f"{text!r} is not a size: an integer with K, M or G (e.g. 8M)")
    size = int(m.group(1)) * UNITS[m.group(2).upper()]
    if not 1 <= size <= MAX_MESSAGE_BYTES:
        raise ConfigError(field, f"{text!r}: sizes run from 1 byte to 1024G (2^40), got {size:,}")
    return size


def parse_sizes(text: str, field: str = "sizes") -> list[int]:
    """``A:B``: ``A, 2A, 4A, ...`` up to ``B`` (nccl-tests' ``-b A -e B -f 2``); ``A``: one."""
    lo, sep, hi = text.partition(":")
    first = parse_size(lo, field)
    last = parse_size(hi, field) if sep else first
    if last < first:
        raise ConfigError(field, f"{text!r}: the last size is below the first")
    return [first << k for k in range((last // first).bit_length())]


def nccl_size(op: str, requested: int, n: int) -> tuple[int, int]:
    """``(size_bytes, count)`` of the row nccl-tests prints for ``requested`` bytes (module doc)."""
    count = requested // FLOAT_BYTES
    if op in PER_RANK_OPS:
        count //= n
        return FLOAT_BYTES * n * count, count
    return FLOAT_BYTES * count, count


# -- one step on the fabric ------------------------------------------------------------------------
@dataclass(frozen=True)
class StepProfile:
    """One step of an op at ``ref_bytes`` (module doc): per fabric flow the sending time
    ``wire_s`` (scales with the bytes) and propagation ``lat_s`` (does not); ``chain_lat_s``,
    the propagation summed over the step's fabric transfers (a broadcast's chain);
    ``scaleup_bytes``, the most bytes one GPU sends inside its domain; ``scaleup_transfers``,
    the step's transfers inside a domain."""

    ref_bytes: float
    wire_s: np.ndarray
    lat_s: np.ndarray
    chain_lat_s: float
    scaleup_bytes: float
    scaleup_transfers: int

    def fabric_s(self, size: float) -> float:
        """``max_f (w_f · size / ref + lat_f)``; 0 without fabric flows."""
        if self.wire_s.size == 0:
            return 0.0
        return float(np.max(self.wire_s * (size / self.ref_bytes) + self.lat_s))

    def wire_max_s(self, size: float) -> float:
        """The longest sending time of a fabric flow at ``size``; 0 without any."""
        return float(self.wire_s.max(initial=0.0)) * size / self.ref_bytes


def op_step(op: str, n: int, size_bytes: float) -> wc.Step:
    """The transfers of one step of ``op`` over ranks ``0..n-1`` (module doc)."""
    if op == "broadcast":
        r = np.arange(n - 1)
        return wc.Step(r, r + 1, np.full(n - 1, float(size_bytes)))
    return collective_steps(op, n, size_bytes)[0]


def step_profile(
    topo: Topology,
    router: Router,
    op: str,
    n: int,
    domain_gpus: int,
    ref_bytes: float,
    *,
    channels: int = 4,
    seed: int = 0,
) -> StepProfile:
    """Simulate the fabric part of one step of ``op`` at ``ref_bytes`` (ranks on GPUs
    ``0..n-1``, domains of ``domain_gpus``) and measure its scale-up part."""
    step = op_step(op, n, ref_bytes)
    inside = step.src // domain_gpus == step.dst // domain_gpus
    sent = np.bincount(step.src[inside], step.bytes[inside], minlength=n)
    src, dst = step.src[~inside], step.dst[~inside]
    hop_s = topo.hop_latency_s
    chain = float(path_links(topo, src, dst).sum() * hop_s)
    wire = lat = np.zeros(0)
    if src.size:
        fabric = wc.Step(src, dst, step.bytes[~inside])
        flows = collective_flows([fabric], np.arange(n), channels=channels, seed=seed).flows
        res = simulate(topo, flows, router)
        if res.unfinished:
            raise InfeasibleError(f"{res.unfinished} flows of the {op} never finished")
        lat = path_links(topo, flows.src, flows.dst) * hop_s
        wire = res.finish_s - res.start_s - lat
    return StepProfile(ref_bytes, wire, lat, chain, float(sent.max()), int(inside.sum()))


# -- the collective's time -------------------------------------------------------------------------
@dataclass(frozen=True)
class ScaleUp:
    """A scale-up domain's per-GPU bandwidth ``bandwidth_bps`` and latency ``latency_s``."""

    bandwidth_bps: float
    latency_s: float

    def send_s(self, nbytes: float) -> float:
        """``8 b / B_su``: sending ``b`` bytes."""
        return 8.0 * nbytes / self.bandwidth_bps

    def time_s(self, nbytes: float) -> float:
        """``L_su + 8 b / B_su``: sending and arriving; 0 when nothing is sent."""
        return self.latency_s + self.send_s(nbytes) if nbytes > 0 else 0.0


def collective_time_s(
    op: str, n: int, size: float, prof: StepProfile, su: ScaleUp, step_latency_s: float
) -> float:
    """Seconds of ``op`` over ``n`` ranks of ``size`` bytes (module doc); 0 for size 0."""
    if size <= 0:
        return 0.0
    scaleup_bytes = prof.scaleup_bytes * size / prof.ref_bytes
    if op == "broadcast":
        lat = prof.chain_lat_s + prof.scaleup_transfers * su.latency_s
        return step_latency_s + lat + max(prof.wire_max_s(size), su.send_s(scaleup_bytes))
    step = step_latency_s + max(prof.fabric_s(size), su.time_s(scaleup_bytes))
    return step * (2 * (n - 1) if op == "all_reduce" else n - 1 if op in RING_OPS else 1)


# -- the table -------------------------------------------------------------------------------------
def check_op(op: str, mode: str) -> None:
    if op not in OPS:
        raise ConfigError("op", f"must be one of {', '.join(OPS)}, got {op!r}")
    if mode == "flowlet":
        raise ConfigError(
            "mode",
            "flowlet re-hashes in the gaps between steps, which the one simulated "
            f"step does not have; use one of {', '.join(MODES)}",
        )
    if mode not in MODES:
        raise ConfigError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")


def nccl_table(
    cluster: ClusterConfig,
    op: str,
    sizes: list[int],
    *,
    gpus: int | None = None,
    mode: str = "adaptive",
    channels: int = 4,
    step_latency_s: float = 0.0,
    seed: int = 0,
) -> dict:
    """nccl-tests' out-of-place table of ``op`` for ``sizes`` (requested bytes) on ``gpus``
    GPUs of ``cluster`` (default all; errors about them name ``ranks``): ``{"nic_gbps",
    "rows": [{"size_bytes", "count", "type", "redop", "root", "time_us", "algbw_gbs",
    "busbw_gbs"}, ...], ...}`` (module doc). ``step_latency_s``: software latency per step."""
    check_op(op, mode)
    n = cluster.gpus if gpus is None else gpus
    if not 2 <= n <= cluster.gpus:
        raise ConfigError(
            "ranks", f"must be in 2..{cluster.gpus:,} (the cluster's GPUs), got {n:,}"
        )
    if channels < 1:
        raise ConfigError("channels", f"must be >= 1, got {channels}")
    kind = "permutation" if op == "broadcast" else op  # one step of n flows
    topo = build_cluster(cluster)
    check_collective_size(
        "ranks", kind, n, sync="step", channels=channels, planes=topo.planes, modes=(mode,)
    )
    shown = [nccl_size(op, v, n) for v in sizes]
    ref = max(size for size, _ in shown) or FLOAT_BYTES
    router = Router(topo, mode, seed=seed)
    prof = step_profile(topo, router, op, n, cluster.domain_gpus, ref, channels=channels, seed=seed)
    su = cluster.scale_up
    scale_up = ScaleUp(su.bandwidth_gbps * 1e9, su.latency_s) if su else ScaleUp(np.inf, 0.0)
    rows = [
        _row(op, n, size, count, collective_time_s(op, n, size, prof, scale_up, step_latency_s))
        for size, count in shown
    ]
    return {
        "op": op,
        "gpus": n,
        "cluster": cluster.name,
        "mode": mode,
        "channels": channels,
        "step_latency_us": step_latency_s * 1e6,
        "nic_gbps": cluster.fabric.nic_rate_gbps,
        "scale_up": su.model_dump() if su else None,
        "rows": rows,
        "avg_busbw_gbs": float(np.mean([r["busbw_gbs"] for r in rows])),
    }


def _row(op: str, n: int, size: int, count: int, time_s: float) -> dict:
    algbw = size / time_s / 1e9 if time_s > 0 else 0.0
    return {
        "size_bytes": size,
        "count": count,
        "type": "float",
        "redop": "sum" if op in ("all_reduce", "reduce_scatter") else "none",
        "root": 0 if op == "broadcast" else -1,
        "time_us": time_s * 1e6,
        "algbw_gbs": algbw,
        "busbw_gbs": algbw * bus_factor(op, n),
    }


def format_table(res: dict) -> str:
    """The table as nccl-tests prints its out-of-place columns (time with 2, 1 or 0 decimals
    below 100 us, 10 ms and above, bandwidths with 2), a ``#`` header and its average."""
    lines = [
        f"# {res['op']} on {res['gpus']:,} GPUs of {res['cluster'] or 'the default fabric'}: "
        f"{res['mode']}, {res['channels']} channels, NIC {res['nic_gbps']:g} Gb/s",
        "#",
        "#       size         count      type   redop    root     time   algbw   busbw",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]
    for r in res["rows"]:
        t = r["time_us"]
        time = f"{t:7.0f}" if t >= 10000 else f"{t:7.1f}" if t >= 100 else f"{t:7.2f}"
        lines.append(
            f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['redop']:>6s}  "
            f"{r['root']:6d}  {time}  {r['algbw_gbs']:6.2f}  {r['busbw_gbs']:6.2f}"
        )
    lines.append(f"# Avg bus bandwidth    : {res['avg_busbw_gbs']:g}")
    return "\n".join(lines)
