"""Packet-level discrete-event fabric simulator (numba), on the flow engine's objects.

``simulate_packets(topo, flows, mode, config=PacketConfig(...))`` runs a
:class:`~trainfabric.fabric.flows.FlowTable` (dependencies and delays honoured with the flow
engine's start rule) on a :class:`~trainfabric.fabric.topology.Topology` (leaf_spine,
multiplane, fat_tree) under a load-balancing mode of :data:`trainfabric.fabric.routing.MODES`.

Model (units: bytes, seconds; ``mtu_bytes`` is the payload of a full packet):

* **Links**: a packet of ``w`` wire bytes (payload + ``header_bytes``; a trimmed packet or a
  control packet is ``header_bytes``) occupies a link of rate ``c`` for ``8 w / c`` and
  arrives ``hop_latency_s`` after its last bit left (store and forward at every hop).
* **Output queues**: one per directed link (host NIC ports included), two classes served in
  strict priority: control packets and trimmed headers (high), data (low; at a host NIC
  also NACKs, served round-robin over flows, one packet per flow in turn, as htsim's
  FairPriorityQueue; FIFO at switch ports). A header first in its class is put on the wire
  when the port frees without waiting for an event (not under PFC). At a switch port
  the low class holds at most ``queue_packets x mtu_bytes`` bytes counting the packet being
  serialised (htsim's accounting), the high class twice that. ECN (data, at switch ports):
  marked with probability ``(q - kmin) / (kmax - kmin)`` for ``kmin <= q < kmax`` and 1 above
  (``q`` in bytes, thresholds ``ecn_k*_packets x mtu_bytes``; ``kmin = kmax`` is a step).
* **Switch modes**: ``trim`` — a data packet that does not fit is cut to its header, which
  goes on at high priority (with probability 1/2 the arriving packet, otherwise the last one
  queued, which the arrival replaces: htsim's CompositeQueue); ``lossy`` — drop tail;
  ``lossless`` — no capacity limit, PFC: the bytes a switch holds that arrived over link
  ``l`` above ``pfc_xoff_packets x mtu`` send a PAUSE to ``l``'s transmitter (it arrives
  ``hop_latency_s`` later and stops new transmissions on ``l``), below ``pfc_xon_packets``
  a RESUME; nothing is ever dropped (a failed link still loses what is sent onto it).
* **Transports** (:mod:`~trainfabric.fabric.packet.transport`): ``ndp`` (receiver-driven,
  pulls paced at the receiver's rate) and ``dctcp`` (RoCE-like window, DCTCP ECN law).
  Losses are recovered by NACKs (trimmed header; a hole ``reorder_nack_packets`` below the
  highest arrival in the sprayed modes, 3 in the in-order modes) and a timeout ``rto_s``.
  The receiver delivers in order through a reordering buffer; each payload byte is
  delivered once (duplicates are counted, not delivered).
* **Load balancing**: :mod:`~trainfabric.fabric.packet.lb`.
* **Connections**: flows sharing an ``entropy`` value are one connection for path choice
  (the same ECMP / flowlet hash, the same pinned plane: NCCL's persistent queue pairs);
  distinct values are new connections (htsim's generators). Transport state (window,
  credits, sequence space) is per flow: every message starts with the initial window.
* **Failures**: a link that is down in truth drops what is sent onto it and what is in flight
  on it; the hardware / software / routing views learn a change after
  ``reaction_*_s``; static failures (``link_up``) are known to every view from t = 0.
* **Metrics**: :mod:`~trainfabric.fabric.packet.result` (latency, jitter = p99 - p50 of the
  one-way latency, queue occupancy, reordering depth, retransmissions, lost bytes, goodput
  timeline; ``acked_s`` = htsim's completion, the source holding the last ACK).
* **Checked against htsim** (same flows, htsim's parameters: 100 Gb/s, 1 us per hop, MTU
  4000 + 64 B, 35-packet queues, IW 50): 512-host 2 MB permutation acked FCT p50/p99
  178.3/179.2 us (htsim 178.2/179.3, spray/perm), 184.6/188.5 (184.3/188.3, adaptive /
  ecmp_ar); 128-host 100 kB all-to-all 1052.6/1074.9 (1053.0/1074.2); 64-to-1 incast
  completion 5272 (5270); 8 x 16 chained ring 972 (978).
* **Limits**: :mod:`~trainfabric.fabric.packet.config` (packet count and memory bound).
"""

from trainfabric.fabric.packet.config import PacketConfig

__all__ = ["PacketConfig", "PacketResult", "simulate_packets"]


def __getattr__(name: str):
    """``simulate_packets`` and ``PacketResult`` load lazily: importing the config (as the
    scenario models do) must not load numba."""
    if name == "simulate_packets":
        from trainfabric.fabric.packet.driver import simulate_packets

        return simulate_packets
    if name == "PacketResult":
        from trainfabric.fabric.packet.result import PacketResult

        return PacketResult
    raise AttributeError(name)
