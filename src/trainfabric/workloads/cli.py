"""``trainfabric workloads ...``: training jobs -> task DAGs and traffic matrices.

``workloads list``: the built-in presets; ``workloads show``: a workload's DAG summary and
critical path at a uniform rate; ``workloads export``: the versioned JSON interchange files,
or a Chakra execution trace (``--format chakra``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

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
        "dp-hd, hybrid), a task-DAG/traffic .json or job .toml file, a Chakra trace (a folder "
        "of NAME.RANK.et files or one of them) or a SimAI/AICB workload .txt."
    ),
]
PodsOpt = Annotated[
    int | None,
    typer.Option(min=1, max=65_536, help="Re-map the job onto this many pods [default: its own]."),
]
# Internal field names of the workloads API -> what the user typed.
NAMES = {
    "pods": "--pods",
    "seed": "--seed",
    "rate_bps": "--rate-gbps",
    "workload": "WORKLOAD",
    "gpus_per_pod": "--gpus-per-pod",
}


# What ``workloads show`` adds for an imported trace, counted as its file states them.
IMPORTED_COUNTS = (
    "ranks",
    "collectives",
    "collective_bytes",
    "p2p_messages",
    "p2p_bytes",
    "compute_nodes",
)


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
    gpus_per_pod: GpusPerPodOpt = None,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Summarise a workload: nodes, edges, bytes per phase, critical path at a uniform rate;
    for an imported trace also the counts its file states (ranks, collectives, bytes)."""
    from trainfabric.workloads import load_workload, summarize

    with progress(json_out, "workloads show", show_progress), options(**NAMES):
        s = summarize(load_workload(workload, pods, seed, gpus_per_pod), rate_gbps * 1e9)
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
    for key in IMPORTED_COUNTS if "ranks" in s else ():
        head.add_row(f"file: {key}", f"{s[key]:,}")
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
    file: Annotated[
        Path,
        typer.Argument(
            help="Output JSON file (its folder is created); with --format chakra, the folder "
            "of the trace files."
        ),
    ],
    traffic: Annotated[
        bool, typer.Option(help="Write the traffic-matrix sequence instead of the DAG.")
    ] = False,
    fmt: Annotated[
        Literal["json", "chakra"],
        typer.Option(
            "--format",
            help="json: the versioned interchange file; chakra: one NAME.RANK.et execution "
            "trace per pod (a GPU when the job has one per pod) and groups.json, for astra-sim.",
        ),
    ] = "json",
    pods: PodsOpt = None,
    seed: SeedOpt = 0,
    gpus_per_pod: GpusPerPodOpt = None,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a workload in the versioned JSON interchange format (task DAG or traffic), or
    its task DAG as a Chakra execution trace (--format chakra)."""
    from trainfabric.workloads import interchange, load_workload

    if fmt == "chakra":
        if traffic:
            raise ConfigError("--traffic", "a Chakra trace holds the task DAG, not traffic")
        return _export_chakra(workload, file, pods, seed, gpus_per_pod, show_progress, json_out)
    prepare_dir(file.parent, "FILE")
    if file.is_dir():
        raise ConfigError("FILE", f"{file} is a directory; expected a file name")
    with progress(json_out, "workloads export", show_progress), options(**NAMES):
        w = load_workload(workload, pods, seed, gpus_per_pod)
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


def _export_chakra(workload, folder: Path, pods, seed, gpus_per_pod, show_progress, json_out):
    """``workloads export --format chakra``: the trace's files are named after the workload;
    a job's collectives are written for its own algorithm (``dp_collective``)."""
    from trainfabric.workloads import load_workload
    from trainfabric.workloads.chakra import write_trace

    prepare_dir(folder, "FILE")
    with progress(json_out, "workloads export", show_progress), options(**NAMES):
        w = load_workload(workload, pods, seed, gpus_per_pod)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", w.name)
        algorithm = w.job.parallelism.dp_collective if w.job is not None else "ring"
        written = write_trace(w.dag, folder, name, algorithm)
    info = {
        "path": str(folder),
        "format": "chakra",
        "name": name,
        "ranks": len(written.files),
        "items": written.items,
        "et_nodes": written.et_nodes,
        "collectives_as_sends": written.collectives_as_sends,
    }
    if json_out:
        return emit_json(info)
    err.print(f"wrote Chakra trace {name} ({info['ranks']} ranks) to {folder}")
