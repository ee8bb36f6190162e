"""Event-driven fluid engine: closed-form completion times, conservation, dependencies, the
ring shortcut, link flaps and reaction times, completion batching, determinism, bad inputs.

Closed forms: a flow of ``B`` payload bytes alone at rate ``x`` finishes
``8 B (4160/4096) / x + hops x hop_latency`` after it starts (4096 B MTU, 64 B headers); a
flow whose path is cut sends nothing until the mode reroutes or the link returns, and a split
flow loses the dead link's share until its mode reacts (that share is resent at the end).
"""

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flow import collectives as fc
from trainfabric.fabric.flow.engine import simulate
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.routing import MODES, Router

WIRE = 4160 / 4096
LAT = 1e-6  # default hop latency


def wire_bits(nbytes):
    return np.asarray(nbytes, float) * 8 * WIRE


def derangement(n, rng):
    while True:
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


# -- (a) line rate on a non-blocking fabric -------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_spray_carries_a_permutation_at_line_rate(seed):
    topo = T.multiplane(64, 4, 16, 800e9)  # full bisection: d = U = 8
    rng = np.random.default_rng(seed)
    dst = derangement(64, rng)
    nbytes = rng.uniform(1e6, 4e6, 64)
    res = simulate(topo, FlowTable.simple(np.arange(64), dst, nbytes), Router(topo, "spray"))
    hops = np.where(topo.leaf_of(np.arange(64)) == topo.leaf_of(dst), 2, 4)
    assert (hops == 4).any()
    np.testing.assert_array_equal(res.start_s, 0.0)
    np.testing.assert_allclose(res.finish_s, wire_bits(nbytes) / 800e9 + hops * LAT, rtol=1e-12)


def test_ecmp_without_collisions_runs_each_flow_at_the_port_rate():
    """One flow per source leaf and per destination leaf: no two flows can share a link, so
    each gets one plane's port, nic / P."""
    P = 4
    topo = T.multiplane(64, P, 16, 800e9)
    src = np.arange(8) * 8 + np.arange(8) % 3
    dst = ((np.arange(8) + 3) % 8) * 8 + 5
    nbytes = np.linspace(1e6, 3e6, 8)
    res = simulate(topo, FlowTable.simple(src, dst, nbytes), Router(topo, "ecmp", seed=4))
    np.testing.assert_allclose(res.finish_s, wire_bits(nbytes) / (800e9 / P) + 4 * LAT, rtol=1e-12)


def test_ecmp_collision_halves_the_rate():
    """Two equal flows out of leaf 0 hashed onto the same uplink share it: both finish at
    twice the lone-flow time; a third flow on another uplink is unaffected."""
    topo = T.multiplane(64, 4, 16, 800e9)
    router = Router(topo, "ecmp", seed=0)
    cand = FlowTable.simple(np.full(400, 1), np.full(400, 20), 1.0, entropy=np.arange(400))
    path = router.route(cand, np.arange(400)).group
    up, down = path[:, 1], path[:, 2]
    same = np.flatnonzero(up == up[0])[1]
    other = np.flatnonzero((up != up[0]) & (down != down[0]) & (down != down[same]))[0]
    flows = FlowTable.simple(
        [1, 2, 3], [20, 21, 22], 2e6, entropy=np.array([0, same, other], np.uint64)
    )
    res = simulate(topo, flows, Router(topo, "ecmp", seed=0))
    lone = wire_bits(2e6) / 200e9
    np.testing.assert_allclose(
        res.finish_s, [2 * lone + 4 * LAT] * 2 + [lone + 4 * LAT], rtol=1e-12
    )


# -- (b) conservation -----------------------------------------------------------------------------
def _mixed_workload(seed, n=150, hosts=64):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, hosts, n)
    dst = (src + rng.integers(1, hosts, n)) % hosts
    return FlowTable.simple(
        src,
        dst,
        rng.uniform(0.2, 3.0, n) * 1e6,
        job=rng.integers(0, 3, n),
        release_s=rng.uniform(0, 50e-6, n),
        entropy=rng.integers(0, 2**63, n, dtype=np.uint64),
    )


