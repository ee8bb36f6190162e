"""Cross-pillar study sync-under-failures: the study equals the fabric and DiLoCo pillars called
by hand in the same order, the sync seconds cross the pillar boundary unchanged (units and
value), the healthy sync equals the closed form, the paired columns are differences of the
study's own rows, a sweep resumes, bad input names its field."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainfabric.diloco.fleet import Block, FleetConfig, SyncDurations, get_regime, simulate
from trainfabric.diloco.learners import SyncModel
from trainfabric.diloco.policies import make_policy
from trainfabric.errors import ConfigError
from trainfabric.experiments.studies import sync_under_failures as suf
from trainfabric.fabric import topology as T
from trainfabric.fabric.flow import engine as E
from trainfabric.fabric.flow.collectives import collective_flows, place
from trainfabric.fabric.routing import Router
from trainfabric.fabric.scenarios import TopologyConfig, build_topology
from trainfabric.io import loads
from trainfabric.runs import SweepSpec
from trainfabric.workloads.collectives import Step, ring_all_reduce

FLEET = {
    "windows": 600,
    "fleet_seeds": 2,
    "islands": 3,
    "params": 1e8,
    "policies": ["fixed_h", "adaptive_load", "no_sync"],
}
TINY = {
    "topology": {"gpus": 16, "planes": 2, "switch_radix": 8, "nic_rate_gbps": 100.0},
    "island_hosts": 2,
    "channels": 2,
    "modes": ["ecmp", "adaptive"],
    "failed_fractions": [0.0, 0.25],
    "draws": 2,
    "flap_probability": 1.0,
    "flap_durations_s": [0.002],
    "flap_sides": ["fabric"],
    "fleet": FLEET,
}
HEADERS = 4160 / 4096  # wire bytes per payload byte (64 B headers per 4096 B MTU)


@pytest.fixture(scope="module")
def tiny_table():
    return suf.sync_under_failures(suf.SyncUnderFailuresConfig(**TINY), 0)


def _by_hand_sync_s(mode: str, frac: float, d: int, seed: int = 0) -> float:
    """One draw of the sync, pillar by pillar: topology, placement, k rings of matching rank,
    flows, failed cables, the flow engine; then the flap on the chosen carrying cable."""
    topo = build_topology(TopologyConfig(**TINY["topology"]))
    m, k = FLEET["islands"], TINY["island_hosts"]
    hosts = place(topo.host_leaf[0], m * k, "random", seed)
    shard = FLEET["params"] * 4.0 / k
    rings = [ring_all_reduce([i * k + r for i in range(m)], shard) for r in range(k)]
    steps = [
        Step(*(np.concatenate([getattr(s, a) for s in group]) for a in ("src", "dst", "bytes")))
        for group in zip(*rings, strict=True)
    ]
    flows = collective_flows(
        steps, hosts, step_latency_s=50e-6, sync="rank", channels=2, seed=seed
    ).flows
    rng = np.random.default_rng([seed, round(frac * 1e6), d])
    up = T.fail_links(topo, frac, seed=int(rng.integers(2**31)))
    u = rng.random(4)
    res = E.simulate(topo, flows, Router(topo, mode, seed=seed), link_up=up)
    used = np.flatnonzero(topo.link_tier == T.UP1)
    used = used[(res.link_bits[used] > 0) | (res.link_bits[topo.reverse[used]] > 0)]
    cable = used[int(u[3] * used.size)]
    at = u[2] * res.makespan_s
    events = E.LinkEvents.flap([cable, topo.reverse[cable]], at, at + 0.002)
    res = E.simulate(topo, flows, Router(topo, mode, seed=seed), link_up=up, events=events)
    return res.makespan_s + 0.005


def test_sync_steps_are_k_rings_of_matching_rank():
    m, k, shard = 5, 3, 6e6
    steps = suf.sync_steps(m, k, shard)
    assert len(steps) == 2 * (m - 1)
    for s in steps:
        assert s.src.size == m * k
        np.testing.assert_array_equal(s.src % k, s.dst % k)  # host r of one island to host r
        hop = (s.dst // k - s.src // k) % m
        assert set(hop.tolist()) == {1}  # the next island on the ring
        np.testing.assert_allclose(s.bytes, shard / m)
    sent = np.zeros(m * k)
    for s in steps:
        np.add.at(sent, s.src, s.bytes)
    np.testing.assert_allclose(sent, 2 * (m - 1) / m * shard)  # the ring's 2(M-1)/M factor


def test_study_equals_the_pillars_by_hand(tiny_table):
    """Every draw measured by hand on the fabric pillar, the samples fed by hand to the DiLoCo
    pillar's simulator: the study's sync figures, SLO and loss are those numbers."""
    regime = get_regime("bursty").model_copy(update={"sync": SyncModel(params=1e8, islands=3)})
    fleet = FleetConfig(windows=600)
    seeds = np.array([0, 1])
    for frac in TINY["failed_fractions"]:
        for mode in TINY["modes"]:
            samples = np.array([_by_hand_sync_s(mode, frac, d) for d in range(2)])
            blocks = [Block(make_policy(p), seeds) for p in ("fixed_h", "adaptive_load")]
            sim = simulate(fleet, regime, blocks, durations=SyncDurations(samples=samples)).table
            cell = tiny_table[(tiny_table.failed_fraction == frac) & (tiny_table["mode"] == mode)]
            assert cell.sync_s_mean.iloc[0] == pytest.approx(samples.mean(), rel=1e-12)
            assert cell.sync_s_max.iloc[0] == pytest.approx(samples.max(), rel=1e-12)
            assert cell.sync_s_p50.iloc[0] == pytest.approx(np.median(samples), rel=1e-12)
            for policy, rows in sim.groupby("policy"):
                row = cell[cell.policy == policy].iloc[0]
                assert row.slo_violation_rate == pytest.approx(
                    rows.slo_violation_rate.mean(), abs=1e-15
                )
                assert row.loss_equal_wallclock == pytest.approx(rows.final_loss.mean(), rel=1e-14)
                assert row.syncs == pytest.approx(rows.syncs.mean())
                assert rows.syncs.min() > 0  # the fabric's seconds were charged


def test_sync_seconds_cross_the_boundary_unchanged():
    """One draw per cell: every sync the simulator charges is the fabric's seconds exactly."""
    cfg = suf.SyncUnderFailuresConfig(**TINY | {"draws": 1, "flap_probability": 0.0})
    table = suf.sync_under_failures(cfg, 0)
    synced = table[table.syncs > 0]
    assert len(synced) > 0
    np.testing.assert_allclose(synced.fleet_sync_s, synced.sync_s_mean, rtol=1e-12)
    assert (table.sync_s_mean > 0).all() and (table.sync_s_max < 60).all()
    assert table.provenance.str.contains("measured").all()


