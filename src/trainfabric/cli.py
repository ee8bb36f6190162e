"""The ``trainfabric`` command: one sub-command group per pillar, a thin layer over the API.

Conventions: ``--json`` prints exactly one JSON object on stdout; tables and progress go to
stderr/stdout for people; ``--config FILE.toml`` supplies option values (keys are the option
names, ``-`` or ``_``); user errors print one line and exit with code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from typer._click.exceptions import NoArgsIsHelpError

from trainfabric.clikit import ConfigOpt, JsonOpt, err, out
from trainfabric.clikit import emit_json as _emit_json
from trainfabric.diloco import cli as diloco_cli
from trainfabric.errors import ConfigError, TrainfabricError
from trainfabric.fabric import cli as fabric_cli

app = typer.Typer(
    help="Plan, simulate and schedule the networks of large AI-training clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
workloads_app = typer.Typer(
    help="Training jobs -> task DAGs and traffic matrices.", no_args_is_help=True
)
ocs_app = typer.Typer(
    help="Optical circuit switch wiring: plan it, compare it with the MILP.", no_args_is_help=True
)
app.add_typer(workloads_app, name="workloads")
app.add_typer(ocs_app, name="ocs")
app.add_typer(fabric_cli.app, name="fabric")
app.add_typer(diloco_cli.app, name="diloco")


# -- workloads --------------------------------------------------------------------------------
@workloads_app.command("list")
def workloads_list(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List the built-in presets."""
    from trainfabric.workloads.presets import PRESETS

    rows = {name: p.description for name, p in PRESETS.items()}
    if json_out:
        return _emit_json({"presets": rows})
    table = Table("preset", "description")
    for name, desc in rows.items():
        table.add_row(name, desc)
    out.print(table)


@workloads_app.command("show")
def workloads_show(
    workload: Annotated[str, typer.Argument(help="Preset name or a .json/.toml file.")],
    pods: Annotated[int | None, typer.Option(help="Re-map the job onto this many pods.")] = None,
    rate_gbps: Annotated[
        float, typer.Option(help="Uniform pod-pair rate for the critical path (Gb/s).")
    ] = 100.0,
    seed: Annotated[int, typer.Option(help="Seed of the MoE expert-load draw.")] = 0,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Summarise a workload: nodes, edges, bytes per phase, critical path at a uniform rate."""
    from trainfabric.workloads import load_workload, summarize

    if rate_gbps <= 0:
        raise ConfigError("rate_gbps", "must be > 0")
    s = summarize(load_workload(workload, pods, seed), rate_gbps * 1e9)
    if json_out:
        return _emit_json(s)
    head = Table("quantity", "value", title=f"workload {s['workload']}")
    for key in ("pods", "nodes", "edges", "compute_nodes", "comm_nodes", "barrier_nodes", "phases"):
        head.add_row(key, f"{s[key]:,}")
    head.add_row("inter-pod bytes / iteration", f"{s['comm_bytes'] / 1e9:,.3f} GB")
    head.add_row(
        f"critical path @ {rate_gbps:g} Gb/s per pod pair", f"{s['critical_path_s']:.4f} s"
    )
    head.add_row("critical path, communication free", f"{s['compute_only_s']:.4f} s")
    for key, val in (s.get("job") or {}).items():
        head.add_row(f"job.{key}", f"{val:,}" if isinstance(val, int) else str(val))
    out.print(head)
    phases = Table("phase kind", "phases", "inter-pod GB", "intra-pod GB")
    for kind, row in s["phase_kinds"].items():
        phases.add_row(
            kind,
            str(row["count"]),
            f"{row['bytes'] / 1e9:,.3f}",
            f"{row['intra_pod_bytes'] / 1e9:,.3f}",
        )
    out.print(phases)


@workloads_app.command("export")
def workloads_export(
    workload: Annotated[str, typer.Argument(help="Preset name or a .json/.toml file.")],
    file: Annotated[Path, typer.Argument(help="Output JSON file.")],
    traffic: Annotated[
        bool, typer.Option(help="Write the traffic-matrix sequence instead of the DAG.")
    ] = False,
    pods: Annotated[int | None, typer.Option(help="Re-map the job onto this many pods.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the MoE expert-load draw.")] = 0,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a workload in the versioned JSON interchange format (task DAG or traffic)."""
    from trainfabric.workloads import interchange, load_workload

    w = load_workload(workload, pods, seed)
    path = interchange.save(w.traffic if traffic else w.dag, file)
    info = {
        "path": str(path),
        "format": interchange.TRAFFIC_FORMAT if traffic else interchange.DAG_FORMAT,
        "nodes": w.dag.n_nodes,
        "phases": len(w.traffic),
    }
    if json_out:
        return _emit_json(info)
    err.print(f"wrote {info['format']} v{interchange.VERSION} to {path}")


# -- ocs ---------------------------------------------------------------------------------------
WorkloadArg = Annotated[str, typer.Option("--workload", help="Preset name or a .json/.toml file.")]
PodsOpt = Annotated[int | None, typer.Option(help="Pods (re-maps a preset; default: its own).")]
PortsOpt = Annotated[int, typer.Option("--ports", help="OCS-facing ports per pod (d).")]
OcsOpt = Annotated[int, typer.Option("--ocs", help="Parallel OCSes (s); must divide --ports.")]
RateOpt = Annotated[float, typer.Option(help="Circuit rate B, Gb/s.")]
FallbackOpt = Annotated[float, typer.Option(help="Fallback rate B0 per pod pair, Gb/s (> 0).")]
B1Opt = Annotated[float, typer.Option(help="Prior weight b1_rel (b1 = b1_rel / CP0).")]
B2Opt = Annotated[float, typer.Option(help="Smoothing b2_rel (b2 = b2_rel log|paths| / CP0).")]
SeedOpt = Annotated[int, typer.Option(help="Seed (MoE expert loads, swap order).")]


def _ocs_instance(workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, b1, b2):
    """The workload and OCS model of a CLI call (temperatures checked here)."""
    from trainfabric.ocs.model import OcsModel
    from trainfabric.workloads import load_workload

    for name, value in (("b1", b1), ("b2", b2)):
        if not value > 0:
            raise ConfigError(name, "must be > 0")
    w = load_workload(workload, pods, seed)
    model = OcsModel.uniform(
        w.dag.n_pods, ports, ocs, rate_bps=rate_gbps * 1e9, fallback_bps=fallback_gbps * 1e9
    )
    return w, model


@ocs_app.command("plan")
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
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the cross-connect tables go.")
    ] = Path("runs/ocs-plan"),
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Plan the inter-pod wiring through parallel OCSes and write per-OCS cross-connect tables."""
    from trainfabric.ocs.planner import plan, write_plan

    w, model = _ocs_instance(workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, b1, b2)
    result = plan(w.dag, model, b1_rel=b1, b2_rel=b2, seed=seed)
    summary = {"workload": w.name, **result.summary(model)}
    summary["tables_path"] = str(write_plan(out_dir, model, result, summary))
    if json_out:
        return _emit_json(summary)
    t = Table(
        "quantity", "value", title=f"OCS plan: {w.name} on {model.n} pods, d={ports}, s={ocs}"
    )
    t.add_row("hard critical path (integer wiring)", f"{summary['hard_critical_path_s']:.6f} s")
    t.add_row("uniform mesh critical path", f"{summary['uniform_critical_path_s']:.6f} s")
    t.add_row("improvement vs uniform", f"{100 * summary['improvement_vs_uniform']:.2f} %")
    t.add_row("smoothed cost U", f"{summary['smoothed_cost_s']:.6f} s")
    t.add_row("KL(w || q)", f"{summary['kl_to_prior']:.4f}")
    t.add_row("circuits moved vs uniform mesh", str(summary["circuits_moved_vs_prior"]))
    t.add_row("solve + round + decompose", f"{summary['solve_time_s']:.3f} s")
    t.add_row("per-OCS split", "ok" if summary["split_feasible"] else "INFEASIBLE (see tables)")
    t.add_row("cross-connect tables", summary["tables_path"])
    out.print(t)


@ocs_app.command("compare")
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
    milp_time_limit_s: Annotated[float, typer.Option(help="HiGHS time limit (s).")] = 60.0,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Our planner beside the MILP (HiGHS), uniform mesh, demand and TM-only wirings."""
    from trainfabric.ocs.planner import compare

    w, model = _ocs_instance(workload, pods, ports, ocs, rate_gbps, fallback_gbps, seed, b1, b2)
    rows = compare(
        w.dag, model, b1_rel=b1, b2_rel=b2, seed=seed, milp_time_limit_s=milp_time_limit_s
    )
    if json_out:
        return _emit_json({"workload": w.name, "pods": model.n, "methods": rows})
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


