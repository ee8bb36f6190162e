"""Jobs on shared pods: placement, byte shares and the shared DAGs
(:mod:`trainfabric.ocs.fairness`).

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.families import combine
from trainfabric.workloads import load_workload
from trainfabric.workloads.dag import TaskDAG
from trainfabric.workloads.workload import is_file_spec


@dataclass(frozen=True, eq=False)
class FairJob:
    """One job: ``dag`` on the model's pods (already placed), the model ``pods`` it runs on,
    and its weight ``ω > 0``."""

    name: str
    dag: TaskDAG
    pods: np.ndarray
    weight: float = 1.0


def embed(dag: TaskDAG, pods, n: int) -> TaskDAG:
    """``dag`` (on ``k`` pods) on ``n ≥ k`` pods, its pod ``i`` renamed ``pods[i]`` (distinct;
    :meth:`TaskDAG.relabel`); ConfigError naming ``pods`` otherwise."""
    pods = np.asarray(pods, dtype=np.int64)
    if pods.size != dag.n_pods or np.unique(pods).size != pods.size:
        raise ConfigError("pods", f"a {dag.n_pods}-pod job needs {dag.n_pods} distinct pods")
    if pods.min() < 0 or pods.max() >= n:
        raise ConfigError("pods", f"job pods must lie in 0..{n - 1}")
    return dag.relabel(pods, n)


def place_jobs(
    workloads: list[str],
    n: int,
    job_pods: list[int] | None = None,
    weights: list[float] | None = None,
    seed: int = 0,
) -> list[FairJob]:
    """Jobs from workload specs (presets or files, :func:`~trainfabric.workloads.load_workload`)
    on ``n`` pods: job ``j`` is re-mapped onto ``job_pods[j]`` pods (default ``n``; a JSON file
    keeps its own pod count, and a different ``job_pods[j]`` is an error) and placed on a
    random subset of that size in random order (job 0 on all ``n`` pods keeps the identity).
    One ``default_rng(seed)`` draws every placement; the preset's own randomness (MoE skew)
    uses ``seed + j``.

    ConfigError naming ``jobs`` (none given), ``weights`` (count or a value ≤ 0),
    ``job_pods`` (count, a size outside ``2..n``, or not a JSON file's) or ``pods`` (a JSON
    file with more pods than ``n``).
    """
    if not workloads:
        raise ConfigError("jobs", "give at least one job")
    j = len(workloads)
    weights = [1.0] * j if weights is None else [float(w) for w in weights]
    if len(weights) != j or not all(w > 0 and math.isfinite(w) for w in weights):
        raise ConfigError("weights", f"need {j} finite weights > 0, got {weights}")
    if job_pods is not None and len(job_pods) != j:
        raise ConfigError("job_pods", f"need one pod count per job ({j}), got {len(job_pods)}")
    rng = np.random.default_rng(seed)
    jobs = []
    for i, spec in enumerate(workloads):
        k = n if job_pods is None else int(job_pods[i])
        if not 2 <= k <= n:
            raise ConfigError("job_pods", f"job {i} ({spec}): {k} pods, need 2..{n}")
        fixed = is_file_spec(spec) and spec.endswith(".json")  # a DAG file keeps its pods
        w = load_workload(spec, None if fixed else k, seed + i)
        if fixed and job_pods is not None and w.dag.n_pods != k:
            raise ConfigError("job_pods", f"job {i} ({spec}) is a {w.dag.n_pods}-pod file")
        k = w.dag.n_pods
        if k > n:
            raise ConfigError("pods", f"job {i} ({spec}) needs {k} pods, only {n} given")
        pods = np.arange(n) if (i == 0 and k == n) else rng.permutation(n)[:k]
        jobs.append(FairJob(w.name, embed(w.dag, pods, n), np.sort(pods), weights[i]))
    return jobs


def byte_shares(dags: list[TaskDAG], model: OcsModel) -> list[np.ndarray]:
    """Per job, the share ``s ∈ (0, 1]`` of every comm node (in ``dag.comm_nodes`` order) in
    its pair's directed rate: its job's bytes in that direction over all jobs' (module doc)."""
    n = model.n
    per_job = []
    for dag in dags:
        c = dag.comm_nodes
        key = dag.pod[c].astype(np.int64) * n + dag.dst[c]
        per_job.append((key, np.bincount(key, dag.bytes[c], n * n)))
    total = sum(b for _, b in per_job)
    return [
        np.divide(b[key], total[key], out=np.ones(key.size), where=total[key] > 0)
        for key, b in per_job
    ]


def shared_dags(dags: list[TaskDAG], model: OcsModel) -> list[TaskDAG]:
    """Each job's DAG with every transfer's bytes divided by its byte share (module doc), so
    that its PathCost is the job's cost on the shared wiring."""
    out = []
    for dag, share in zip(dags, byte_shares(dags, model), strict=True):
        nbytes = dag.bytes.astype(float).copy()
        nbytes[dag.comm_nodes] /= share
        out.append(
            TaskDAG(
                dag.n_pods,
                dag.kind,
                dag.pod,
                dag.dst,
                dag.duration_s,
                nbytes,
                dag.latency_s,
                dag.phase,
                dag.indptr,
                dag.indices,
                dag.phases,
                dag.names,
            )
        )
    return out


def side_by_side(dags: list[TaskDAG]) -> TaskDAG:
    """All DAGs in one, with no edge between them (critical path = the slowest job's)."""
    out = dags[0]
    for i, dag in enumerate(dags[1:], start=1):
        out = combine(out, dag, series=False, tags=("" if i > 1 else "j0:", f"j{i}:"))
    return out
