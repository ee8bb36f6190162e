"""``trainfabric workloads ...``: training jobs -> task DAGs and traffic matrices.

``workloads list``: the built-in presets; ``workloads show``: a workload's DAG summary and
critical path at a uniform rate; ``workloads export``: the versioned JSON interchange files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainfabric.clikit import (
    ConfigOpt,
    JsonOpt,
    MaxMemoryOpt,
    ProgressOpt,
    SeedOpt,
    emit_json,
    err,
    finite,
    options,
    out,
    progress,
)
from trainfabric.errors import ConfigError
from trainfabric.io import prepare_dir

app = typer.Typer(help="Training jobs -> task DAGs and traffic matrices.", no_args_is_help=True)

WorkloadArg = Annotated[
    str,
    typer.Argument(
        help="Preset (gpt3-175b, llama3-70b, deepseek-v3, mixtral-8x7b, moe, pipeline, dp-ring, "
        "dp-hd, hybrid) or a task-DAG/traffic .json or job .toml file."
    ),
]
PodsOpt = Annotated[
    int | None,
    typer.Option(min=1, max=65_536, help="Re-map the job onto this many pods [default: its own]."),
]
# Internal field names of the workloads API -> what the user typed.
NAMES = {"pods": "--pods", "seed": "--seed", "rate_bps": "--rate-gbps", "workload": "WORKLOAD"}


@app.command("list")
def workloads_list(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List the built-in presets."""
    from trainfabric.workloads.presets import PRESETS

    rows = {name: p.description for name, p in PRESETS.items()}
    if json_out:
        return emit_json({"presets": rows})
    table = Table("preset", "description")
    for name, desc in rows.items():
        table.add_row(name, desc)
    out.print(table)


@app.command("show")
def workloads_show(
    workload: WorkloadArg,
    pods: PodsOpt = None,
    rate_gbps: Annotated[
        float,
        typer.Option(
            help="Uniform pod-pair rate for the critical path, Gb/s (> 0).",
            callback=finite(gt=0, le=1e9),
        ),
    ] = 100.0,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Summarise a workload: nodes, edges, bytes per phase, critical path at a uniform rate."""
    from trainfabric.workloads import load_workload, summarize

    with progress(json_out, "workloads show", show_progress), options(**NAMES):
        s = summarize(load_workload(workload, pods, seed), rate_gbps * 1e9)
    if json_out:
        return emit_json(s)
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


@app.command("export")
def workloads_export(
    workload: WorkloadArg,
    file: Annotated[Path, typer.Argument(help="Output JSON file (its folder is created).")],
    traffic: Annotated[
        bool, typer.Option(help="Write the traffic-matrix sequence instead of the DAG.")
    ] = False,
    pods: PodsOpt = None,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a workload in the versioned JSON interchange format (task DAG or traffic)."""
    from trainfabric.workloads import interchange, load_workload

    prepare_dir(file.parent, "FILE")
    if file.is_dir():
        raise ConfigError("FILE", f"{file} is a directory; expected a file name")
    with progress(json_out, "workloads export", show_progress), options(**NAMES):
        w = load_workload(workload, pods, seed)
        path = interchange.save(w.traffic if traffic else w.dag, file)
    info = {
        "path": str(path),
        "format": interchange.TRAFFIC_FORMAT if traffic else interchange.DAG_FORMAT,
        "nodes": w.dag.n_nodes,
        "phases": len(w.traffic),
    }
    if json_out:
        return emit_json(info)
    err.print(f"wrote {info['format']} v{interchange.VERSION} to {path}")