# -- sweeps and reports -----------------------------------------------------------------------
@app.command("sweep")
def sweep(
    file: Annotated[Path, typer.Argument(help="Sweep TOML: experiment, seeds, [base], [grid].")],
    executor: Annotated[str, typer.Option(help="local (process pool), ray, or serial.")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: a local Ray).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Local worker processes (default: CPU count).")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Run directory (default runs/<name>).")
    ] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a parameter grid x seeds; re-running the same command resumes finished cells."""
    from trainfabric.experiments import load_sweep, run_sweep

    spec = load_sweep(file)
    res = run_sweep(spec, out_dir, executor=executor, workers=workers, address=address)
    info = {
        "run_dir": str(res.run_dir),
        "cells": len(res.computed) + len(res.skipped),
        "computed": len(res.computed),
        "skipped": len(res.skipped),
        "rows": len(res.results),
    }
    if json_out:
        return _emit_json(info)
    err.print(f"{info['computed']} cells computed, {info['skipped']} resumed -> {res.run_dir}")


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Render RUN_DIR/report.html (tables and figures) from any run directory."""
    from trainfabric.experiments import render_report

    path = render_report(run_dir)
    if json_out:
        return _emit_json({"report": str(path)})
    err.print(f"report: {path}")


@app.command("demo")
def demo(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the demo writes its run directory.")
    ] = Path("runs/demo"),
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The main job on embedded defaults: every pillar's small scenario, then one report."""
    from trainfabric.demo import run_demo

    result = run_demo(out_dir, console=err if json_out else out)
    if json_out:
        return _emit_json(result)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except TrainfabricError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except NoArgsIsHelpError as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except typer.TyperException as exc:
        sys.stderr.write(f"error: {exc.format_message()}\n")
        raise SystemExit(2) from None
    except typer.Abort:
        sys.stderr.write("aborted\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
