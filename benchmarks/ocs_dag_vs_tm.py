"""E11: DAG-aware objective vs the traffic-matrix-only objective (max pair utilisation).

Same solver, same temperatures knob, same instance; the TM-only wiring optimises the max over
pairs of the aggregated traffic's transfer time (what TM-driven OCS planners optimise) and is
then scored, like ours, by the hard critical path of the DAG. Pipeline-heavy jobs (``pipeline``,
``hybrid``) are where the DAG matters (target: >= 10% shorter critical path); ``moe`` and the
DP patterns are reported beside them.
"""

from __future__ import annotations

import numpy as np
from _common import emit, parser

from trainfabric.ocs.cost import PathCost
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.planner import plan, plan_traffic_only
from trainfabric.workloads import build_dag, get_preset

FAMILIES = ("pipeline", "hybrid", "moe", "dp-ring", "dp-hd")
PIPELINE_HEAVY = ("pipeline", "hybrid")


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    seeds = [0] if args.quick else [0, 1, 2]
    rows = []
    for n in (16, 32):
        for family in FAMILIES:
            for seed in seeds:
                dag = build_dag(get_preset(family, pods=n), seed)
                model = OcsModel.uniform(n, 8, 4)
                cost = PathCost(dag, model)
                ours = cost.hard(plan(dag, model, seed=seed).x)
                tm = cost.hard(plan_traffic_only(dag, model, seed=seed))
                rows.append(
                    {
                        "family": family,
                        "pods": n,
                        "seed": seed,
                        "dag_cp_s": ours,
                        "tm_cp_s": tm,
                        "reduction": 1 - ours / tm,
                    }
                )
    heavy = [r["reduction"] for r in rows if r["family"] in PIPELINE_HEAVY]
    emit(
        "ocs_dag_vs_tm",
        {
            "quick": args.quick,
            "median_reduction_pipeline_heavy": float(np.median(heavy)),
            "min_reduction_all": float(min(r["reduction"] for r in rows)),
            "targets": {"median_reduction_pipeline_heavy": 0.10, "min_reduction_all": 0.0},
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
