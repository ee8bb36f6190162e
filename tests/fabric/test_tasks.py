"""The DAG-driven engine (fabric.tasks): the flow engine's numbers on flow tables written as
task graphs, barrier semantics by hand, zero-byte flows and zero-time timers, memory that
follows the flows in flight, snapshot / resume, determinism, bad input.

Closed forms: a flow of ``B`` payload bytes alone at rate ``x`` takes
``8 B (4160/4096) / x`` to send and arrives ``hops x 1 us`` later.
"""

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flow.engine import simulate
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.routing import MODES, Router
from trainfabric.fabric.tasks.engine import TaskSim, run_tasks
from trainfabric.fabric.tasks.graph import BARRIER, COMM, TIMER, TaskGraph

WIRE = 4160 / 4096
LAT = 1e-6


def random_flows(seed: int, n: int = 50, hosts: int = 64) -> FlowTable:
    """``n`` flows with random dependencies on 25 persistent connections (several flows per
    connection, some concurrent)."""
    rng = np.random.default_rng(seed)
    c_src = rng.integers(0, hosts, 25)
    c_dst = (c_src + rng.integers(1, hosts, 25)) % hosts
    c_channel = rng.integers(0, 4, 25)
    conn = rng.integers(0, 25, n)
    src, dst = c_src[conn], c_dst[conn]
    ptr, deps = [0], []
    for f in range(n):
        if f:
            deps += sorted(set(rng.integers(0, f, rng.integers(0, min(f, 3) + 1)).tolist()))
        ptr.append(len(deps))
    return FlowTable(
        src=src,
        dst=dst,
        bytes=rng.uniform(1e5, 1e7, n),
        entropy=conn.astype(np.uint64) * 7919,
        job=np.zeros(n),
        deps_ptr=ptr,
        deps=deps,
        release_s=rng.uniform(0, 1e-4, n),
        delay_s=rng.uniform(0, 1e-5, n),
        channel=c_channel[conn],
    )


@pytest.fixture(scope="module")
def topo():
    return T.multiplane(64, 2, 16, 400e9)


