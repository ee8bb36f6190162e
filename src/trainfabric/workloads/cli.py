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
    err,
    finite,
    options,
    out,
    progress,
)
from trainfabric.errors import ConfigError
from trainfabric.io import prepare_dir
from trainfabric.tables import Col, fmt_number, print_records

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
    typer.Option(
        min=1, max=65_536, help="Re-map the job onto this many pods \\[default: its own]."
    ),
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
    job = s.get("job")
    out.print(f"[bold]workload {escape(s['workload'])}: {s['pods']:,} pods[/bold]")
    if job is not None:
        out.print(escape(job["global_batch_note"]))
    rows = [{"quantity": q, "value": v} for q, v in _show_rows(s, rate_gbps)]
    print_records(out, rows, [Col("quantity"), Col("value")])
    kinds = [{"kind": kind, **row} for kind, row in s["phase_kinds"].items()]
    print_records(out, kinds, PHASE_COLS)


def _gb(v: float) -> str:
    return fmt_number(v / 1e9)


# Per phase kind: how many phases and their bytes.
PHASE_COLS = (
    Col("kind", "phase kind"),
    Col("count", "phases"),
    Col("bytes", "inter-pod bytes", "GB", _gb),
    Col("intra_pod_bytes", "intra-pod bytes", "GB", _gb),
)
# What an imported file states, in words (the JSON keys of IMPORTED_COUNTS).
IMPORTED_LABELS = {
    "ranks": "ranks in the file",
    "collectives": "collectives in the file",
    "collective_bytes": "collective bytes in the file (GB)",
    "p2p_messages": "point-to-point messages in the file",
    "p2p_bytes": "point-to-point bytes in the file, send side (GB)",
    "compute_nodes": "compute nodes in the file",
}


def _show_rows(s: dict, rate_gbps: float) -> list[tuple[str, str]]:
    """``workloads show``'s quantities in words with their units."""
    rows = [
        ("pods", fmt_number(s["pods"])),
        ("task-DAG nodes", fmt_number(s["nodes"])),
        ("task-DAG edges", fmt_number(s["edges"])),
        ("compute nodes", fmt_number(s["compute_nodes"])),
        ("communication nodes", fmt_number(s["comm_nodes"])),
        ("barrier nodes", fmt_number(s["barrier_nodes"])),
        ("phases", fmt_number(s["phases"])),
        ("inter-pod bytes per iteration (GB)", _gb(s["comm_bytes"])),
        (f"critical path at {rate_gbps:g} Gb/s per pod pair (s)", fmt_number(s["critical_path_s"])),
        ("critical path without communication (s)", fmt_number(s["compute_only_s"])),
    ]
    for key in IMPORTED_COUNTS if "ranks" in s else ():
        rows.append((IMPORTED_LABELS[key], (_gb if key.endswith("bytes") else fmt_number)(s[key])))
    if s.get("dp_gradient_bytes") is not None:
        rows.append(("one data-parallel replica's gradients (GB)", _gb(s["dp_gradient_bytes"])))
    return rows + (_job_rows(s["job"], rate_gbps) if s.get("job") else [])


def _job_rows(j: dict, rate_gbps: float) -> list[tuple[str, str]]:
    """A job's model, parallelism, batch and FLOPs in words with their units."""
    return [
        ("model", j["model"]),
        ("parameters", fmt_number(j["params"])),
        ("active parameters per token", fmt_number(j["active_params"])),
        ("tensor-parallel degree (TP)", fmt_number(j["tp"])),
        ("pipeline stages (PP)", fmt_number(j["pp"])),
        ("data-parallel replicas (DP)", fmt_number(j["dp"])),
        ("expert-parallel degree (EP)", fmt_number(j["ep"])),
        ("pipeline schedule", j["schedule"]),
        ("GPUs", fmt_number(j["gpus"])),
        ("GPUs per pod", fmt_number(j["gpus_per_pod"])),
        ("micro-batches per iteration", fmt_number(j["micro_batches"])),
        ("sequences per micro-batch", fmt_number(j["micro_batch_size"])),
        ("sequence length (tokens)", fmt_number(j["seq_len"])),
        ("global batch (sequences)", fmt_number(j["global_batch_sequences"])),
        ("global batch = tokens per iteration (tokens)", fmt_number(j["tokens_per_iteration"])),
        ("model FLOPs per iteration (PFLOP)", fmt_number(j["iteration_flops"] / 1e15)),
        ("GPU peak (TFLOP/s)", fmt_number(j["gpu_flops"] / 1e12)),
        ("MFU assumed for the compute (%)", fmt_number(100 * j["mfu"], 3)),
        (f"MFU over the critical path at {rate_gbps:g} Gb/s (%)",
         fmt_number(100 * j["mfu_at_critical_path"], 3)),
    ]  # fmt: skip


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


def _check_trace_folder(folder: Path, name: str, n_ranks: int) -> None:
    """Refuse a folder holding trace files that this export would not overwrite (another
    trace, or more ranks of this one): the folder would read as a mix of two traces."""
    ours = {f"{name}.{r}.et" for r in range(n_ranks)}
    other = sorted(f.name for f in folder.glob("*.et") if f.name not in ours)
    if other:
        raise ConfigError(
            "FILE",
            f"{folder} holds {other[0]}, not of this {n_ranks}-rank trace {name}; "
            "export into another folder",
        )


def _export_chakra(workload, folder: Path, pods, seed, gpus_per_pod, show_progress, json_out):
    """``workloads export --format chakra``: the trace's files are named after the workload;
    a job's collectives are written for its own algorithm (``dp_collective``)."""
    from trainfabric.workloads import load_workload
    from trainfabric.workloads.chakra import write_trace

    prepare_dir(folder, "FILE")
    with progress(json_out, "workloads export", show_progress), options(**NAMES):
        w = load_workload(workload, pods, seed, gpus_per_pod)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", w.name)
        _check_trace_folder(folder, name, w.dag.n_pods)
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
