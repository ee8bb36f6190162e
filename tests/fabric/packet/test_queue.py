"""Packet engine's event queue (the timing wheel of :mod:`trainfabric.fabric.packet.kernel`):
it pops exactly the order of one heap on ``(time, item)``, whatever its bucket width and slot
count, so a run's outputs do not depend on them."""

import dataclasses
import heapq

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.packet import PacketConfig, simulate_packets
from trainfabric.fabric.packet import driver as D
from trainfabric.fabric.packet import kernel as K

# event times: many exact ties, zero, both signs, the extremes of float64
TIMES = st.one_of(
    st.sampled_from([0.0, -0.0, 1e-6, 1.325e-6, 2e-6, 1.0, np.inf, 1e300, -1e300, 5e-324]),
    st.floats(-1e-3, 1e-2, allow_nan=False),
    st.integers(0, 40).map(lambda i: i * 3.25e-7),
)
WIDTHS = st.sampled_from([1e-12, 1e-9, 3.1e-7, 1e-3, 1e9])


def _queue(capacity: int, width: float, slots: int):
    ctr = np.zeros(K.N_CTR, np.int64)
    hp, wl = D.event_queue(capacity, width, slots, ctr)
    return hp, wl, ctr


@given(
    ops=st.lists(st.one_of(TIMES, st.just(None)), max_size=300),
    width=WIDTHS,
    slots=st.sampled_from([64, 128, 4096]),
)
def test_queue_pops_in_heap_order(ops, width, slots):
    """Pushes (``None``: a pop) against ``heapq`` on ``(time, item)``, fresh unique items:
    every pop returns the reference's minimum; the count and peak follow every step."""
    hp, wl, ctr = _queue(len(ops) + 1, width, slots)
    ref: list = []
    peak = 0
    for n, t in enumerate(ops):
        if t is None:
            if not ref:
                continue
            got = K.pop(hp, wl, ctr)
            want = heapq.heappop(ref)
            assert (got[0], got[1]) == want and np.signbit(got[0]) == np.signbit(want[0])
        else:
            item = (n * 7919) % 100_003  # unique, not in push order
            K.push(hp, wl, ctr, t, item % 16, item // 16)
            heapq.heappush(ref, (t, item))
        peak = max(peak, len(ref))
        assert ctr[K.C_HN] == len(ref) and ctr[K.C_HMAX] == peak
    while ref:
        assert K.pop(hp, wl, ctr) == heapq.heappop(ref)
    assert ctr[K.C_STATUS] == K.ST_OK


def test_a_full_queue_refuses_a_push():
    """``n_events + 1`` pending events fit; one more sets ST_HEAP and is not queued."""
    hp, wl, ctr = _queue(3, 1e-9, 64)
    for i in range(4):
        K.push(hp, wl, ctr, 1e-6 * i, K.K_WAKE, i)
    assert ctr[K.C_STATUS] == K.ST_OK and ctr[K.C_HN] == 4
    K.push(hp, wl, ctr, 0.0, K.K_WAKE, 9)
    assert ctr[K.C_STATUS] == K.ST_HEAP and ctr[K.C_HN] == 4
    assert [K.pop(hp, wl, ctr)[1] >> 4 for _ in range(4)] == [0, 1, 2, 3]


@given(keys=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6)), max_size=400))
def test_bucket_sorts_order_by_time_then_item(keys):
    """Both sorts of a wheel bucket: ``(time, item)`` ascending (ties in time are common)."""
    rows = np.array([(t * 1e-7, float(i)) for t, i in dict.fromkeys(keys)] or np.zeros((0, 2)))
    want = sorted(map(tuple, rows))
    for sort in (K.insertion_sort, K.heapsort):
        hp = np.zeros((rows.shape[0] + 5, 2))
        hp[2 : 2 + len(rows)] = rows
        sort(hp, 2, 2 + len(rows))
        assert list(map(tuple, hp[2 : 2 + len(rows)])) == want


def test_wheel_slots_and_width():
    """A power of two, 4 per directed link, at least 64; the wheel spans 2 full-packet hops."""
    assert D.wheel_slots(1) == 64
    assert D.wheel_slots(2048) == 8192
    assert D.wheel_slots(2049) == 16384
    topo = T.leaf_spine(512, 32, 100e9, hop_latency_s=1e-6)
    cfg = PacketConfig(mtu_bytes=4000, header_bytes=64)
    hop = 4064 * 8 / 100e9 + 1e-6
    assert D.wheel_width_s(topo, cfg) * D.wheel_slots(topo.n_links) == pytest.approx(2 * hop)


