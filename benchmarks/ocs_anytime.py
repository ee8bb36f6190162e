"""E3 anytime: our plan vs the exact solvers' incumbents at 1x and 10x our wall time.

Instances: the two families of ``benchmarks/ocs_scale.py`` (its ``job``: ``moe`` and
``pp-dp``) at 256 and 1,024 pods, d = 16 ports, s = 4 OCSes, seed 0. Per instance:

1. **Ours** (a fresh process; numba compiled first on the 64-pod instance, not timed): the DAG
   is built (the workload, timed apart), then ``plan`` runs with ``ocs_scale``'s planner
   settings (its ``MAX_ITER`` and ``ROUND_MAX_MOVES`` where it defines them, else ``plan``'s
   defaults); its wall time is ``W``. Reported: the hard critical path of our wiring
   (``PathCost.hard``), and the plan's ``lower_bound_s`` / ``certified_gap`` when the planner
   reports them (else null). A plan that fails is recorded (``plans_failed``), not compared.
2. **Exact solvers**, each at a solve-time limit of ``1 x W`` and ``10 x W``: the project MILP
   (``solve_milp``, reduced model, highspy, one thread) and scipy's HiGHS
   (``scipy.optimize.milp``) on the literal secant-cut MILP (``milp_model(reduce=False)``).
   Building the model is not charged to the limit (reported as ``build_s``; the project MILP's
   ``wall_s`` includes it). Each run is a fresh process with its address space capped at
   ``--mem-gb`` (``RLIMIT_AS``; also ``TRAINFABRIC_MAX_MEMORY_GB``) and killed after
   ``BUILD_TIMEOUT_S`` + the limit + a grace; the two solvers run side by side (one per core).
   Outcome of a run: ``incumbent`` (its wiring scored by ``PathCost.hard``, with the solver's
   dual bound), ``no_incumbent``, ``oom`` (out of memory while solving, or killed by a signal
   after the model was built), ``not_built`` (out of memory or out of time while building the
   model; a solver not built at 1x is not rerun at 10x, since building does not depend on the
   limit), or ``error``.

Printed: ``ours_better_than_exact_at_10x``: over the instances where at least one exact
solver has an incumbent at 10x, whether our hard critical path is below every such incumbent
on all of them (null when there is none), with the counts (``instances_with_incumbent_10x``,
``ours_better_10x``) and the no-incumbent / oom / not-built counts per multiple; runs without
an incumbent are not wins on quality and are counted apart.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from _common import emit, parser, peak_rss_gb

SIZES = (256, 1024)
FAMILIES = ("moe", "pp-dp")
PORTS, OCS = 16, 4
MULTIPLES = (1, 10)
SOLVERS = ("milp", "scipy")
BUILD_TIMEOUT_S = 300.0  # building an exact model longer than this counts as not built
GRACE_S = 60.0
MIP_REL_GAP = 1e-6
SCIPY_STATUS = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded", 4: "other"}


def instance(family: str, n: int):
    from ocs_scale import job

    from trainfabric.ocs.model import OcsModel
    from trainfabric.workloads import build_dag

    t0 = time.perf_counter()
    dag = build_dag(job(family, n))
    return dag, OcsModel.uniform(n, PORTS, OCS), time.perf_counter() - t0


def plan_settings() -> dict:
    """``ocs_scale``'s planner settings (its ``MAX_ITER`` / ``ROUND_MAX_MOVES`` where defined)
    on one thread, as the exact solvers run (``threads=1``)."""
    import ocs_scale

    names = {"MAX_ITER": "max_iter", "ROUND_MAX_MOVES": "round_max_moves"}
    settings = {kw: getattr(ocs_scale, c) for c, kw in names.items() if hasattr(ocs_scale, c)}
    return settings | {"threads": 1}  # one thread, as HiGHS gets


def run_ours(family: str, n: int) -> dict:
    from trainfabric.ocs.wiring.cost import PathCost
    from trainfabric.ocs.wiring.planner import plan

    dag, model, _ = instance(family, 64)
    plan(dag, model, **plan_settings())  # numba compilation, not timed
    dag, model, build_s = instance(family, n)
    t0 = time.perf_counter()
    result = plan(dag, model, **plan_settings())
    wall = time.perf_counter() - t0
    return {
        "dag_nodes": dag.n_nodes,
        "dag_build_s": build_s,
        "ours_s": wall,
        "ours_cp_s": PathCost(dag, model).hard(result.x),
        "lower_bound_s": getattr(result, "lower_bound_s", None),
        "certified_gap": getattr(result, "certified_gap", None),
        "plan_settings": plan_settings(),
        "peak_gb": peak_rss_gb(),
    }


def _say(**kw) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def run_exact(solver: str, family: str, n: int, limit_s: float) -> dict:
    """One exact run (module doc); stage lines on stdout (``dag``, ``built``), result last."""
    import numpy as np

    import trainfabric.ocs.wiring.milp as milp_module
    from trainfabric.ocs.wiring.cost import PathCost

    dag, model, _ = instance(family, n)
    _say(stage="dag")
    t0 = time.perf_counter()
    build = {}
    build_model = milp_module.milp_model

    def traced_build(*args, **kw):  # reports when the model is built (solve_milp builds it)
        mm = build_model(*args, **kw)
        build["s"] = time.perf_counter() - t0
        _say(stage="built", build_s=build["s"])
        return mm

    milp_module.milp_model = traced_build
    try:
        if solver == "milp":
            r = milp_module.solve_milp(
                dag, model, time_limit_s=limit_s, mip_rel_gap=MIP_REL_GAP, threads=1
            )
            x, bound, status = r.x, r.best_bound_s, r.status
        else:
            x, bound, status = _scipy(traced_build(dag, model, reduce=False), limit_s)
    except MemoryError:
        return {"outcome": "oom" if build else "not_built", "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    return {
        "outcome": "no_incumbent" if x is None else "incumbent",
        "status": status,
        "cp_s": None if x is None else PathCost(dag, model).hard(x),
        "bound_s": None if bound is None or not np.isfinite(bound) else bound,
        "build_s": build["s"],
        "wall_s": wall,
    }


def _scipy(mm, limit_s: float):
    """scipy's HiGHS on the assembled model: (incumbent wiring or None, dual bound s, status)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    a = csr_matrix((mm.a_value, mm.a_index, mm.a_start), shape=(mm.n_cons, mm.n_vars))
    res = milp(
        mm.col_cost,
        integrality=mm.integrality,
        bounds=Bounds(mm.col_lower, mm.col_upper),
        constraints=LinearConstraint(a, mm.row_lower, mm.row_upper),
        options=dict(time_limit=limit_s, mip_rel_gap=MIP_REL_GAP, disp=False),
    )
    x = None if res.x is None else np.rint(res.x[: mm.n_pairs]).astype(np.int64)
    dual = getattr(res, "mip_dual_bound", None)
    status = SCIPY_STATUS.get(res.status, str(res.status))
    return x, None if dual is None else float(dual) * mm.t_ref_s, status


