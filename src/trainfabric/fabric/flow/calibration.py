"""The flow engine calibrated by the packet engine: per-message start-up, first-window loss and
the trimming model of failures, flaps and adaptive plane queues.

The fluid engine (:mod:`trainfabric.fabric.flow.engine`) sends every flow at its max-min rate from
its first instant and adds the path's propagation at the end. A packet transport
(:mod:`trainfabric.fabric.packet`, NDP-like by default) differs in three ways that the packet
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
all-reduce 1.3% (raw 7.7%) / 8.1% (raw 15.6%), permutation 5.4% / 10% (raw 36%: adaptive),
incast 1.1% / 4.2%, small-flow all-to-all 3.4% / 25% (mean FCT).

3. **Failures, flaps, adaptive plane queues.** Where a link is down or flaps, and under
   adaptive routing on multiplane fabrics, the calibration also carries a
   :class:`~trainfabric.fabric.flow.trimming.TrimmingModel` (that module's doc: trimming
   instead of max-min throttling, adaptive routing's local decisions, spurious
   retransmissions after reordering, lost packets waiting for timeouts), whose four
   constants are fitted after the two above on the failure and flap cases of the
   leaf-spine fit fabric and of a 24-host multiplane one (and its permutation). Held out,
   leaf-spine / multiplane: failures 7.5% / 10.6% (before it 45% / 32%), flaps 7.3% /
   12.0% (66% / 92%). Not repaired, named: ECMP in every family (each engine hashes
   connections to paths with its own function, so collisions differ: a different draw, not
   a model error).

The calibration is **opt-in** (:func:`simulate_calibrated`, or ``calibration = true`` in a
scenario): the raw fluid model stays the default because it is exact for what it models
(max-min rates; the tests compare it with closed forms) and because the fitted constants
belong to one transport and queue setting; the flow engine keeps its speed either way (the
calibration edits the flow table; the trimming model runs the Python loop, and only on the
runs it applies to). :func:`fluid_valid` marks the regime the
calibration does not repair: a large predicted first-window loss (incast and small-flow
all-to-alls beyond ``MAX_RETX``), where the packet engine is the reference for per-flow
completion times.

Units: seconds, bytes, packets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric.flow.trimming import TrimmingModel, simulate_trimmed
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.result import EngineResult

MAX_RETX = 0.2  # predicted retransmitted fraction beyond which the fluid model is not trusted


@dataclass(frozen=True)
class Calibration:
    """The two fitted constants, the transport setting they were fitted for, and the model
    of trimming, reordering and loss recovery on failed or flapping links and under adaptive
    routing (:class:`~trainfabric.fabric.flow.trimming.TrimmingModel`, with its own fitted
    constants; ``None``: the raw engine's rates there)."""

    startup_s: float = 0.0
    retx_gain: float = 0.0
    window_packets: int = 50
    queue_packets: int = 35
    mtu_bytes: int = 4096
    trimming: TrimmingModel | None = None

    def __post_init__(self):
        if not (np.isfinite(self.startup_s) and self.startup_s >= 0):
            raise ConfigError("calibration.startup_s", "must be finite and >= 0")
        if not (np.isfinite(self.retx_gain) and self.retx_gain >= 0):
            raise ConfigError("calibration.retx_gain", "must be finite and >= 0")
        for name in ("window_packets", "queue_packets", "mtu_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"calibration.{name}", "must be >= 1")


RAW = Calibration()
# Fitted by benchmarks/flow_vs_packet.py on its fit cases (see its JSON for the held-out error):
# the start-up and the gain on the healthy leaf-spine fit cases, then the trimming model's four
# constants (dimensionless but for the fraction) on the failure and flap fit cases of both fit
# fabrics and the multiplane permutation.
FITTED = Calibration(
    startup_s=2.0e-6,
    retx_gain=0.0,
    trimming=TrimmingModel(
        reorder_gain=1.5, adaptive_reorder_gain=1.0, loss_gain=1.0, second_timeout_fraction=0.55
    ),
)


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

    flows = calibrated_flows(flows, cal)
    if cal.trimming is None:
        res = simulate(topo, flows, router, **kwargs)
    else:
        res = simulate_trimmed(topo, flows, router, cal.trimming, **kwargs)
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


def fit_fields(error, base, grids: dict, sweeps: int = 2) -> tuple[object, float]:
    """Coordinate search over the fields of the dataclass ``base``: ``sweeps`` times, each
    field of ``grids`` in turn over its grid with the others held; returns the point
    minimising ``error`` (a non-negative loss, evaluated once per distinct point) and its
    loss. Used for the trimming model's fitted constants (``benchmarks/flow_vs_packet.py``)."""
    seen: dict[tuple, float] = {}

    def loss_of(cand) -> float:
        key = tuple(float(getattr(cand, name)) for name in grids)
        if key not in seen:
            seen[key] = float(error(cand))
        return seen[key]

    best, loss = base, loss_of(base)
    for _ in range(sweeps):
        for name, grid in grids.items():
            for v in grid:
                cand = replace(best, **{name: float(v)})
                e = loss_of(cand)
                if e < loss:
                    best, loss = cand, e
    return best, loss
