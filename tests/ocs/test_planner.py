"""Planner end to end and `trainfabric ocs plan/compare`: keys, tables within port limits."""

import numpy as np
import pandas as pd
import pytest

from trainfabric.io import loads
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.planner import compare, plan, port_owner
from trainfabric.workloads import build_dag, get_preset


@pytest.fixture(scope="module")
def moe8():
    return build_dag(get_preset("moe", pods=8)), OcsModel.uniform(8, 8, 4)


def test_plan_is_a_valid_wiring_and_beats_uniform(moe8):
    dag, model = moe8
    p = plan(dag, model)
    model.check_wiring(p.x)
    assert p.decomposition.feasible
    assert sum(len(t) for t in p.tables) == model.total_circuits
    cost = PathCost(dag, model)
    assert p.hard_critical_path_s == pytest.approx(cost.hard(p.x))
    assert p.hard_critical_path_s <= p.uniform_critical_path_s * (1 + 1e-12)


def test_cross_connects_respect_ports_and_sum_to_the_wiring(moe8):
    dag, model = moe8
    p = plan(dag, model)
    owner = port_owner(model)
    total = np.zeros((model.n, model.n), int)
    for table in p.tables:
        ports = [q for c in table for q in c]
        assert len(ports) == len(set(ports)) == owner.size  # every port exactly once
        for a, b in table:
            total[owner[a], owner[b]] += 1
            total[owner[b], owner[a]] += 1
    np.testing.assert_array_equal(model.from_matrix(total), p.x)


def test_compare_rows(moe8):
    dag, model = moe8
    rows = compare(dag, model, milp_time_limit_s=30, methods=("entropic", "milp", "uniform"))
    by = {r["method"]: r for r in rows}
    assert by["milp"]["status"] == "optimal"
    assert by["milp"]["hard_critical_path_s"] <= by["entropic"]["hard_critical_path_s"] + 1e-12
    assert by["milp"]["hard_critical_path_s"] <= by["uniform"]["hard_critical_path_s"] + 1e-12


def _critical_path(dag, model, x) -> float:
    """Independent of PathCost: node durations from the model (compute as given, a comm node
    ``latency + 8 bytes / (rate x circuits of its pod pair + fallback)``), then the longest
    path by one forward sweep over the DAG (its edges go from lower to higher node ids)."""
    m = model.to_matrix(x)
    comm = dag.dst >= 0
    dur = dag.duration_s.astype(float).copy()
    pair_rate = model.rate_bps * m[dag.pod[comm], dag.dst[comm]] + model.fallback_bps
    dur[comm] = dag.latency_s[comm] + 8.0 * dag.bytes[comm] / pair_rate
    start = np.zeros(dag.n_nodes)
    for v in range(dag.n_nodes):
        succ = dag.indices[dag.indptr[v] : dag.indptr[v + 1]]
        assert (succ > v).all()
        start[succ] = np.maximum(start[succ], start[v] + dur[v])
    return float((start + dur).max())


