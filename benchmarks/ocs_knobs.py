"""Robustness of the planner's defaults: the median gap to the proven optimum over each knob's
documented range, one knob at a time, against the defaults.

Knobs and ranges (documented in ``trainfabric ocs plan --help`` and :func:`planner.plan`):
``b1_rel`` (prior weight) and ``b2_rel`` (smoothing) from a quarter to four times their
defaults (1 and 50), and the rounding's work budget ``round_max_moves`` from a tenth of its
default to ten times it. Instances: the five hard families (:mod:`trainfabric.ocs.wiring.families`)
at 8 and 16 pods, d = 8, seed 0 (the project MILP proves each optimum first, 300 s limit).
``max_shift_pp`` = the largest |median gap(setting) − median gap(defaults)| in percentage
points over every setting (target ≤ 0.1).
"""

from __future__ import annotations

import numpy as np
from _common import emit, parser

from trainfabric.ocs.wiring import rounding
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.families import FAMILIES, family
from trainfabric.ocs.wiring.milp import solve_milp
from trainfabric.ocs.wiring.planner import plan

DEFAULTS = {"b1_rel": 1.0, "b2_rel": 50.0, "round_max_moves": rounding.DEFAULT_MAX_MOVES}
RANGES = {
    "b1_rel": (0.25, 0.5, 2.0, 4.0),
    "b2_rel": (12.5, 25.0, 100.0, 200.0),
    "round_max_moves": (rounding.DEFAULT_MAX_MOVES // 10, rounding.DEFAULT_MAX_MOVES * 10),
}


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    instances = []
    for name in FAMILIES:
        for pods in (8, 16):
            dag, model = family(name, pods, 8, 0)
            opt = solve_milp(dag, model, time_limit_s=300.0)
            if opt.status == "optimal":
                instances.append((name, pods, dag, model, opt.objective_s))
    settings = [("defaults", None)] + [(k, v) for k, vs in RANGES.items() for v in vs]
    rows, medians = [], {}
    for knob, value in settings:
        kw = dict(DEFAULTS) if knob == "defaults" else {**DEFAULTS, knob: value}
        gaps = []
        for name, pods, dag, model, opt in instances:
            x = plan(dag, model, seed=0, bound_rounds=1, **kw).x
            gap = PathCost(dag, model).hard(x) / opt - 1
            gaps.append(gap)
            rows.append({"knob": knob, "value": value, "family": name, "pods": pods, "gap": gap})
        medians[f"{knob}={value}"] = float(np.median(gaps))
    base = medians["defaults=None"]
    shift = max(abs(m - base) for m in medians.values()) * 100
    emit(
        "ocs_knobs",
        {
            "quick": args.quick,
            "instances": len(instances),
            "median_gap_defaults": base,
            "median_gap_by_setting": medians,
            "max_shift_pp": shift,
            "targets": {"max_shift_pp": 0.1},
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
