"""Fabric pillar: multiplane Ethernet fabrics (Spectrum-X style) and three engines to run them.

Layout, bottom to top (each layer imports only the ones below it; an import-linter contract in
``pyproject.toml`` keeps it so):

- :mod:`.topology` (fabrics as arrays), :mod:`.flows` (the flow table, every engine's input),
  :mod:`.result` (what every engine's result answers), :mod:`.events` (links going down and
  up), :mod:`.mcf` (max-concurrent-flow LP, HiGHS);
- :mod:`.routing` (the load-balancing modes) and :mod:`.heap` (the compiled heaps the engines
  share), then :mod:`.maxmin` (progressive filling) and :mod:`.latency` (a per-packet latency
  estimate);
- :mod:`.config` (what every scenario file shares: ``[topology]``, ``[faults]``, the modes),
  then :mod:`.cluster` (cluster files, ``--cluster``: a fabric and its scale-up domain);
- the engines, independent of each other: :mod:`.flow` (fluid, max-min), :mod:`.tasks` (a
  DAG of compute and communication on the fluid model) and :mod:`.packet` (packet level);
- :mod:`.iteration` (a training job's iteration on the fabric) and :mod:`.nccl` (nccl-tests
  tables, ``fabric collective``);
- :mod:`.scenarios` (the four evaluations, the suite, run directories);
- :mod:`.cli` (``trainfabric fabric ...``).

What a user imports is exported here (imported on first use)::

    from trainfabric.fabric import multiplane, Router, collective_flows, simulate

Module paths of the release before the subpackages (``trainfabric.fabric.engine``,
``trainfabric.fabric.collectives``, ...) still import, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from trainfabric.lazy import exports, moved

_EXPORTS = {
    "Topology": "topology",
    "multiplane": "topology",
    "leaf_spine": "topology",
    "fat_tree": "topology",
    "fail_links": "topology",
    "FlowTable": "flows",
    "EngineResult": "result",
    "LinkEvents": "events",
    "Router": "routing",
    "max_min_rates": "maxmin",
    "max_concurrent_flow": "mcf",
    "TopologyConfig": "config",
    "build_topology": "config",
    "ClusterConfig": "cluster",
    "load_cluster": "cluster",
    "build_cluster": "cluster",
    "nccl_table": "nccl",
    "SimResult": "flow.engine",
    "simulate": "flow.engine",
    "collective_flows": "flow.collectives",
    "run_collective": "flow.collectives",
    "TaskGraph": "tasks.graph",
    "TaskSim": "tasks.engine",
    "TaskResult": "tasks.engine",
    "run_tasks": "tasks.engine",
    "PacketConfig": "packet",
    "PacketResult": "packet",
    "simulate_packets": "packet",
    "load_job": "iteration.run",
    "run_iteration": "iteration.run",
    "load_scenario": "scenarios.config",
    "run_to_dir": "scenarios.rundir",
    "run_eval": "scenarios.suite",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)

# Old module paths (one release): trainfabric.fabric.<old> -> its module now.
MOVED = {
    "engine": "trainfabric.fabric.flow.engine",
    "engine_loop": "trainfabric.fabric.flow.loop",
    "calibration": "trainfabric.fabric.flow.calibration",
    "collectives": "trainfabric.fabric.flow.collectives",
    "taskgraph": "trainfabric.fabric.tasks.graph",
    "tasks_loop": "trainfabric.fabric.tasks.loop",
    "iteration_faults": "trainfabric.fabric.iteration.faults",
    "iteration_packet": "trainfabric.fabric.iteration.packet",
    "iteration_report": "trainfabric.fabric.iteration.report",
    "iteration_scenario": "trainfabric.fabric.iteration.scenario",
}
moved(__name__, MOVED)
