"""The packet engine's state arrays, by name (:class:`PacketState`).

The driver (:mod:`.driver`) sizes every array up front; the kernel (:mod:`.kernel`) reads them
as ``st.fi``, ``st.pi``, ... A ``NamedTuple`` is a plain tuple to numba (a field is resolved
at compile time), so the names cost nothing at run time. Row layouts (``FI_*``, ``P_*``, ...)
are the kernel's constants.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class PacketState(NamedTuple):
    fi: np.ndarray  # [flows, FI_*] int64: per flow (window, next sequence, path, ...)
    ff: np.ndarray  # [flows, FF_*] float64: per flow (times, bytes lost, ...)
    sst: np.ndarray  # [data packets] uint8: sender state of packet g = off[f] + s
    stime: np.ndarray  # [data packets] float64: its send time (s)
    rqn: np.ndarray  # [data packets] int64: retransmission queue links
    spath: np.ndarray  # [data packets] int64: the path it was sent on
    li: np.ndarray  # [directed links, L_*] int64: per link (queue, pause, wake, ...)
    lf: np.ndarray  # [directed links, LF_*] float64: per link (busy until, ingress bytes, ...)
    pi: np.ndarray  # [pool, P_*] int64: packets in flight (free list through P_NEXT)
    pf: np.ndarray  # [pool, PF_*] float64: their times
    hp: np.ndarray  # event queue rows (time, id * 16 + kind): its heaps and wheel nodes
    wl: np.ndarray  # event queue links (int64): wheel slots, their bitmap, node links
    views: np.ndarray  # [3 mechanisms, links] uint8: 1 where the mechanism believes it is up
    ret_path: np.ndarray  # [flows, N_RETIRE] paths a spraying flow retired after a loss ...
    ret_until: np.ndarray  # ... each until this time (s)
    conn_last: np.ndarray  # [connections] last send (s): a gap > the flowlet gap ...
    conn_fl: np.ndarray  # ... starts a new flowlet (its number re-hashes the path)
    link_tier: np.ndarray  # [links] tier of each link
    host_up: np.ndarray  # [planes, hosts] uplink of each host NIC per plane
    host_down: np.ndarray  # [planes, hosts] downlink to each host per plane
    hq: np.ndarray  # [hosts, N_HI] int64: host NIC queues (round-robin heads, armed)
    hfq: np.ndarray  # [hosts, N_HF] host NIC queue figures
    got: np.ndarray  # [data packets] uint8: receiver bit of packet g
    sq: np.ndarray  # [sub-queues, 3] round-robin sub-queues (head, tail, next)