# -- against the flow engine -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("option", ["static", "failures", "flap", "batched"])
def test_flow_table_as_tasks_matches_the_flow_engine(topo, mode, option):
    ft = random_flows(3)
    fab = np.flatnonzero(topo.fabric)
    kw = {
        "static": {},
        "failures": {"link_up": ~np.isin(np.arange(topo.n_links), fab[::7])},
        "flap": {"events": LinkEvents.flap(np.r_[fab[3], fab[40]], 2e-5, 3e-4)},
        "batched": {"batch_rtol": 0.05},
    }[option]
    ref = simulate(topo, ft, Router(topo, mode, seed=1), **kw)
    res = run_tasks(topo, TaskGraph.from_flow_table(ft), Router(topo, mode, seed=1), **kw)
    # adaptive re-balances at a link event on the unfinished traffic; the LP's split is
    # only unique within its 1e-3 congestion tolerance, so the two inputs' splits may differ
    rtol = 2e-3 if (mode == "adaptive" and option == "flap") else 1e-9
    np.testing.assert_allclose(res.finish_s[1::2], ref.finish_s, rtol=rtol)
    np.testing.assert_allclose(res.link_bits, ref.link_bits, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(res.delivered_bytes[1::2], ft.bytes, rtol=1e-9)


# -- barrier semantics by hand ---------------------------------------------------------------------
def test_count_down_barrier_releases_after_its_last_predecessor_by_hand(topo):
    """Timers 0 (2 ms) and 1 (3 ms, latency 1 ms) join at barrier 2 (latency 0.5 ms); comm 3
    (one flow, 1 MB, ECMP so one port of 200 Gb/s) follows it, then timer 4 (1 ms)."""
    g = TaskGraph.from_edges(
        [TIMER, TIMER, BARRIER, COMM, TIMER],
        [2e-3, 3e-3, 0.0, 0.0, 1e-3],
        [(0, 2), (1, 2), (2, 3), (3, 4)],
        latency_s=[0.0, 1e-3, 5e-4, 0.0, 0.0],
        flow_set=[-1, -1, -1, 0, -1],
        set_ptr=[0, 1],
        flow_conn=[0],
        flow_bytes=[1e6],
        conn_src=[0],
        conn_dst=[63],
    )
    res = run_tasks(topo, g, Router(topo, "ecmp"))
    send = 8e6 * WIRE / 200e9 + 4 * LAT
    b = 4e-3 + 5e-4
    np.testing.assert_allclose(res.start_s, [0, 1e-3, b, b, b + send], rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, [2e-3, 4e-3, b, b + send, b + send + 1e-3], rtol=1e-12)
    assert res.released_by.tolist() == [-1, -1, 1, 2, 3]
    assert res.critical_path().tolist() == [1, 2, 3, 4]


def test_ties_release_towards_the_lower_index(topo):
    g = TaskGraph.from_edges(
        [TIMER, TIMER, TIMER, BARRIER], [1e-3, 1e-3, 1e-3, 0.0], [(0, 3), (1, 3), (2, 3)]
    )
    res = run_tasks(topo, g, Router(topo, "ecmp"))
    assert res.released_by[3] == 0
    assert res.finish_s[3] == 1e-3


def test_a_phase_ends_when_its_slowest_flow_arrives(topo):
    """Two comm tasks between barriers: 1 MB and 3 MB on disjoint hosts; the exit barrier
    finishes with the 3 MB flow and is released by it."""
    g = TaskGraph.from_edges(
        [BARRIER, COMM, COMM, BARRIER],
        0.0,
        [(0, 1), (0, 2), (1, 3), (2, 3)],
        flow_set=[-1, 0, 1, -1],
        set_ptr=[0, 1, 2],
        flow_conn=[0, 1],
        flow_bytes=[1e6, 3e6],
        conn_src=[0, 2],
        conn_dst=[1, 3],  # same leaf: 2 hops, no shared link
    )
    res = run_tasks(topo, g, Router(topo, "ecmp"))
    np.testing.assert_allclose(res.finish_s[3], 24e6 * WIRE / 200e9 + 2 * LAT, rtol=1e-12)
    assert res.released_by[3] == 2


# -- zero-byte flows and zero-time timers ----------------------------------------------------------
def test_zero_bytes_and_zero_time(topo):
    """A zero-byte flow arrives after its path's propagation latency; a comm task without
    flows and a zero-time timer finish when they start; every byte is delivered once."""
    g = TaskGraph.from_edges(
        [TIMER, COMM, COMM, COMM, BARRIER],
        [0.0, 0, 0, 0, 0],
        [(0, 1), (1, 2), (2, 3), (3, 4)],
        latency_s=[0, 0, 2e-6, 0, 0],
        flow_set=[-1, 0, 1, 2, -1],
        set_ptr=[0, 1, 1, 3],
        flow_conn=[0, 0, 1],
        flow_bytes=[0.0, 0.0, 5e5],
        conn_src=[0, 8],
        conn_dst=[63, 9],
    )
    res = run_tasks(topo, g, Router(topo, "spray"))
    cross = 4 * LAT  # hosts 0 and 63 are on different leaves
    np.testing.assert_allclose(res.finish_s[:3], [0.0, cross, cross + 2e-6], rtol=1e-12)
    np.testing.assert_allclose(
        res.finish_s[3], cross + 2e-6 + 4e6 * WIRE / 400e9 + 2 * LAT, rtol=1e-12
    )
    np.testing.assert_allclose(res.delivered_bytes, [0, 0, 0, 5e5, 0], rtol=1e-12)


# -- memory follows the flows in flight -----------------------------------------------------------
def test_a_long_chain_keeps_few_flows_in_flight(topo):
    """400 ring steps of 64 flows each, chained by barriers: at most one step (64 flows) is
    ever in flight, and the slot arrays stay that size."""
    steps, n = 400, 64
    src = np.arange(n)
    dst = (src + 9) % n
    kind = np.tile([COMM, BARRIER], steps)
    edges = [(k, k + 1) for k in range(2 * steps - 1)]
    flow_set = np.where(kind == COMM, 0, -1)
    g = TaskGraph.from_edges(
        kind,
        0.0,
        edges,
        flow_set=flow_set,
        set_ptr=[0, n],
        flow_conn=np.arange(n),
        flow_bytes=np.full(n, 1e5),
        conn_src=src,
        conn_dst=dst,
    )
    res = run_tasks(topo, g, Router(topo, "ecmp", seed=2))
    assert res.unfinished == 0
    assert res.peak_flows == n
    assert res.state_bytes < 200 * n * 12 + 10_000
    np.testing.assert_allclose(res.delivered_bytes[::2], n * 1e5, rtol=1e-9)


# -- snapshot / resume -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ecmp", "adaptive", "flowlet"])
def test_resume_without_events_reproduces_the_run_exactly(topo, mode):
    g = TaskGraph.from_flow_table(random_flows(5))
    full = run_tasks(topo, g, Router(topo, mode, seed=1), bin_s=1e-5)
    sim = TaskSim(topo, g, Router(topo, mode, seed=1), bin_s=1e-5)
    for at in (1e-5, 7e-5, 2e-4):
        snap = sim.snapshot(at)
        assert snap.time_s <= at
        res = TaskSim.resume(snap, sim).run()
        np.testing.assert_array_equal(res.finish_s, full.finish_s)
        np.testing.assert_array_equal(res.released_by, full.released_by)
        np.testing.assert_array_equal(res.bin_bits, full.bin_bits)
        # connections may be routed in another order after a resume: same sums, other order
        np.testing.assert_allclose(res.link_bits, full.link_bits, rtol=1e-12)
    np.testing.assert_array_equal(sim.run().finish_s, full.finish_s)


@pytest.mark.parametrize("mode", ["ecmp", "spray", "pinning"])
def test_a_flap_resumed_from_a_snapshot_equals_the_run_from_zero(topo, mode):
    g = TaskGraph.from_flow_table(random_flows(6))
    link = np.flatnonzero(topo.fabric)[5]
    healthy = TaskSim(topo, g, Router(topo, mode, seed=1))
    for at in (3e-5, 1.5e-4):
        ev = LinkEvents.flap(link, at, at + 1e-4)
        ref = run_tasks(topo, g, Router(topo, mode, seed=1), events=ev)
        res = TaskSim.resume(healthy.snapshot(at), healthy, events=ev).run()
        np.testing.assert_allclose(res.finish_s, ref.finish_s, rtol=1e-12)


def test_events_before_the_snapshot_are_refused(topo):
    g = TaskGraph.from_flow_table(random_flows(6))
    sim = TaskSim(topo, g, Router(topo, "ecmp"))
    snap = sim.snapshot(1e-4)
    with pytest.raises(ConfigError, match="events.time_s"):
        TaskSim.resume(snap, sim, events=LinkEvents.flap(0, snap.time_s / 2, 1.0))


# -- determinism, link loads, bad input ------------------------------------------------------------
def test_same_seed_same_numbers_and_bins_add_up(topo):
    g = TaskGraph.from_flow_table(random_flows(7, n=80))
    a = run_tasks(topo, g, Router(topo, "ecmp", seed=9), bin_s=2e-5)
    b = run_tasks(topo, g, Router(topo, "ecmp", seed=9), bin_s=2e-5)
    np.testing.assert_array_equal(a.finish_s, b.finish_s)
    np.testing.assert_allclose(a.bin_bits.sum(), a.link_bits.sum(), rtol=1e-9)
    per_class = np.bincount(T.HOST_UP * topo.planes + topo.link_plane, minlength=1)
    assert per_class.size  # the default classes are tier x plane
    up = topo.link_tier == T.HOST_UP
    host_up_bits = a.link_bits[up].sum()
    np.testing.assert_allclose(host_up_bits, 8 * WIRE * g.flow_bytes.sum(), rtol=1e-9)
    assert (a.utilisation() <= 1 + 1e-9).all()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"duration_s": [-1.0, 0.0]}, "tasks.duration_s"),
        ({"edges": [(1, 0)]}, "tasks.succ"),
        ({"kind": [TIMER, 7]}, "tasks.kind"),
        ({"flow_set": [0, -1]}, "tasks.flow_set"),
    ],
)
def test_bad_graphs_name_the_field(change, field):
    args = {"kind": [TIMER, BARRIER], "duration_s": [1.0, 0.0], "edges": [(0, 1)]}
    args.update(change)
    with pytest.raises(ConfigError, match=field):
        TaskGraph.from_edges(args.pop("kind"), args.pop("duration_s"), args.pop("edges"), **args)


