"""Training jobs -> task DAGs and pod/GPU traffic (dense GPT, MoE; DP/TP/PP/EP).

Public API: :class:`Job` (and its parts), :data:`PRESETS`, :func:`get_preset`,
:func:`build_dag`, :class:`TaskDAG`, :class:`PhaseTraffic`, :func:`load_workload`,
:func:`summarize`, the collectives in :mod:`~trainfabric.workloads.collectives`, the JSON
formats in :mod:`~trainfabric.workloads.interchange`, GPU transfers of comm nodes
(:class:`GpuTransfers`, :func:`even_split`) and the reporting maths of
:mod:`~trainfabric.workloads.attribution` (:func:`exposed_comm`, per-collective bandwidths).
"""

from __future__ import annotations

from trainfabric.lazy import exports

# Submodule of each public name; imported on first use, so `trainfabric --help` and the other
# pillars' commands do not pay for numba, scipy and networkx (see __getattr__).
_EXPORTS = {
    "build_dag": "build",
    "schedule": "build",
    "BARRIER": "dag",
    "COMM": "dag",
    "COMPUTE": "dag",
    "Phase": "dag",
    "TaskDAG": "dag",
    "GpuTransfers": "dag",
    "even_split": "dag",
    "gpu_transfers": "dag",
    "exposed_comm": "attribution",
    "phase_groups": "attribution",
    "asap_times": "attribution",
    "compute_only_critical_path": "attribution",
    "ComputeSpec": "job",
    "Job": "job",
    "ModelSpec": "job",
    "ParallelismSpec": "job",
    "PlacementSpec": "job",
    "PRESETS": "presets",
    "get_preset": "presets",
    "PhaseTraffic": "traffic",
    "dag_from_traffic": "traffic",
    "traffic_from_dag": "traffic",
    "Workload": "workload",
    "load_workload": "workload",
    "summarize": "workload",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
