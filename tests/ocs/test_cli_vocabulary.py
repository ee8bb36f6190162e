"""`ocs plan` and `ocs compare` speak one vocabulary: the same baseline under the same key and
name in both, findings that carry the JSON's numbers, CSV tables equal to the Parquet ones,
and terminal output that fits 80 columns."""

import pandas as pd
import pytest

from trainfabric import clikit
from trainfabric.io import loads
from trainfabric.ocs.wiring.planner import compare_findings, plan_findings
from trainfabric.tables import fmt_number

INSTANCE = ("--workload", "moe", "--pods", "16", "--ports", "8", "--ocs", "4")
CRITICAL_PATHS = (
    "hard_critical_path_s",
    "best_near_uniform_critical_path_s",
    "uniform_mesh_critical_path_s",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``ocs plan --json`` and ``ocs compare --json`` on one instance, run once: (plan JSON,
    compare JSON, the plan's run directory)."""
    from trainfabric.cli import main

    out_dir = tmp_path_factory.mktemp("plan")
    printed = []
    for argv in (
        ["ocs", "plan", *INSTANCE, "--out", str(out_dir), "--report", "--json"],
        ["ocs", "compare", *INSTANCE, "--milp-time-limit-s", "20", "--json"],
    ):
        with pytest.raises(SystemExit) as exc, _stdout() as buf:
            main(argv)
            raise SystemExit(0)
        assert exc.value.code == 0
        printed.append(loads(buf.getvalue()))
    return printed[0], printed[1], out_dir


def _stdout():
    import contextlib
    import io

    return contextlib.redirect_stdout(io.StringIO())


@pytest.fixture
def narrow(monkeypatch):
    """The commands' console at 80 columns."""
    monkeypatch.setattr(clikit.out, "_width", 80)


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_plan_and_compare_name_the_baselines_alike(runs):
    plan, comp, _ = runs
    by = {r["method"]: r for r in comp["methods"]}
    for key, method in (
        ("uniform_mesh_critical_path_s", "uniform"),
        ("best_near_uniform_critical_path_s", "best-near-uniform"),
        ("hard_critical_path_s", "entropic"),
    ):
        assert plan[key] == comp[key] == by[method]["hard_critical_path_s"], key
    assert by["uniform"]["label"] == "uniform mesh"
    assert by["best-near-uniform"]["label"] == "best near-uniform wiring"
    # the older keys stay, with the meaning they had
    assert plan["uniform_critical_path_s"] == plan["best_near_uniform_critical_path_s"]
    assert plan["improvement_vs_uniform"] == plan["improvement_vs_best_near_uniform"]
    cp, mesh = plan["hard_critical_path_s"], plan["uniform_mesh_critical_path_s"]
    assert plan["improvement_vs_uniform_mesh"] == pytest.approx(1 - cp / mesh, rel=1e-12)
    assert plan["fractional_wiring_critical_path_s"] == plan["fractional_critical_path_s"]
    # the MILP is the optimum here: bound <= MILP <= every other wiring
    assert plan["lower_bound_s"] <= by["milp"]["hard_critical_path_s"] * (1 + 1e-9)
    milp = by["milp"]["hard_critical_path_s"]
    assert all(milp <= r["hard_critical_path_s"] * (1 + 1e-9) for r in comp["methods"])
    assert plan["best_near_uniform_critical_path_s"] <= mesh


def test_findings_carry_the_numbers_of_the_json(runs):
    plan, comp, out_dir = runs
    first = plan["findings"][0]
    for key in CRITICAL_PATHS:
        assert f"{fmt_number(plan[key])} s" in first, key
    for key in ("improvement_vs_best_near_uniform", "improvement_vs_uniform_mesh"):
        assert f"{fmt_number(100 * plan[key], 3)}% below" in first, key
    cert = plan["findings"][1]
    assert f"within {fmt_number(100 * plan['certified_gap'], 3)}%" in cert
    assert f"{fmt_number(plan['lower_bound_s'])} s" in cert
    assert f"{fmt_number(100 * plan['certificate_tolerance'], 3)}%" in cert
    assert comp["findings"][0] == first.replace("The plan's", "Our plan's")
    assert plan["findings"] == plan_findings(plan) and comp["findings"] == compare_findings(
        comp["methods"]
    )
    summary = loads((out_dir / "summary.json").read_text())
    assert summary["findings"] == plan["findings"] and (out_dir / "report.html").is_file()


def _summary(**over):
    base = {
        "hard_critical_path_s": 1.0,
        "lower_bound_s": 0.8,
        "certified_gap": 0.25,
        "certificate_tolerance": 0.01,
        "best_near_uniform_critical_path_s": 2.0,
        "uniform_mesh_critical_path_s": 4.0,
        "fractional_wiring_critical_path_s": 0.9,
        "method": "general",
        "split_feasible": True,
        "ocs_configs": [[[0, 1]], [[2, 3], [4, 5]]],
        "ocs": 2,
        "circuits_moved_vs_prior": 1,
        "total_circuits": 3,
        "unrealised_circuits": [],
    }
    return base | over


def test_plan_findings_in_closed_form():
    f = plan_findings(_summary())
    assert f[0] == (
        "The plan's critical path is 1.000 s, 50.0% below the best near-uniform wiring's "
        "2.000 s and 75.0% below the uniform mesh's 4.000 s."
    )
    assert "within 25.0% of the best any wiring can do" in f[1]
    assert "is within 1.00% of its relaxation's optimum; the rest of the gap" in f[1]
    assert len(f) == 3 and f[2].startswith("All 3 circuits")  # 0.8 <= 0.9 <= 1: no remark
    loose = plan_findings(
        _summary(certificate_tolerance=0.3, fractional_wiring_critical_path_s=1.2)
    )
    assert "all of the gap may be the bound's slack and the plan optimal" in loose[1]
    assert "1.200 s, above the plan's" in loose[2]
    below = plan_findings(_summary(fractional_wiring_critical_path_s=0.5))
    assert "below the certified lower bound" in below[2]
    exact = plan_findings(_summary(certified_gap=0.0, lower_bound_s=1.0, method="exact-one-hop"))
    assert exact[1].startswith("No wiring can do better")
    split = plan_findings(_summary(split_feasible=False, unrealised_circuits=[[0, 1, 2]]))
    assert split[-1].startswith("2 circuits could not be split")


def test_csv_tables_equal_the_parquet_ones(runs):
    _, _, out_dir = runs
    for stem in ("cross_connects", "wiring"):
        parquet = pd.read_parquet(out_dir / f"{stem}.parquet")
        csv = pd.read_csv(out_dir / f"{stem}.csv")
        pd.testing.assert_frame_equal(csv, parquet, check_dtype=False)
        assert len(csv) > 0 and list(csv.columns) == list(parquet.columns)


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_terminal_output_fits_80_columns_findings_first(cli, narrow, tmp_path, runs, command):
    plan, comp, _ = runs
    extra = ["--out", str(tmp_path)] if command == "plan" else ["--milp-time-limit-s", "20"]
    code, out, _ = cli("ocs", command, *INSTANCE, *extra)
    assert code == 0
    assert "…" not in out and max(len(line.rstrip()) for line in out.splitlines()) <= 80
    findings = [f for f in (plan if command == "plan" else comp)["findings"] if "took" not in f]
    text = _words(out)
    where = [text.index(_words(sentence)) for sentence in findings]
    assert where == sorted(where) and where[-1] < text.index("critical path (s)")
    assert "uniform mesh" in out and "best near-uniform wiring" in out


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("fairness", "--jobs", "moe,pipeline", "--pods", "8", "--p", "inf", "--no-alpha-check"),
         "best near-uniform wiring"),
        (("online", "--slots", "200", "--pods", "6", "--ports", "4", "--ocs", "2"),
         "regret bound (s)"),
    ],
)  # fmt: skip
def test_the_other_ocs_commands_fit_80_columns(cli, narrow, argv, needle):
    code, out, _ = cli("ocs", *argv)
    assert code == 0 and "…" not in out and needle in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
