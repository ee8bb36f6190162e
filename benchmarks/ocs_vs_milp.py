"""E1 + E3: our plan's hard critical path vs the proven MILP optimum, and the speed-up.

Instance sets, fixed before measuring (CLARIFICATIONS, issue 12 §2):

* ``hard``: the five families of :mod:`trainfabric.ocs.wiring.families` at their three sizes
  (``families.SIZES``), d in {8, 16} ports, s = 4 OCSes, seeds 0-2 (0-4 without ``--quick``);
* ``old``: the earlier benchmark's families (presets pipeline, dp-ring, dp-hd, moe, hybrid) at
  n in {8, 16, 32}, d = 8; seed 0 (MoE and hybrid also 1, 2 without ``--quick``).

Per instance, in one worker process and one after the other (so that the speed-up is a ratio
measured side by side under the same load): our planner (``plan``, default settings on one
thread, ``threads=1``, as the exact solvers get; as the first plan on its cluster: the
traffic-free wirings it keeps per pod shape are forgotten first,
:func:`~trainfabric.ocs.wiring.baselines.clear_cache`; then at the other effort
levels, each also as a first plan), the
project MILP (``solve_milp``: reduced model, highspy, one thread, 300 s limit, relative gap
1e-6), and scipy's HiGHS (``scipy.optimize.milp``) on the literal secant-cut MILP
``milp_model(reduce=False)`` (its time includes building the model, as the project MILP's
does). scipy's run is *censored* at the project MILP's time to proven optimum (at least 1 s;
300 s when the project MILP did not prove): beyond that the project MILP is the faster exact
solver whatever scipy does, so the best-exact time is known; ``--scipy-full`` runs it to 300 s
for its own time to optimum. ``--workers`` (default 2) instances run at once.

Every wiring is scored by the one hard critical-path function (``PathCost.hard``); gaps are
``ours / optimum - 1`` where the project MILP proved optimality (an instance where only scipy
proved takes scipy's optimum). Printed figures: ``median_gap``, ``p95_gap``, ``max_gap`` over
the proven hard instances (``old_*`` for the old set), the uniform mesh's and the
demand-proportional wiring's gaps, ``median_certified_gap`` (the plan's ``certified_gap`` when
the planner reports one, else null), ``median_speedup_vs_best_exact`` = median over instances
(both sets) at 32-128 pods whose best exact time to proven optimum is >= 1 s of (that time) /
(our plan's wall time), with ``speedup_instances`` counting them, and ``bound_violations`` =
instances where the plan's ``lower_bound_s`` exceeds the proven optimum by more than 1e-9
relative (``bound_checked`` counts the instances checked).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
from _common import emit, parser

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import baselines
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.families import SIZES, family
from trainfabric.ocs.wiring.milp import milp_model, solve_milp
from trainfabric.ocs.wiring.planner import plan
from trainfabric.workloads import build_dag, get_preset

OLD_FAMILIES = ("pipeline", "dp-ring", "dp-hd", "moe", "hybrid")
OLD_SIZES = (8, 16, 32)
PORTS = (8, 16)
TIME_LIMIT_S = 300.0  # the one time limit
MIP_REL_GAP = 1e-6
OTHER_EFFORTS = ("fast", "thorough")  # planned beside the default, reported under by_effort
SPEEDUP_PODS = (32, 128)
SPEEDUP_MIN_S = 1.0
BOUND_TOL = 1e-9
SCIPY_STATUS = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded", 4: "other"}


def instance(kind: str, name: str, pods: int, ports: int, seed: int):
    if kind == "hard":
        return family(name, pods, ports, seed)
    return build_dag(get_preset(name, pods=pods), seed), OcsModel.uniform(pods, ports, 4)


def scipy_exact(dag, model: OcsModel, time_limit_s: float) -> dict:
    """scipy's HiGHS on the literal secant-cut MILP (``milp_model(reduce=False)``): wall time
    (build + solve, s), status, incumbent wiring (or None) and dual bound (s). The time limit
    covers build + solve: HiGHS gets what the build left (nothing: no solve, ``time_limit``)."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    t0 = time.perf_counter()
    mm = milp_model(dag, model, reduce=False)
    build_s = time.perf_counter() - t0
    out = dict(scipy_build_s=build_s, scipy_vars=mm.n_vars, scipy_cons=mm.n_cons)
    if build_s >= time_limit_s:  # out of time while building: censored, no solve
        return dict(scipy_s=build_s, scipy_status="time_limit", x=None, scipy_bound_s=None, **out)
    a = sp.csr_matrix((mm.a_value, mm.a_index, mm.a_start), shape=(mm.n_cons, mm.n_vars))
    res = milp(
        mm.col_cost,
        integrality=mm.integrality,
        bounds=Bounds(mm.col_lower, mm.col_upper),
        constraints=LinearConstraint(a, mm.row_lower, mm.row_upper),
        options=dict(time_limit=time_limit_s - build_s, mip_rel_gap=MIP_REL_GAP, disp=False),
    )
    bound = getattr(res, "mip_dual_bound", None)
    return dict(
        scipy_s=time.perf_counter() - t0,
        scipy_status=SCIPY_STATUS.get(res.status, str(res.status)),
        x=None if res.x is None else np.rint(res.x[: mm.n_pairs]).astype(np.int64),
        scipy_bound_s=None if bound is None else float(bound) * mm.t_ref_s,
        **out,
    )