def child(argv: list[str]) -> None:
    """``--child ours FAMILY N`` or ``--child SOLVER FAMILY N LIMIT_S MEM_GB``."""
    what, family, n = argv[0], argv[1], int(argv[2])
    if what == "ours":
        _say(**run_ours(family, n))
        return
    limit_s, mem_gb = float(argv[3]), float(argv[4])
    cap = int(mem_gb * 1e9)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.environ["TRAINFABRIC_MAX_MEMORY_GB"] = str(mem_gb)
    _say(**run_exact(what, family, n, limit_s))


def launch(args: list[str], timeout_s: float) -> dict:
    """Run a child; classify a kill or a crash by the last stage it reached."""
    cmd = [sys.executable, __file__, "--child", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        out, rc, err = done.stdout, done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        out, rc, err = exc.stdout or "", "timeout", ""
        out = out.decode() if isinstance(out, bytes) else out
    lines = [json.loads(s) for s in out.splitlines() if s.startswith("{")]
    if lines and "stage" not in lines[-1]:
        return lines[-1]
    built = any(d.get("stage") == "built" for d in lines)
    memory = "MemoryError" in err or "bad_alloc" in err or (isinstance(rc, int) and rc < 0)
    if rc == "timeout":
        outcome = "killed" if built else "not_built"  # past its limit, or building too long
    elif memory:
        outcome = "oom" if built else "not_built"
    else:
        outcome = "error"
    sig = -rc if isinstance(rc, int) and rc < 0 else None
    return {
        "outcome": outcome,
        "returncode": rc if isinstance(rc, int) else None,
        "signal": signal.Signals(sig).name if sig else None,
        "stderr_tail": err[-400:],
    }


def measure(family: str, n: int, mem_gb: float) -> dict:
    ours = launch(["ours", family, str(n)], 3600)
    if "ours_s" not in ours:  # recorded, not compared (summarize skips it)
        return {"family": family, "pods": n, "ports": PORTS, "ours_failed": ours, "exact": []}
    w = ours["ours_s"]

    def one(solver: str, mult: int) -> dict:
        limit = mult * w
        timeout = ours["dag_build_s"] * 3 + BUILD_TIMEOUT_S + limit + GRACE_S
        t0 = time.perf_counter()
        res = launch([solver, family, str(n), f"{limit:.6f}", str(mem_gb)], timeout)
        res.update(solver=solver, multiple=mult, limit_s=limit, process_s=time.perf_counter() - t0)
        print(f"  {family} n={n} {solver} {mult}x: {res['outcome']}", file=sys.stderr, flush=True)
        return res

    exact: list[dict] = []
    unbuildable: set[str] = set()
    with ThreadPoolExecutor(len(SOLVERS)) as pool:
        for mult in MULTIPLES:
            live = [s for s in SOLVERS if s not in unbuildable]
            exact += pool.map(one, live, [mult] * len(live))
            for s in unbuildable:  # the build does not depend on the limit: same outcome
                exact.append({"solver": s, "multiple": mult, "outcome": "not_built", "as_at": 1})
            unbuildable |= {e["solver"] for e in exact if e["outcome"] == "not_built"}
    return {"family": family, "pods": n, "ports": PORTS, **ours, "exact": exact}


def summarize(rows: list[dict]) -> dict:
    out: dict = {"plans_failed": sum("ours_failed" in r for r in rows)}
    for mult in MULTIPLES:
        with_inc = better = 0
        counts = dict.fromkeys(("no_incumbent", "oom", "not_built", "killed", "error"), 0)
        for r in rows:
            runs = [e for e in r["exact"] if e["multiple"] == mult]
            for e in runs:
                if e["outcome"] in counts:
                    counts[e["outcome"]] += 1
            inc = [e["cp_s"] for e in runs if e["outcome"] == "incumbent"]
            if inc:
                with_inc += 1
                better += r["ours_cp_s"] < min(inc)
        tag = f"{mult}x"
        out[f"instances_with_incumbent_{tag}"] = with_inc
        out[f"ours_better_{tag}"] = better
        out[f"ours_better_than_exact_at_{tag}"] = (better == with_inc) if with_inc else None
        out |= {f"{k}_{tag}": v for k, v in counts.items()}
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--mem-gb", type=float, default=8.0, help="address-space cap per exact run")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="pod counts (iterating)")
    args = p.parse_args()
    t0 = time.perf_counter()
    rows = []
    for n in map(int, args.sizes.split(",")):
        for family in FAMILIES:
            rows.append(measure(family, n, args.mem_gb))
            print(f"{family} n={n} ours {rows[-1].get('ours_s')}s", file=sys.stderr, flush=True)
    emit(
        "ocs_anytime",
        {
            "quick": args.quick,
            "mem_gb": args.mem_gb,
            "wall_s": time.perf_counter() - t0,
            **summarize(rows),
            "rows": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
