"""Faults during a training iteration: the draws' maths, failed cables and flaps on small jobs."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.iteration import faults as IF

# -- the draws' maths ----------------------------------------------------------------------------
spans = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 10)).map(lambda p: (p[0], p[0] + p[1])),
    min_size=1,
    max_size=8,
)


@given(spans)
def test_merged_intervals_cover_exactly_the_union(pairs):
    """On an integer grid: a point is in the merged union iff it is in some input interval."""
    s, f = np.array(pairs, float).T
    merged = IF.merge_intervals(s, f)
    grid = np.arange(0, 52) + 0.5
    inside = ((grid[:, None] >= s) & (grid[:, None] < f)).any(axis=1)
    in_merged = ((grid[:, None] >= merged[:, 0]) & (grid[:, None] < merged[:, 1])).any(axis=1)
    assert np.array_equal(inside, in_merged)
    assert np.all(merged[1:, 0] > merged[:-1, 1])  # disjoint, sorted, not touching


def test_times_are_uniform_over_the_union_by_length():
    iv = np.array([[0.0, 1.0], [5.0, 8.0]])
    t = IF.time_in_intervals(iv, np.array([0.0, 0.125, 0.25, 0.5, 0.999999]))
    np.testing.assert_allclose(t, [0.0, 0.5, 5.0, 6.0, 8.0], atol=1e-5)
    u = np.random.default_rng(0).random(20000)
    t = IF.time_in_intervals(iv, u)
    assert ((t >= 0) & (t <= 1)).mean() == pytest.approx(0.25, abs=0.01)
    assert not np.any((t > 1) & (t < 5))
    with pytest.raises(ConfigError, match="faults"):
        IF.time_in_intervals(np.zeros((0, 2)), u)


def test_cable_candidates_are_the_used_cables_of_a_side():
    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=400e9)
    bits = np.zeros(topo.n_links)
    host = topo.host_down[1, 3]  # traffic into GPU 3 on plane 1 only
    up1 = np.flatnonzero(topo.link_tier == T.UP1)
    spine = topo.reverse[up1[5]]  # traffic on the spine -> leaf direction of cable up1[5]
    bits[[host, spine]] = 1.0
    assert IF.cable_candidates(topo, bits, "nic").tolist() == [topo.host_up[1, 3]]
    assert IF.cable_candidates(topo, bits, "fabric").tolist() == [up1[5]]
    assert set(IF.cable_links(topo, up1[5])) == {up1[5], spine}
    with pytest.raises(ConfigError, match="flap_sides"):
        IF.cable_candidates(topo, bits, "spine")


def test_flap_plan_spreads_draws_and_is_the_same_for_every_call():
    faults = SimpleNamespace(
        flap_sides=["nic", "fabric"], flap_durations_s=[1e-3, 1.0], flap_draws=10
    )
    plan = IF.flap_plan(faults, seed=4)
    assert len(plan) == 12  # ceil(10 / 4) = 3 per (side, duration)
    assert plan.groupby(["side", "duration_s"]).size().eq(3).all()
    pd.testing.assert_frame_equal(plan, IF.flap_plan(faults, seed=4))
    assert not plan.equals(IF.flap_plan(faults, seed=5))


def test_summaries_by_hand():
    fail = pd.DataFrame({"mode": ["ecmp"] * 3, "failed_fraction": 0.1, "slowdown": [1.0, 1.5, 1.2]})
    assert IF.failures_summary(fail) == {
        "ecmp": {"failure_slowdown_median": 1.2, "failure_slowdown_worst": 1.5}
    }
    flaps = pd.DataFrame(
        {
            "mode": "spray",
            "side": "nic",
            "duration_s": 0.001,
            "slowdown": np.arange(1, 102) / 100 + 1,
            "hit": [True] * 26 + [False] * 75,
        }
    )
    s = IF.flaps_summary(flaps)["spray"]
    assert s["flap_slowdown_p50"] == pytest.approx(1.51)
    assert s["flap_slowdown_p99"] == pytest.approx(2.0)
    assert s["flap_slowdown_max"] == pytest.approx(2.01)
    assert s["flap_hit_rate"] == pytest.approx(26 / 101)
    assert s["flap_slowdown_p90_nic_1ms"] == s["flap_slowdown_p90"]


# -- failures and flaps on a hand-made iteration --------------------------------------------------
RATE = 100e9
WIRE = (4096 + 64) / 4096  # payload -> wire bytes (the engine's headers)


def chain_run(topo, mode: str, parts: list, seed: int = 0):
    """An iteration as a chain of timers (``float``: seconds) and comm tasks (``(src hosts,
    dst hosts, bytes per flow)``, one flow per pair), run healthy: the ``run`` the fault
    functions take (topology, graph, mode, seed, result, iteration_s)."""
    from trainfabric.fabric.iteration.run import make_router
    from trainfabric.fabric.tasks.engine import run_tasks
    from trainfabric.fabric.tasks.graph import COMM, TIMER, TaskGraph

    kind, dur, flow_set, set_ptr, src, dst, nbytes = [], [], [], [0], [], [], []
    for p in parts:
        if isinstance(p, float):
            kind.append(TIMER)
            dur.append(p)
            flow_set.append(-1)
            continue
        s, d, b = p
        kind.append(COMM)
        dur.append(0.0)
        flow_set.append(len(set_ptr) - 1)
        src += list(s)
        dst += list(d)
        nbytes += [b] * len(s)
        set_ptr.append(len(src))
    n = len(kind)
    graph = TaskGraph.from_edges(
        kind,
        dur,
        [(i, i + 1) for i in range(n - 1)],
        flow_set=flow_set,
        set_ptr=set_ptr,
        flow_conn=np.arange(len(src)),
        flow_bytes=nbytes,
        conn_src=src,
        conn_dst=dst,
    )
    res = run_tasks(topo, graph, make_router(topo, mode, seed), bin_s=1e-3)
    return SimpleNamespace(
        topo=topo, graph=graph, mode=mode, seed=seed, result=res, iteration_s=res.makespan_s
    )


def fabric():
    """One plane, 4 leaves of 2 hosts, 2 spines (one cable per leaf-spine pair), 100 Gb/s,
    no hop latency: every figure below is counted by hand."""
    return T.leaf_spine(8, switch_radix=4, nic_rate_bps=RATE, hop_latency_s=0.0)


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_failed_cable_off_the_routes_costs_nothing_and_on_them_what_a_hand_count_says():
    """Hosts 0, 1 (leaf 0) each send 1 GB to hosts 2, 3 (leaf 1) after 10 ms of compute:
    leaf 0's two uplinks carry both flows at line rate. With one uplink of leaf 0 down,
    spraying puts both flows on the other one: half the rate, twice the comm time. A cable of
    leaf 3 (no traffic) changes nothing."""
    topo = fabric()
    run = chain_run(topo, "spray", [0.01, ([0, 1], [2, 3], 1e9)])
    comm = 1e9 * 8 * WIRE / RATE
    assert run.iteration_s == pytest.approx(0.01 + comm, rel=1e-9)
    leaf_up = topo.tables["leaf_up"][0]
    for cable, expected in ((leaf_up[3, 0], 0.01 + comm), (leaf_up[0, 1], 0.01 + 2 * comm)):
        up = np.ones(topo.n_links, bool)
        up[IF.cable_links(topo, cable)] = False
        res = IF.failed_iteration(run, up)
        assert res.makespan_s == pytest.approx(expected, rel=1e-9)
    faults = SimpleNamespace(failed_fractions=[0.25], failure_draws=3, workers=1)
    table = IF.run_failures(run, faults, seed=1)
    seen = []  # the same draws on two local processes, progress reported per draw
    pooled = IF.run_failures(run, SimpleNamespace(**{**vars(faults), "workers": 2}), 1, seen.append)
    assert sorted(seen) == [0, 1, 2]
    cols = [c for c in table if c != "sim_wall_s"]
    pd.testing.assert_frame_equal(pooled[cols], table[cols])
    assert table["failed_cables"].eq(2).all()  # round(0.25 x 8 leaf-spine cables)
    np.testing.assert_allclose(table["slowdown"], table["iteration_s"] / run.iteration_s)
    # by hand: the flows use the spines whose cables to leaf 0 and to leaf 1 both survive,
    # each at line rate: slowdown 2 / usable spines (inf: the job never finishes)
    for d in range(3):
        up = _failed(topo, 1, 0.25, d)
        usable = int((up[leaf_up[0]] & up[leaf_up[1]]).sum())
        expected = (0.01 + comm * 2 / usable) / run.iteration_s if usable else np.inf
        assert table["slowdown"][d] == pytest.approx(expected, rel=1e-9)
        assert (table["unfinished_tasks"][d] > 0) == (usable == 0)
    assert np.isinf(table["slowdown"]).any() and np.isfinite(table["slowdown"]).any()


def _failed(topo, seed: int, fraction: float, draw: int) -> np.ndarray:
    """The link state of failure draw ``draw`` (as run_failures draws it)."""
    s = int(np.random.default_rng([seed, round(fraction * 1e6), draw]).integers(2**31))
    return T.fail_links(topo, fraction, seed=s)


def test_flap_outside_communication_costs_nothing_inside_it_stalls_the_step():
    """Comm, 3 s of compute, comm (ECMP: the routing view learns a change after 1 s). A 1 ms
    flap of a used cable starting 1 ms into the compute is seen down and up again by every
    mechanism before the next comm starts: no cost. The same flap during the first comm, on
    the cable its one flow uses, stalls that flow for exactly the flap (ECMP keeps the dead
    cable, as routing reacts only after 1 s, and the flow sends nothing while it is down)."""
    topo = fabric()
    part = ([0], [2], 1e8)
    run = chain_run(topo, "ecmp", [part, 3.0, part])
    first = run.result.finish_s[0]
    healthy = IF._sim(run)
    used = IF.cable_candidates(topo, run.result.link_bits, "fabric")
    quiet = IF.flap_once(run, healthy, int(used[0]), first + 1e-3, 1e-3)
    assert quiet["iteration_s"] == run.iteration_s and quiet["step_stall_s"] == 0
    assert not quiet["hit"]
    healthy = IF._sim(run)
    loud = IF.flap_once(run, healthy, int(used[0]), first / 2, 1e-3)
    assert loud["hit"] and loud["reaction_s"] == 1.0
    assert loud["step_stall_s"] == pytest.approx(1e-3, rel=1e-9)
    assert loud["iteration_stall_s"] == pytest.approx(1e-3, rel=1e-9)


def test_resumed_flap_equals_the_flap_rerun_from_zero():
    from trainfabric.fabric.events import LinkEvents
    from trainfabric.fabric.iteration.run import make_router
    from trainfabric.fabric.tasks.engine import run_tasks

    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=200e9)
    a2a = ([0, 1, 2, 3, 8, 9], [8, 9, 12, 13, 0, 5], 5e7)
    for mode in ("ecmp", "pinning", "spray"):
        run = chain_run(topo, mode, [0.002, a2a, 0.001, ([4, 5], [10, 11], 2e8)])
        healthy = IF._sim(run)
        for cable, at in ((int(topo.host_up[1, 0]), 0.0025), (int(topo.host_up[0, 4]), 0.0045)):
            row = IF.flap_once(run, healthy, cable, at, 0.01)
            events = LinkEvents.flap(IF.cable_links(topo, cable), at, at + 0.01)
            ref = run_tasks(topo, run.graph, make_router(topo, mode, 0), events=events)
            assert row["iteration_s"] == pytest.approx(ref.makespan_s, rel=1e-12, abs=0)


def test_hit_rate_counts_exactly_the_draws_whose_cable_carried_traffic():
    """Two comms one after the other on disjoint leaves: a cable is hit iff it is on the route
    of a flow of the comm in flight at the flap instant (brute force: route those flows
    afresh). Draws land in both comms, so both outcomes occur."""
    from trainfabric.fabric.iteration.run import make_router
    from trainfabric.fabric.maxmin import link_load

    topo = fabric()
    run = chain_run(topo, "ecmp", [([0, 1], [2, 3], 1e8), 0.001, ([4, 5], [6, 7], 1e8)])
    faults = SimpleNamespace(flap_sides=["nic", "fabric"], flap_durations_s=[1e-3], flap_draws=40)
    table = IF.run_flaps(run, faults, seed=2)
    res, g = run.result, run.graph
    router = make_router(topo, "ecmp", 0)
    conns = g.conn_table()
    expected = []
    for row in table.itertuples():
        task = np.flatnonzero((res.start_s <= row.at_s) & (res.finish_s > row.at_s))
        sets = g.flow_set[task]
        flows = np.concatenate([np.arange(g.set_ptr[s], g.set_ptr[s + 1]) for s in sets])
        r = router.route(conns, g.flow_conn[flows])
        used = link_load(r.group, r.weight, router.groups, topo.n_links, np.ones(flows.size)) > 0
        expected.append(bool(used[IF.cable_links(topo, row.cable)].any()))
    assert table["hit"].tolist() == expected
    assert 0 < table["hit"].mean() < 1
    assert IF.flaps_summary(table)["ecmp"]["flap_hit_rate"] == pytest.approx(np.mean(expected))


def test_report_figures_of_the_iteration_tables():
    from trainfabric.experiments import fabric_iteration_studies as FS
    from trainfabric.runs.report import FIGURES

    key = {"job": "j", "mode": "ecmp", "overlap": "none"}
    critical = pd.DataFrame(
        [
            {**key, "start_s": 0.0, "finish_s": 1.0, "category": "compute"},
            {**key, "start_s": 1.0, "finish_s": 1.5, "category": "DP"},
        ]
    )
    coll = critical.assign(category=["PP", "DP"], on_critical_path=[False, True])
    util = pd.DataFrame(
        [
            {**key, "t_s": t, "tier": "up1", "plane": p, "utilisation": 0.5}
            for t in (0, 1)
            for p in (0, 1)
        ]
    )
    fail = pd.DataFrame({"mode": ["ecmp", "spray"], "failed_fraction": 0.1, "slowdown": [1.2, 1.0]})
    flaps = pd.DataFrame(
        {"mode": "ecmp", "side": ["nic", "fabric"], "duration_s": 1e-3, "slowdown": [1.0, 1.5]}
    )
    for stem, table in (
        (FS.CRITICAL_STEM, critical),
        (FS.COLLECTIVES_STEM, coll),
        (FS.UTILISATION_STEM, util),
        (IF.FAILURES_STEM, fail),
        (IF.FLAPS_STEM, flaps),
    ):
        assert len(FIGURES[stem](table)) == 1
        assert FIGURES[stem](table.drop(columns=["mode", "start_s", "t_s"], errors="ignore")) == []
