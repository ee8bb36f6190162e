"""The flow engine calibrated by the packet engine: per-message start-up and first-window loss.

The fluid engine (:mod:`trainfabric.fabric.flow.engine`) sends every flow at its max-min rate from
its first instant and adds the path's propagation at the end. A packet transport
(:mod:`trainfabric.fabric.packet`, NDP-like by default) differs in two ways that the packet
runs show (``benchmarks/flow_vs_packet.py``):

1. **Start-up per message.** Before the last byte arrives, a message pays what the fluid
   model has no name for: store-and-forward of a packet at every hop, the first round trip of
   its window, pulls/ACKs. Modelled as a constant delay ``startup_s`` added to every flow's
   ``delay_s`` (a message posted at ``t`` starts sending at ``t + startup_s``). It matters
   for small messages and for dependent steps (a ring pays it once per step).
2. **First-window loss.** Every message starts with ``window_packets`` in flight at line
   rate. When ``k`` messages start towards one receiver together, its port holds
   ``queue_packets`` and drains one packet per packet time; the rest of the burst is trimmed
   (or dropped) and sent again. Per receiver ``d`` and release instant, the excess is

       E_d = max(0, Σ_{f → d} min(window, n_f) − queue_packets − window)

   packets (one window drains while the burst arrives), and every flow to ``d`` in that
   burst gets the predicted retransmitted fraction ``r_f = E_d / Σ_{f → d} n_f``
   (``n_f``: its packets). Retransmitted bytes cross the sender's link again, so the flow's
   bytes are inflated to ``bytes_f (1 + retx_gain · r_f)``. In an incast the receiver is
   the bottleneck and the sender links have room, so the inflation costs little; in an
   all-to-all of small messages the senders are the bottleneck and it costs its full size.

Both constants are fitted (:func:`fit`) on packet runs of some sizes and seeds and reported
with the flow-vs-packet error on others (``benchmarks/flow_vs_packet.py``; its JSON in
``benchmarks/results/flow_vs_packet.json``): packet engine defaults (NDP-like transport,
trimming, fair round-robin NIC and pull queues), fitted on a 100G single-plane leaf-spine
(32 hosts, seed 0); held out on the same fabric at 64 hosts and other sizes (seeds 1, 11,
21) and on a 4-plane 800G multiplane fabric (32 hosts, seeds 2, 11, 21). :data:`FITTED`:
``startup_s = 2 us``, ``retx_gain = 0`` (trimming makes first-window loss cheap: incast
makespans agree within 4% without it). Held-out error of the calibrated engine (worst over
seeds, makespan and mean FCT, spray and adaptive), leaf-spine / multiplane: ring
all-reduce 1.3% (raw 7.7%) / 8.1% (raw 15.6%), permutation 5.4% / spray 2.5%, incast 1.1%
/ 4.2%, small-flow all-to-all 3.4% / 25% (mean FCT). Not repaired, named: failures (up to
45%: the packet NIC retires congested paths while the fluid spray splits obliviously; the
packet adaptive mode's greedy per-packet choices against the fluid LP split), flaps (up to
92%: lost packets wait for a NACK or the 1 ms retransmission timeout, the fluid model only
reroutes), adaptive on multiplane (up to 35%: the packet NIC picks a plane by its own
queue), and ECMP in every family (each engine hashes connections to paths with its own
function, so collisions differ: a different draw, not a model error).

The calibration is **opt-in** (:func:`simulate_calibrated`, or ``calibration = true`` in a
scenario): the raw fluid model stays the default because it is exact for what it models
(max-min rates; the tests compare it with closed forms) and because the fitted constants
belong to one transport and queue setting; the flow engine keeps its speed either way (the
calibration only edits the flow table). :func:`fluid_valid` marks the regime the
calibration does not repair: a large predicted first-window loss (incast and small-flow
all-to-alls beyond ``MAX_RETX``), where the packet engine is the reference for per-flow
completion times.

Units: seconds, bytes, packets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.result import EngineResult

MAX_RETX = 0.2  # predicted retransmitted fraction beyond which the fluid model is not trusted


@dataclass(frozen=True)
class Calibration:
    """The two fitted constants and the transport setting they were fitted for."""

    startup_s: float = 0.0
    retx_gain: float = 0.0
    window_packets: int = 50
    queue_packets: int = 35
    mtu_bytes: int = 4096

    def __post_init__(self):
        if not (np.isfinite(self.startup_s) and self.startup_s >= 0):
            raise ConfigError("calibration.startup_s", "must be finite and >= 0")
        if not (np.isfinite(self.retx_gain) and self.retx_gain >= 0):
            raise ConfigError("calibration.retx_gain", "must be finite and >= 0")
        for name in ("window_packets", "queue_packets", "mtu_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"calibration.{name}", "must be >= 1")


RAW = Calibration()
# Fitted by benchmarks/flow_vs_packet.py on its fit cases (see its JSON for the held-out error).
FITTED = Calibration(startup_s=2.0e-6, retx_gain=0.0)


def first_window_retx(flows: FlowTable, cal: Calibration) -> np.ndarray:
    """Predicted retransmitted fraction ``r_f`` of every flow (module doc, item 2).

    Flows burst together when they have the same receiver and start together: the same
    ``release_s`` and ``delay_s`` and the same dependencies (compared by their count and
    first and last flow id, so the flows one collective step releases share a burst and
    successive steps do not).
    """
    n_pkts = np.ceil(flows.bytes / cal.mtu_bytes)
    first = np.minimum(n_pkts, cal.window_packets)
    lo, hi = flows.deps_ptr[:-1], flows.deps_ptr[1:]
    padded = np.r_[flows.deps, -1]  # slot deps.size: "no dependency"
    dep_first = padded[np.where(hi > lo, lo, flows.deps.size)]
    dep_last = padded[np.where(hi > lo, hi - 1, flows.deps.size)]
    timing = [flows.release_s.view(np.int64), flows.delay_s.view(np.int64)]
    keys = np.stack([flows.dst, hi - lo, dep_first, dep_last, *timing])
    _, burst = np.unique(keys, axis=1, return_inverse=True)
    burst = burst.ravel()
    in_flight = np.bincount(burst, weights=first)
    total = np.bincount(burst, weights=n_pkts)
    excess = np.maximum(0.0, in_flight - cal.queue_packets - cal.window_packets)
    return excess[burst] / total[burst]


def calibrated_flows(flows: FlowTable, cal: Calibration) -> FlowTable:
    """``flows`` with the start-up delay added and the bytes inflated (module doc); the same
    table when both constants are 0."""
    if cal.startup_s == 0 and cal.retx_gain == 0:
        return flows
    inflate = 1.0 + cal.retx_gain * first_window_retx(flows, cal)
    return replace(flows, bytes=flows.bytes * inflate, delay_s=flows.delay_s + cal.startup_s)


def fluid_valid(flows: FlowTable, cal: Calibration = FITTED) -> bool:
    """False where the predicted first-window loss of some flow exceeds :data:`MAX_RETX`:
    the incast / small-message regime, where the fluid model has no loss at all. The packet
    runs (``benchmarks/flow_vs_packet.py``) keep its makespans within a few percent there
    (trimming and fair pull queues), but per-flow times of small messages on fast links
    drift (all-to-all of 32 KiB on 200G planes: mean FCT +25%)."""
    return bool(first_window_retx(flows, cal).max(initial=0.0) <= MAX_RETX)


@dataclass(frozen=True)
class CalibratedResult(EngineResult):
    """The flow engine's result on the calibrated flows, with ``start_s`` moved back to the
    instant each message was posted (so ``finish_s - start_s`` includes its start-up).
    ``finish_s`` is the raw result's, so ``makespan_s`` and ``unfinished``
    (:class:`~trainfabric.fabric.result.EngineResult`) are its too."""

    start_s: np.ndarray
    finish_s: np.ndarray
    raw: object

    def __getattr__(self, name):  # n_events, wall_s, stalls(), timelines: the engine's own
        return getattr(self.raw, name)


def simulate_calibrated(topo, flows: FlowTable, router, cal: Calibration = FITTED, **kwargs):
    """:func:`trainfabric.fabric.flow.engine.simulate` on :func:`calibrated_flows`; ``kwargs`` go
    to the engine (events, link_up, ...)."""
    from trainfabric.fabric.flow.engine import simulate

    res = simulate(topo, calibrated_flows(flows, cal), router, **kwargs)
    return CalibratedResult(start_s=res.start_s - cal.startup_s, finish_s=res.finish_s, raw=res)


def fit(
    error, startup_grid: np.ndarray, gain_grid: np.ndarray, base: Calibration = RAW
) -> tuple[Calibration, float]:
    """The grid point minimising ``error(cal)`` (a non-negative loss over the fit cases, e.g.
    the mean squared log ratio of completion times); coordinate search: the start-up on the
    grid with the gain at its first value, then the gain, then the start-up again."""
    best = replace(base, startup_s=float(startup_grid[0]), retx_gain=float(gain_grid[0]))
    loss = error(best)
    for name, grid in (
        ("startup_s", startup_grid),
        ("retx_gain", gain_grid),
        ("startup_s", startup_grid),
    ):
        for v in grid:
            cand = replace(best, **{name: float(v)})
            e = error(cand)
            if e < loss:
                best, loss = cand, e
    return best, loss
