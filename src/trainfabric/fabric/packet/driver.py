"""Build the packet engine's arrays from a topology and a flow table, run the kernel and
wrap its outputs (:func:`simulate_packets`)."""

from __future__ import annotations

import math
import time

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.packet import kernel as K
from trainfabric.fabric.packet.config import PacketConfig, auto_window, check_size
from trainfabric.fabric.packet.lb import mode_views, n_paths
from trainfabric.fabric.packet.result import PacketResult
from trainfabric.fabric.packet.state import PacketState
from trainfabric.fabric.routing import SPLIT_MODES, check_mode

MODE_IDS = {
    "ecmp": K.M_ECMP,
    "flowlet": K.M_FLOWLET,
    "pinning": K.M_PINNING,
    "spray": K.M_SPRAY,
    "adaptive": K.M_ADAPTIVE,
}
SW_IDS = {"lossless": K.SW_LOSSLESS, "lossy": K.SW_LOSSY, "trim": K.SW_TRIM}
TR_IDS = {"ndp": K.TR_NDP, "dctcp": K.TR_DCTCP}
MAX_RETRIES = 6
POOL_FACTOR = 2  # packet records per window packet (data + its ACK / pull); doubles on overflow
TIMELINE_CELLS = 1 << 20  # jobs x bins of the goodput timeline (8 MB)
WHEEL_SLOTS_PER_LINK = 4  # event wheel: slots per directed link (wheel_slots)
WHEEL_SPAN = 2.0  # ... spanning this many full-packet hops (wheel_width_s)


