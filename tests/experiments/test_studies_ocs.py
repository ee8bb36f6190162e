"""Cross-pillar studies sync-over-ocs and rewire-or-defer: each study equals the pillars called
by hand in the same order, the sync seconds cross the pillar boundary unchanged (units and
value), the composed DAG and the co-schedules keep their invariants, a sweep resumes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.diloco.fleet import Block, FleetConfig, SyncDurations, get_regime, simulate
from trainfabric.diloco.learners import ProgressModel, SyncModel
from trainfabric.diloco.policies import make_policy
from trainfabric.experiments.studies import rewire_or_defer as rod
from trainfabric.experiments.studies import sync_over_ocs as soo
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online import threshold as online
from trainfabric.ocs.wiring import baselines
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.planner import plan
from trainfabric.runs import SweepSpec
from trainfabric.workloads import build_dag, get_preset

FLEET = {"windows": 120, "fleet_seeds": 2, "islands": 3, "policies": ["adaptive_load"]}
TINY = {
    "workload": "moe",
    "island_pods": 2,
    "ports": 2,
    "ocs": 1,
    "wirings": ["uniform", "dag_aware"],
    "fleet": FLEET,
}


@pytest.fixture(scope="module")
def tiny_table():
    return soo.sync_over_ocs(soo.SyncOverOcsConfig(**TINY), 0)


def test_ring_sync_equals_the_diloco_pillars_own_formula():
    """k = 1, every ring pair at c circuits: the OCS critical path of the sync DAG equals
    SyncModel.duration_s at link rate B·c + B0 (same units: seconds, same value)."""
    m, c, lat = 5, 2, 7e-6
    model = OcsModel.uniform(m, 2 * c, 1, rate_bps=100e9, fallback_bps=5e9)
    (ring,) = soo.rings(m, 1)
    x = np.zeros(model.n_pairs, dtype=np.int64)
    x[model.pair_index(ring, np.roll(ring, -1))] = c
    dag = soo.sync_dag(m, m, 1, 1e9 * 4.0, lat, 0.005)
    ours = PathCost(dag, model).hard(x)
    theirs = SyncModel(
        params=1e9, islands=m, link_gbps=(100 * c + 5), step_latency_s=lat, outer_step_s=0.005
    ).duration_s()
    assert ours == pytest.approx(theirs, rel=1e-12)
    # hand closed form: 2(M-1) steps of S/M bytes each, plus the outer step
    assert ours == pytest.approx(2 * (m - 1) * (lat + 8 * 4e9 / m / (205e9)) + 0.005, rel=1e-12)


def test_rings_join_pods_of_matching_rank():
    assert [r.tolist() for r in soo.rings(3, 2)] == [[0, 2, 4], [1, 3, 5]]


def test_combined_dag_is_iteration_then_sync():
    """On every wiring: CP(combined) = CP(islands) + CP(sync); the islands side by side last as
    one island (same job, offset pods), at a uniform rate too."""
    cfg = soo.SyncOverOcsConfig(**TINY)
    islands, ring, combined = soo.sync_dags(cfg, 0)
    model = cfg.model()
    rng = np.random.default_rng(0)
    wirings = [baselines.uniform_mesh(model), np.zeros(model.n_pairs, dtype=np.int64)]
    wirings.append(rng.integers(0, 2, model.n_pairs))
    for x in wirings:
        total = PathCost(islands, model).hard(x) + PathCost(ring, model).hard(x)
        assert PathCost(combined, model).hard(x) == pytest.approx(total, rel=1e-12)
    one = build_dag(get_preset("moe", pods=2), 0)
    assert islands.critical_path_at(100e9) == pytest.approx(one.critical_path_at(100e9), rel=1e-12)
    assert islands.n_nodes == 3 * one.n_nodes and combined.n_pods == 6
    assert islands.comm_bytes() == pytest.approx(3 * one.comm_bytes())
    assert combined.n_nodes == islands.n_nodes + ring.n_nodes
    # k rings x 2(M-1) steps x M flows of shard/M bytes (shard = P·4/k), k = 2, M = 3
    assert ring.comm_bytes() == pytest.approx(2 * 2 * (3 - 1) * (1e9 * 4.0 / 2))


def test_sync_over_ocs_equals_the_pillars_by_hand(tiny_table):
    """Build the DAG, wire it, read the sync and iteration seconds, simulate the fleet: all by
    hand with the pillars' APIs, then compare every figure the study reports."""
    cfg = soo.SyncOverOcsConfig(**TINY)
    islands, ring, combined = soo.sync_dags(cfg, 0)
    model = cfg.model()
    hand = {
        "uniform": baselines.uniform_mesh(model),
        "dag_aware": plan(combined, model, 1.0, 50.0, 0).x,
    }
    regime = get_regime("bursty").model_copy(update={"sync": SyncModel(params=1e9, islands=3)})
    for wiring, x in hand.items():
        sync_s = PathCost(ring, model).hard(x)
        iter_s = PathCost(islands, model).hard(x)
        fleet = FleetConfig(windows=120, progress=ProgressModel(steps_per_s=1 / iter_s))
        blocks = [Block(make_policy("adaptive_load"), np.array([0, 1]))]
        sim = simulate(fleet, regime, blocks, durations=SyncDurations(samples=[sync_s])).table
        row = tiny_table[(tiny_table.wiring == wiring) & (tiny_table.policy == "adaptive_load")]
        assert len(row) == 1
        row = row.iloc[0]
        assert row.sync_s == pytest.approx(sync_s, rel=1e-12)
        assert row.iteration_s == pytest.approx(iter_s, rel=1e-12)
        assert row.critical_path_s == pytest.approx(sync_s + iter_s, rel=1e-12)
        assert row.slo_violation_rate == pytest.approx(sim.slo_violation_rate.mean(), abs=1e-15)
        assert row.loss_equal_wallclock == pytest.approx(sim.final_loss.mean(), rel=1e-14)
        assert row.syncs == pytest.approx(sim.syncs.mean())
        if sim.syncs.min() > 0:  # the simulator drew exactly the OCS seconds
            assert row.fleet_sync_s == pytest.approx(sync_s, rel=1e-12)


