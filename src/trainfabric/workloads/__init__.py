"""Training jobs -> task DAGs and pod/GPU traffic (dense GPT, MoE; DP/TP/PP/EP).

Public API: :class:`Job` (and its parts), :data:`PRESETS`, :func:`get_preset`,
:func:`build_dag`, :class:`TaskDAG`, :class:`PhaseTraffic`, :func:`load_workload`,
:func:`summarize`, the collectives in :mod:`~trainfabric.workloads.collectives` and the JSON
formats in :mod:`~trainfabric.workloads.interchange`.
"""

from trainfabric.workloads.build import build_dag, schedule
from trainfabric.workloads.dag import BARRIER, COMM, COMPUTE, Phase, TaskDAG
from trainfabric.workloads.job import ComputeSpec, Job, ModelSpec, ParallelismSpec, PlacementSpec
from trainfabric.workloads.presets import PRESETS, get_preset
from trainfabric.workloads.traffic import PhaseTraffic, dag_from_traffic, traffic_from_dag
from trainfabric.workloads.workload import Workload, load_workload, summarize

__all__ = [
    "BARRIER",
    "COMM",
    "COMPUTE",
    "ComputeSpec",
    "Job",
    "ModelSpec",
    "PRESETS",
    "ParallelismSpec",
    "Phase",
    "PhaseTraffic",
    "PlacementSpec",
    "TaskDAG",
    "Workload",
    "build_dag",
    "dag_from_traffic",
    "get_preset",
    "load_workload",
    "schedule",
    "summarize",
    "traffic_from_dag",
]
