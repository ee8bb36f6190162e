"""``trainfabric ocs plan`` and ``ocs compare``: the wiring and its rivals.

``ocs plan``: the entropic planner's wiring, its per-OCS cross-connect tables (Parquet and
CSV) and a run directory with ``summary.json`` and ``report.html``; ``ocs compare``: the
planner beside the MILP (HiGHS), the uniform mesh, the best near-uniform wiring, the
demand-proportional and the traffic-matrix-only wirings. Both print their findings
(:func:`~trainfabric.ocs.wiring.planner.plan_findings`, ``compare_findings``) first, in the
words the JSON's keys use: "uniform mesh" and "best near-uniform wiring" are two baselines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trainfabric.clikit import (
    ConfigOpt,
    GpusPerPodOpt,
    JsonOpt,
    MaxMemoryOpt,
    ProgressOpt,
    SeedOpt,
    emit_json,
    finite,
    options,
    out,
    progress,
)
from trainfabric.errors import ConfigError
from trainfabric.io import prepare_dir, write_json, write_parquet
from trainfabric.ocs.cli.options import (
    NAMES,
    B1Opt,
    B2Opt,
    EffortOpt,
    FallbackOpt,
    OcsOpt,
    PodsOpt,
    PortsOpt,
    RateOpt,
    WorkloadArg,
)
from trainfabric.tables import Col, fmt_number, print_records


def _ocs_instance(workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, gpus_per_pod=None):
    """The workload and OCS model of a CLI call (errors name the options); an imported
    trace's pods are its ranks in groups of ``gpus_per_pod``."""
    from trainfabric.ocs.model import OcsModel
    from trainfabric.workloads import load_workload

    with options(**NAMES):
        w = load_workload(workload, pods, seed, gpus_per_pod)
        if pods is None and w.dag.n_pods < 2:  # the file placed one pod: say which option did
            field = "--gpus-per-pod" if gpus_per_pod is not None else "--workload"
            raise ConfigError(field, f"{workload} places 1 pod; an OCS connects at least 2")
        model = OcsModel.uniform(
            w.dag.n_pods, ports, ocs, rate_bps=rate_gbps * 1e9, fallback_bps=fallback_gbps * 1e9
        )
    return w, model


