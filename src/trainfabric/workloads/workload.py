"""A workload is a preset name, a job TOML, an interchange JSON file (DAG or traffic), or a
job someone else described: a Chakra execution trace (a folder of ``NAME.RANK.et`` files, or
one of them) or a SimAI/AICB workload file.

:func:`load_workload` resolves any of them to a :class:`Workload` with both views of the
traffic: the task DAG and the phase traffic matrices. An imported job also keeps the counts
its file states (:attr:`Workload.counts`) and the bytes one data-parallel replica reduces per
iteration (:attr:`Workload.dp_gradient_bytes`, the DiLoCo sync payload). :func:`summarize` is
what ``trainfabric workloads show`` prints.

**A job's batch.** Global batch ``G = micro_batch_size · micro_batches · dp`` sequences, tokens
per iteration ``T = G · seq_len``; model FLOPs per iteration ``6 · T · active weights``
(:func:`~trainfabric.workloads.sizes.iteration_flops`) and the MFU over the critical path
``FLOPs / (gpus · gpu_flops · critical path)``. Re-mapping onto other pods
(:func:`~trainfabric.workloads.job.remap_onto_pods`) keeps every replica's micro-batches, so
when DP absorbs the change the global batch grows with DP (weak scaling); when PP
absorbs it (``pipeline``) the global batch stays. :func:`summarize` says which.

**GPUs per pod of an imported job.** A trace's rank is a GPU; rank ``r`` goes to pod
``r // gpus_per_pod``. The default is one GPU per pod for a Chakra trace (the GPU-level view
astra-sim simulates) and 8 for a SimAI file (its servers, ``-g_p_s`` 8 in SimAI).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from trainfabric.config import read_toml, validate
from trainfabric.errors import ConfigError
from trainfabric.workloads import interchange
from trainfabric.workloads.build import build_dag
from trainfabric.workloads.dag import BARRIER, COMM, COMPUTE, TaskDAG
from trainfabric.workloads.job import Job, remap_onto_pods
from trainfabric.workloads.presets import PRESETS, get_preset
from trainfabric.workloads.sizes import iteration_flops
from trainfabric.workloads.traffic import PhaseTraffic, dag_from_traffic, traffic_from_dag


@dataclass(eq=False)
class Workload:
    """Both views of one iteration's traffic; ``job`` is None for workloads read from JSON;
    ``base_job``: the job before ``pods`` re-mapped it (None when it was not re-mapped)."""

    name: str
    dag: TaskDAG
    job: Job | None = None
    _traffic: PhaseTraffic | None = field(default=None, repr=False)
    counts: dict[str, int] | None = None
    dp_gradient_bytes: float | None = None
    base_job: Job | None = None

    @cached_property
    def traffic(self) -> PhaseTraffic:
        return self._traffic if self._traffic is not None else traffic_from_dag(self.dag)


def is_file_spec(spec: str) -> bool:
    """A workload argument names a file when it exists or ends in .json / .toml / .et."""
    return Path(spec).exists() or spec.endswith((".json", ".toml", ".et"))


def is_imported(spec: str) -> bool:
    """Whether ``spec`` names a Chakra trace (a ``.et`` file or a folder holding them) or a
    SimAI file."""
    from trainfabric.workloads.simai import is_simai_file

    path = Path(spec)
    if path.is_dir():
        return any(path.glob("*.et"))
    return spec.endswith(".et") or is_simai_file(path)


def load_workload(
    spec: str, pods: int | None = None, seed: int = 0, gpus_per_pod: int | None = None
) -> Workload:
    """Resolve a preset name or a file into a Workload (``pods`` re-maps presets and jobs;
    ``gpus_per_pod`` places an imported trace's ranks, module doc).

    A file that cannot be read (missing, a directory, not UTF-8, not JSON/TOML) is a
    ConfigError naming ``workload``; a malformed one names the bad value's path in it
    (``nodes[3].bytes``, ``model.layers``; a trace: its file, rank and node)."""
    if not is_file_spec(spec):
        job, base = get_preset(spec, pods), get_preset(spec)
        return Workload(spec, build_dag(job, seed), job, base_job=None if job is base else base)
    path = Path(spec)
    if is_imported(spec):
        w = _imported(path, gpus_per_pod)
        if pods is not None and pods != w.dag.n_pods:
            raise ConfigError(
                "pods", f"{path} places {w.dag.n_pods} pods; choose them with --gpus-per-pod"
            )
        return w
    if path.suffix == ".toml":
        base = _load_job(path)
        if pods is None or pods == base.placement.pods:
            return Workload(base.name, build_dag(base, seed), base)
        job = remap_onto_pods(base, pods)
        return Workload(job.name, build_dag(job, seed), job, base_job=base)
    if path.suffix == ".txt":  # not a SimAI file (is_imported): say so, not "invalid JSON"
        from trainfabric.workloads.simai import POLICY

        raise ConfigError("workload", f"{path}: not a SimAI workload file (first word {POLICY})")
    obj = interchange.load(path, field="workload")
    n = obj.n_pods
    if pods is not None and pods != n:
        raise ConfigError("pods", f"{path} describes {n} pods; a file cannot be re-mapped")
    if isinstance(obj, PhaseTraffic):
        return Workload(path.stem, dag_from_traffic(obj), None, obj)
    return Workload(path.stem, obj)


def _imported(path: Path, gpus_per_pod: int | None) -> Workload:
    """A Chakra trace or a SimAI file as a Workload (module doc)."""
    from trainfabric.workloads.simai import is_simai_file, load_simai

    if is_simai_file(path):
        s = load_simai(path, 8 if gpus_per_pod is None else gpus_per_pod)
        return Workload(s.name, s.dag, counts=s.counts, dp_gradient_bytes=s.dp_gradient_bytes)
    from trainfabric.workloads.chakra import dp_gradient_bytes, read_trace, trace_counts, trace_dag

    g = 1 if gpus_per_pod is None else gpus_per_pod
    trace = read_trace(path)
    dag = trace_dag(trace, g)
    return Workload(
        trace.name, dag, counts=trace_counts(trace), dp_gradient_bytes=dp_gradient_bytes(trace, g)
    )


def _load_job(path: Path) -> Job:
    """A job TOML: an unreadable file (missing, a directory, binary, bad TOML) is a
    ConfigError naming ``workload``; a bad value one naming its TOML key (``model.layers``)."""
    try:
        data = read_toml(path)
    except ConfigError as exc:
        raise ConfigError("workload", exc.message) from None
    return validate(Job, data)


def summarize(w: Workload, rate_bps: float) -> dict[str, Any]:
    """Counts, bytes per phase kind and the critical path at a uniform pod-pair rate."""
    dag, tr = w.dag, w.traffic
    kinds: dict[str, dict[str, float]] = {}
    per_phase = tr.phase_bytes()
    for ph, nbytes in zip(tr.phases, per_phase, strict=True):
        row = kinds.setdefault(ph.kind, {"count": 0, "bytes": 0.0, "intra_pod_bytes": 0.0})
        row["count"] += 1
        row["bytes"] += float(nbytes)
        row["intra_pod_bytes"] += ph.intra_pod_bytes
    out: dict[str, Any] = {
        "workload": w.name,
        "pods": dag.n_pods,
        "nodes": dag.n_nodes,
        "edges": dag.n_edges,
        "compute_nodes": int(np.sum(dag.kind == COMPUTE)),
        "comm_nodes": int(np.sum(dag.kind == COMM)),
        "barrier_nodes": int(np.sum(dag.kind == BARRIER)),
        "comm_bytes": dag.comm_bytes(),
        "phases": len(tr),
        "phase_kinds": kinds,
        "rate_bps": rate_bps,
        "critical_path_s": dag.critical_path_at(rate_bps),
        "compute_only_s": dag.compute_time(),
    }
    if w.counts is not None:  # an imported job: the counts as its file states them
        out["dag_compute_nodes"] = out["compute_nodes"]
        out.update(w.counts)
        out["dp_gradient_bytes"] = w.dp_gradient_bytes
    if w.job is not None:
        out["job"] = _job_summary(w.job, w.base_job, out["critical_path_s"])
    return out


def global_batch_sequences(job: Job) -> int:
    """``G = micro_batch_size · micro_batches · dp`` sequences per iteration."""
    par = job.parallelism
    return par.micro_batch_size * par.micro_batches * par.dp


def _job_summary(job: Job, base: Job | None, critical_path_s: float) -> dict[str, Any]:
    """A job's shape, its batch and FLOPs (module doc) and, when re-mapped, where from."""
    m, par, comp = job.model, job.parallelism, job.compute
    g = global_batch_sequences(job)
    flops = iteration_flops(job)
    out: dict[str, Any] = {
        "model": m.name,
        "params": m.params(),
        "active_params": m.params(active=True),
        "tp": par.tp,
        "pp": par.pp,
        "dp": par.dp,
        "ep": par.ep,
        "micro_batches": par.micro_batches,
        "schedule": par.schedule,
        "gpus": par.gpus,
        "gpus_per_pod": job.placement.gpus_per_pod,
        "seq_len": m.seq_len,
        "micro_batch_size": par.micro_batch_size,
        "global_batch_sequences": g,
        "global_batch_tokens": g * m.seq_len,
        "tokens_per_iteration": g * m.seq_len,
        "gpu_flops": comp.gpu_flops,
        "mfu": comp.mfu,
        "iteration_flops": flops,
        "mfu_at_critical_path": flops / (par.gpus * comp.gpu_flops * critical_path_s),
        "global_batch_note": batch_note(job, base),
    }
    if base is not None:
        bp = base.parallelism
        out["remapped_from"] = {
            "pods": base.placement.pods,
            **{k: getattr(bp, k) for k in ("tp", "pp", "dp", "ep")},
            "global_batch_sequences": global_batch_sequences(base),
        }
    return out


def batch_note(job: Job, base: Job | None) -> str:
    """The global batch in words; after a re-map, which degrees changed and whether the
    global batch changed with them."""
    g, seq, par = global_batch_sequences(job), job.model.seq_len, job.parallelism
    batch = f"{g:,} sequences of {seq:,} tokens ({g * seq:,} tokens per iteration)"
    if base is None:
        return (
            f"Global batch: {batch}: {par.micro_batch_size:,} per micro-batch x "
            f"{par.micro_batches:,} micro-batches x DP {par.dp:,}."
        )
    g0, bp = global_batch_sequences(base), base.parallelism
    moved = ", ".join(
        f"{k.upper()} {getattr(bp, k):,} -> {getattr(par, k):,}"
        for k in ("tp", "pp", "dp", "ep")
        if getattr(bp, k) != getattr(par, k)
    )
    head = f"Re-mapped from {base.placement.pods:,} to {job.placement.pods:,} pods ({moved}): "
    if g == g0:
        return head + f"the global batch stays {batch}."
    return head + (
        f"the global batch grows with DP, from {g0:,} to {batch}; every replica keeps its "
        f"{par.micro_batches:,} micro-batches (weak scaling)."
        if g > g0
        else f"the global batch shrinks with DP, from {g0:,} to {batch}."
    )


def workload_names() -> list[str]:
    return list(PRESETS)
