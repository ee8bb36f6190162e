"""Online rewiring under drifting traffic: the lazy threshold policy and its regret
(docs/ocs.md §1.10).

Modules: :mod:`.threshold` (the one-hop cost, the policies, the regret bound and the
evaluation), :mod:`.dag` (the same on a job's task DAG, regret bounded from both sides),
:mod:`.glr` (reconfiguration triggered by the GLR detector), :mod:`.adaptive` (policies
that set their own threshold online: rent-or-buy on the measured excess, and the GLR trigger
calibrated to the stream with a cost gate), :mod:`.churn` (what the
reconfigurations cost on the OCSes), :mod:`.drift` (a job's traffic with a set l1 drift).
``trainfabric.ocs.online`` was one module; its names are all exported here.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "CHARGES": "threshold",
    "OneHopCost": "threshold",
    "theta_star": "threshold",
    "regret_bound": "threshold",
    "effective_switch_cost": "threshold",
    "Policy": "threshold",
    "PolicyRun": "threshold",
    "standard_policies": "threshold",
    "run_policies": "threshold",
    "ORACLE_GRID": "threshold",
    "OnlineResult": "threshold",
    "evaluate": "threshold",
    "slot_dag": "dag",
    "DagPolicyRun": "dag",
    "DagOnlineResult": "dag",
    "evaluate_dag": "dag",
    "DEFAULT_COUNTS_PER_SLOT": "glr",
    "glr_mask": "glr",
    "AdaptiveRun": "adaptive",
    "StreamNull": "adaptive",
    "balance_mask": "adaptive",
    "fit_null": "adaptive",
    "learned_mask": "adaptive",
    "utilisation": "adaptive",
    "glr_calibrated_mask": "adaptive",
    "replay": "churn",
    "ChurnRow": "churn",
    "traffic_matrix": "drift",
    "drift_traffic": "drift",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