def test_healthy_sync_is_the_closed_form_and_the_diloco_model_without_headers(tiny_table):
    """Adaptive routing on a healthy fabric (fluid: ideal): 2(M-1) steps of S/(kM) bytes at
    the NIC rate with headers, plus per-step latency and 4 hops; the DiLoCo pillar's own
    formula (at k x NIC per island) is the same sync without headers and hops."""
    m, k, rate, hop = 3, 2, 100e9, 1e-6
    chunk = 1e8 * 4.0 / (k * m)
    diloco = 2 * (m - 1) * (8 * chunk / rate + 50e-6) + 0.005
    fabric = 2 * (m - 1) * (8 * chunk * HEADERS / rate + 50e-6 + 4 * hop) + 0.005
    np.testing.assert_allclose(tiny_table.sync_s_diloco_model, diloco, rtol=1e-12)
    adaptive = tiny_table[tiny_table["mode"] == "adaptive"]
    assert adaptive.healthy_sync_s.iloc[0] == pytest.approx(fabric, rel=1e-9)
    assert (tiny_table.sync_s_max >= tiny_table.sync_s_p50).all()


def test_without_faults_every_draw_is_the_healthy_sync():
    cfg = suf.SyncUnderFailuresConfig(
        **TINY | {"failed_fractions": [0.0], "flap_probability": 0.0, "draws": 3}
    )
    draws = suf.sync_draws(cfg, 0)
    np.testing.assert_allclose(draws.sync_s, draws.healthy_sync_s, rtol=1e-12)
    assert not draws.flap.any() and (draws.failed_cables == 0).all()


def test_paired_columns_are_differences_of_the_rows(tiny_table):
    """Same fleet seeds in every cell: a paired mean difference is the difference of means."""
    t = tiny_table.set_index(["failed_fraction", "mode", "policy"])
    for (frac, mode, policy), row in t.iterrows():
        ref_p = t.loc[(frac, mode, "fixed_h")]
        ref_m = t.loc[(frac, "ecmp", policy)]
        for col in suf.PAIRED:
            assert row[f"{col}_vs_policy_ref"] == pytest.approx(row[col] - ref_p[col], abs=1e-12)
            assert row[f"{col}_vs_mode_ref"] == pytest.approx(row[col] - ref_m[col], abs=1e-12)
    assert (tiny_table[tiny_table.policy == "fixed_h"].slo_violation_rate_vs_policy_ref == 0).all()
    floor = tiny_table[tiny_table.policy == "no_sync"]
    assert floor.slo_violation_rate.nunique() == 1  # no sync: the fabric cannot matter


def test_too_many_island_hosts_names_the_field():
    cfg = suf.SyncUnderFailuresConfig(**TINY | {"island_hosts": 8})
    with pytest.raises(ConfigError) as err:
        suf.sync_under_failures(cfg, 0)
    assert err.value.field == "island_hosts"


def test_a_study_sweep_resumes(assert_sweep_resumes):
    spec = SweepSpec(
        experiment="sync-under-failures",
        seeds=1,
        base=TINY | {"modes": ["adaptive"], "failed_fractions": [0.25], "draws": 1},
        grid={"flap_probability": [0.0, 1.0]},
        name="resume",
    )
    assert_sweep_resumes(spec)


def test_the_demo_has_the_cross_pillar_step(demo_run):
    """The session's demo run (shared fixture) carries the short sync-under-failures table."""
    run_dir, printed = demo_run
    step = loads(printed)["steps"]["cross-pillar"]
    table = pd.read_parquet(run_dir / "cross_pillar_sync_under_failures.parquet")
    assert len(table) == 2 * 2 * 3  # failed fractions x modes x policies
    assert set(table["mode"]) == {"ecmp", "adaptive"}
    assert set(step["sync_s_p99"]) == {"ecmp@0", "ecmp@0.1", "adaptive@0", "adaptive@0.1"}
    for r in table.itertuples():
        assert step["sync_s_p99"][f"{r.mode}@{r.failed_fraction:g}"] == r.sync_s_p99 > 0


def test_figures_plot_every_mode(tiny_table):
    (fig,) = suf.study_figures(tiny_table)
    left, right = fig.axes[:2]
    assert len(left.containers) == len(right.containers) == len(TINY["modes"])
    assert suf.study_figures(tiny_table[tiny_table.failed_fraction == 0.0]) == []