def test_cli_plan_is_a_valid_wiring_with_the_figures_it_reports(cli, tmp_path):
    """``ocs plan --json`` on the 16-pod MoE (d = 8 ports, 4 OCSes; the near-uniform mesh is
    not optimal here): every OCS's cross-connect table is a matching of its own ports (each
    pod has d/s of them per OCS); the tables give exactly the written wiring; the reported
    critical paths are those of that wiring and of the best near-uniform one, recomputed
    from the DAG; certified lower bound <= plan <= near-uniform and demand-proportional;
    gap and improvement are the ratios of those numbers."""
    from trainfabric.ocs.wiring.baselines import best_near_uniform, demand_proportional
    from trainfabric.workloads import load_workload

    argv = ["--pods", "16", "--ports", "8", "--ocs", "4", "--json", "--out", str(tmp_path)]
    code, out, _ = cli("ocs", "plan", "--workload", "moe", *argv)
    assert code == 0
    s = loads(out)
    dag = load_workload("moe", 16, 0).dag  # what the CLI plans (seed 0)
    model = OcsModel.uniform(16, 8, 4, rate_bps=s["rate_bps"], fallback_bps=s["fallback_bps"])
    assert (s["pods"], s["ports"], s["ocs"]) == (16, [8] * 16, 4)
    assert (s["rate_bps"], s["fallback_bps"]) == (100e9, 5e9)  # the CLI's defaults

    table = pd.read_parquet(tmp_path / "cross_connects.parquet")
    per_ocs = 8 // 4
    circuits = np.zeros((16, 16), int)
    for k, t in table.groupby("ocs"):
        ports = np.r_[t["a_port"], t["b_port"]]
        assert np.unique(ports).size == ports.size  # a matching: every port at most once
        assert ports.min() >= 0 and ports.max() < 16 * per_ocs
        np.testing.assert_array_equal(t["a_pod"], t["a_port"] // per_ocs)
        np.testing.assert_array_equal(t["b_pod"], t["b_port"] // per_ocs)
        assert (t["a_pod"] != t["b_pod"]).all()
        assert t[["a_port", "b_port"]].to_numpy().tolist() == s["ocs_configs"][k]
        np.add.at(circuits, (t["a_pod"], t["b_pod"]), 1)
    assert sorted(table["ocs"].unique()) == [0, 1, 2, 3] and len(s["ocs_configs"]) == 4
    circuits += circuits.T
    assert (circuits.sum(axis=1) <= 8).all() and (np.diag(circuits) == 0).all()
    wiring = pd.read_parquet(tmp_path / "wiring.parquet")
    written = np.zeros((16, 16), int)
    written[wiring["u"], wiring["v"]] = wiring["circuits"]
    np.testing.assert_array_equal(written + written.T, circuits)
    assert s["unrealised_circuits"] == [] and s["split_feasible"]

    x = model.from_matrix(circuits)
    cost = PathCost(dag, model)
    hard = _critical_path(dag, model, x)
    assert s["hard_critical_path_s"] == pytest.approx(hard, rel=1e-12)
    near = best_near_uniform(cost, model, seed=0)
    assert s["uniform_critical_path_s"] == pytest.approx(_critical_path(dag, model, near))
    lb, cp, uni = s["lower_bound_s"], s["hard_critical_path_s"], s["uniform_critical_path_s"]
    assert 0 < lb <= cp < uni
    assert cp <= _critical_path(dag, model, demand_proportional(dag, model)) * (1 + 1e-12)
    assert s["certified_gap"] == pytest.approx(cp / lb - 1, rel=1e-12)
    assert s["improvement_vs_uniform"] == pytest.approx(1 - cp / uni, rel=1e-12)
    paths = pd.read_parquet(tmp_path / "critical_paths.parquet")
    assert paths["method"].tolist()[::3] == ["our plan", "lower bound, any wiring"]
    assert paths["critical_path_s"].tolist()[::3] == [cp, lb]


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_cli_plan_without_report_does_not_import_pandas(tmp_path):
    """pandas is 0.3-0.4 s of a CLI start-up: the plan's tables are written by pyarrow alone
    and the report (which reads them with pandas) is rendered only with --report."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from trainfabric.cli import main\n"
        f"sys.argv = ['trainfabric', 'ocs', 'plan', '--pods', '8', '--out', {str(tmp_path)!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('pandas' in sys.modules, file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == "False"
    assert (tmp_path / "critical_paths.parquet").exists()


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("--ports", "6", "--ocs", "4"), "--ocs:"),
        (("--pods", "7"), "--pods:"),
        (("--b1", "0"), "'--b1'"),
    ],
)
def test_cli_plan_bad_input_exits_2(cli, argv, field):
    code, _, err = cli("ocs", "plan", "--workload", "moe", *argv)
    assert code == 2 and field in err and err.count("\n") == 1


@pytest.mark.slow  # compiles every planner kernel from scratch (~40 s)
def test_same_seed_same_plan_on_a_cold_and_a_warm_compile_cache(tmp_path):
    """The polishing budget starts after the kernel has run once, so a first run that compiles
    every kernel (empty NUMBA_CACHE_DIR) returns the same wiring as a warm one."""
    import os
    import subprocess
    import sys

    script = (
        "from trainfabric.ocs.model import OcsModel\n"
        "from trainfabric.ocs.wiring.planner import plan\n"
        "from trainfabric.workloads import build_dag, get_preset\n"
        "p = plan(build_dag(get_preset('moe', pods=8)), OcsModel.uniform(8, 8, 4), seed=1)\n"
        "print(p.x.tolist(), p.hard_critical_path_s)\n"
    )
    env = os.environ | {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        for _ in ("cold", "warm")
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout


@pytest.mark.parametrize("preset", ["moe", "hybrid", "pipeline"])
def test_a_second_thread_changes_nothing_but_the_time(preset):
    """``threads=2`` runs the rounding's preparation and the baselines beside the solver: the
    wiring, every critical path and the certificate equal ``threads=1``'s to the bit, and the
    timings still cover every stage; a bad ``threads`` is refused by name."""
    from trainfabric.errors import ConfigError

    dag, model = build_dag(get_preset(preset, pods=16)), OcsModel.uniform(16, 8, 4)
    one, two = (plan(dag, model, threads=t) for t in (1, 2))
    np.testing.assert_array_equal(one.x, two.x)
    np.testing.assert_array_equal(one.x_frac, two.x_frac)
    for key in ("hard_critical_path_s", "uniform_critical_path_s", "lower_bound_s"):
        assert getattr(one, key) == getattr(two, key)
    assert one.timings_s.keys() == two.timings_s.keys()
    with pytest.raises(ConfigError) as err:
        plan(dag, model, threads=3)
    assert err.value.field == "threads"


def test_rounding_with_its_preparation_given_or_computed_is_the_same(moe8):
    """:func:`.rounding.prepare` passed to ``round_wiring`` gives the rounding it computes
    itself; one prepared for another ``b2`` is refused by name."""
    from trainfabric.errors import ConfigError
    from trainfabric.ocs.wiring.rounding import prepare, round_wiring

    dag, model = moe8
    p = plan(dag, model)
    cost = PathCost(dag, model)
    own = round_wiring(cost, model, p.x_frac, b2=p.b2)
    given = round_wiring(cost, model, p.x_frac, b2=p.b2, prepared=prepare(cost, model, p.b2))
    np.testing.assert_array_equal(own.x, given.x)
    assert (own.hard_cp_s, own.work, own.starts) == (given.hard_cp_s, given.work, given.starts)
    with pytest.raises(ConfigError) as err:
        round_wiring(cost, model, p.x_frac, b2=p.b2, prepared=prepare(cost, model, 2 * p.b2))
    assert err.value.field == "prepared"


def test_compare_a_job_without_traffic_between_pods(tmp_path):
    """One compute node, no transfer: every method's critical path is that node's 1 s (the
    traffic-matrix-only plan has an empty matrix: the uniform mesh), not an error."""
    from trainfabric.workloads import load_workload

    path = tmp_path / "compute.json"
    path.write_text(
        '{"format": "trainfabric.taskdag", "version": 1, "pods": 3, "phases": [], "nodes": '
        '[{"id": 0, "kind": "compute", "pod": 0, "duration_s": 1.0}], "edges": []}'
    )
    rows = compare(load_workload(str(path)).dag, OcsModel.uniform(3, 2, 1))
    assert {r["method"] for r in rows} >= {"entropic", "traffic-only", "milp"}
    assert all(r["hard_critical_path_s"] == 1.0 for r in rows)