def test_a_flow_with_every_path_down_leaves_its_tasks_unfinished():
    """Static failures cut both uplinks of the source leaf: the comm task never finishes and
    the run returns (as the flow engine does) instead of waiting forever."""
    topo = T.leaf_spine(8, switch_radix=4)
    leaf0_up = topo.tables["leaf_up"][0, topo.leaf_of(0)]
    up = np.ones(topo.n_links, bool)
    up[leaf0_up] = False
    far = int(np.flatnonzero(topo.leaf_of(np.arange(8)) != topo.leaf_of(0))[0])
    g = TaskGraph.from_edges(
        [COMM, TIMER],
        [0.0, 1e-3],
        [(0, 1)],
        flow_set=[0, -1],
        set_ptr=[0, 1],
        flow_conn=[0],
        flow_bytes=[1e6],
        conn_src=[0],
        conn_dst=[far],
    )
    for mode in ("spray", "ecmp"):
        res = run_tasks(topo, g, Router(topo, mode), link_up=up)
        assert res.unfinished == 2
        assert np.isnan(res.finish_s).all() and res.start_s[0] == 0.0


def test_a_snapshot_lists_the_flows_and_links_in_flight(topo):
    ft = random_flows(8)
    g = TaskGraph.from_flow_table(ft)
    sim = TaskSim(topo, g, Router(topo, "ecmp", seed=1))
    snap = sim.snapshot(1.5e-4)
    task, conn, group, _ = snap.flows_in_flight()
    full = run_tasks(topo, g, Router(topo, "ecmp", seed=1))
    t = snap.time_s
    running = np.flatnonzero((full.start_s <= t) & (full.finish_s > t) & (g.kind == COMM))
    assert task.size and set(task.tolist()) <= set(running.tolist())
    np.testing.assert_array_equal(conn, g.flow_conn[g.set_ptr[g.flow_set[task]]])
    mask = snap.links_in_flight()
    np.testing.assert_array_equal(np.flatnonzero(mask), np.unique(group[group >= 0]))