def simulate_packets(
    topo: T.Topology,
    flows: FlowTable,
    mode: str,
    *,
    config: PacketConfig | None = None,
    events: LinkEvents | None = None,
    link_up: np.ndarray | None = None,
    seed: int = 0,
    until_s: float | None = None,
) -> PacketResult:
    """Packet-level run of ``flows`` on ``topo`` under load-balancing ``mode`` (package doc).

    ``link_up``: links down from t = 0 (every mechanism knows); ``events``: timed link state
    changes (each mechanism learns them after its reaction time); ``until_s``: stop there.
    """
    check_mode(mode)
    cfg = config if config is not None else PacketConfig()
    if not isinstance(cfg, PacketConfig):
        raise ConfigError("config", "must be a PacketConfig")
    flows.check_hosts(topo.n_hosts)
    if until_s is not None and not until_s > 0:
        raise ConfigError("until_s", "must be > 0")
    up = _link_state(topo, link_up)
    ev = events or LinkEvents(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool))
    if np.any(ev.link >= topo.n_links) or np.any(ev.link < 0):
        raise ConfigError("events.link", f"link ids must be in 0..{topo.n_links - 1}")
    nbytes = np.ceil(flows.bytes).astype(np.int64)
    npk = -(-nbytes // cfg.mtu_bytes)
    total = int(npk.sum())
    iw = cfg.initial_window_packets or auto_window(cfg, topo.nic_rate_bps, topo.hop_latency_s)
    max_w = max(cfg.max_window_packets, iw)
    window = max_w if cfg.transport == "dctcp" else iw
    pool = int(POOL_FACTOR * np.minimum(npk, window).sum() + 8 * topo.n_hosts + 4096)
    check_size(cfg, total, flows.n, pool, topo.n_links, topo.planes)
    wall0 = time.perf_counter()
    for _ in range(MAX_RETRIES):
        out = _run_once(
            topo, flows, mode, cfg, ev, up, seed, until_s, nbytes, npk, pool, (iw, max_w)
        )
        status = out["ctr"][K.C_STATUS]
        if status == K.ST_OK:
            break
        pool *= 2
    else:
        raise ConfigError("flows.bytes", "the packet pool kept overflowing")
    return _result(out, flows, nbytes, total, time.perf_counter() - wall0)


def successors(flows: FlowTable) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the reverse dependencies, as :meth:`FlowTable.successors`: ``succ[ptr[d] :
    ptr[d + 1]]`` are the flows waiting on ``d``, in increasing id (a stable sort of the
    dependency entries by the flow they wait on). In numpy: the engine then loads one
    compiled function, not two, at start-up."""
    deps = np.asarray(flows.deps, np.int64)
    owner = np.repeat(np.arange(flows.n, dtype=np.int64), np.diff(flows.deps_ptr))
    ptr = np.zeros(flows.n + 1, np.int64)
    np.cumsum(np.bincount(deps, minlength=flows.n), out=ptr[1:])
    return ptr, owner[np.argsort(deps, kind="stable")]


def _link_state(topo: T.Topology, link_up) -> np.ndarray:
    if link_up is None:
        return np.ones(topo.n_links, bool)
    up = np.asarray(link_up, bool)
    if up.shape != (topo.n_links,):
        raise ConfigError("link_up", f"must have one entry per link ({topo.n_links})")
    return up


def _flow_arrays(topo, flows, mode, nbytes, npk):
    n = flows.n
    off = np.zeros(n, np.int64)
    np.cumsum(npk[:-1], out=off[1:])
    _, conn = np.unique(flows.entropy, return_inverse=True)
    fl = np.zeros((n, K.N_FL), np.int64)
    fl[:, K.FL_SRC] = flows.src
    fl[:, K.FL_DST] = flows.dst
    fl[:, K.FL_NPK] = npk
    fl[:, K.FL_LAST] = nbytes - (npk - 1) * 0  # fixed below once the MTU is known
    fl[:, K.FL_OFF] = off
    fl[:, K.FL_CONN] = conn
    fl[:, K.FL_CHAN] = flows.channel
    fl[:, K.FL_JOB] = flows.job
    flf = np.c_[flows.release_s, flows.delay_s].astype(float)
    fi = np.zeros((n, K.N_FI), np.int64)
    fi[:, K.FI_RQH] = -1
    fi[:, K.FI_RQT] = -1
    fi[:, K.FI_TARGET] = -1
    fi[:, K.FI_PENDING] = np.diff(flows.deps_ptr)
    fi[:, K.FI_NPATH] = n_paths(topo, flows.src, flows.dst)
    ff = np.zeros((n, K.N_FF))
    ff[:, [K.FF_START, K.FF_FINISH, K.FF_ACKED]] = np.nan
    ff[:, K.FF_LASTMIG] = -np.inf
    return fl, flf, fi, ff, int(conn.max(initial=-1)) + 1


def _run_once(topo, flows, mode, cfg, ev, up, seed, until_s, nbytes, npk, pool, windows):
    n, L, H = flows.n, topo.n_links, topo.n_hosts
    total = int(npk.sum())
    fl, flf, fi, ff, n_conn = _flow_arrays(topo, flows, mode, nbytes, npk)
    fl[:, K.FL_LAST] = nbytes - (npk - 1) * cfg.mtu_bytes
    succ_ptr, succ = successors(flows)
    li = np.zeros((L, K.N_LI), np.int64)
    li[:, [K.L_QH0, K.L_QT0, K.L_QH1, K.L_QT1]] = -1
    li[:, K.L_TRUTH] = up
    lf = np.zeros((L, K.N_LF))
    lf[:, K.LF_SER] = 8.0 / topo.capacity_bps
    pi = np.zeros((pool, K.N_PI), np.int64)
    pi[:, K.P_NEXT] = np.r_[np.arange(1, pool), -1]
    pf = np.zeros((pool, K.N_PF))
    n_heap = pool + 2 * L + H + 3 * n + 4 * ev.time_s.size + 64
    ctr = np.zeros(K.N_CTR, np.int64)
    hp, wl = event_queue(n_heap, wheel_width_s(topo, cfg), wheel_slots(L), ctr)
    view = np.tile(up.astype(np.uint8), (3, 1))
    spray = mode == "spray"
    ret_path = np.full((n if spray else 0, K.N_RETIRE), -1, np.int64)
    ret_until = np.zeros((n if spray else 0, K.N_RETIRE))
    hq = np.zeros((H, K.N_HI), np.int64)
    hq[:, [K.H_PQH, K.H_PQT]] = -1
    st = PacketState(
        fi=fi,
        ff=ff,
        sst=np.zeros(total, np.uint8),
        stime=np.zeros(total),
        rqn=np.full(total, -1, np.int64),
        spath=np.full(total, -1, np.int64),
        li=li,
        lf=lf,
        pi=pi,
        pf=pf,
        hp=hp,
        wl=wl,
        views=view,
        ret_path=ret_path,
        ret_until=ret_until,
        conn_last=np.full(n_conn, -np.inf),
        conn_fl=np.zeros(n_conn, np.int64),
        link_tier=topo.link_tier.astype(np.int64),
        host_up=topo.host_up.astype(np.int64),
        host_down=topo.host_down.astype(np.int64),
        hq=hq,
        hfq=np.zeros((H, K.N_HF)),
        got=np.zeros(total, np.uint8),
        sq=np.full((3 * n * topo.planes, 3), -1, np.int64),
    )
    tp = _topo_tuple(topo)
    fp, ip = _params(topo, cfg, mode, until_s, windows)
    ctr[K.C_FREE] = 0
    ctr[K.C_DOWN0 : K.C_DOWN2 + 1] = int((~up).sum())
    rng = np.array([np.uint64(0x853C49E6748FEA9B) ^ np.uint64(seed * 2 + 1)], np.uint64)
    lat = np.zeros(min(cfg.latency_samples, total + 1))
    jobs = int(flows.job.max(initial=0)) + 1
    tl = np.zeros((jobs, max(1024, TIMELINE_CELLS // jobs) // 2 * 2))
    end, res = K.run(
        st,
        fl,
        flows.entropy.view(np.int64),
        flf,
        succ_ptr,
        succ,
        tp,
        topo.link_dst.astype(np.int64),
        ev.time_s,
        ev.link,
        ev.up.astype(np.bool_),
        fp,
        ip,
        ctr,
        rng,
        lat,
        tl,
    )
    react = (cfg.reaction_hardware_s, cfg.reaction_software_s, cfg.reaction_routing_s)
    detected = {
        m: ev.time_s + r for m, r in zip(("hardware", "software", "routing"), react, strict=True)
    }
    return {
        "st": st,
        "ctr": ctr,
        "lat": lat,
        "tl": tl,
        "res": res,
        "end": end,
        "npk": npk,
        "detected": detected,
    }


def _aligned_rows(n: int) -> np.ndarray:
    """``zeros((n, 2))`` whose data starts on a 64-byte boundary (the event wheel's chunks are
    64-byte lines)."""
    raw = np.zeros(2 * n + 8)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip : skip + 2 * n].reshape(n, 2)


def wheel_slots(n_links: int) -> int:
    """Slots of the event queue's wheel: a power of two, ``WHEEL_SLOTS_PER_LINK`` per
    directed link (each busy link has an event or two per hop time), within
    ``[64, 2**22]``. Only the speed depends on it, never the order of events."""
    want = min(max(WHEEL_SLOTS_PER_LINK * n_links, 64), 1 << 22)
    return 1 << (want - 1).bit_length()


def wheel_width_s(topo: T.Topology, cfg: PacketConfig) -> float:
    """Bucket width (s) of the wheel: ``WHEEL_SPAN`` hops of a full packet (serialisation
    on the slowest link + propagation: the farthest ahead most events are scheduled) over
    the slots, so that the wheel spans ``WHEEL_SPAN`` such hops."""
    rates = topo.capacity_bps[topo.capacity_bps > 0]
    slowest = float(rates.min()) if rates.size else 1e9
    hop = cfg.wire_bytes * 8.0 / slowest + topo.hop_latency_s
    return WHEEL_SPAN * hop / wheel_slots(topo.n_links)


def event_queue(
    n_events: int, width_s: float, slots: int, ctr: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's event queue for at most ``n_events + 1`` pending events, buckets of
    ``width_s`` seconds, ``slots`` wheel slots (a power of two >= 64): its rows ``hp``,
    its links ``wl`` and its state in ``ctr`` (kernel, section "event queue")."""
    if not (0.0 < width_s < math.inf and 1.0 / width_s < math.inf):
        width_s = 1e-6  # any width keeps the order exact: this one for degenerate inputs
    if slots < 64 or slots & (slots - 1):
        raise ValueError(f"wheel slots must be a power of two >= 64, got {slots}")
    cap = n_events + 1
    chunks = (cap + 3) // 4 + slots + 1  # full chunks, and one partly filled per slot
    hp = _aligned_rows((K.Q_OFF + cap + 3) // 4 * 4 + 4 * chunks)
    hp[0, 0] = 1.0 / width_s
    links = 2 * slots + slots // 64
    wl = np.zeros(links + chunks, np.int64)
    wl[:slots] = -1
    wl[links:] = np.arange(1, chunks + 1)
    wl[-1] = -1
    ctr[K.C_QCAP] = cap
    ctr[K.C_QCUR] = -(1 << 62) - slots  # below every bucket: the first pushes go far
    ctr[K.C_QACT] = ctr[K.C_QFAR] = ctr[K.C_QWHEEL] = ctr[K.C_QFREE] = ctr[K.C_QHEAD] = 0
    ctr[K.C_QNB] = slots
    return hp, wl


def _topo_tuple(topo: T.Topology):
    """Routing tables of both fabric kinds (the other kind's are 1-entry placeholders, so
    the kernel compiles once): host ports, the host's leaf / edge, 2-tier ``leaf_up`` and
    ``spine_down``, per switch its role (leaf 0 / spine 1; edge 0 / agg 1 / core 2), index
    in its tier and plane, fat-tree ``edge_up``, ``agg_down``, ``agg_up``, ``core_down``
    and ``up_slot`` (per agg uplink its ``j x ua + m`` row of ``core_down``)."""
    i64 = np.int64
    t = topo.tables
    tier = topo.switch_tier.astype(i64)
    if topo.kind == "fat_tree":
        first = np.searchsorted(tier, np.arange(3))  # switches are numbered tier by tier
        sw_idx = np.arange(topo.n_switches) - first[tier]
        agg_up = t["agg_up"].astype(i64)
        u = t["edge_up"].shape[1]
        up_slot = np.full(topo.n_links, -1, i64)
        a, m = np.indices(agg_up.shape)
        up_slot[agg_up] = (a % u) * agg_up.shape[1] + m
        two = (np.zeros((1, 1, 1), i64), np.zeros((1, 1, 1, 1), i64))
        fat = (t["edge_up"], t["agg_down"], agg_up, t["core_down"], up_slot)
        sw_role, sw_plane = tier, np.zeros(topo.n_switches, i64)
    else:
        leaf_up, spine_down = t["leaf_up"], t["spine_down"]
        L, S = leaf_up.shape[1], spine_down.shape[1]
        per = L + S
        local = np.arange(topo.n_switches) % per
        sw_role = (local >= L).astype(i64)
        sw_idx = np.where(local < L, local, local - L)
        sw_plane = np.arange(topo.n_switches) // per
        two = (leaf_up, spine_down)
        one = np.zeros((1, 1), i64)
        fat = (one, one, one, one, np.zeros(1, i64))
    return (
        topo.host_down.astype(i64),
        topo.host_leaf[0].astype(i64),
        *(np.ascontiguousarray(x, i64) for x in two),
        sw_role.astype(i64),
        np.asarray(sw_idx, i64),
        np.asarray(sw_plane, i64),
        *(np.ascontiguousarray(x, i64) for x in fat),
    )


def _params(topo: T.Topology, cfg: PacketConfig, mode: str, until_s, windows):
    fp = np.zeros(K.N_FP)
    mtu = float(cfg.mtu_bytes)
    fp[K.F_PROP] = topo.hop_latency_s
    fp[K.F_RTO] = cfg.rto_s
    fp[K.F_FLOWLET] = cfg.flowlet_gap_s
    fp[K.F_RETIRE] = cfg.path_retire_s
    fp[K.F_REACT0] = cfg.reaction_hardware_s
    fp[K.F_REACT1] = cfg.reaction_software_s
    fp[K.F_REACT2] = cfg.reaction_routing_s
    fp[K.F_KMIN] = cfg.ecn_kmin_packets * mtu
    fp[K.F_KMAX] = cfg.ecn_kmax_packets * mtu
    fp[K.F_XOFF] = cfg.pfc_xoff_packets * mtu
    fp[K.F_XON] = cfg.pfc_xon_packets * mtu
    fp[K.F_QCAP] = cfg.queue_packets * mtu
    fp[K.F_PACE] = cfg.wire_bytes * 8.0 / (topo.nic_rate_bps * cfg.pull_rate_fraction)
    fp[K.F_UNTIL] = np.inf if until_s is None else float(until_s)
    fp[K.F_GAIN] = cfg.dctcp_gain
    fp[K.F_TLRES] = cfg.timeline_resolution_s
    levels = np.asarray(cfg.adaptive_levels, float) * fp[K.F_QCAP]
    fp[K.F_LEV0 : K.F_LEV0 + levels.size] = levels
    ip = np.zeros(K.N_IP, np.int64)
    ip[K.I_MODE] = MODE_IDS[mode]
    ip[K.I_SW] = SW_IDS[cfg.switch_mode]
    ip[K.I_TR] = TR_IDS[cfg.transport]
    ip[K.I_MTU] = cfg.mtu_bytes
    ip[K.I_HDR] = cfg.header_bytes
    ip[K.I_IW], ip[K.I_MAXW] = windows
    ip[K.I_NACKK] = cfg.reorder_nack_packets if mode in SPLIT_MODES else 3
    ip[K.I_H] = topo.n_hosts
    ip[K.I_P] = topo.planes
    ip[K.I_MIGRATE] = int(cfg.pinning_migrate)
    ip[K.I_VPLANE], ip[K.I_VREMOTE], ip[K.I_VFABRIC] = mode_views(mode)
    ip[K.I_ACKREL] = int(cfg.release_on == "acked")
    ip[K.I_NLEV] = levels.size
    ip[K.I_FAT] = int(topo.kind == "fat_tree")
    return fp, ip


def _per_flow_count(mask: np.ndarray, npk: np.ndarray) -> np.ndarray:
    """Per flow, the True entries of its slice of the per-packet ``mask``."""
    ends = np.cumsum(npk)
    total = np.r_[0, np.cumsum(mask)]
    return total[ends] - total[ends - npk]


def _result(out, flows: FlowTable, nbytes, total: int, wall: float) -> PacketResult:
    st, ctr = out["st"], out["ctr"]
    fi, ff, lf = st.fi, st.ff, st.lf
    end = float(out["end"])
    n_lat = int(ctr[K.C_NLAT])
    return PacketResult(
        start_s=ff[:, K.FF_START].copy(),
        finish_s=ff[:, K.FF_FINISH].copy(),
        acked_s=ff[:, K.FF_ACKED].copy(),
        delivered_bytes=ff[:, K.FF_DELIV].copy(),
        flow_bytes=nbytes.astype(float),
        lost_bytes=ff[:, K.FF_LOST].copy(),
        detected_s=out["detected"],
        flow_job=flows.job.copy(),
        reorder_max=fi[:, K.FI_ROMAX].copy(),
        in_order_packets=fi[:, K.FI_RCVNXT].copy(),
        received_packets=_per_flow_count(st.got == 1, out["npk"]),
        queue_max_bytes=lf[:, K.LF_MAX].copy(),
        queue_mean_bytes=lf[:, K.LF_AREA] / end if end > 0 else np.zeros(lf.shape[0]),
        link_bytes=lf[:, K.LF_BYTES].copy(),
        latency_s=out["lat"][: min(n_lat, out["lat"].size)].copy(),
        n_latency=n_lat,
        n_events=int(ctr[K.C_NEV]),
        n_packets=total,
        sent_packets=int(ctr[K.C_SENT]),
        control_packets=int(ctr[K.C_CTRL]),
        retransmitted=int(ctr[K.C_RTX]),
        dropped=int(ctr[K.C_DROP]),
        trimmed=int(ctr[K.C_TRIM]),
        ecn_marked=int(ctr[K.C_ECN]),
        pause_events=int(ctr[K.C_PAUSE]),
        duplicates=int(ctr[K.C_DUP]),
        timeouts=int(ctr[K.C_TIMEOUTS]),
        migrations=int(ctr[K.C_MIGR]),
        no_route=int(ctr[K.C_NOROUTE]),
        end_s=end,
        wall_s=wall,
        timeline=out["tl"],
        timeline_res_s=float(out["res"]),
        pool_peak=int(ctr[K.C_USEDMAX]),
        heap_peak=int(ctr[K.C_HMAX]),
        events_by_kind=dict(zip(K.EVENT_KINDS, ctr[K.C_KIND : K.C_KIND + 9].tolist(), strict=True)),
    )
