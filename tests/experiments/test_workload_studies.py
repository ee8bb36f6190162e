"""The critical_path experiment and the demo end to end."""

import pandas as pd
import pytest

from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.experiments.workload_studies import CriticalPathConfig, critical_path_figures
from trainfabric.io import loads
from trainfabric.runs import SweepSpec, expand, get, run_sweep
from trainfabric.workloads import build_dag, get_preset


def test_critical_path_row_matches_the_dag():
    cfg = validate(
        CriticalPathConfig, {"workload": "hybrid", "rate_gbps": 50, "moe_skew_gini": 0.3}
    )
    row = get("critical_path").function(cfg, 4).iloc[0]
    dag = build_dag(get_preset("hybrid").model_copy(update={"moe_skew_gini": 0.3}), 4)
    assert row["critical_path_s"] == dag.critical_path_at(50e9)
    assert row["exposed_comm_fraction"] == pytest.approx(
        1 - dag.compute_time() / row["critical_path_s"]
    )


def test_critical_path_reads_files(tmp_path):
    from trainfabric.workloads import interchange

    path = interchange.save(build_dag(get_preset("pipeline", pods=4)), tmp_path / "p.json")
    cfg = validate(CriticalPathConfig, {"workload": str(path), "rate_gbps": 100})
    row = get("critical_path").function(cfg, 0).iloc[0]
    assert row["nodes"] == build_dag(get_preset("pipeline", pods=4)).n_nodes


def test_unknown_workload_in_grid_is_named():
    spec = SweepSpec(experiment="critical_path", grid={"workload": ["moe", "bogus"]})
    with pytest.raises(ConfigError) as exc:
        expand(spec)
    assert exc.value.field == "grid.workload[1]"


def test_sweep_figure_has_one_line_per_workload(tmp_path):
    spec = SweepSpec(
        experiment="critical_path",
        grid={"workload": ["pipeline", "moe"], "rate_gbps": [50.0, 200.0]},
    )
    res = run_sweep(spec, tmp_path / "run", executor="serial", progress=False)
    (fig,) = critical_path_figures(res.results)
    assert len(fig.axes[0].lines) == 2
    assert critical_path_figures(res.results[res.results.rate_gbps == 50.0]) == []


@pytest.mark.slow  # over 5 s in the default run (make test-all runs it)
def test_demo_writes_a_report_and_resumes(demo_run, capsys):
    from trainfabric.cli import main

    run_dir, printed = demo_run
    out = loads(printed)
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert out["steps"]["sweep"]["computed"] == out["steps"]["sweep"]["cells"] == 60
    presets = pd.read_parquet(run_dir / "presets.parquet")
    assert set(presets.preset) >= {"gpt3-175b", "llama3-70b", "deepseek-v3", "mixtral-8x7b"}
    assert out["steps"]["ocs-online"]["bound_held"] is True
    online = pd.read_parquet(run_dir / "ocs_online.parquet")
    curve = online[online.part == "curve"]
    assert len(curve) == 8 and (curve.regret_s <= curve.regret_bound_s).all()
    sched = pd.read_parquet(run_dir / "ocs_schedule.parquet")
    assert len(sched) == 10 and (sched.makespan_s >= sched.lower_bound_s * (1 - 1e-9)).all()
    imported = out["steps"]["imported"]  # SimAI's GPT-13B file through every pillar
    assert (imported["ranks"], imported["collectives"], imported["pods"]) == (128, 1323, 16)
    assert imported["ocs_critical_path_s"] <= imported["ocs_uniform_critical_path_s"]
    assert len(pd.read_parquet(run_dir / "imported_job.parquet")) == 1
    assert not any(step["resumed"] for step in out["steps"].values())
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.glob("*.parquet")}
    (run_dir / "steps" / "workloads.json").unlink()  # as if the run had stopped in that step
    with pytest.raises(SystemExit):
        main(["demo", "--out", str(run_dir), "--json"])
        raise SystemExit(0)
    again = loads(capsys.readouterr().out)
    assert [n for n, step in again["steps"].items() if not step["resumed"]] == ["workloads"]
    assert again["steps"]["ocs"]["gap_vs_milp"] == out["steps"]["ocs"]["gap_vs_milp"]
    rewritten = {p for p, t in stamps.items() if p.stat().st_mtime_ns != t}
    assert rewritten == {run_dir / "presets.parquet"}  # only the missing step's table
