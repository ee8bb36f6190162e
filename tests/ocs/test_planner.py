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


def test_cli_plan_json_keys_and_tables(cli, tmp_path):
    code, out, _ = cli(
        "ocs",
        "plan",
        "--workload",
        "moe",
        "--pods",
        "16",
        "--ports",
        "8",
        "--ocs",
        "4",
        "--json",
        "--out",
        str(tmp_path),
    )
    assert code == 0
    s = loads(out)
    for key in (
        "hard_critical_path_s",
        "smoothed_cost_s",
        "kl_to_prior",
        "solve_time_s",
        "ocs_configs",
    ):
        assert key in s
    assert len(s["ocs_configs"]) == 4
    table = pd.read_parquet(tmp_path / "cross_connects.parquet")
    assert len(table) == 16 * 8 // 2 and set(table.ocs) == {0, 1, 2, 3}


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
