"""The four fabric evaluation scenarios, as typed configs and functions returning tables.

Modules: :mod:`.config` (the scenario files), :mod:`.common` (building blocks and one
collective run on either engine), one module per kind (:mod:`.line_rate`, :mod:`.isolation`,
:mod:`.failures`, :mod:`.flaps`; the ``iteration`` kind is :mod:`trainfabric.fabric.iteration`),
:mod:`.rundir` (a scenario into a run directory) and :mod:`.suite` (``fabric eval``, the demo).
The fields every kind shares are in :mod:`trainfabric.fabric.config`.

A scenario file (TOML) has a ``kind`` and the fields of that kind; every kind shares
``name``, ``seed``, ``modes`` (load-balancing modes compared) and ``[topology]``:

* ``line_rate``: each collective x message size x mode on an idle fabric; busbw as a
  fraction of the NIC rate (NCCL-tests), beside the header-only bound ``4096/4160``.
* ``isolation``: a victim collective alone, then next to an aggressor all-to-all tenant on
  the other hosts; placements interleave both tenants on every leaf (``scattered``), so they
  share leaf uplinks and spines; ``isolation_ratio`` = victim solo time / victim time with the
  aggressor (1 = perfect isolation), per mode and oversubscription.
* ``failures``: a fraction of the leaf-spine cables down (seeded draws). Each figure is named
  for what it is (none of them is "the bisection" by itself):

  - ``mean_permutation_goodput``: the max-min goodput (each mode's routing) of a random
    half-to-half permutation, averaged over its senders, as a fraction of the NIC rate;
  - ``max_concurrent_flow_lp``: the largest ``λ`` such that every flow of that same
    permutation gets ``λ`` x line rate at once (HiGHS LP, :mod:`trainfabric.fabric.mcf`);
  - ``maxflow_bisection``: the true max-flow across the fabric's bisection (the first half of
    the leaves, in leaf order, against the rest: :func:`~trainfabric.fabric.topology.bisection_bps`)
    on the same failure draw, over ``(H/2)`` x NIC rate; a property of the links alone;
  - ``cut_permutation_goodput``: the max-min goodput of a permutation *across that cut*
    (every host of one half sends to a distinct host of the other, both ways);
    ``goodput_over_maxflow`` = ``cut_permutation_goodput / maxflow_bisection``, at most 1
    (every such flow crosses the cut in one direction or the other, and the fabric is
    symmetric) — the F3 target restated: adaptive's ``>= 0.98`` of the max-flow bound;
  - ``ideal_fraction``: the capacity-proportional ideal ``1 - f``.

  ``mean_permutation_goodput`` may exceed ``maxflow_bisection``: a random permutation's
  flows need not cross the leaf-aligned cut. Also the collective's completion time, with
  its increase over no failures.
* ``flaps``: a training-like sequence (compute gap, then the collective, ``iterations``
  times); one run per flap (a host link or the most loaded fabric cable down at ``at_s`` for
  ``duration_s``) and one without. ``impaired_until_s``: from the flap to the last moment
  some active flow of the job still sends into the dead link (the mode's measured
  reaction: its traffic is lost or stuck); ``stall_s``: the longest interval, starting
  during the
  flap, in which the job has started, unfinished flows but zero goodput (stuck, not merely
  slower) — the throughput dip that the mode's reaction time should bound;
  ``iteration_stall_s`` (and ``step_stall_s``): the largest extra duration of one iteration
  (collective step) against the flap-free run, which also counts the slowdown of running on
  ``(P-1)/P`` of a host's bandwidth while its link is down.

* ``iteration`` (:mod:`trainfabric.fabric.iteration.run`): a training job's iteration on the
  fabric (``[workload]`` where the other kinds have ``[collective]``) per mode and DP overlap
  setting: iteration time, exposed communication per phase category, collectives with
  busbw, utilisation over time per tier and plane, the critical path, the most loaded links;
  ``[tenants]`` (jobs interleaved on leaves, seeded start offsets, slowdown against alone)
  and ``[faults]`` (:mod:`trainfabric.fabric.iteration.faults`). Not one of the four
  evaluation scenarios (:data:`SCENARIOS`); :data:`KINDS` holds every kind.

Engines: ``engine = "flow"`` (default: the fluid max-min engine,
:mod:`trainfabric.fabric.flow.engine`; ``calibration = true`` adds the packet-fitted per-message
start-up of :mod:`trainfabric.fabric.flow.calibration`) or ``"packet"`` (the packet-level
engine, :mod:`trainfabric.fabric.packet`, configured by the ``[packet]`` table). On the
packet engine every step of a collective is simulated (no ring shortcut), line-rate rows add
the measured per-packet latency (p50, p99, p99.9), jitter (p99 - p50) and retransmissions,
failures measure the permutations' goodput and latency from packet runs
(:func:`measured_goodput`), and a flap's effect is the engine's: packets sent into the
dead link are lost, each mechanism reroutes after its reaction time, the transport
recovers the loss (NACKs, timeouts); ``stall_s`` is measured on the delivered bytes.

Size guards: before building any flow, every scenario prices the flows it will simulate
(:func:`trainfabric.fabric.flow.collectives.collective_memory_bytes`: per collective, its flow
count times the per-flow memory of the costliest mode) and, in ``failures``, the
concurrent-flow LP (:func:`trainfabric.fabric.mcf.check_lp_size`), and refuses over the
memory limit with a ConfigError naming the input that sets the size: the collective's
``ranks`` when given (``collectives.<i>.ranks``, ``victim.ranks``, ``aggressor.ranks``,
``collective.ranks``), else ``topology.gpus``. The topology itself is priced per link
(:func:`topology_links`) before it is built.

Units: bytes, seconds; rates in Gb/s in files (``nic_rate_gbps``), bits/s inside.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "CollectiveConfig": "config",
    "LineRateScenario": "config",
    "IsolationScenario": "config",
    "FailuresScenario": "config",
    "FlapConfig": "config",
    "FlapsScenario": "config",
    "SCENARIOS": "config",
    "KINDS": "config",
    "Scenario": "config",
    "parse_scenario": "config",
    "load_scenario": "config",
    "HEADER_BOUND": "common",
    "scenario_router": "common",
    "place_ranks": "common",
    "steps_for": "common",
    "size_field": "common",
    "check_flows": "common",
    "collective_part": "common",
    "flow_options": "common",
    "kind_label": "common",
    "PACKET_KEYS": "trainfabric.fabric.packet.result",
    "simulate_flows": "common",
    "run_steps": "common",
    "run_line_rate": "line_rate",
    "line_rate_summary": "line_rate",
    "run_isolation": "isolation",
    "isolation_summary": "isolation",
    "half_to_half_permutation": "failures",
    "cut_permutation": "failures",
    "maxflow_bisection": "failures",
    "permutation_flows": "failures",
    "permutation_throughput": "failures",
    "routed_figures": "failures",
    "measured_goodput": "failures",
    "PACKET_PERMUTATION_BYTES": "failures",
    "run_failures": "failures",
    "FAILURE_FIGURES": "failures",
    "MAXFLOW_TARGET": "failures",
    "failures_summary": "failures",
    "run_flaps": "flaps",
    "flaps_summary": "flaps",
    "STEMS": "rundir",
    "TIMELINE_STEM": "rundir",
    "RUNNERS": "rundir",
    "FAILURE_KEYS": "rundir",
    "HEADLINE": "rundir",
    "run_scenario": "rundir",
    "summarize": "rundir",
    "write_tables": "rundir",
    "write_manifest": "rundir",
    "render_run": "rundir",
    "run_to_dir": "rundir",
    "topology_comparison": "suite",
    "eval_scenarios": "suite",
    "packet_eval_scenarios": "suite",
    "eval_name": "suite",
    "run_eval": "suite",
    "f3_check": "suite",
    "demo_scenarios": "suite",
    "fabric_demo": "suite",
    # names this package held when it was one module, defined beside it now
    "LBMode": "trainfabric.fabric.config",
    "ALL_MODES": "trainfabric.fabric.config",
    "MiB": "trainfabric.fabric.config",
    "Fraction": "trainfabric.fabric.config",
    "Positive": "trainfabric.fabric.config",
    "MAX_GPUS": "trainfabric.fabric.config",
    "TopologyConfig": "trainfabric.fabric.config",
    "ScenarioConfig": "trainfabric.fabric.config",
    "FaultsConfig": "trainfabric.fabric.config",
    "LINK_BYTES": "trainfabric.fabric.config",
    "topology_links": "trainfabric.fabric.config",
    "build_topology": "trainfabric.fabric.config",
    "WorkloadConfig": "trainfabric.fabric.iteration.config",
    "TenantsConfig": "trainfabric.fabric.iteration.config",
    "IterationScenario": "trainfabric.fabric.iteration.config",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