@pytest.mark.parametrize("mode", MODES)
def test_conservation_of_bits_and_capacity(mode):
    topo = T.multiplane(64, 4, 16, 800e9)
    flows = _mixed_workload(3)
    up = T.fail_links(topo, 0.1, seed=1)
    # an alive fabric cable flaps early on, so there are lost shares and reroutes too
    lk = topo.tables["leaf_up"][1, 2][up[topo.tables["leaf_up"][1, 2]]][0]
    events = LinkEvents.flap([lk, topo.reverse[lk]], 10e-6, 40e-6)
    res = simulate(
        topo,
        flows,
        Router(topo, mode),
        link_up=up,
        events=events,
        record_links=True,
    )
    assert res.unfinished == 0
    dt = np.diff(res.seg_t)
    assert np.all(dt >= 0)
    loads = res.link_load_bps.astype(float)  # [segments, links], stored as float32
    assert loads.shape == (dt.size, topo.n_links)
    np.testing.assert_allclose(
        loads.T @ dt, res.link_bits, rtol=1e-6, atol=1e-6 * res.link_bits.max()
    )
    assert np.all(loads <= topo.capacity_bps * (1 + 2**-23))
    assert np.all(res.link_bits <= topo.capacity_bps * res.end_s * (1 + 1e-9))
    assert np.all(res.link_bits[~up] == 0)
    # every payload bit arrives once: integrated goodput per job = the job's wire bits
    delivered = res.job_goodput_bps @ dt
    expect = np.bincount(flows.job, wire_bits(flows.bytes), minlength=3)
    np.testing.assert_allclose(delivered, expect, rtol=1e-9)
    # nobody beats its own NIC, nobody starts before its release
    assert np.all(res.start_s == flows.release_s)
    assert np.all(res.finish_s - res.start_s >= wire_bits(flows.bytes) / 800e9)
    # the run ends with the last send completion, not at the last (view) event after it
    assert res.makespan_s - 4 * LAT - 1e-15 <= res.end_s <= res.makespan_s - 2 * LAT + 1e-15
    util = res.mean_utilisation(topo)
    np.testing.assert_allclose(util, res.link_bits / (topo.capacity_bps * res.end_s), rtol=1e-15)


# -- (c) dependencies -----------------------------------------------------------------------------
def test_chain_starts_at_predecessor_finish_plus_delay():
    topo = T.multiplane(32, 2, 8)
    rng = np.random.default_rng(0)
    n = 6
    src = rng.integers(0, 32, n)
    dst = (src + rng.integers(1, 32, n)) % 32
    delay = rng.uniform(0, 5e-6, n)
    release = np.array([1e-6, 0, 0, 1.0, 0, 0])  # flow 3 waits for its release instead
    flows = FlowTable(
        src=src,
        dst=dst,
        bytes=rng.uniform(1e5, 1e6, n),
        entropy=np.arange(n),
        job=np.zeros(n),
        deps_ptr=np.r_[0, np.arange(n)],
        deps=np.arange(n - 1),
        release_s=release,
        delay_s=delay,
    )
    res = simulate(topo, flows, Router(topo, "spray"))
    assert res.start_s[0] == release[0] + delay[0]
    for f in range(1, n):
        assert res.start_s[f] == max(release[f], res.finish_s[f - 1]) + delay[f]
    assert res.start_s[3] == 1.0 + delay[3]
    # each runs alone at line rate
    hops = np.where(topo.leaf_of(src) == topo.leaf_of(dst), 2, 4)
    dur = wire_bits(flows.bytes) / topo.nic_rate_bps + hops * LAT
    np.testing.assert_allclose(res.finish_s - res.start_s, dur, rtol=1e-9)


@pytest.mark.parametrize("mode", ["ecmp", "adaptive"])
def test_random_dag_obeys_the_start_rule(mode):
    topo = T.multiplane(32, 2, 8)
    rng = np.random.default_rng(7)
    n = 60
    deps = [
        rng.choice(f, min(f, int(rng.integers(0, 4))), replace=False) if f else [] for f in range(n)
    ]
    src = rng.integers(0, 32, n)
    flows = FlowTable(
        src=src,
        dst=(src + rng.integers(1, 32, n)) % 32,
        bytes=rng.uniform(1e5, 1e6, n),
        entropy=rng.integers(0, 2**63, n, dtype=np.uint64),
        job=np.zeros(n),
        deps_ptr=np.r_[0, np.cumsum([len(d) for d in deps])],
        deps=np.concatenate([np.asarray(d, np.int64) for d in deps]),
        release_s=rng.uniform(0, 20e-6, n),
        delay_s=rng.uniform(0, 3e-6, n),
    )
    res = simulate(topo, flows, Router(topo, mode))
    for f in range(n):
        ready = max([flows.release_s[f], *res.finish_s[deps[f]]])
        assert res.start_s[f] == ready + flows.delay_s[f]
        assert res.finish_s[f] > res.start_s[f]


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling"])
def test_collective_rank_sync_starts_against_brute_force_dependencies(algorithm):
    topo = T.multiplane(64, 4, 16)
    n = 8
    steps = fc.collective_steps("all_reduce", n, 4e6, algorithm)
    hosts = fc.place(topo.host_leaf[0], n, "scattered")
    cf = fc.collective_flows(steps, hosts, sync="rank", channels=2, step_latency_s=3e-6)
    res = simulate(topo, cf.flows, Router(topo, "ecmp"))
    f = cf.flows
    for j in range(f.n):
        k = cf.step[j]
        prev = np.flatnonzero(cf.step == k - 1)
        touching = [i for i in prev if f.src[j] in (f.src[i], f.dst[i])]
        ready = max([0.0, *res.finish_s[touching]])
        assert res.start_s[j] == pytest.approx(ready + 3e-6, rel=1e-15, abs=0)


