"""The static wiring problem (docs/ocs.md §1.3-1.9): how many circuits each pod pair gets.

The planner (:mod:`.planner`) solves the entropic relaxation and rounds it:

- :mod:`.cost`: the smoothed (log-sum-exp) and hard critical path of the task DAG as
  functions of the pair circuits, on the exact compression of :mod:`.compress`;
- :mod:`.prior` and :mod:`.projection`: the symmetric prior and the KL projection onto the
  degree slice (Sinkhorn, then Newton);
- :mod:`.solver`: entropic proximal gradient (mirror descent) for the free energy;
- :mod:`.rounding` and :mod:`.search`: fractional -> integer wiring, cost-aware;
- :mod:`.decompose`: the integer wiring split onto the ``s`` OCSes, cross-connect tables;
- :mod:`.bound`: a certified lower bound on the integer optimum;
- :mod:`.milp`: the exact MILP (HiGHS), the reference;
- :mod:`.baselines`: uniform mesh, demand-proportional, traffic-matrix-only wirings;
- :mod:`.onehop`: the exact one-hop optimum (max link utilisation) and its fast path;
- :mod:`.families`: the hard instance families, fixed before measuring.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "Plan": "planner",
    "plan": "planner",
    "cross_connect_table": "planner",
    "write_plan": "planner",
    "plan_traffic_only": "planner",
    "compare": "planner",
    "PathCost": "cost",
    "temperatures": "cost",
    "SolveResult": "solver",
    "solve": "solver",
    "ProjectionResult": "projection",
    "project": "projection",
    "uniform_prior": "prior",
    "kl": "prior",
    "round_to_degrees": "rounding",
    "RoundResult": "rounding",
    "round_wiring": "rounding",
    "Decomposition": "decompose",
    "cross_connects": "decompose",
    "decompose_churn_aware": "decompose",
    "Certificate": "bound",
    "certify": "bound",
    "MilpResult": "milp",
    "hard_critical_path": "milp",
    "solve_milp": "milp",
    "uniform_mesh": "baselines",
    "best_near_uniform": "baselines",
    "demand_proportional": "baselines",
    "OneHopInstance": "onehop",
    "OneHopResult": "onehop",
    "mlu": "onehop",
    "one_hop_optimum": "onehop",
    "FAMILIES": "families",
    "family": "families",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
