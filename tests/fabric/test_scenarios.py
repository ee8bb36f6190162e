"""Fabric scenarios end to end: files in, tables/report out, bad files -> one-line errors."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import scenarios as S
from trainfabric.fabric import topology as T
from trainfabric.io import loads

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SMALL = {"gpus": 16, "switch_radix": 8, "planes": 2}


def tiny(kind: str, **extra) -> dict:
    base = {"kind": kind, "seed": 3, "modes": ["ecmp", "adaptive"], "topology": SMALL}
    if kind == "line_rate":
        base |= {"sizes_bytes": [2**20], "collectives": [{"kind": "all_reduce", "sync": "step"}]}
    if kind == "isolation":
        base |= {"oversubscription": [1.0], "failed_fractions": [0.0]}
    if kind == "failures":
        base |= {"fractions": [0.0, 0.25], "draws": 1, "collective": {"kind": "all_to_all"}}
    if kind == "flaps":
        base |= {
            "collective": {"kind": "all_reduce", "ranks": 4, "size_bytes": 2**22},
            "iterations": 4,
            "compute_s": 0.01,
            "flaps": [{"link": "fabric", "duration_s": 0.05}],
        }
    return base | extra


@pytest.mark.parametrize("kind", list(S.SCENARIOS))
def test_each_kind_runs_to_a_run_directory(kind, tmp_path):
    sc = S.parse_scenario(tiny(kind))
    res = S.run_to_dir(sc, tmp_path / kind)
    table = pd.read_parquet(tmp_path / kind / f"{S.STEMS[kind]}.parquet")
    assert len(table) == len(res["rows"]) > 0
    assert set(res["modes"]) == {"ecmp", "adaptive"}
    manifest = loads((tmp_path / kind / "manifest.json").read_text())
    assert manifest["config"]["kind"] == kind
    html = Path(res["report"]).read_text()
    assert html.count("data:image/png") >= 1  # the scenario's own figure rendered


def test_failures_table_is_consistent(tmp_path):
    table = S.run_failures(S.parse_scenario(tiny("failures")))
    assert np.allclose(table["ideal_fraction"], 1 - table["failed_fraction"])
    healthy = table[table["failed_fraction"] == 0]
    assert np.allclose(healthy["max_concurrent_flow_lp"], 1.0)  # every flow at line rate
    assert np.allclose(healthy[healthy["mode"] == "adaptive"]["mean_permutation_goodput"], 1.0)
    assert np.allclose(healthy["maxflow_bisection"], 1.0)  # full bisection
    broken = table[table["failed_fraction"] > 0]
    assert (broken["failed_links"] > 0).all()
    assert np.all(healthy["collective_increase"] == 0)


def test_failure_labels_are_what_they_say():
    """Every permutation across the leaf-order cut stays under the max-flow of that cut
    (goodput_over_maxflow <= 1, any mode); the max-flow is a property of the links (one
    value per draw, whatever the mode) and equals the per-spine closed form of a 2-tier
    fabric: sum over planes and spines of min(alive A->s, alive s->B) cables x port rate.
    The mean goodput of a random permutation is NOT bounded by it (no assertion)."""
    sc = S.parse_scenario(tiny("failures", fractions=[0.0, 0.25], draws=3))
    table = S.run_failures(sc)
    assert (table["goodput_over_maxflow"] <= 1 + 1e-9).all()
    assert np.allclose(
        table["goodput_over_maxflow"] * table["maxflow_bisection"], table["cut_permutation_goodput"]
    )
    per_draw = table.groupby(["failed_fraction", "draw"])["maxflow_bisection"].nunique()
    assert (per_draw == 1).all()
    topo = S.build_topology(sc.topology)
    for frac, d in [(0.25, 0), (0.25, 2)]:
        rng = np.random.default_rng([sc.seed, d])
        up = T.fail_links(topo, frac, seed=int(rng.integers(2**31)))
        cap_up, cap_down = T.bundle_capacity(topo, up)  # [P, L, S], [P, S, L]
        leaves = cap_up.shape[1]
        a = np.arange(leaves) < leaves // 2  # hosts are in leaf order, leaves hold equal counts
        closed = np.minimum(cap_up[:, a].sum(axis=1), cap_down[:, :, ~a].sum(axis=2)).sum()
        closed *= topo.port_rate_bps / (topo.n_hosts / 2 * topo.nic_rate_bps)
        row = table[(table["failed_fraction"] == frac) & (table["draw"] == d)]
        assert row["maxflow_bisection"].iloc[0] == pytest.approx(min(closed, 1.0))
    summary = S.summarize("failures", {S.STEMS["failures"]: table})
    for mode in sc.modes:
        assert set(S.FAILURE_KEYS) <= set(summary[mode])


def test_connections_reach_the_flows():
    """``connections`` is a strict field of every collective and is passed to the flows."""
    with pytest.raises(ConfigError) as exc:
        S.parse_scenario(tiny("failures", collective={"kind": "all_to_all", "connections": "x"}))
    assert exc.value.field == "collective.connections"
    sc = S.parse_scenario(
        tiny("failures", collective={"kind": "all_reduce", "connections": "per_message"})
    )
    assert S.flow_options(sc.collective, 0)["connections"] == "per_message"
    table = S.run_failures(sc.model_copy(update={"fractions": [0.0], "modes": ["ecmp"]}))
    assert (table["connections"] == "per_message").all()


def test_flap_stalls_follow_the_reaction_time():
    """An ECMP flow on the flapped cable waits for routing (the flap's 50 ms, it comes back
    first); adaptive loses traffic for at most its hardware reaction time."""
    table = S.run_flaps(S.parse_scenario(tiny("flaps"))).set_index("mode")
    assert table.loc["adaptive", "impaired_until_s"] <= 5e-6 + 1e-12
    assert table.loc["adaptive", "stall_s"] == 0.0
    assert table.loc["ecmp", "impaired_until_s"] == pytest.approx(0.05, rel=1e-6)
    assert (table["baseline_stall_s"] == 0).all()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "kind"),
        ({"kind": "latency"}, "kind"),
        (tiny("line_rate", sizes_bytes=[0]), "sizes_bytes.0"),
        (tiny("line_rate", sizes_bytes=[1e-30]), "sizes_bytes.0"),
        (tiny("line_rate", sizes_bytes=[1e30]), "sizes_bytes.0"),
        (tiny("line_rate", modes=["magic"]), "modes.0"),
        (tiny("line_rate", topology=SMALL | {"gpus": 1000}), "topology.gpus"),
        (tiny("failures", fractions=[1.5]), "fractions.0"),
        (tiny("flaps", flaps=[{"link": "host", "duration_s": -1}]), "flaps.0.duration_s"),
        (tiny("flaps", flaps=[{"link": "host", "duration_s": 1, "iteration": 9}]), "iteration"),
        (tiny("isolation", victim={"kind": "all_reduce", "ranks": 15}), "victim.ranks"),
        (tiny("line_rate", typo=1), "typo"),
        (tiny("iteration", bin_s=1e-15), "bin_s"),  # its bins would not fit in memory
        (
            tiny("flaps", flaps=[{"link": "host", "duration_s": 1, "at_s": 0.1, "iteration": 3}]),
            "flaps.0",
        ),
    ],
)
def test_bad_scenarios_name_the_field(data, field):
    with pytest.raises(ConfigError) as exc:
        sc = S.parse_scenario(data)
        S.run_scenario(sc)
    assert field in exc.value.field


def test_example_config_loads():
    sc = S.load_scenario(CONFIGS / "fabric-failures.toml")
    assert sc.kind == "failures" and sc.topology.gpus == 128


def test_cli_run_json_and_errors(cli, tmp_path):
    f = tmp_path / "lr.toml"
    f.write_text(
        'kind = "line_rate"\nmodes = ["spray"]\nsizes_bytes = [1048576.0]\n'
        "[topology]\ngpus = 16\nswitch_radix = 8\nplanes = 2\n"
    )
    code, out, _ = cli("fabric", "run", str(f), "--out", str(tmp_path / "run"), "--json")
    assert code == 0
    res = loads(out)
    assert 0 < res["modes"]["spray"]["line_rate_fraction"] <= S.HEADER_BOUND
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "line_rate"\n[topology]\ngpus = "many"\n')
    code, out, err = cli("fabric", "run", str(bad))
    assert code == 2 and out == ""
    assert err.startswith("error: topology.gpus") and err.count("\n") == 1
    code, _, err = cli("fabric", "run", str(tmp_path / "missing.toml"))
    assert code == 2 and err.startswith("error: SCENARIO") and "not found" in err


# -- `fabric eval`: the figures hold their bounds -------------------------------------------------
def check_eval(res: dict, run_dir: Path) -> None:
    """What ``fabric eval --json`` and its run directory must satisfy at any size: closed
    forms, bounds and orderings that a wrong engine, router or summary would break."""
    config = loads((run_dir / "manifest.json").read_text())["config"]
    topo = S.build_topology(S.TopologyConfig(**config["line_rate"]["topology"]))
    nic, port, hosts = topo.nic_rate_bps, topo.port_rate_bps, topo.n_hosts
    modes = res["modes"]
    assert set(modes) == set(config["line_rate"]["modes"])
    assert res["header_bound"] == S.HEADER_BOUND == 4096 / 4160

    # (a) line rate: the ideal time is the NIC-rate closed form (ring all-reduce moves
    # 2 (n-1)/n S per rank, all-to-all (n-1)/n S); busbw / line rate = ideal / measured time,
    # never above the payload share of the wire; spraying (even split, healthy fabric)
    # reaches it within 5% at the largest size and beats every hashing mode there.
    lr = pd.read_parquet(run_dir / "fabric_line_rate.parquet")
    n, size = lr["ranks"], lr["size_bytes"]
    share = np.where(lr["collective"].str.startswith("all_reduce"), 2 * (n - 1) / n, (n - 1) / n)
    np.testing.assert_allclose(lr["ideal_time_s"], share * size * 8 / nic, rtol=1e-12)
    np.testing.assert_allclose(lr["line_rate_fraction"], lr["ideal_time_s"] / lr["time_s"])
    assert ((lr["line_rate_fraction"] > 0) & (lr["line_rate_fraction"] <= S.HEADER_BOUND)).all()
    big = lr[lr["size_bytes"] == lr["size_bytes"].max()]
    for _, per in big.groupby("collective"):
        by = per.set_index("mode")["line_rate_fraction"]
        assert by["spray"] >= 0.95 * S.HEADER_BOUND and by["adaptive"] >= 0.95 * S.HEADER_BOUND
        assert by["spray"] >= by.drop(["spray", "adaptive"]).max()
    for mode, v in big.groupby("mode")["line_rate_fraction"].min().items():
        assert modes[mode]["line_rate_fraction"] == pytest.approx(v, rel=1e-12)

    # (b) isolation: solo / shared in (0, 1]; an even split on a healthy full-bisection
    # fabric gives the victim its solo time exactly
    iso = pd.read_parquet(run_dir / "fabric_isolation.parquet")
    ratio = iso["isolation_ratio"]
    np.testing.assert_allclose(ratio, iso["victim_solo_s"] / iso["victim_shared_s"])
    assert ((ratio > 0) & (ratio <= 1 + 1e-9)).all()
    calm = iso[(iso["oversubscription"] == 1) & (iso["failed_fraction"] == 0)].set_index("mode")
    for mode in ("spray", "adaptive"):
        assert calm.loc[mode, "isolation_ratio"] == pytest.approx(1.0, rel=1e-9)
    for mode, row in calm.iterrows():
        assert modes[mode]["isolation_ratio"] == pytest.approx(row["isolation_ratio"], rel=1e-12)

    # (c) failures: round(f x cables) cables down (both directions); the bisection max-flow
    # and the max-concurrent-flow LP are 1 when healthy and never above it; each failed cable
    # removes at most its port rate from the cut; the cut permutation stays under the
    # max-flow; adaptive's split is the minimum-congestion one, so max-min gives every flow
    # at least the LP's lambda
    fl = pd.read_parquet(run_dir / "fabric_failures.parquet")
    cables = int(np.isin(topo.link_tier, [T.UP1]).sum())
    frac = fl["failed_fraction"]
    np.testing.assert_array_equal(fl["failed_links"], 2 * np.round(frac * cables).astype(int))
    np.testing.assert_allclose(fl["ideal_fraction"], 1 - frac)
    healthy = fl[frac == 0]
    assert len(healthy) == len(modes) * config["failures"]["draws"]
    assert (healthy["maxflow_bisection"] == 1).all()
    assert np.allclose(healthy["max_concurrent_flow_lp"], 1.0)
    even = healthy[healthy["mode"].isin(["spray", "adaptive"])]["mean_permutation_goodput"]
    assert len(even) == 2 * config["failures"]["draws"] and np.allclose(even, 1.0)
    assert (fl["maxflow_bisection"] <= 1).all() and (fl["max_concurrent_flow_lp"] <= 1 + 1e-9).all()
    floor = 1 - fl["failed_links"] / 2 * port / (hosts / 2 * nic)
    assert (fl["maxflow_bisection"] >= floor - 1e-12).all()
    assert (fl["goodput_over_maxflow"] <= 1 + 1e-9).all()
    assert (fl["mean_permutation_goodput"] <= 1 + 1e-9).all()
    adaptive = fl[fl["mode"] == "adaptive"]
    lam = adaptive["max_concurrent_flow_lp"]
    assert (adaptive["mean_permutation_goodput"] >= lam * (1 - 1e-6)).all()
    near = frac.unique()[np.argmin(np.abs(frac.unique() - 0.1))]
    at10 = fl[frac == near].groupby("mode")[list(S.FAILURE_FIGURES)].mean()
    for mode, row in at10.iterrows():
        for k, v in row.items():
            assert modes[mode][f"{k}_at_10pct_failures"] == pytest.approx(v, rel=1e-12)
    f3 = modes["adaptive"]["goodput_over_maxflow_at_10pct_failures"]
    assert res["f3"] == {"adaptive_over_maxflow": f3, "target": 0.98, "met": f3 >= 0.98}

    # (d) flaps: nobody sends into the dead link longer than the flap or its own reaction
    # time; no stall outlasts that; hardware-reacting adaptive never stalls; ECMP keeps
    # hashing onto the fabric cable it loads most until routing reacts, so its job stalls
    # for all of that but what one iteration could still move
    fp = pd.read_parquet(run_dir / "fabric_flaps.parquet")
    reach = np.minimum(fp["duration_s"], fp["reaction_s"])
    assert (fp["impaired_until_s"] <= reach + 1e-9).all()
    assert (fp["stall_s"] <= fp["impaired_until_s"] + 1e-9).all()
    assert (fp["baseline_stall_s"] == 0).all() and (fp["unfinished"] == 0).all()
    assert (fp[fp["mode"] == "adaptive"]["stall_s"] == 0).all()
    ecmp = fp[(fp["mode"] == "ecmp") & (fp["link"] == "fabric")]
    assert len(ecmp) >= 1
    e_reach = np.minimum(ecmp["duration_s"], ecmp["reaction_s"])
    np.testing.assert_allclose(ecmp["impaired_until_s"], e_reach, rtol=1e-9)
    assert (ecmp["stall_s"] >= e_reach - ecmp["iteration_s"]).all()
    assert (ecmp["iteration_stall_s"] >= e_reach - ecmp["iteration_s"]).all()
    for mode, v in fp.groupby("mode")["stall_s"].max().items():
        assert modes[mode]["flap_recovery_s"] == v


def small_eval_scenarios(quick_scenarios):
    """``fabric eval --quick``'s four scenarios on 16 GPUs (4 planes, radix 8: 4 leaves x 2
    spines per plane, 2 cables per pair): the same modes, sizes, fractions and flaps; the
    flapped job is an 8-rank all-reduce of 16 MiB for 4 iterations of 20 ms compute (quick's
    16 ranks x 256 MiB x 20 iterations take 90 s on this fabric), still under 1.5 s flaps
    that outlast the routing reaction (1 s)."""
    out = []
    for sc in quick_scenarios:
        update = {"topology": S.TopologyConfig(gpus=16, switch_radix=8)}
        if sc.kind == "flaps":
            ar = S.CollectiveConfig(kind="all_reduce", ranks=8, size_bytes=16 * 2**20)
            update |= {"collective": ar, "iterations": 4, "compute_s": 0.02}
        out.append(sc.model_copy(update=update))
    return out


@pytest.fixture(scope="module")
def small_eval(tmp_path_factory):
    """``trainfabric fabric eval --quick --json --out DIR`` in-process, on
    :func:`small_eval_scenarios` (about 5 s): (the JSON, DIR). The report's figures are not
    drawn (8 s here; the per-kind tests and the slow quick run draw them)."""
    import contextlib
    import io

    from trainfabric.cli import main
    from trainfabric.fabric.scenarios import suite

    run_dir = tmp_path_factory.mktemp("eval") / "e"
    quick_scenarios = suite.eval_scenarios

    def scenarios(quick, seed=0, engine="flow"):
        assert quick and engine == "flow"
        return small_eval_scenarios(quick_scenarios(quick, seed, engine))

    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(suite, "eval_scenarios", scenarios)
        mp.setattr(suite, "render_run", lambda d: d / "report.html")
        with contextlib.redirect_stdout(stdout), pytest.raises(SystemExit) as exc:
            main(["fabric", "eval", "--quick", "--json", "--out", str(run_dir)])
            raise SystemExit(0)
    assert exc.value.code == 0
    return loads(stdout.getvalue()), run_dir


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_eval_figures_hold_their_bounds(small_eval):
    res, run_dir = small_eval
    assert res["quick"] and res["engine"] == "flow" and res["run_dir"] == str(run_dir)
    check_eval(res, run_dir)


@pytest.mark.slow
def test_eval_quick_figures_hold_their_bounds(cli, tmp_path):
    """The real ``--quick`` (64 GPUs, about 3 minutes) with its report."""
    code, out, _ = cli("fabric", "eval", "--quick", "--json", "--out", str(tmp_path / "e"))
    assert code == 0
    res = loads(out)
    check_eval(res, tmp_path / "e")
    assert Path(res["report"]).read_text().count("data:image/png") >= 4


def test_scenarios_are_sweepable_experiments():
    from trainfabric.runs import get, run_cell

    assert get("fabric_failures").config_model is S.FailuresScenario
    table = run_cell("fabric_line_rate", tiny("line_rate", modes=["spray"]), seed=5)
    assert (table["seed"] == 5).all() and (table["line_rate_fraction"] > 0).all()


def test_topology_comparison_at_the_seed_scale():
    """32,768 GPUs on a 51.2 Tb/s ASIC: 4 planes of 256 x 200G (2 tiers: 4 x (256 leaves +
    128 spines)) vs 64 x 800G (3 tiers: 1,024 edges + 1,024 aggs + 512 cores; a single
    2-tier plane holds only 64 x 32 = 2,048 hosts)."""
    t = S.topology_comparison(S.TopologyConfig(gpus=32768, switch_radix=256), [32768])
    t = t.set_index("build")
    assert t.loc["multiplane", "switches"] == 4 * (256 + 128)
    assert t.loc["fat_tree", "switches"] == 1024 + 1024 + 512
    assert not t.loc["leaf_spine", "fits"] and "2048" in t.loc["leaf_spine", "note"]
    assert t.loc["multiplane", "max_switch_hops"] == 3 and t.loc["fat_tree", "max_switch_hops"] == 5
    for build in ("multiplane", "fat_tree"):  # full bisection both: H/2 x 800G
        assert t.loc[build, "bisection_gbps"] == 32768 / 2 * 800


@pytest.mark.parametrize("mode", ["ecmp", "adaptive"])
def test_one_routing_gives_the_same_figures(mode):
    """The failures scenario routes a permutation once for its goodput and its latency
    estimate: the same numbers as the separate static_goodput and packet_latency_s."""
    from trainfabric.fabric.latency import packet_latency_s

    topo = S.build_topology(S.TopologyConfig(**SMALL))
    up = T.fail_links(topo, 0.25, seed=4)
    src, dst = S.half_to_half_permutation(topo.n_hosts, np.random.default_rng(4))
    flows = S.permutation_flows(src, dst, 2)
    got = S.routed_figures(topo, S.scenario_router(topo, mode, 0), flows, 0.5, up)
    goodput = S.permutation_throughput(topo, S.scenario_router(topo, mode, 0), flows, up)
    per_host = np.bincount(flows.src, minlength=topo.n_hosts)[flows.src]
    offered = 0.5 * topo.nic_rate_bps / per_host
    lat = packet_latency_s(topo, S.scenario_router(topo, mode, 0), flows, offered, up)
    assert got["mean_permutation_goodput"] == pytest.approx(goodput, rel=1e-12)
    p50 = np.quantile(lat, 0.5, method="inverted_cdf")
    assert got["latency_p50_us_est"] == pytest.approx(p50 * 1e6, rel=1e-12)
