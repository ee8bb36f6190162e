"""OCS pillar: the inter-pod wiring through ``s`` parallel optical circuit switches.

The maths is in the docstrings of the modules that compute it; ``docs/ocs.md`` maps the spec's
sections onto them. Layout, bottom to top (each layer imports only the ones below it; an
import-linter contract in ``pyproject.toml`` keeps it so):

- :mod:`.model` (pods, ports, OCSes), :mod:`.traffic` (time-varying pod traffic),
  :mod:`.highs` (HiGHS through highspy's public API);
- :mod:`.wiring` (the static problem: smoothed critical path, KL prior, mirror descent with a
  Sinkhorn-type projection, rounding, per-OCS decomposition, certified bound, MILP, baselines),
  :mod:`.detect` (GLR-CUSUM and GLR change detectors), :mod:`.schedule` (circuit scheduling
  with reconfiguration delay);
- :mod:`.online` (rewiring under drifting traffic), :mod:`.fairness` (several jobs on one
  wiring);
- :mod:`.cli` (``trainfabric ocs ...``).

What a user imports is exported here (imported on first use)::

    from trainfabric.ocs import OcsModel, plan
    from trainfabric.workloads import load_workload

    w = load_workload("moe", pods=16)
    model = OcsModel.uniform(16, ports_per_pod=8, s=4)
    result = plan(w.dag, model)

Module paths of the release before the subpackages (``trainfabric.ocs.planner``,
``trainfabric.ocs.cost``, ...) still import, with a ``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

from trainfabric.lazy import exports, moved

_EXPORTS = {
    "OcsModel": "model",
    "TrafficSequence": "traffic",
    "read_sequence": "traffic",
    "Plan": "wiring.planner",
    "plan": "wiring.planner",
    "compare": "wiring.planner",
    "write_plan": "wiring.planner",
    "PathCost": "wiring.cost",
    "round_wiring": "wiring.rounding",
    "Certificate": "wiring.bound",
    "certify": "wiring.bound",
    "MilpResult": "wiring.milp",
    "solve_milp": "wiring.milp",
    "hard_critical_path": "wiring.milp",
    "uniform_mesh": "wiring.baselines",
    "demand_proportional": "wiring.baselines",
    "one_hop_optimum": "wiring.onehop",
    "family": "wiring.families",
    "CusumDetector": "detect.detectors",
    "GlrDetector": "detect.detectors",
    "Schedule": "schedule.model",
    "check_schedule": "schedule.model",
    "run_schedulers": "schedule.schedulers",
    "lower_bound": "schedule.bounds",
    "OneHopCost": "online.threshold",
    "run_policies": "online.threshold",
    "standard_policies": "online.threshold",
    "evaluate_dag": "online.dag",
    "FairJob": "fairness.jobs",
    "place_jobs": "fairness.jobs",
    "fair_plan": "fairness.plan",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)

# Old module paths (one release): trainfabric.ocs.<old> -> its module now.
MOVED = {
    **{
        m: f"trainfabric.ocs.wiring.{m}"
        for m in (
            "baselines",
            "bound",
            "compress",
            "cost",
            "decompose",
            "families",
            "milp",
            "onehop",
            "planner",
            "prior",
            "projection",
            "rounding",
            "search",
            "solver",
        )
    },
    "online_churn": "trainfabric.ocs.online.churn",
    "online_dag": "trainfabric.ocs.online.dag",
    "online_glr": "trainfabric.ocs.online.glr",
    "drift": "trainfabric.ocs.online.drift",
    "detect_streams": "trainfabric.ocs.detect.streams",
    "schedule_bounds": "trainfabric.ocs.schedule.bounds",
    "schedulers": "trainfabric.ocs.schedule.schedulers",
    "schedule_study": "trainfabric.ocs.schedule.study",
    "decompositions": "trainfabric.ocs.schedule.decompositions",
    "demand": "trainfabric.ocs.schedule.demand",
}
moved(__name__, MOVED)
