"""``trainfabric ocs plan`` and ``ocs compare``: the wiring and its rivals.

``ocs plan``: the entropic planner's wiring and per-OCS cross-connect tables; ``ocs compare``:
the planner beside the MILP (HiGHS), the uniform mesh, the demand-proportional and the
traffic-matrix-only wirings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
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
from trainfabric.io import prepare_dir
from trainfabric.ocs.cli.options import (
    NAMES,
    B1Opt,
    B2Opt,
    FallbackOpt,
    OcsOpt,
    PodsOpt,
    PortsOpt,
    RateOpt,
    WorkloadArg,
)


def _ocs_instance(workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, gpus_per_pod=None):
    """The workload and OCS model of a CLI call (errors name the options); an imported
    trace's pods are its ranks in groups of ``gpus_per_pod``."""
    from trainfabric.ocs.model import OcsModel
    from trainfabric.workloads import load_workload

    with options(**NAMES):
        w = load_workload(workload, pods, seed, gpus_per_pod)
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
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the cross-connect tables go.")
    ] = Path("runs/ocs-plan"),
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Plan the inter-pod wiring through parallel OCSes and write per-OCS cross-connect tables."""
    from trainfabric.ocs.wiring.planner import plan, write_plan
    from trainfabric.runs.store import RunDir

    with progress(json_out, "ocs plan", show_progress):
        # The workload and the options first: a refused job leaves no empty --out behind.
        w, model = _ocs_instance(
            workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, gpus_per_pod
        )
        prepare_dir(out_dir, "--out")
        with RunDir(out_dir).single_run(None), options(**NAMES):
            result = plan(w.dag, model, b1_rel=b1, b2_rel=b2, seed=seed)
    summary = {"workload": w.name, **result.summary(model)}
    summary["tables_path"] = str(write_plan(out_dir, model, result, summary))
    if json_out:
        return emit_json(summary)
    t = Table(
        "quantity",
        "value",
        title=f"OCS plan: {w.name} on {model.n} pods, d={ports}, s={ocs}; "
        f"certified gap <= {100 * summary['certified_gap']:.2f} %",
    )
    t.add_row("hard critical path (integer wiring)", f"{summary['hard_critical_path_s']:.6f} s")
    t.add_row("certified lower bound (any wiring)", f"{summary['lower_bound_s']:.6f} s")
    t.add_row("certificate tolerance", f"{100 * summary['certificate_tolerance']:.2f} %")
    t.add_row("best near-uniform critical path", f"{summary['uniform_critical_path_s']:.6f} s")
    t.add_row("improvement vs near-uniform", f"{100 * summary['improvement_vs_uniform']:.2f} %")
    t.add_row("smoothed cost U", f"{summary['smoothed_cost_s']:.6f} s")
    t.add_row("KL(w || q)", f"{summary['kl_to_prior']:.4f}")
    t.add_row("circuits moved vs uniform mesh", str(summary["circuits_moved_vs_prior"]))
    t.add_row("solve + round + decompose", f"{summary['solve_time_s']:.3f} s")
    t.add_row("per-OCS split", "ok" if summary["split_feasible"] else "INFEASIBLE (see tables)")
    t.add_row("cross-connect tables", summary["tables_path"])
    out.print(t)


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
    """Our planner beside the MILP (HiGHS), uniform mesh, demand and TM-only wirings."""
    from trainfabric.ocs.wiring.planner import compare

    with progress(json_out, "ocs compare", show_progress), options(**NAMES):
        w, model = _ocs_instance(
            workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, gpus_per_pod
        )
        rows = compare(
            w.dag, model, b1_rel=b1, b2_rel=b2, seed=seed, milp_time_limit_s=milp_time_limit_s
        )
    if json_out:
        return emit_json({"workload": w.name, "pods": model.n, "methods": rows})
    t = Table(
        "method",
        "hard CP (s)",
        "vs best (%)",
        "wall (s)",
        "status",
        title=f"{w.name}: {model.n} pods, d={ports}, s={ocs}",
    )
    best = min(r["hard_critical_path_s"] for r in rows)
    for r in rows:
        t.add_row(
            r["method"],
            f"{r['hard_critical_path_s']:.6f}",
            f"{100 * (r['hard_critical_path_s'] / best - 1):.2f}",
            f"{r['wall_s']:.3f}",
            r["status"],
        )
    out.print(t)