# -- (d) ring shortcut ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [8, 16])
def test_ring_shortcut_equals_the_step_by_step_run(mode, n):
    topo = T.multiplane(64, 4, 16)
    steps = fc.collective_steps("all_reduce", n, 8e6, "ring")
    hosts = fc.place(topo.host_leaf[0], n, "random", seed=n)
    kw = {"sync": "step", "channels": 2, "step_latency_s": 2e-6}
    short = fc.run_collective(topo, Router(topo, mode, seed=1), steps, hosts, shortcut=True, **kw)
    full = fc.run_collective(topo, Router(topo, mode, seed=1), steps, hosts, shortcut=False, **kw)
    assert short.shortcut == (mode != "flowlet")
    assert not full.shortcut and full.steps_simulated == 2 * (n - 1)
    assert short.time_s == pytest.approx(full.time_s, rel=1e-9)


# -- (e) flaps ------------------------------------------------------------------------------------
FLAP_BYTES = 3.0 * 800e9 / 8 / WIRE  # 3 s alone at 800G


@pytest.mark.parametrize(
    "mode,t1,extra",
    [
        # single path cut: no goodput until the link returns or routing reroutes (1 s)
        ("ecmp", 0.8, 0.3),
        ("ecmp", 2.5, 1.0),
        ("pinning", 2.5, 1.0),
        ("flowlet", 0.8, 0.3),
        # spray over U = 8 uplinks: 1/8 lost until routing reacts or the link returns
        ("spray", 0.8, 0.3 / 8),
        ("spray", 2.5, 1.0 / 8),
        # adaptive: 1/8 lost for the hardware reaction time only
        ("adaptive", 0.8, 5e-6 / 8),
        ("adaptive", 2.5, 5e-6 / 8),
    ],
)
def test_flap_on_the_path(mode, t1, extra):
    topo = T.leaf_spine(64, 16, 800e9)  # U = 8 uplinks, S = 4 spines, C = 2 cables
    flows = FlowTable.simple([0], [20], FLAP_BYTES, entropy=np.array([5], np.uint64))
    if mode in ("spray", "adaptive"):
        lk = topo.tables["leaf_up"][0, 0, 3]
    else:  # the one uplink the flow uses (from a failure-free run)
        healthy = simulate(topo, flows, Router(topo, mode, seed=2), record_links=True)
        used = healthy.link_bits[topo.tables["leaf_up"][0, 0]] > 0
        assert used.sum() == 1
        lk = topo.tables["leaf_up"][0, 0][used][0]
    t0 = 0.5
    events = LinkEvents.flap([lk, topo.reverse[lk]], t0, t1)
    res = simulate(topo, flows, Router(topo, mode, seed=2), events=events)
    assert res.finish_s[0] == pytest.approx(3.0 + extra + 4 * LAT, abs=1e-9)
    stalls = res.stalls()
    if mode in ("spray", "adaptive"):
        assert stalls.size == 0
        lossy = res.impaired()
        assert lossy.shape == (1, 2)
        assert lossy[0, 0] == t0
        assert lossy[0, 1] == pytest.approx(t0 + extra * 8, rel=1e-12)
    else:
        np.testing.assert_allclose(stalls, [[t0, t0 + extra]], rtol=1e-12)


def test_flap_off_the_path_changes_nothing():
    topo = T.leaf_spine(64, 16, 800e9)
    flows = FlowTable.simple([0], [20], 1e9, entropy=np.array([5], np.uint64))
    used = Router(topo, "ecmp", seed=2).route(flows, [0]).group[0]
    other = np.setdiff1d(topo.tables["leaf_up"][0, 0], used)[0]
    res = simulate(
        topo, flows, Router(topo, "ecmp", seed=2), events=LinkEvents.flap([other], 1e-3, 2e-3)
    )
    assert res.finish_s[0] == pytest.approx(wire_bits(1e9) / 800e9 + 4 * LAT, rel=1e-12)


