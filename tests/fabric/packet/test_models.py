"""Packet engine against closed forms and invariants: M/D/1 queueing, fair sharing of one
bottleneck, lossless incast, exactly-once in-order delivery, determinism, failures."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.packet import PacketConfig, simulate_packets
from trainfabric.fabric.routing import MODES

RATE = 100e9
MTU, HDR = 4000, 64
SER = (MTU + HDR) * 8 / RATE


def test_md1_mean_queueing_delay():
    """Poisson single-packet arrivals (31 senders on the receiver's leaf, load 0.5) into one
    port: the mean wait is the M/D/1 value rho S / (2 (1 - rho)) = S / 2, within 8%
    (about 24,000 packets; the sampling error is about 2%)."""
    topo = T.leaf_spine(64, 64, RATE)  # 32 hosts per leaf
    rng = np.random.default_rng(5)
    n, rho = 24_000, 0.5
    t = np.cumsum(rng.exponential(SER / rho, n))
    src = rng.integers(1, 32, n)
    flows = FlowTable.simple(src, np.zeros(n, np.int64), MTU, release_s=t)
    cfg = PacketConfig(mtu_bytes=MTU, header_bytes=HDR, queue_packets=10_000)
    res = simulate_packets(topo, flows, "ecmp", config=cfg)
    assert res.unfinished == 0 and res.latency_s.size == n
    wait = res.latency_s - 2 * (SER + topo.hop_latency_s)
    assert wait.min() > -1e-12
    expected = rho * SER / (2 * (1 - rho))
    assert wait.mean() == pytest.approx(expected, rel=0.08)


@pytest.mark.parametrize(
    ("transport", "switch_mode", "nbytes", "rtol"),
    [("ndp", "trim", 3e6, 0.05), ("dctcp", "lossless", 10e6, 0.15), ("dctcp", "lossy", 10e6, 0.15)],
)
def test_n_flows_share_one_bottleneck(transport, switch_mode, nbytes, rtol):
    """N = 6 long flows from other leaves into one receiver: while all are active each gets
    1/N of the receiver's link (goodput over the middle half of the run). NDP (the receiver's
    round-robin pulls): within 5% (measured 0.2% over 4 seeds). DCTCP (the ECN law, gain
    1/16, converges over ~1 ms: 10 MB flows): within 15% (measured worst 10.3% over 4 seeds,
    lossless and lossy, where a drop halves one window)."""
    topo = T.leaf_spine(32, 16, RATE)  # 8 hosts per leaf
    n = 6
    src = 8 + np.arange(n) * 3
    flows = FlowTable.simple(src, np.zeros(n, np.int64), nbytes, job=np.arange(n))
    cfg = PacketConfig(
        mtu_bytes=MTU,
        header_bytes=HDR,
        transport=transport,
        switch_mode=switch_mode,
        queue_packets=40,
        initial_window_packets=16,
    )
    res = simulate_packets(topo, flows, "spray", config=cfg)
    assert res.unfinished == 0
    end = res.finish_s.min()
    edges, per_job = res.goodput_timeline(1e-6)
    mid = (edges[:-1] >= 0.25 * end) & (edges[1:] <= 0.75 * end)
    share = per_job[:, mid].sum(axis=1) / per_job[:, mid].sum()
    np.testing.assert_allclose(share, 1 / n, rtol=rtol)
    # the receiver's link is saturated: total payload rate close to MTU / (MTU + HDR)
    rate = per_job[:, mid].sum() * 8 / (mid.sum() * (edges[1] - edges[0]))
    assert rate / RATE == pytest.approx(MTU / (MTU + HDR), rel=0.03)


@pytest.mark.parametrize("transport", ["ndp", "dctcp"])
def test_lossless_incast_never_drops(transport):
    """A 31-to-1 incast in lossless mode: PFC pauses, nothing is dropped or retransmitted."""
    topo = T.leaf_spine(64, 32, RATE)
    src = np.arange(1, 32)
    flows = FlowTable.simple(src, np.zeros(31, np.int64), 400_000)
    cfg = PacketConfig(
        mtu_bytes=MTU,
        header_bytes=HDR,
        transport=transport,
        switch_mode="lossless",
        queue_packets=8,
        pfc_xoff_packets=8,
        pfc_xon_packets=4,
    )
    res = simulate_packets(topo, flows, "adaptive", config=cfg)
    assert res.unfinished == 0
    assert res.dropped == 0 and res.trimmed == 0 and res.retransmitted == 0
    assert res.pause_events > 0
    np.testing.assert_array_equal(res.delivered_bytes, 400_000)
    # the ideal: 31 x 400 kB through one port
    ideal = 31 * 100 * SER
    assert ideal < res.makespan_s < 1.15 * ideal


def _scenario(data, planes):
    """Random flows on 16 hosts: a 2-tier fabric of ``planes`` planes, or (``planes = 0``)
    a 3-tier fat-tree of radix 4."""
    if planes == 0:
        topo = T.fat_tree(16, 4, 25e9)
    elif planes > 1:
        topo = T.multiplane(16, planes=planes, switch_radix=8, nic_rate_bps=planes * 25e9)
    else:
        topo = T.leaf_spine(16, 8, 25e9)
    n = data.draw(st.integers(1, 10))
    src = np.array(data.draw(st.lists(st.integers(0, 15), min_size=n, max_size=n)))
    shift = np.array(data.draw(st.lists(st.integers(1, 15), min_size=n, max_size=n)))
    dst = (src + shift) % 16
    nbytes = data.draw(st.lists(st.integers(1, 120_000), min_size=n, max_size=n))
    release = data.draw(st.lists(st.sampled_from([0.0, 2e-6, 30e-6]), min_size=n, max_size=n))
    has_dep = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    deps = [i - 1 for i in range(1, n) if has_dep[i]]
    ptr = np.r_[0, np.cumsum([int(i > 0 and has_dep[i]) for i in range(n)])]
    flows = FlowTable(
        src=src,
        dst=dst,
        bytes=np.array(nbytes, float),
        entropy=np.arange(n, dtype=np.uint64) % 3,
        job=np.zeros(n, np.int32),
        deps_ptr=ptr,
        deps=np.array(deps, np.int64),
        release_s=np.array(release),
        delay_s=np.zeros(n),
        channel=np.arange(n) % 2,
    )
    return topo, flows


@given(data=st.data())
def test_every_byte_delivered_exactly_once(data):
    """Random small scenarios in every mode, switch mode and transport, with queues small
    enough to trim, drop and pause: every flow completes, each payload byte is delivered
    once, in order (the in-order prefix is the whole flow)."""
    planes = data.draw(st.sampled_from([0, 1, 2]))
    topo, flows = _scenario(data, planes)
    mode = data.draw(st.sampled_from(MODES))
    cfg = PacketConfig(
        mtu_bytes=1000,
        header_bytes=64,
        queue_packets=data.draw(st.integers(2, 12)),
        switch_mode=data.draw(st.sampled_from(["lossless", "lossy", "trim"])),
        transport=data.draw(st.sampled_from(["ndp", "dctcp"])),
        initial_window_packets=data.draw(st.integers(1, 30)),
        pfc_xoff_packets=4.0,
        pfc_xon_packets=2.0,
        rto_s=200e-6,
        reorder_nack_packets=8,
    )
    res = simulate_packets(topo, flows, mode, config=cfg, seed=data.draw(st.integers(0, 9)))
    assert res.unfinished == 0
    np.testing.assert_array_equal(res.delivered_bytes, np.ceil(flows.bytes))
    npk = -(-np.ceil(flows.bytes).astype(int) // 1000)
    np.testing.assert_array_equal(res.in_order_packets, npk)
    np.testing.assert_array_equal(res.received_packets, npk)
    if cfg.switch_mode == "lossless":
        assert res.dropped == 0


def test_reordering_buffer_delivers_in_order():
    """Sprayed traffic over two planes with different loads arrives out of order; at every
    cut of the (deterministic) run, what was delivered is exactly the payload of the
    in-order prefix, and the buffer holds the rest of what was received."""
    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=50e9)
    src = np.array([0, 1, 2, 3, 8])
    dst = np.array([12, 12, 13, 12, 12])
    flows = FlowTable.simple(src, dst, 500_000)
    cfg = PacketConfig(mtu_bytes=MTU, header_bytes=HDR, queue_packets=20)
    full = simulate_packets(topo, flows, "spray", config=cfg, seed=1)
    assert full.reorder_max.max() > 0
    buffered_seen = False
    for cut in np.linspace(0.1, 0.9, 9) * full.makespan_s:
        part = simulate_packets(topo, flows, "spray", config=cfg, seed=1, until_s=cut)
        np.testing.assert_array_equal(part.delivered_bytes, part.in_order_packets * MTU)
        assert np.all(part.received_packets >= part.in_order_packets)
        buffered_seen |= bool(np.any(part.received_packets > part.in_order_packets))
    assert buffered_seen


def test_same_seed_same_result():
    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=50e9)
    rng = np.random.default_rng(0)
    flows = FlowTable.simple(rng.integers(0, 8, 12), rng.integers(8, 16, 12), 200_000)
    cfg = PacketConfig(mtu_bytes=MTU, header_bytes=HDR, queue_packets=8)
    a = simulate_packets(topo, flows, "adaptive", config=cfg, seed=4)
    b = simulate_packets(topo, flows, "adaptive", config=cfg, seed=4)
    c = simulate_packets(topo, flows, "adaptive", config=cfg, seed=5)
    np.testing.assert_array_equal(a.finish_s, b.finish_s)
    np.testing.assert_array_equal(a.latency_s, b.latency_s)
    assert (a.n_events, a.trimmed, a.retransmitted) == (b.n_events, b.trimmed, b.retransmitted)
    assert not np.array_equal(a.finish_s, c.finish_s)


def test_static_failure_is_avoided_by_every_mode():
    """A leaf uplink down from t = 0: every mechanism knows it; nothing is lost."""
    topo = T.leaf_spine(16, 8, RATE)
    flows = FlowTable.simple(np.arange(4), 8 + np.arange(4), 200_000)
    up = np.ones(topo.n_links, bool)
    lk = topo.tables["leaf_up"][0, 0, :2]
    up[lk] = False
    up[topo.reverse[lk]] = False
    for mode in MODES:
        res = simulate_packets(topo, flows, mode, link_up=up)
        assert res.unfinished == 0 and res.dropped == 0, mode


def test_flap_loses_packets_until_the_mechanism_reacts():
    """A fabric cable fails for 1 ms mid-transfer: packets sent onto it (queued at it, in
    flight on it) are lost and recovered by NACK / timeout. Adaptive (hardware view, 5 us)
    stops using it after its reaction time: it loses at most what the port held plus 6 us of
    traffic in each direction; spray keeps spraying onto it (routing reacts in 1 s)."""
    topo = T.leaf_spine(16, 8, RATE)
    flows = FlowTable.simple(np.arange(4), 8 + np.arange(4), 2_000_000)
    lk = int(topo.tables["leaf_up"][0, 0, 1])
    ev = LinkEvents.flap([lk, int(topo.reverse[lk])], 20e-6, 1e-3)
    cfg = PacketConfig(mtu_bytes=MTU, header_bytes=HDR, rto_s=100e-6)
    dropped = {}
    for mode in ("spray", "adaptive"):
        res = simulate_packets(topo, flows, mode, config=cfg, events=ev)
        assert res.unfinished == 0
        np.testing.assert_array_equal(res.delivered_bytes, 2_000_000)
        assert res.dropped > 0 and res.retransmitted > 0
        assert 0 < res.lost_bytes.sum() <= res.dropped * MTU
        assert res.detected_s["hardware"][0] == pytest.approx(20e-6 + 5e-6)
        dropped[mode] = res.dropped
    held = 2 * (cfg.queue_packets + 6e-6 / SER)  # data both ways (control packets are fewer)
    assert dropped["adaptive"] <= held < dropped["spray"]


def test_pinning_migrates_after_a_host_link_failure():
    """Pinned connections whose plane loses its host link move to another plane after the
    software reaction time (drain barrier: the lost packets time out first)."""
    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=200e9)
    flows = FlowTable.simple(np.arange(4), 8 + np.arange(4), 3_000_000)
    lk = topo.host_up[:, :4].ravel()
    ev = LinkEvents(np.full(lk.size // 2, 10e-6), lk[:4], np.zeros(4, bool))
    cfg = PacketConfig(mtu_bytes=MTU, header_bytes=HDR, rto_s=50e-6, reaction_software_s=20e-6)
    res = simulate_packets(topo, flows, "pinning", config=cfg, events=ev)
    assert res.unfinished == 0
    assert res.migrations > 0 and res.dropped > 0
    np.testing.assert_array_equal(res.delivered_bytes, 3_000_000)


@pytest.mark.parametrize("planes", [1, 2])
def test_flow_and_packet_engines_agree_on_a_permutation_of_large_flows(planes):
    """8 MB flows of a random permutation (64 hosts), sprayed: the packet engine's makespan
    is the fluid one plus start-up (first RTT, headers are in both), within 6% above it."""
    from trainfabric.fabric.flow.engine import simulate
    from trainfabric.fabric.routing import Router

    topo = T.multiplane(64, planes=planes, switch_radix=16, nic_rate_bps=planes * RATE)
    rng = np.random.default_rng(1)
    p0 = rng.permutation(64)
    perm = np.empty(64, np.int64)
    perm[p0] = np.roll(p0, 1)
    flows = FlowTable.simple(np.arange(64), perm, 8e6)
    fluid = simulate(topo, flows, Router(topo, "spray"), mtu_bytes=MTU, header_bytes=HDR)
    cfg = PacketConfig(mtu_bytes=MTU, header_bytes=HDR)
    packet = simulate_packets(topo, flows, "spray", config=cfg)
    assert 1.0 <= packet.makespan_s / fluid.makespan_s <= 1.06


def test_a_packet_lost_at_the_nic_for_want_of_a_route_counts_as_dropped():
    """Hypothesis's find: host 2's only uplink (link 0 of the radix-4 fat-tree) down from 0 to
    60 us; pinning sends host 2's 1000-byte flow before the NIC sees a usable plane, so its
    packets are lost at the NIC (no route). Every lost payload byte is a dropped packet."""
    topo = T.fat_tree(16, 4, 25e9)
    src = np.array([2, 3, 0])
    flows = FlowTable(
        src=src,
        dst=(src + 1) % 16,
        bytes=np.array([1000.0, 1.0, 1.0]),
        entropy=np.arange(3, dtype=np.uint64) % 3,
        job=np.zeros(3, np.int32),
        deps_ptr=np.zeros(4, np.int64),
        deps=np.zeros(0, np.int64),
        release_s=np.zeros(3),
        delay_s=np.zeros(3),
        channel=np.arange(3) % 2,
    )
    up = np.array([5.9953422591222446e-05, 3.359535272648123e-05, 1.3227450313016388e-04])
    ev = LinkEvents(np.r_[np.zeros(3), up], np.r_[0, 0, 2, 0, 0, 2], np.repeat([False, True], 3))
    cfg = PacketConfig(
        mtu_bytes=1000,
        header_bytes=64,
        queue_packets=2,
        switch_mode="lossless",
        transport="ndp",
        initial_window_packets=1,
        rto_s=100e-6,
        reaction_software_s=50e-6,
        reaction_routing_s=300e-6,
    )
    res = simulate_packets(topo, flows, "pinning", config=cfg, events=ev, seed=0)
    assert res.no_route >= 1 and res.unfinished == 0
    np.testing.assert_array_equal(res.delivered_bytes, flows.bytes)
    assert res.lost_bytes.sum() <= res.dropped * cfg.mtu_bytes


@given(data=st.data())
def test_every_byte_delivered_exactly_once_under_random_flaps(data):
    """Random flaps of any links (host or fabric, 1 to 3, each down 1-200 us) in every mode,
    switch mode and transport: what the dead links swallow is recovered (NACK, timeout,
    the mechanisms' reactions), every byte is delivered exactly once."""
    planes = data.draw(st.sampled_from([0, 1, 2]))
    topo, flows = _scenario(data, planes)
    k = data.draw(st.integers(1, 3))
    links = np.array(data.draw(st.lists(st.integers(0, topo.n_links - 1), min_size=k, max_size=k)))
    t0 = np.array(data.draw(st.lists(st.floats(0, 50e-6), min_size=k, max_size=k)))
    dur = np.array(data.draw(st.lists(st.floats(1e-6, 200e-6), min_size=k, max_size=k)))
    ev = LinkEvents(
        np.r_[t0, t0 + dur], np.r_[links, links], np.r_[np.zeros(k, bool), np.ones(k, bool)]
    )
    cfg = PacketConfig(
        mtu_bytes=1000,
        header_bytes=64,
        queue_packets=data.draw(st.integers(2, 12)),
        switch_mode=data.draw(st.sampled_from(["lossless", "lossy", "trim"])),
        transport=data.draw(st.sampled_from(["ndp", "dctcp"])),
        initial_window_packets=data.draw(st.integers(1, 30)),
        rto_s=100e-6,
        reaction_software_s=50e-6,
        reaction_routing_s=300e-6,
    )
    mode = data.draw(st.sampled_from(MODES))
    res = simulate_packets(
        topo, flows, mode, config=cfg, events=ev, seed=data.draw(st.integers(0, 9))
    )
    assert res.unfinished == 0
    np.testing.assert_array_equal(res.delivered_bytes, np.ceil(flows.bytes))
    assert res.lost_bytes.sum() <= res.dropped * cfg.mtu_bytes


def test_flowlet_rehashes_after_an_idle_gap_and_ecmp_does_not():
    """Two messages on one connection (same entropy), the second 100 us after the first
    ends (gap 50 us): ECMP keeps the connection on one leaf uplink, flowlet re-hashes it
    (a different uplink for most entropies). Counted from the bytes each uplink carried."""
    topo = T.leaf_spine(16, 16, RATE)  # 8 hosts and 8 uplinks per leaf
    uplinks = topo.tables["leaf_up"][0, 0]
    used = {"ecmp": [], "flowlet": []}
    for ent in range(12):
        flows = FlowTable(
            src=[0, 0],
            dst=[9, 9],
            bytes=[100_000.0, 100_000.0],
            entropy=np.array([ent, ent], np.uint64),
            job=[0, 0],
            deps_ptr=[0, 0, 1],
            deps=[0],
            release_s=[0.0, 0.0],
            delay_s=[0.0, 100e-6],
        )
        for mode in used:
            res = simulate_packets(topo, flows, mode, config=PacketConfig(mtu_bytes=MTU))
            assert res.unfinished == 0
            data = res.link_bytes[uplinks] > 20 * MTU  # a message is 25 packets
            used[mode].append(int(data.sum()))
    assert used["ecmp"] == [1] * 12
    assert sum(u == 2 for u in used["flowlet"]) >= 8
