"""Load balancing at packet granularity (the modes of :data:`trainfabric.fabric.routing.MODES`).

Decisions are taken per packet where the real mechanism takes them (the kernel's
``pick_plane`` at the source NIC, ``pick_uplink`` at a leaf, ``pick_cable`` at a spine):

* ``ecmp``: the plane, the leaf uplink and the spine cable are hashes of the connection's
  entropy (``flows.entropy``) and the switch id: one path per connection, collisions
  persist. ACKs/pulls hash the reverse direction independently. Views: routing (1 s).
* ``flowlet``: as ecmp, but the entropy is re-drawn (``hash(entropy, flowlet#)``) when the
  connection sends after an idle gap longer than ``flowlet_gap_s``. Views: routing.
* ``pinning`` (swplb): the host pins the connection to plane ``(hash(src, dst) + channel)``
  among the planes whose host links are up in the *software* view, ECMP inside it (one path,
  in order). It moves to the next usable plane when its plane's host link is down in the
  software view, or on congestion / loss (a NACK or a timeout) at most once per
  ``reaction_software_s``, and only after a **drain barrier**: no packet is sent until every
  packet outstanding on the old plane is acknowledged, NACKed or timed out.
* ``spray`` (hwplb / MRC-like NIC spraying): every data packet (new or retransmitted) takes
  the next path of a per-connection cyclic permutation of all ``P x U x C`` paths (plane,
  leaf uplink, spine cable; a fresh random permutation ``(a k + b) mod n`` every cycle, as
  htsim's ``perm`` reshuffles per cycle). A path whose packet was trimmed or lost is
  *retired* for ``path_retire_s`` (the NIC's congestion / failure feedback, reaction about
  one RTT). Planes: local port in the hardware view, remote port in the routing view; a leaf
  whose designated uplink is unusable (routing view) re-hashes among the usable ones.
* ``adaptive`` (hwplb + Spectrum-X adaptive routing): the NIC picks the plane whose local
  port has the fewest bytes queued; each leaf picks, per packet, the eligible uplink with
  the fewest bytes queued (queued + the rest of the packet being serialised), each spine the
  least-loaded cable into the destination leaf; ties at random. Views: hardware (5 us).

Fat-tree (single plane, 3 tiers): an edge picks one of its ``u`` aggs, an agg of the source
pod one of its ``ua`` core uplinks (spray: the path's digits; ecmp-like: a hash; adaptive:
the least occupied eligible port), a core forwards on the cable with the same uplink index
into the destination pod.

Eligible uplink: up in the view and its spine has an up cable into the destination leaf.
A packet sent into a link that is down in truth is lost there (and what is in flight on a
link when it fails); each mechanism routes around a failure only once its view has it.
"""

from __future__ import annotations

import numpy as np

from trainfabric.fabric import topology as T
from trainfabric.fabric.routing import _VIEWS

VIEW_INDEX = {"hardware": 0, "software": 1, "routing": 2}


def mode_views(mode: str) -> tuple[int, int, int]:
    """Indices (plane choice / local port, remote host port, fabric) of the views ``mode``
    uses (the same table as the flow engine's :mod:`trainfabric.fabric.routing`)."""
    return tuple(VIEW_INDEX[v] for v in _VIEWS[mode])


def n_paths(topo: T.Topology, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Spray paths per flow: ``P`` within one leaf, ``P x U x C`` across leaves; fat-tree:
    1 within an edge, ``u`` (aggs) within a pod, ``u x ua`` (agg uplinks) across pods."""
    if topo.kind == "fat_tree":
        t = topo.tables
        u, ua, e_pod = t["edge_up"].shape[1], t["agg_up"].shape[1], int(t["edges_per_pod"])
        a, b = topo.leaf_of(src), topo.leaf_of(dst)
        return np.where(a == b, 1, np.where(a // e_pod == b // e_pod, u, u * ua)).astype(np.int64)
    leaf_up, spine_down = topo.tables["leaf_up"], topo.tables["spine_down"]
    cross = leaf_up.shape[2] * spine_down.shape[3]
    same = topo.leaf_of(src) == topo.leaf_of(dst)
    return np.where(same, topo.planes, topo.planes * cross).astype(np.int64)
