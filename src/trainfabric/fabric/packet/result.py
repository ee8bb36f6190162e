"""What one packet-level run produced (:class:`PacketResult`) and its summary figures.

Definitions (used by :meth:`PacketResult.summary` and everywhere the engine reports them):

* **one-way latency** of a data packet: from the first bit leaving the source NIC (start of
  serialisation on the host link, so NIC queueing is *not* included) to its last bit reaching
  the receiver NIC: serialisation at every hop, propagation, switch queueing. ``latency_s``
  is a uniform sample (reservoir, seeded) of at most ``latency_samples`` of them.
* **jitter**: ``p99 - p50`` of that one-way latency (us).
* **FCT** (flow completion time): ``finish_s - start_s``, finish = the last payload byte
  delivered in order at the receiver; ``acked_s`` is when the source got the ACK covering
  it (htsim's definition of a finished flow).
* **queue occupancy** per directed link: bytes waiting in its output queue (the packet being
  serialised excluded); ``queue_max_bytes`` and the time mean ``queue_mean_bytes`` over the
  run; ``link_bytes``: wire bytes each link transmitted (its mean utilisation is
  ``8 x link_bytes / (capacity x end_s)``).
* **reordering depth** per flow: the most packets ever held in the receiver's reordering
  buffer (received above the first missing sequence); ``in_order_packets`` (the first
  missing sequence) and ``received_packets`` (distinct packets received) at the end of the
  run: the buffer holds their difference.
* **lost bytes** per flow: payload of data packets dropped on a link that was down (sent onto
  it, queued at its port, or in flight when it failed) or with no route; ``dropped`` counts
  every packet discarded (queue drops, dead links, no route at a switch or at the NIC, so
  ``lost_bytes.sum() <= dropped x mtu``) and ``trimmed`` the trims.
  ``detected_s[mechanism][i]``: when each mechanism (hardware, software, routing) learned
  link event ``i`` (its time plus that mechanism's reaction time; the model's views change
  exactly then).
* **line-rate fraction** of a flow: ``bytes x 8 / (FCT x rate)`` (payload goodput over the
  rate given, e.g. the NIC rate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric.result import EngineResult

# The per-run figures of :meth:`PacketResult.summary` that scenarios report beside the flow
# engine's columns (:meth:`PacketResult.packet_metrics`).
PACKET_KEYS = (
    "p50_latency_us",
    "p99_latency_us",
    "p999_latency_us",
    "jitter_us",
    "retransmit_fraction",
    "dropped",
    "trimmed",
    "timeouts",
    "reorder_max",
    "queue_max_bytes",
)


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else float("nan")


@dataclass(frozen=True)
class PacketResult(EngineResult):
    """Per-flow, per-link and global outputs of :func:`simulate_packets` (seconds, bytes);
    ``makespan_s``, ``unfinished``, :meth:`packet_metrics`:
    :class:`~trainfabric.fabric.result.EngineResult`."""

    start_s: np.ndarray
    finish_s: np.ndarray
    acked_s: np.ndarray
    delivered_bytes: np.ndarray
    flow_bytes: np.ndarray
    lost_bytes: np.ndarray
    detected_s: dict
    flow_job: np.ndarray
    reorder_max: np.ndarray
    in_order_packets: np.ndarray
    received_packets: np.ndarray
    queue_max_bytes: np.ndarray
    queue_mean_bytes: np.ndarray
    link_bytes: np.ndarray
    latency_s: np.ndarray
    n_latency: int
    n_events: int
    n_packets: int
    sent_packets: int
    control_packets: int
    retransmitted: int
    dropped: int
    trimmed: int
    ecn_marked: int
    pause_events: int
    duplicates: int
    timeouts: int
    migrations: int
    no_route: int
    end_s: float
    wall_s: float
    timeline: np.ndarray
    timeline_res_s: float
    pool_peak: int  # the most packet records in use at once
    heap_peak: int  # the most events pending at once in the event queue
    events_by_kind: dict

    def _has_makespan(self) -> bool:
        """Only when some flow finished: a run in which none did has ``makespan_s = 0.0``."""
        return bool(np.isfinite(self.finish_s).any())

    @property
    def fct_s(self) -> np.ndarray:
        return self.finish_s - self.start_s

    @property
    def events_per_s(self) -> float:
        return self.n_events / self.wall_s if self.wall_s > 0 else float("nan")

    def line_rate_fraction(self, rate_bps: float) -> np.ndarray:
        """Per flow, payload goodput over its FCT as a fraction of ``rate_bps``."""
        return self.flow_bytes * 8.0 / (self.fct_s * rate_bps)

    def goodput_timeline(self, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
        """``(edges[B + 1], bytes[jobs, B])``: payload bytes delivered in order per job in
        bins of ``bin_s`` (rounded to a whole number of the recorded resolution)."""
        if not bin_s > 0:
            raise ConfigError("bin_s", "must be > 0")
        per = max(1, int(round(bin_s / self.timeline_res_s)))
        tl = self.timeline
        used = int(np.flatnonzero(tl.any(axis=0)).max(initial=-1)) + 1
        nb = max(1, -(-used // per))
        pad = np.zeros((tl.shape[0], nb * per))
        pad[:, :used] = tl[:, :used]
        binned = pad.reshape(tl.shape[0], nb, per).sum(axis=2)
        return np.arange(nb + 1) * per * self.timeline_res_s, binned

    def summary(self) -> dict:
        """Headline figures (module doc for the definitions); times in us."""
        lat = self.latency_s * 1e6
        fct = self.fct_s[np.isfinite(self.fct_s)] * 1e6
        p50, p99 = _pct(lat, 50), _pct(lat, 99)
        return {
            "flows": int(self.finish_s.size),
            "unfinished": self.unfinished,
            "makespan_us": self.makespan_s * 1e6,
            "fct_p50_us": _pct(fct, 50),
            "fct_p99_us": _pct(fct, 99),
            "fct_max_us": float(fct.max()) if fct.size else float("nan"),
            "p50_latency_us": p50,
            "p99_latency_us": p99,
            "p999_latency_us": _pct(lat, 99.9),
            "jitter_us": p99 - p50,
            "packets": self.n_packets,
            "retransmitted": self.retransmitted,
            "retransmit_fraction": self.retransmitted / max(self.n_packets, 1),
            "dropped": self.dropped,
            "trimmed": self.trimmed,
            "ecn_marked": self.ecn_marked,
            "pause_events": self.pause_events,
            "timeouts": self.timeouts,
            "reorder_max": int(self.reorder_max.max(initial=0)),
            "queue_max_bytes": float(self.queue_max_bytes.max(initial=0.0)),
            "events": self.n_events,
            "wall_s": self.wall_s,
            "events_per_s": self.events_per_s,
        }

    def packet_metrics(self) -> dict:
        """:data:`PACKET_KEYS` of :meth:`summary`: the figures a scenario reports per run."""
        summary = self.summary()
        return {k: summary[k] for k in PACKET_KEYS}