def test_sync_seconds_cross_the_boundary_unchanged(tiny_table):
    """The seconds per sync the OCS side computes are the seconds the simulator charges."""
    synced = tiny_table[tiny_table.syncs > 0]
    assert len(synced) > 0
    np.testing.assert_allclose(synced.fleet_sync_s, synced.sync_s, rtol=1e-12)
    assert (tiny_table.sync_s > 0).all() and (tiny_table.sync_s < 3600).all()
    base = tiny_table[tiny_table.wiring == "uniform"]
    assert (base.slo_violation_rate_vs_ref == 0).all()
    assert tiny_table.provenance.str.contains("measured").all()


def test_no_sync_floor_is_the_same_on_every_wiring_without_progress_coupling():
    cfg = soo.SyncOverOcsConfig(
        **TINY | {"iteration_from_wiring": False, "fleet": FLEET | {"policies": ["no_sync"]}}
    )
    table = soo.sync_over_ocs(cfg, 0)
    assert table.slo_violation_rate.nunique() == 1
    assert (table.slo_violation_rate_vs_ref == 0).all()


# -- rewire-or-defer ---------------------------------------------------------------------------


def _brute_end(start, work, dark, rho, dt=1e-4):
    t, left = start, work
    while left > 1e-12:
        rate = rho if any(a <= t < b for a, b in dark) else 1.0
        step = min(dt, left / rate)
        t, left = t + step, left - step * rate
    return t


@settings(max_examples=25)
@given(
    start=st.floats(0, 3),
    work=st.floats(0.01, 2),
    gaps=st.lists(st.tuples(st.floats(0, 1), st.floats(0.001, 0.5)), max_size=3),
    rho=st.floats(0.05, 1.0),
)
def test_stretched_end_matches_time_stepping(start, work, gaps, rho):
    dark, t = [], 0.0
    for gap, length in gaps:
        dark.append((t + gap, t + gap + length))
        t = t + gap + length
    end = rod.stretched_end(start, work, dark, rho)
    assert end == pytest.approx(_brute_end(start, work, dark, rho), abs=2e-4)
    assert end >= start + work - 1e-12
    assert end <= start + work / rho + 1e-9


@settings(max_examples=25)
@given(
    syncs=st.lists(st.booleans(), min_size=40, max_size=40),
    reconfigs=st.lists(st.booleans(), min_size=40, max_size=40),
    sync_s=st.floats(0.1, 3.0),
    delta=st.one_of(st.just(0.0), st.floats(0.001, 1.5)),
)
def test_coschedules_keep_their_promises(syncs, reconfigs, sync_s, delta):
    syncs, reconfigs = np.array(syncs), np.array(reconfigs)
    rho = 0.05
    out = {m: rod.coschedule(syncs, reconfigs, m, sync_s, delta, rho) for m in rod.MODES}
    ind = out["independent"]
    assert (ind["reconfig_at"] == reconfigs).all()
    for mode, sched in out.items():
        starts = np.flatnonzero(sched["sync_at"]).astype(float)
        ends = starts + np.asarray(sched["durations"])
        assert len(sched["durations"]) == starts.size
        assert (starts[1:] >= ends[:-1] - 1e-12).all()  # syncs never overlap
        assert (np.asarray(sched["durations"]) >= sync_s * (1 - 1e-12)).all()
        dark = [(r, r + delta) for r in np.flatnonzero(sched["reconfig_at"])]
        collide = any(a < e and s < b for s, e in zip(starts, ends, strict=True) for a, b in dark)
        # the OCS alone can only wait for syncs, not undo a darkness longer than a window
        protected = mode in ("sync_defers", "joint") or (mode == "ocs_defers" and delta <= 1.0)
        if protected and delta > 0:
            assert not collide, mode
            np.testing.assert_allclose(sched["durations"], sync_s)
        if mode == "sync_defers":
            assert (sched["reconfig_at"] == reconfigs).all()
    if delta == 0:
        np.testing.assert_allclose(ind["durations"], sync_s)


