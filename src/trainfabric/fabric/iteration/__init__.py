"""A training job's iteration on the fabric: job -> servers -> GPU flows -> the task engine.

:mod:`.run` (place the job, build its task graph, run it), :mod:`.faults` (failed cables and
link flaps during the iteration), :mod:`.packet` (the same iteration on the packet engine),
:mod:`.report` (what an iteration reports), :mod:`.config` and :mod:`.scenario` (the
``iteration`` scenario kind, tenants, and ``trainfabric fabric job``), :mod:`.findings`
(what ``fabric job`` answers, in sentences).
``trainfabric.fabric.iteration`` was one module (now :mod:`.run`); its names are exported here.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "JOB_FABRIC": "run",
    "server_count": "run",
    "server_leaf": "run",
    "place_servers": "run",
    "interleaved_pools": "run",
    "pair_mesh": "run",
    "MeshRouter": "run",
    "LoadedJob": "run",
    "cut_layers": "run",
    "load_job": "run",
    "resolve_job": "run",
    "build_job": "run",
    "OVERLAPS": "run",
    "with_overlap": "run",
    "JobOnHosts": "run",
    "job_graph": "run",
    "repeat_graph": "run",
    "concat_graphs": "run",
    "LATENCY_NOTE": "run",
    "make_router": "run",
    "default_bin_s": "run",
    "IterationRun": "run",
    "run_iteration": "run",
    "WorkloadConfig": "config",
    "TenantsConfig": "config",
    "IterationScenario": "config",
    "FAILURES_STEM": "faults",
    "FLAPS_STEM": "faults",
    "SIDES": "faults",
    "RANKING_SOURCE": "faults",
    "merge_intervals": "faults",
    "time_in_intervals": "faults",
    "cable_candidates": "faults",
    "cable_links": "faults",
    "flap_plan": "faults",
    "failed_iteration": "faults",
    "run_failures": "faults",
    "comm_intervals": "faults",
    "flap_once": "faults",
    "run_flaps": "faults",
    "failures_summary": "faults",
    "QUANTILES": "faults",
    "flaps_summary": "faults",
    "most_loaded_links": "report",
    "busy_time": "report",
    "phase_kind_rows": "report",
    "critical_segments": "report",
    "iteration_tables": "report",
    "job_fabric": "scenario",
    "job_command": "scenario",
    "run_job": "scenario",
    "JobSpec": "scenario",
    "JobRun": "scenario",
    "write_job_dir": "scenario",
    "job_findings": "findings",
    "run_tenants": "scenario",
    "STEM": "scenario",
    "PACKET_STEM": "scenario",
    "STEMS": "scenario",
    "scenario_tables": "scenario",
    "scenario_summary": "scenario",
    "dag_flow_table": "packet",
    "packet_iteration": "packet",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