def ocs_plan(
    workload: WorkloadArg = "moe",
    pods: PodsOpt = None,
    ports: PortsOpt = 8,
    ocs: OcsOpt = 4,
    b1: B1Opt = 1.0,
    b2: B2Opt = 50.0,
    seed: SeedOpt = 0,
    rate_gbps: RateOpt = 100.0,
    fallback_gbps: FallbackOpt = 5.0,
    gpus_per_pod: GpusPerPodOpt = None,
    effort: EffortOpt = "default",
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Run directory: cross_connects.parquet and .csv (one row per cross-connect: "
            "ocs, a_port, a_pod, b_port, b_pod), wiring.parquet and .csv (u, v, circuits), "
            "critical_paths.parquet (the plan, both baselines, the lower bound), plan.json, "
            "summary.json (with findings), and report.html with --report.",
        ),
    ] = Path("runs/ocs-plan"),
    report: Annotated[
        bool,
        typer.Option(
            "--report",
            help="Also render report.html (findings, the critical-path chart, the tables; "
            "about a second; `trainfabric report DIR` renders it later).",
        ),
    ] = False,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Plan the inter-pod wiring through parallel OCSes and write per-OCS cross-connect tables
    (Parquet and CSV), and with --report an HTML report; prints the findings first."""
    from trainfabric.ocs.wiring.planner import effort_budgets, plan
    from trainfabric.runs.store import RunDir

    with progress(json_out, "ocs plan", show_progress):
        # The workload and the options first: a refused job leaves no empty --out behind.
        with options(**NAMES):
            effort_budgets(effort)
        w, model = _ocs_instance(
            workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, gpus_per_pod
        )
        prepare_dir(out_dir, "--out")
        with RunDir(out_dir).single_run(None):
            _check_out(out_dir)
            with options(**NAMES):
                result = plan(w.dag, model, b1_rel=b1, b2_rel=b2, seed=seed, effort=effort)
            summary = _write_run(out_dir, w.name, model, result, report)
    if json_out:
        return emit_json(summary)
    _print_findings(f"OCS plan: {_instance(w.name, model, ports, ocs)}", summary["findings"])
    print_records(out, _plan_rows(summary), [Col("quantity"), Col("value")])
    out.print(
        f"Run directory {escape(str(out_dir))}: cross_connects.parquet and .csv (per-OCS "
        "cross-connects), wiring.parquet and .csv, summary.json"
        + (
            ", report.html"
            if report
            else f"; its report: trainfabric report {escape(str(out_dir))}"
        )
    )


def _check_out(out_dir: Path) -> None:
    """Refuse an ``--out`` directory that holds anything but an earlier ``ocs plan``
    (its ``plan.json``, no run manifest): another run's tables or the user's own files are
    never overwritten."""
    from trainfabric.runs.store import LOCK_NAME

    names = {p.name for p in out_dir.iterdir()} - {LOCK_NAME}
    if names and ("manifest.json" in names or "plan.json" not in names):
        raise ConfigError(
            "--out", f"{out_dir} holds files that are not an earlier ocs plan; use another --out"
        )


def _write_run(out_dir: Path, name: str, model, result, report: bool) -> dict:
    """The plan's summary with its findings, written as tables, ``plan.json``,
    ``summary.json`` and (``report``) ``report.html`` into ``out_dir``."""
    from trainfabric.ocs.wiring.planner import CROSS_CONNECTS, WIRING, plan_findings, write_plan

    summary = {"workload": name, **result.summary(model)}
    summary = {"findings": plan_findings(summary), **summary}
    summary["tables_path"] = str(write_plan(out_dir, model, result, summary))
    summary["tables_csv_path"] = str(out_dir / f"{CROSS_CONNECTS}.csv")
    summary["wiring_csv_path"] = str(out_dir / f"{WIRING}.csv")
    write_parquet(out_dir / "critical_paths.parquet", _critical_paths(summary))
    write_json(out_dir / "summary.json", {k: v for k, v in summary.items() if k != "ocs_configs"})
    if report:
        from trainfabric.runs import render_report

        summary["report"] = str(render_report(out_dir))
    return summary


def _critical_paths(s: dict) -> dict:
    """The plan beside both baselines and the certified lower bound (seconds), as columns:
    the table whose ``method`` comparison the report draws."""
    import numpy as np

    return {
        "method": np.array(
            ["our plan", "best near-uniform wiring", "uniform mesh", "lower bound, any wiring"]
        ),
        "critical_path_s": np.array(
            [
                s["hard_critical_path_s"],
                s["best_near_uniform_critical_path_s"],
                s["uniform_mesh_critical_path_s"],
                s["lower_bound_s"],
            ],
            dtype=float,
        ),
    }


def _instance(name: str, model, ports: int, ocs: int) -> str:
    return f"{name} on {model.n:,} pods, {ports:,} OCS ports per pod, {ocs:,} OCSes"


def _print_findings(title: str, findings: list[str]) -> None:
    """The title in bold, then one bullet per finding (wrapped lines hang under the text)."""
    out.print(f"[bold]{escape(title)}[/bold]")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for sentence in findings:
        grid.add_row("-", escape(sentence))
    out.print(grid)
    out.print()


def _pct(v: float) -> str:
    return fmt_number(100 * v, 3)


# ``ocs plan``'s quantities in words with their units (the findings' vocabulary) and their
# summary keys; a fraction shown as "(%)" is multiplied by 100.
PLAN_ROWS = (
    ("plan's critical path (s)", "hard_critical_path_s"),
    ("certified lower bound, any wiring (s)", "lower_bound_s"),
    ("certified gap: plan above the bound (%)", "certified_gap"),
    ("certificate tolerance: bound below its relaxation (%)", "certificate_tolerance"),
    ("best near-uniform wiring's critical path (s)", "best_near_uniform_critical_path_s"),
    ("uniform mesh's critical path (s)", "uniform_mesh_critical_path_s"),
    ("plan below the best near-uniform wiring (%)", "improvement_vs_best_near_uniform"),
    ("plan below the uniform mesh (%)", "improvement_vs_uniform_mesh"),
    ("solver's fractional wiring's critical path, not a bound (s)",
     "fractional_wiring_critical_path_s"),
    ("smoothed critical path U of the plan (s)", "smoothed_cost_s"),
    ("KL(w || q) to the uniform prior (nats)", "kl_to_prior"),
    ("circuits moved from the uniform mesh (count)", "circuits_moved_vs_prior"),
    ("planning wall time (s)", "solve_time_s"),
)  # fmt: skip


# ``ocs compare``'s table: a wiring per row, named as in the findings (the MILP with its
# status); ``vs_plan`` = critical path / our plan's − 1.
COMPARE_COLS = (
    Col("wiring"),
    Col("hard_critical_path_s", "critical path", "s"),
    Col("vs_plan", "vs plan", "%", fmt=lambda v: f"+{_pct(v)}" if v > 0 else _pct(v)),
    Col("wall_s", "wall time", "s", fmt=lambda v: fmt_number(v, 2)),
)


def _plan_rows(s: dict) -> list[dict]:
    """:data:`PLAN_ROWS` of the summary ``s``, then whether the per-OCS split is whole."""
    rows = [
        {"quantity": q, "value": (_pct if q.endswith("(%)") else fmt_number)(s[key])}
        for q, key in PLAN_ROWS
    ]
    split = "ok" if s["split_feasible"] else "INFEASIBLE (see tables)"
    return [*rows, {"quantity": "per-OCS split", "value": split}]


def ocs_compare(
    workload: WorkloadArg = "moe",
    pods: PodsOpt = None,
    ports: PortsOpt = 8,
    ocs: OcsOpt = 4,
    b1: B1Opt = 1.0,
    b2: B2Opt = 50.0,
    seed: SeedOpt = 0,
    rate_gbps: RateOpt = 100.0,
    fallback_gbps: FallbackOpt = 5.0,
    gpus_per_pod: GpusPerPodOpt = None,
    milp_time_limit_s: Annotated[
        float, typer.Option(help="HiGHS time limit, s (> 0).", callback=finite(gt=0, le=86_400))
    ] = 60.0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Our planner beside the MILP (HiGHS), the uniform mesh, the best near-uniform wiring,
    the demand-proportional and the traffic-matrix-only wirings; prints the findings first."""
    from trainfabric.ocs.wiring.planner import compare, compare_findings

    with progress(json_out, "ocs compare", show_progress), options(**NAMES):
        w, model = _ocs_instance(
            workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, gpus_per_pod
        )
        rows = compare(
            w.dag, model, b1_rel=b1, b2_rel=b2, seed=seed, milp_time_limit_s=milp_time_limit_s
        )
    by = {r["method"]: r["hard_critical_path_s"] for r in rows}
    result = {
        "workload": w.name,
        "pods": model.n,
        "findings": compare_findings(rows),
        "hard_critical_path_s": by["entropic"],
        "best_near_uniform_critical_path_s": by["best-near-uniform"],
        "uniform_mesh_critical_path_s": by["uniform"],
        "methods": rows,
    }
    if json_out:
        return emit_json(result)
    _print_findings(
        f"OCS wirings compared: {_instance(w.name, model, ports, ocs)}", result["findings"]
    )
    table = [
        {
            **r,
            "wiring": r["label"] + (f", {r['status']}" if r["method"] == "milp" else ""),
            "vs_plan": r["hard_critical_path_s"] / by["entropic"] - 1,
        }
        for r in rows
    ]
    print_records(out, table, COMPARE_COLS)