def run_one(spec: tuple, scipy_full: bool = False) -> dict:
    """Plan, project MILP and scipy's HiGHS on one instance (module doc)."""
    kind, name, pods, ports, seed = spec
    dag, model = instance(*spec)
    cost = PathCost(dag, model)
    baselines.clear_cache()  # every instance is planned as a first plan on its cluster
    t0 = time.perf_counter()
    ours = plan(dag, model, seed=seed, threads=1)  # one thread, as HiGHS gets
    ours_s = time.perf_counter() - t0
    levels = {}
    for effort in OTHER_EFFORTS:
        baselines.clear_cache()
        t1 = time.perf_counter()
        p = plan(dag, model, seed=seed, effort=effort, threads=1)
        levels[effort] = {
            "s": time.perf_counter() - t1,
            "cp_s": cost.hard(p.x),
            "certified_gap": p.certified_gap,
        }
    milp = solve_milp(
        dag, model, time_limit_s=TIME_LIMIT_S, mip_rel_gap=MIP_REL_GAP, threads=1, seed=seed
    )
    milp_proved = milp.status == "optimal"
    limit = TIME_LIMIT_S if scipy_full or not milp_proved else max(milp.wall_s, SPEEDUP_MIN_S)
    sc = scipy_exact(dag, model, min(limit, TIME_LIMIT_S))
    x_scipy = sc.pop("x")
    row = {
        "set": kind,
        "family": name,
        "pods": pods,
        "ports": ports,
        "seed": seed,
        "dag_nodes": dag.n_nodes,
        "comm_nodes": int(dag.comm_nodes.size),
        "ours_s": ours_s,
        "ours_cp_s": cost.hard(ours.x),
        "lower_bound_s": getattr(ours, "lower_bound_s", None),
        "certified_gap": getattr(ours, "certified_gap", None),
        "milp_s": milp.wall_s,
        "milp_status": milp.status,
        "milp_cp_s": cost.hard(milp.x) if milp.x is not None else None,
        "milp_bound_s": milp.best_bound_s,
        "scipy_limit_s": limit,
        "scipy_cp_s": None if x_scipy is None else cost.hard(x_scipy),
        **sc,
        "effort": levels,
        "uniform_cp_s": cost.hard(baselines.uniform_mesh(model)),
        "demand_cp_s": cost.hard(baselines.demand_proportional(dag, model)),
    }
    proved = {"milp": milp_proved, "scipy": row["scipy_status"] == "optimal"}
    times = {k: row[f"{k}_s"] for k, ok in proved.items() if ok}
    if times:
        best = min(times, key=times.get)
        row.update(best_exact=best, best_exact_s=times[best])
        opt = row["milp_cp_s"] if proved["milp"] else row["scipy_cp_s"]
        row["optimum_s"] = opt
        for k in ("ours", "uniform", "demand"):
            row[f"{k}_gap"] = row[f"{k}_cp_s"] / opt - 1
        for level in levels.values():
            level["gap"] = level["cp_s"] / opt - 1
    return row


def warm_up() -> None:
    """Compile numba kernels and load HiGHS in a worker before any timed run."""
    run_one(("hard", "pp-dp", 8, 8, 0))


def specs(quick: bool) -> list[tuple]:
    seeds = [0, 1, 2] if quick else [0, 1, 2, 3, 4]
    hard = [
        ("hard", name, n, d, s)
        for name, sizes in SIZES.items()
        for n in sizes
        for d in PORTS
        for s in seeds
    ]
    old = [
        ("old", name, n, 8, s)
        for n in OLD_SIZES
        for name in OLD_FAMILIES
        for s in (seeds[:1] if quick or name not in ("moe", "hybrid") else seeds[:3])
    ]
    return sorted(hard + old, key=lambda s: -s[2])  # largest first: better load balance


def _q(values, q: float):
    return float(np.percentile(values, q)) if len(values) else None


def _speedup(rows: list[dict], effort: str = "default") -> list[float]:
    """Best exact time / our plan's time at ``effort``, on the speed-up instances (doc)."""
    return [
        r["best_exact_s"] / _level(r, effort)["s"]
        for r in rows
        if SPEEDUP_PODS[0] <= r["pods"] <= SPEEDUP_PODS[1]
        and r.get("best_exact_s", 0.0) >= SPEEDUP_MIN_S
    ]


