"""What a trimming packet transport does that max-min rates do not, on failed and flapping
links and in adaptive routing's plane queues (:class:`TrimmingModel`; opt-in, through
:mod:`trainfabric.fabric.flow.calibration`).

The raw engine (:mod:`trainfabric.fabric.flow.engine`) gives every flow its max-min rate on
the links its mode's split loads, and loses the share it sends into a link that is down in
truth until the mode learns it. The packet engine (:mod:`trainfabric.fabric.packet`: an
NDP-like transport on trimming switches, its default) differs in the four ways below.
They show where a link is down at the start (``link_up``) or changes state (``events``),
and under adaptive routing on a multiplane fabric whose plane ports hold more packets than
the receiver's reorder window (:meth:`TrimmingModel.queue_outlasts_window`: a 35-packet
queue of a 200G plane is 140 packets of an 800G NIC, over the 64 that trigger a NACK).
Only those runs take this model (:func:`applies`, in the engine's Python loop); every
other run is the raw engine's, bit for bit.

1. **Local decisions.** The packet engine's adaptive routing picks, per packet, the least
   occupied eligible port of each switch: it sees its own queues, not the congestion
   further on, so under failures it splits like the oblivious spray (evenly over the next
   hops that still reach the destination, in the hardware view), not like the router's
   min-congestion LP (:mod:`trainfabric.fabric.routing`): epochs here are begun without
   the demand that the LP balances.
2. **Trimming, not throttling.** A receiver pulls one packet per arrival (data or trimmed
   header) at its line rate, so a sender sends at its share of the host links whatever
   happens in the fabric; a fabric link offered more than its capacity trims the excess,
   which is sent again on another path. Per rate solve: send rates ``x`` are max-min fair
   on the host links alone; then, tier by tier in the order packets cross them (``UP1``,
   ``UP2``, ``DOWN2``, ``DOWN1``), link ``l`` is offered ``A_l = Σ_f a_fl x_f k_f``
   (``a_fl``: the flow's share on ``l``; ``k_f``: the share of its sends that survived the
   tiers before) and trims ``d_l = max(0, 1 − c_l / A_l)``; the flow keeps
   ``k_f ← k_f (1 − Σ_{l∈tier} a_fl d_l / Σ_{l∈tier} a_fl)``. Goodput ``x_f k_f
   (1 − lost_f) / (1 + u_f)`` (``u_f``: item 3). Max-min would instead slow every flow
   crossing the overloaded link to its fair share there, although most of its paths
   avoid it (on the held-out 20%-failure leaf-spine, max-min is 29-45% slower than the
   packet engine's spray, this model within 3%).
3. **Reordering.** A receiver NACKs a sequence that ``K = reorder_packets`` later packets
   overtook; one delayed by ``T`` more queued packets than another at a port of capacity
   ``c`` is overtaken by ``T x_f / c`` packets of a flow sending at ``x_f``, so it is sent
   again in vain once queues differ by ``T_f = K c / x_f`` packets, which a queue of
   ``Q = queue_packets`` only reaches where ``T_f < Q``. ``u_f`` (resends per send) is the
   larger of two causes (a packet is NACKed once):

   * *full queues*: an overloaded link (it trims) holds ``Q`` packets. With ``φ_f`` the
     share of the flow's deliveries that crossed such a link with ``T_f < Q`` (``1 − Π``
     over tiers of each tier's share), and reordering needing packets on faster paths as
     well, ``u_f = reorder_gain · φ_f (1 − φ_f)``;
   * *plane queues* (adaptive): the NIC picks the plane whose port is least occupied, by
     quantised occupancy (the packet engine's ``adaptive_levels``, the top one
     ``adaptive_top_level`` of a queue): once every port is above the top level they all
     look alike and it picks at random, so the ``E`` packets of its backlog above the
     levels random-walk among the ``P`` ports, uniformly over the simplex in the long run.
     A packet then joins a port ``D = q_port − q_min`` packets behind the emptiest, and
     ``P(D > T) = (P − 1) / P · (1 − T / E)^(P−1)`` (the chosen port is the emptiest with
     probability ``1/P``; above the minimum, the other ``P − 1`` queues share ``E − P
     q_min`` uniformly). The backlog is the initial window (``window_bdp`` bandwidth-delay
     products of a cross-leaf path, the packet engine's ``auto_window``) less the flow's
     packets in flight (``x_f`` times its round trip: shorter within a leaf, so a larger
     backlog), less ``P`` times the top level. Only packets past the initial window are
     pull-driven: ``u_f = adaptive_reorder_gain · (1 − W / N_f)⁺ · P(D > T_f)`` (``W``: the
     window, ``N_f``: the flow's packets).

   Both gains are fitted (``benchmarks/flow_vs_packet.py``).
4. **Loss recovery.** Packets sent into a link that is down in truth are lost without a
   header. The receiver NACKs a hole once ``K`` later packets arrived (the *NACK delay*
   ``τ_f = K · packet / x_f + 2 · hops · hop_latency``); while the flow still loses
   traffic, a retransmission or a NACK may be lost as well, and what is left waits for the
   retransmission timeout ``rto_s`` (fixed, no back-off) after the flow's last cumulative
   progress. A flow that lost ``L_f`` packets, a share ``p_f`` of what it sent meanwhile,
   over a period ``D_f``, leaves ``λ_f = loss_gain · L_f p_f (1 − τ_f / D_f)⁺`` packets
   unrepaired on average (a repair fails with a probability proportional to ``p_f``, and
   only while the loss lasts past the NACK delay), so it needs a timeout with probability
   ``1 − exp(−λ_f)`` (a stalled flow, its only path cut, always); of those,
   ``second_timeout_fraction`` need two (the first timeout resends only what was sent
   before the last progress; a retransmission lost after it waits for the second). Its
   last progress is mid-way through its losses (holes below the first unrepaired one are
   repaired all along): the flow completes no earlier than ``t_loss + max(τ_f, D_f / 2) +
   k · rto_s`` plus the path's propagation (``t_loss``: its first loss; ``k``: its
   timeouts). Which flows are hit is a matter of packet timing; the probabilities are
   dealt out in completion order by error diffusion (a running sum; a flow takes the event
   when the sum reaches 1/2, which then drops by 1), so a run has the expected number,
   deterministically. ``loss_gain`` and ``second_timeout_fraction`` are fitted.

Not modelled: where the packet engine's hash fallback sends a dead path's share (to one
next hop; the fluid split spreads it evenly: on the fit case with 10% of the cables down,
packet spray is 13% slower than this model); path retirement after a trim or a loss
(spray; folded into the fitted constants); timeouts after the first two while a link
stays down and in use; trimming on a healthy oversubscribed fabric (the raw engine's
max-min there).

Units: seconds, bits/s, packets of ``mtu + header`` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.flow.engine import _check, _Simulation, simulate
from trainfabric.fabric.flows import HEADER_BYTES, MTU_BYTES
from trainfabric.fabric.maxmin import link_load, path_sum

CORE_ORDER = (T.UP1, T.UP2, T.DOWN2, T.DOWN1)  # fabric tiers in the order packets cross them
OVER_RTOL = 1e-6  # a link is overloaded (trims, holds a full queue) above c_l (1 + OVER_RTOL)


@dataclass(frozen=True)
class TrimmingModel:
    """The transport's constants (module doc), the packet engine's defaults
    (:class:`~trainfabric.fabric.packet.config.PacketConfig`): ``queue_packets`` (switch
    queue, packets), ``reorder_packets`` (NACK threshold of sprayed flows, packets),
    ``rto_s`` (retransmission timeout, s), ``window_bdp`` (initial window, bandwidth-delay
    products), ``adaptive_top_level`` (adaptive routing's top occupancy level, fraction of
    a queue); and the fitted ones: ``reorder_gain`` and ``adaptive_reorder_gain`` (resends
    per reordered packet), ``loss_gain`` (unrepaired packets per lost packet and unit loss
    share) and ``second_timeout_fraction`` (of the flows that need a timeout, those that
    need two; in [0, 1])."""

    queue_packets: int = 35
    reorder_packets: int = 64
    rto_s: float = 1e-3
    window_bdp: float = 1.5
    adaptive_top_level: float = 0.2
    reorder_gain: float = 0.0
    adaptive_reorder_gain: float = 0.0
    loss_gain: float = 0.0
    second_timeout_fraction: float = 0.0

    def __post_init__(self):
        for name in ("queue_packets", "reorder_packets"):
            if getattr(self, name) < 1:
                raise ConfigError(f"trimming.{name}", "must be >= 1")
        for name in ("rto_s", "window_bdp"):
            if not (np.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(f"trimming.{name}", "must be finite and > 0")
        if not 0 < self.adaptive_top_level <= 1:
            raise ConfigError("trimming.adaptive_top_level", "must be in (0, 1]")
        for name in ("reorder_gain", "adaptive_reorder_gain", "loss_gain"):
            if not (np.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"trimming.{name}", "must be finite and >= 0")
        if not 0 <= self.second_timeout_fraction <= 1:
            raise ConfigError("trimming.second_timeout_fraction", "must be in [0, 1]")

    def queue_outlasts_window(self, topo) -> bool:
        """A NIC of several planes whose plane port holds more than ``K`` packets of a flow
        at the NIC rate: ``Q · nic_rate > K · c`` for a host link (module doc, item 3)."""
        host = topo.capacity_bps[~topo.fabric]
        if topo.planes < 2 or host.size == 0:
            return False
        return self.queue_packets * topo.nic_rate_bps > self.reorder_packets * host.min()


def applies(model: TrimmingModel, topo, router, link_up, events) -> bool:
    """Whether a run differs from the raw engine under ``model`` (module doc): a link down
    at the start, a link event, or adaptive routing where a plane queue outlasts the
    reorder window."""
    if events is not None and events.time_s.size > 0:
        return True
    if link_up is not None and not bool(np.all(link_up)):
        return True
    return router.mode == "adaptive" and model.queue_outlasts_window(topo)


def plane_reorder_probability(excess, behind, planes: int) -> np.ndarray:
    """``P(D > T) = (P − 1) / P · (1 − T / E)⁺^(P−1)``: a packet joins one of ``P`` ports
    at random, the ``E = excess`` packets of the backlog lying uniformly on the simplex of
    the ports (module doc, item 3), and waits behind more than ``T = behind`` packets more
    than at the emptiest port; 0 where ``E <= 0`` or ``P = 1``."""
    excess = np.asarray(excess, float)
    ratio = np.divide(behind, excess, out=np.ones_like(excess), where=excess > 0)
    spread = np.clip(1.0 - ratio, 0.0, 1.0)
    return (planes - 1) / planes * spread ** (planes - 1)


class TrimmingSimulation(_Simulation):
    """The engine's Python loop under the model (module doc): local adaptive epochs,
    trimming rates, reordering, and loss recovery at completion."""

    def __init__(
        self, topo, flows, router, events, link_up, record_links, wire_factor, model, packet_bits
    ):
        super().__init__(topo, flows, router, events, link_up, record_links, wire_factor)
        self.model = model
        self.packet_bits = float(packet_bits)
        self.mtu_bytes = packet_bits / 8.0 / wire_factor
        self.adaptive = router.mode == "adaptive"
        self.host_cap = np.where(topo.fabric, np.inf, topo.capacity_bps)
        tiers = [topo.link_tier == t for t in CORE_ORDER]
        self.tiers = [m for m in tiers if m.any()]
        self.host_up = topo.link_tier == T.HOST_UP
        self.host_down = topo.link_tier == T.HOST_DOWN
        n = flows.n
        self.loss_bits = np.zeros(n)  # bits sent into dead links
        self.loss_time = np.zeros(n)  # seconds active while losing (or stalled)
        self.loss_sent = np.zeros(n)  # bits sent meanwhile
        self.first_loss = np.full(n, np.nan)
        self.stalled = np.zeros(n, bool)
        self.diffusion = np.zeros(2)  # error-diffusion sums: a timeout, a second one
        self.timeouts = np.zeros(n, np.int64)  # timeouts each flow waited for (0, 1, 2)

    # -- 1. local decisions -----------------------------------------------------------------
    def _epoch(self) -> None:
        self.router.begin_epoch(self.truth, self.views)  # no demand: no min-congestion LP
        if self.active.size:
            self._route(self.active)

    # -- 2, 3. rates ------------------------------------------------------------------------
    def _rates(self) -> tuple[np.ndarray, np.ndarray]:
        act = self.active
        n_links = self.topo.n_links
        if act.size == 0:
            return np.zeros(0), np.zeros(n_links)
        ok = act[self.lost[act] < 1.0]
        self.n_solves += 1
        self.rate[act] = 0.0
        if ok.size == 0:
            return np.zeros(act.size), np.zeros(n_links)
        x = self._send_rates(ok)
        keep, resend, load = self._fabric(ok, x)
        self.rate[ok] = x
        good = np.zeros(self.flows.n)
        good[ok] = x * keep * (1.0 - self.lost[ok]) / (1.0 + resend)
        return good[act], load

    def _send_rates(self, ok: np.ndarray) -> np.ndarray:
        """Max-min fair rates (bits/s) of the flows ``ok`` on the host links alone."""
        return self._max_min(ok, self.host_cap)[0]

    def _fabric(self, ok: np.ndarray, x: np.ndarray):
        """Tier by tier (module doc, items 2 and 3): the share ``keep`` of each flow's sends
        that is delivered, the share ``resend`` of its sends repeated after a spurious NACK,
        and the load every link carries (bits/s)."""
        groups, cap, n_links = self.router.groups, self.topo.capacity_bps, self.topo.n_links
        m = self.model
        sg, sw = self.sg[ok], self.sw[ok]
        keep = np.ones(ok.size)
        in_order = np.ones(ok.size)
        load = link_load(sg, sw, groups, n_links, x) * self.host_up
        for mask in self.tiers:
            offered = link_load(sg, sw, groups, n_links, x * keep) * mask
            over = offered > cap * (1.0 + OVER_RTOL)
            trim = np.where(over, 1.0 - cap / np.where(over, offered, 1.0), 0.0)
            load += np.minimum(offered, cap)
            share = path_sum(sg, sw, groups, mask)
            has = share > 0
            lost = np.divide(
                path_sum(sg, sw, groups, trim), share, out=np.zeros_like(share), where=has
            )
            late = self._behind_full_queue(sg, sw, x, over)
            in_order *= 1.0 - np.divide(late, share, out=np.zeros_like(share), where=has)
            keep *= 1.0 - lost
        load += link_load(sg, sw, groups, n_links, x * keep) * self.host_down
        phi = np.clip(1.0 - in_order, 0.0, 1.0)
        resend = m.reorder_gain * phi * (1.0 - phi)
        if self.adaptive:  # a packet is NACKed once: the larger of the two causes
            resend = np.maximum(resend, m.adaptive_reorder_gain * self._plane_walk(ok, sg, sw, x))
        return keep, resend, load

    def _behind_full_queue(self, sg, sw, x, over) -> np.ndarray:
        """Per flow, its share through the overloaded links (``over``) of one tier whose
        full queue outlasts its reorder window, ``K c_l < Q x_f`` (module doc, item 3)."""
        m = self.model
        groups, cap = self.router.groups, self.topo.capacity_bps
        late = np.zeros(x.size)
        for c in np.unique(cap[over]):
            links = (over & (cap == c)).astype(float)
            fits = m.reorder_packets * c < m.queue_packets * x
            if fits.any():
                late += np.where(fits, path_sum(sg, sw, groups, links), 0.0)
        return late

    def _plane_walk(self, ok, sg, sw, x) -> np.ndarray:
        """Adaptive routing's plane queues (module doc, item 3): per flow, the share of its
        packets sent past the initial window times the probability that one of them is
        overtaken by ``K`` later ones."""
        m, topo = self.model, self.topo
        share = path_sum(sg, sw, self.router.groups, self.host_up.astype(float))
        port_sum = path_sum(sg, sw, self.router.groups, self.host_up * topo.capacity_bps)
        has = (share > 0) & (x > 0)
        port = np.divide(port_sum, share, out=np.zeros_like(share), where=has)  # c, bits/s
        pkt, hop, nic = self.packet_bits, topo.hop_latency_s, topo.nic_rate_bps
        hdr = pkt - 8.0 * self.mtu_bytes
        window = np.ceil(m.window_bdp * 4.0 * (pkt / nic + hdr / nic + 2.0 * hop) * nic / pkt)
        serialise = np.divide(pkt + hdr, port, out=np.zeros_like(port), where=has)
        in_flight = x * self.hops[ok] * (serialise + 2.0 * hop) / pkt
        top = m.adaptive_top_level * m.queue_packets * self.mtu_bytes * 8.0 / pkt
        excess = window - in_flight - topo.planes * top  # E, packets
        behind = m.reorder_packets * np.divide(port, x, out=np.full_like(x, np.inf), where=has)
        packets = self.flows.bytes[ok] / self.mtu_bytes
        pulled = np.clip(1.0 - window / np.maximum(packets, 1.0), 0.0, 1.0)
        return pulled * plane_reorder_probability(excess, behind, topo.planes)

    # -- 4. loss recovery -----------------------------------------------------------------------
    def _advance(self, t0: float, t1: float, goodput: np.ndarray, load: np.ndarray) -> None:
        act = self.active
        dt = t1 - t0
        if dt > 0 and act.size:
            busy = np.minimum(self.proj - t0, dt)
            hit = self.lost[act] > 0
            f, b = act[hit], busy[hit]
            self.loss_bits[f] += self.rate[f] * self.lost[f] * b
            self.loss_sent[f] += self.rate[f] * b
            self.loss_time[f] += b
            self.stalled[f] |= self.lost[f] >= 1.0
            first = f[np.isnan(self.first_loss[f])]
            self.first_loss[first] = t0
        super()._advance(t0, t1, goodput, load)

    def _complete(self, sent: np.ndarray, done: np.ndarray) -> None:
        """Flows ``done`` sent their last byte at ``sent``; one that needs timeouts is
        delivered when its recovery completes (module doc, item 4)."""
        recovered = self._recovery(done)
        hop = self.topo.hop_latency_s
        late = recovered - self.hops[done] * hop
        sent = np.where(np.isnan(recovered), sent, np.fmax(sent, late))
        super()._complete(sent, done)

    def _recovery(self, done: np.ndarray) -> np.ndarray:
        """Instant each of ``done`` has its lost packets back (``nan``: no timeout)."""
        m = self.model
        hop = self.topo.hop_latency_s
        span = self.loss_time[done]
        sent = self.loss_sent[done]
        mean = np.divide(sent, span, out=np.zeros(done.size), where=span > 0)
        tau = 2.0 * self.hops[done] * hop + np.divide(
            m.reorder_packets * self.packet_bits,
            mean,
            out=np.full(done.size, np.inf),
            where=mean > 0,
        )
        lost = self.loss_bits[done]
        share = np.divide(lost, sent, out=np.zeros(done.size), where=sent > 0)
        lasting = np.clip(1.0 - np.divide(tau, span, out=np.ones(done.size), where=span > 0), 0, 1)
        expected = m.loss_gain * lost / self.packet_bits * share * lasting
        p_timeout = np.where(self.stalled[done], 1.0, -np.expm1(-expected))
        out = np.full(done.size, np.nan)
        for i in np.flatnonzero(p_timeout > 0):
            if not self._deal(0, p_timeout[i]):
                continue
            k = 2 if self._deal(1, m.second_timeout_fraction) else 1
            f = done[i]
            self.timeouts[f] = k
            stall = self.first_loss[f] + (0.0 if self.stalled[f] else max(tau[i], span[i] / 2))
            out[i] = stall + k * m.rto_s + self.hops[f] * hop
        return out

    def _deal(self, which: int, p: float) -> bool:
        """One draw of error diffusion ``which`` (0: a timeout, 1: a second one)."""
        taken, self.diffusion[which] = deal(self.diffusion[which], p)
        return taken


def deal(total: float, p: float) -> tuple[bool, float]:
    """Error diffusion (module doc, item 4): add ``p`` to the running ``total``; the event
    is taken when it reaches 1/2, which then drops by 1. After any sequence of draws the
    number taken is within 1/2 of the sum of their probabilities."""
    total += p
    if total >= 0.5:
        return True, total - 1.0
    return False, total


def simulate_trimmed(
    topo,
    flows,
    router,
    model: TrimmingModel,
    *,
    events=None,
    link_up=None,
    until_s: float = np.inf,
    record_links: bool = False,
    batch_rtol: float = 0.0,
    mtu_bytes: int = MTU_BYTES,
    header_bytes: int = HEADER_BYTES,
    compiled: bool | None = None,
):
    """:func:`trainfabric.fabric.flow.engine.simulate` (same arguments) with ``model``:
    where it applies (a link down or a link event; adaptive routing whose queues outlast the
    reorder window) the rates are what a trimming packet transport does (module doc; the
    Python loop); elsewhere the engine's own run, unchanged."""
    if not applies(model, topo, router, link_up, events):
        return simulate(
            topo,
            flows,
            router,
            events=events,
            link_up=link_up,
            until_s=until_s,
            record_links=record_links,
            batch_rtol=batch_rtol,
            mtu_bytes=mtu_bytes,
            header_bytes=header_bytes,
            compiled=compiled,
        )
    wire_factor = _check(topo, flows, router, mtu_bytes, header_bytes, batch_rtol)
    if compiled:
        raise ConfigError("compiled", "the trimming model runs in the Python loop")
    packet_bits = 8.0 * (mtu_bytes + header_bytes)
    sim = TrimmingSimulation(
        topo, flows, router, events, link_up, record_links, wire_factor, model, packet_bits
    )
    sim.batch_rtol = float(batch_rtol)
    return sim.run(until_s)