ROD_TINY = {
    "ports": 2,
    "ocs": 1,
    "fleet": {"windows": 150, "fleet_seeds": 2, "islands": 4, "policies": ["adaptive_load"]},
}


def test_rewire_or_defer_ocs_side_equals_the_ocs_pillar_by_hand():
    cfg = rod.RewireOrDeferConfig(**ROD_TINY)
    layer = rod.ocs_layer(cfg, 3)
    cost = online.OneHopCost(OcsModel.uniform(4, 2, 1))
    seq = tr.generate("moe-phases", 150, 20.0 * 12 * 1e8, pods=4, seed=3, pair_bytes=1e8)
    c = cost.slot_optimum(seq.block(0, 1)[0])[0]
    res = online.evaluate(cost, seq, c, extra=())
    assert layer["switch_cost_s"] == c
    assert layer["theta"] == pytest.approx(res.theta_star, rel=1e-12)
    assert layer["alone"].regret_s == pytest.approx(res.runs["threshold"].regret_s, rel=1e-12)
    (same,) = rod.ocs_costs(layer, [layer["alone"].switched])
    assert same.slot_cost_s == pytest.approx(layer["alone"].slot_cost_s, rel=1e-12)


def test_rewire_or_defer_without_darkness_has_no_regret():
    """delta = 0: no sync is stretched or deferred, every co-schedule is both layers alone,
    and the fleet's replay reproduces the policy's own runs exactly."""
    table = rod.rewire_or_defer(rod.RewireOrDeferConfig(**ROD_TINY | {"delta_ms": 0.0}), 1)
    assert set(table["mode"]) == set(rod.MODES)
    for col in ("ocs_regret_s", "slo_regret", "loss_regret_wallclock", "loss_regret_tokens"):
        assert (table[col] == 0).all(), col
    assert np.allclose(table.sync_regret_s, 0, atol=1e-9)
    assert (table.stretched_syncs == 0).all() and (table.deferred_syncs == 0).all()


def test_rewire_or_defer_regrets_match_the_layers_by_hand():
    """With darkness (seed 2 has collisions): a sync (D < 1 s) can only meet a
    reconfiguration of its own window, which darkens its first δ, so each stretched sync
    costs exactly δ(1 − ρ); the other co-schedules stretch nothing."""
    fleet = ROD_TINY["fleet"] | {"windows": 400}
    cfg = rod.RewireOrDeferConfig(**ROD_TINY | {"delta_ms": 200.0, "fleet": fleet})
    table = rod.rewire_or_defer(cfg, 2).set_index("mode")
    d, rho = rod.nominal_sync_s(cfg), rod.dark_rate(cfg)
    assert rho == pytest.approx(5 / 105) and d < 1.0
    ind = table.loc["independent"]
    assert ind.stretched_syncs > 0
    assert ind.sync_regret_s == pytest.approx(ind.stretched_syncs * 0.2 * (1 - rho), rel=1e-9)
    for mode in ("ocs_defers", "sync_defers", "joint"):
        assert table.loc[mode].sync_regret_s == pytest.approx(0, abs=1e-9)
        assert table.loc[mode].stretched_syncs == 0
    assert table.loc["ocs_defers"].deferred_reconfigs == ind.stretched_syncs
    assert table.loc["sync_defers"].deferred_syncs == ind.stretched_syncs
    assert table.loc["sync_defers"].ocs_regret_s == 0
    assert (table.ocs_alone_reconfigurations <= table.ocs_alone_switches).all()
    assert (table.sync_s_nominal == d).all()


def test_a_study_sweep_resumes(assert_sweep_resumes):
    spec = SweepSpec(
        experiment="rewire-or-defer",
        seeds=1,
        base=ROD_TINY,
        grid={"delta_ms": [0.0, 100.0]},
        name="resume",
    )
    assert_sweep_resumes(spec)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("rewire-or-defer", "-p", 'modes=["x"]'), "base.modes"),
        (("rewire-or-defer", "-p", 'traffic="zzz"'), "base.traffic"),
        (("sync-over-ocs", "-p", 'wirings=["bogus"]'), "base.wirings"),
        (("sync-over-ocs", "-p", 'fleet={policies=["x"]}'), "base.fleet.policies"),
    ],
)
def test_bad_study_input_is_one_line_naming_the_field(cli, tmp_path, args, field):
    code, out, err = cli("experiments", "run", *args, "--out", str(tmp_path / "r"))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {field}:") and err.count("\n") == 1