def _level(row: dict, effort: str) -> dict:
    """One instance's plan at an effort level: ``s``, ``gap`` (None unproven), ``certified_gap``."""
    if effort == "default":
        return {
            "s": row["ours_s"],
            "gap": row.get("ours_gap"),
            "certified_gap": row["certified_gap"],
        }
    return {"gap": None, **row["effort"][effort]}


def by_effort(rows: list[dict]) -> dict:
    """The headline figures at every effort level (the default's are the ``ours_*`` columns)."""
    hard = [r for r in rows if r["set"] == "hard"]
    out = {}
    for effort in ("default", *OTHER_EFFORTS):
        levels = [_level(r, effort) for r in hard]
        gaps = [v["gap"] for v in levels if v["gap"] is not None]
        out[effort] = {
            "median_gap": _q(gaps, 50),
            "p95_gap": _q(gaps, 95),
            "max_gap": max(gaps) if gaps else None,
            "median_certified_gap": _q([v["certified_gap"] for v in levels], 50),
            "median_speedup_vs_best_exact": _q(_speedup(rows, effort), 50),
            "plan_s_total": sum(_level(r, effort)["s"] for r in rows),
        }
    return out


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for kind, prefix in (("hard", ""), ("old", "old_")):
        sel = [r for r in rows if r["set"] == kind]
        proven = [r for r in sel if "optimum_s" in r]
        gaps = [r["ours_gap"] for r in proven]
        out |= {
            f"{prefix}instances": len(sel),
            f"{prefix}proven_optimal": len(proven),
            f"{prefix}unproven": len(sel) - len(proven),
            f"{prefix}median_gap": _q(gaps, 50),
            f"{prefix}p95_gap": _q(gaps, 95),
            f"{prefix}max_gap": max(gaps) if gaps else None,
            f"{prefix}median_uniform_gap": _q([r["uniform_gap"] for r in proven], 50),
            f"{prefix}median_demand_gap": _q([r["demand_gap"] for r in proven], 50),
        }
    cert = [
        r["certified_gap"] for r in rows if r["set"] == "hard" and r["certified_gap"] is not None
    ]
    speed = _speedup(rows)
    checked = [r for r in rows if "optimum_s" in r and r["lower_bound_s"] is not None]
    with_lb = [r for r in rows if r["lower_bound_s"] is not None]
    out |= {
        "median_certified_gap": _q(cert, 50),
        "median_speedup_vs_best_exact": _q(speed, 50),
        "speedup_instances": len(speed),
        "bound_checked": len(checked),
        "bound_violations": sum(
            r["lower_bound_s"] > r["optimum_s"] * (1 + BOUND_TOL) for r in checked
        ),
        "bound_above_ours": sum(
            r["lower_bound_s"] > r["ours_cp_s"] * (1 + BOUND_TOL) for r in with_lb
        ),
        "milp_proven": sum(r["milp_status"] == "optimal" for r in rows),
        "scipy_proven": sum(r["scipy_status"] == "optimal" for r in rows),
        "scipy_faster": sum(r.get("best_exact") == "scipy" for r in rows),
        "effort": "default",
        "by_effort": by_effort(rows),
    }
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="instances run at once (processes)")
    p.add_argument("--scipy-full", action="store_true", help="run scipy's HiGHS to 300 s")
    p.add_argument("--only", default=None, help="comma-separated families (for iterating)")
    args = p.parse_args()
    todo = [s for s in specs(args.quick) if not args.only or s[1] in args.only.split(",")]
    t0 = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(
        args.workers, mp_context=get_context("spawn"), initializer=warm_up
    ) as pool:
        for row in pool.map(run_one, todo, [args.scipy_full] * len(todo)):
            rows.append(row)
            print(
                f"{row['family']:>14} n={row['pods']:<3} d={row['ports']:<2} s={row['seed']} "
                f"gap={row.get('ours_gap')} ours={row['ours_s']:.2f}s milp={row['milp_s']:.1f}s "
                f"{row['milp_status']} scipy={row['scipy_s']:.1f}s {row['scipy_status']}",
                file=sys.stderr,
                flush=True,
            )
    emit(
        "ocs_vs_milp",
        {
            "quick": args.quick,
            "workers": args.workers,
            "scipy_full": args.scipy_full,
            "wall_s": time.perf_counter() - t0,
            **summarize(rows),
            "targets": {
                "p95_gap": 0.01,
                "max_gap": 0.03,
                "median_certified_gap": 0.02,
                "median_speedup_vs_best_exact": 20,
            },
            "rows": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
