"""E11: DAG-aware objective vs the traffic-matrix-only objective (max pair utilisation).

Same solver, same temperatures knob, same instance; the TM-only wiring optimises the max over
pairs of the aggregated traffic's transfer time (what TM-driven OCS planners optimise) and is
then scored, like ours, by the hard critical path of the DAG. The pipeline-heavy set is every
family with a pipeline in it: the presets ``pipeline`` and ``hybrid`` and the hard families
``pp-dp`` (GPipe and 1F1B by seed parity), ``perm-pipe-moe`` and ``two-jobs``
(:mod:`trainfabric.ocs.wiring.families`), at 16 and 32 pods, d in {8, 16}, seeds 0-2 (0-1 with
``--quick``). ``moe``, the DP patterns and the families without a pipeline are reported
beside them (seed 0 only). The headline is the median reduction over the pipeline-heavy
instances, as measured.
"""

from __future__ import annotations

import numpy as np
from _common import emit, parser

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.families import family
from trainfabric.ocs.wiring.planner import plan, plan_traffic_only
from trainfabric.workloads import build_dag, get_preset

PRESETS = ("pipeline", "hybrid", "moe", "dp-ring", "dp-hd")
HARD = ("pp-dp", "perm-pipe-moe", "two-jobs", "moe-layers", "dp-ep")
PIPELINE_HEAVY = ("pipeline", "hybrid", "pp-dp", "perm-pipe-moe", "two-jobs")


def instance(name: str, pods: int, ports: int, seed: int):
    if name in HARD:
        return family(name, pods, ports, seed)
    return build_dag(get_preset(name, pods=pods), seed), OcsModel.uniform(pods, ports, 4)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    seeds = [0, 1] if args.quick else [0, 1, 2]
    rows = []
    for pods in (16, 32):
        for ports in (8, 16):
            for name in PRESETS + HARD:
                for seed in seeds if name in PIPELINE_HEAVY else seeds[:1]:
                    dag, model = instance(name, pods, ports, seed)
                    cost = PathCost(dag, model)
                    ours = cost.hard(plan(dag, model, seed=seed, bound_rounds=1).x)
                    tm = cost.hard(plan_traffic_only(dag, model, seed=seed))
                    rows.append(
                        {
                            "family": name,
                            "pods": pods,
                            "ports": ports,
                            "seed": seed,
                            "dag_cp_s": ours,
                            "tm_cp_s": tm,
                            "reduction": 1 - ours / tm,
                        }
                    )
    heavy = [r["reduction"] for r in rows if r["family"] in PIPELINE_HEAVY]
    by_family = {
        name: float(np.median([r["reduction"] for r in rows if r["family"] == name]))
        for name in PRESETS + HARD
    }
    emit(
        "ocs_dag_vs_tm",
        {
            "quick": args.quick,
            "median_reduction_pipeline_heavy": float(np.median(heavy)),
            "pipeline_heavy_instances": len(heavy),
            "min_reduction_all": float(min(r["reduction"] for r in rows)),
            "median_reduction_by_family": by_family,
            "targets": {"median_reduction_pipeline_heavy": 0.10, "min_reduction_all": 0.0},
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