@given(
    n=st.integers(1, 40),
    deps=st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39)), max_size=60),
)
def test_successors_equal_the_flow_tables(n, deps):
    """The driver's numpy transpose of the dependencies equals ``FlowTable.successors``."""
    pairs = sorted({(max(a, b) % n, min(a, b) % n) for a, b in deps if a % n != b % n})
    pairs = [(f, d) for f, d in pairs if d < f]
    per = [[d for f2, d in pairs if f2 == f] for f in range(n)]
    ptr = np.r_[0, np.cumsum([len(p) for p in per])].astype(np.int64)
    flows = FlowTable(
        src=np.zeros(n, np.int64),
        dst=np.ones(n, np.int64),
        bytes=np.full(n, 1000.0),
        entropy=np.arange(n, dtype=np.uint64),
        job=np.zeros(n, np.int32),
        deps_ptr=ptr,
        deps=np.array([d for p in per for d in p], np.int64),
        release_s=np.zeros(n),
        delay_s=np.zeros(n),
    )
    for got, want in zip(D.successors(flows), flows.successors(), strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


# -- a run does not depend on the wheel ---------------------------------------------------------
WHEELS = [  # (slots per link, span in hops)
    (1, 1e-9),  # buckets of ~1e-20 s: nearly every event goes to the far heap
    (1, 1e12),  # one bucket for the whole run: every event is inserted into the sorted run
    (1, 0.5),  # a short wheel that wraps around every half hop
]


def _outputs(res) -> dict:
    out = {}
    for f in dataclasses.fields(res):
        if f.name != "wall_s":
            out[f.name] = getattr(res, f.name)
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            _assert_same(x, y)
        elif isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=k, strict=True)
        else:
            assert x == y, k


def _scenario(data):
    """A random small run: fat tree or 2-plane fabric, up to 12 flows with dependencies and
    staggered releases, 1-3 links down for 40 us, queues small enough to trim, drop, pause."""
    fat = data.draw(st.booleans())
    topo = T.fat_tree(16, 4, 25e9) if fat else T.multiplane(16, planes=2, switch_radix=8)
    n = data.draw(st.integers(1, 12))
    ints = lambda lo, hi: np.array(data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)))  # noqa: E731
    src = ints(0, 15)
    dep = [data.draw(st.integers(-1, f - 1)) for f in range(n)]
    flows = FlowTable(
        src=src,
        dst=(src + ints(1, 15)) % 16,
        bytes=ints(1, 40_000) * 1.0,
        entropy=np.arange(n, dtype=np.uint64) % 3,
        job=np.zeros(n, np.int32),
        deps_ptr=np.r_[0, np.cumsum([d >= 0 for d in dep])].astype(np.int64),
        deps=np.array([d for d in dep if d >= 0], np.int64),
        release_s=np.array([0.0, 0.0, 3e-6, 1e-3])[ints(0, 3)],
        delay_s=np.zeros(n),
    )
    k = data.draw(st.integers(1, 3))
    links = np.array(data.draw(st.lists(st.integers(0, topo.n_links - 1), min_size=k, max_size=k)))
    t0 = np.array(data.draw(st.lists(st.floats(0, 50e-6), min_size=k, max_size=k)))
    ev = LinkEvents(np.r_[t0, t0 + 40e-6], np.r_[links, links], np.repeat([False, True], k))
    cfg = PacketConfig(
        mtu_bytes=1000,
        header_bytes=64,
        queue_packets=data.draw(st.integers(2, 12)),
        switch_mode=data.draw(st.sampled_from(["lossless", "lossy", "trim"])),
        transport=data.draw(st.sampled_from(["ndp", "dctcp"])),
        initial_window_packets=data.draw(st.integers(1, 30)),
        pfc_xoff_packets=4.0,
        pfc_xon_packets=2.0,
        rto_s=100e-6,
        reaction_software_s=50e-6,
        reaction_routing_s=300e-6,
    )
    return topo, flows, ev, cfg


@given(data=st.data())
def test_a_run_does_not_depend_on_the_wheel(data):
    """Random small runs in every mode, switch mode and transport, with the default wheel
    and with an extreme one: the same outputs, every event count and the queue's peak
    included (the wheel only changes the speed)."""
    topo, flows, ev, cfg = _scenario(data)
    mode = data.draw(st.sampled_from(["ecmp", "flowlet", "pinning", "spray", "adaptive"]))
    seed = data.draw(st.integers(0, 9))
    wheel = data.draw(st.sampled_from(WHEELS))

    def run():
        return _outputs(simulate_packets(topo, flows, mode, config=cfg, events=ev, seed=seed))

    default = run()
    assert default["n_events"] > 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(D, "WHEEL_SLOTS_PER_LINK", wheel[0])
        mp.setattr(D, "WHEEL_SPAN", wheel[1])
        _assert_same(default, run())