# -- (f) completion batching ----------------------------------------------------------------------
def test_batching_error_is_one_sided_and_small():
    topo = T.multiplane(64, 4, 16, 800e9)
    src, dst = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    off = src != dst
    rng = np.random.default_rng(0)
    flows = FlowTable.simple(
        src[off],
        dst[off],
        rng.uniform(0.5, 1.5, off.sum()) * 1e6,
        entropy=rng.integers(0, 2**63, off.sum(), dtype=np.uint64),
    )
    exact = simulate(topo, flows, Router(topo, "ecmp"))
    batched = simulate(topo, flows, Router(topo, "ecmp"), batch_rtol=1e-2, record_links=True)
    assert batched.n_events < exact.n_events / 5
    assert exact.makespan_s <= batched.makespan_s <= 1.02 * exact.makespan_s
    assert batched.unfinished == 0
    # flows finishing inside a window stop sending there: bits are still conserved
    dt = np.diff(batched.seg_t)
    total = wire_bits(flows.bytes).sum()
    assert batched.job_goodput_bps[0] @ dt == pytest.approx(total, rel=1e-9)
    assert batched.link_bits[topo.host_up].sum() == pytest.approx(total, rel=1e-9)
    assert batched.link_bits[topo.host_down].sum() == pytest.approx(total, rel=1e-9)
    loads = batched.link_load_bps.astype(float)
    np.testing.assert_allclose(
        loads.T @ dt, batched.link_bits, rtol=1e-6, atol=1e-6 * batched.link_bits.max()
    )
    assert np.all(loads <= topo.capacity_bps * (1 + 2**-23))


# -- (g) determinism ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ecmp", "flowlet", "adaptive"])
def test_same_seed_same_numbers(mode):
    topo = T.multiplane(64, 4, 16)
    flows = _mixed_workload(11, n=120)
    up = T.fail_links(topo, 0.1, seed=4)
    lk = topo.tables["leaf_up"][0, 1, 2]
    runs = [
        simulate(
            topo,
            flows,
            Router(topo, mode, seed=9),
            link_up=up,
            events=LinkEvents.flap([lk], 5e-6, 30e-6),
        )
        for _ in range(2)
    ]
    a, b = runs
    for name in ("start_s", "finish_s", "seg_t", "job_goodput_bps", "link_bits"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    other = simulate(topo, flows, Router(topo, mode, seed=10), link_up=up)
    if mode != "adaptive":  # a different hash seed moves the collisions
        assert not np.array_equal(a.finish_s, other.finish_s)


# -- (h) bad inputs -------------------------------------------------------------------------------
def _raises(field, fn):
    with pytest.raises(ConfigError) as exc:
        fn()
    assert exc.value.field == field
    return exc


def test_bad_inputs_name_their_field():
    topo = T.multiplane(16, 2, 8)
    router = Router(topo, "ecmp")
    ok = FlowTable.simple([0, 1], [2, 3], 1e6)
    _raises("flows.dst", lambda: FlowTable.simple([0, 1], [2, 1], 1e6))
    _raises(
        "flows.deps",
        lambda: FlowTable(
            src=[0, 1],
            dst=[2, 3],
            bytes=[1.0, 1.0],
            entropy=[0, 1],
            job=[0, 0],
            deps_ptr=[0, 1, 1],
            deps=[1],  # flow 0 waits for flow 1: forward
            release_s=[0, 0],
            delay_s=[0, 0],
        ),
    )
    _raises("flows.bytes", lambda: FlowTable.simple([0], [1], 0.0))
    _raises("flows.dst", lambda: simulate(topo, FlowTable.simple([0], [16], 1.0), router))
    _raises(
        "events.link",
        lambda: simulate(topo, ok, router, events=LinkEvents.flap([topo.n_links], 0.0, 1.0)),
    )
    _raises("events.link", lambda: simulate(topo, ok, router, events=LinkEvents.flap([-1], 0, 1)))
    _raises("link_up", lambda: simulate(topo, ok, router, link_up=np.ones(topo.n_links - 1, bool)))
    for bad in (-0.1, 1.0, 2.0):
        _raises("batch_rtol", lambda bad=bad: simulate(topo, ok, router, batch_rtol=bad))
    _raises("router", lambda: simulate(T.multiplane(16, 2, 8), ok, router))
    _raises("events.time_s", lambda: LinkEvents([-1.0], [0], [False]))
    _raises("flap.duration_s", lambda: LinkEvents.flap([0], 1.0, 1.0))


def test_until_stops_early():
    topo = T.multiplane(16, 2, 8)
    flows = FlowTable.simple([0, 1], [5, 6], [1e6, 1e9])
    res = simulate(topo, flows, Router(topo, "spray"), until_s=1e-3)
    assert res.end_s == 1e-3
    assert res.unfinished == 1 and np.isnan(res.finish_s[1])
    assert res.finish_s[0] == pytest.approx(wire_bits(1e6) / 800e9 + 4 * LAT, rel=1e-12)
