"""Ablation of the seed's method (issue 34, item 4): what the entropic solve adds to the plan.

The full planner is ``plan()``'s general path up to the choice of its wiring: the entropic
solve gives ``x_frac``, ``round_wiring`` rounds and searches it, and the plan is the best of
that rounding and two baseline candidates (best near-uniform, demand-proportional). Each
ablated arm replaces ``x_frac`` by another start (:mod:`trainfabric.ocs.wiring.ablation`:
``uniform`` = the fractional uniform mesh ``M q``, ``demand`` = the fractional
demand-proportional wiring, ``random`` = a seeded random point of the port polytope) and keeps
everything else identical: the same ``b2`` (from the same ``temperatures``), the same search
seed, the same ``round_max_moves`` work budget, at ``plan()``'s default effort (its
``EFFORTS["default"]`` solver iterations and rounding budget). The decomposition and the
certified bound run after the wiring is chosen and are the same for every arm, so they are
left out.

What each figure compares (both sides always include the same things):

* **with candidates** (the headline ``gain_vs_<start>_start_median``): the full planner (its
  rounding, then the best of it and the two candidates) against the same for the arm (its
  rounding, then the best of it and the *same* two candidates);
* **rounding only** (``..._rounding_only``): the entropic start's rounding result alone
  against the arm's rounding result alone, no candidates on either side;
* **start only** (``..._start_only``): both sides again without candidates, and with
  ``round_wiring``'s two iterative roundings (which build a wiring from the empty one by the
  marginals and never read ``x_frac``, so they are in every arm) replaced by the start's own
  floor-and-fill rounding and its class-uniform start (which never reads ``x_frac`` either)
  left out, so that every rounding searched comes from the start. There is no hook for this
  in ``round_wiring``; :func:`start_only` swaps its private ``_iterative_rounding`` and its
  ``best_class_uniform`` for the duration of one call.

* **before the search** (``..._before_search``: the best of the roundings, no search) and
  **1% budget** (``..._low_budget``: ``round_max_moves / 100``): both sides without
  candidates, showing how much of the final quality the search, rather than the start,
  provides.

``gain = arm's critical path / full planner's critical path - 1`` per instance (positive: the
entropic step helps), hard critical path of the integer wiring; the median is over instances
and, for ``random``, over every (instance, draw) pair. At **equal work** the arm runs one
rounding with the full planner's budget. At **equal time** the arm gets the wall time the
full planner spent in its entropic solve plus its rounding (the setup, ``PathCost`` and
temperatures, and the candidates are the same for both sides) and spends it on restarts
(:func:`trainfabric.ocs.wiring.ablation.restarts`: run 0 from the start itself, then from
log-normally perturbed copies of it, ``sigma = 0.5``, for ``uniform``/``demand``, or from
fresh random draws for ``random``; search seed ``seed + k`` for run ``k``; at least one run,
the last may end past the budget: ``wall_s`` says how far); its best is compared as above.

Instance sets (fixed before measuring): ``hard`` = the five families of
``benchmarks/ocs_vs_milp.py`` at their three sizes, d in {8, 16} (``--quick``: d = 8), s = 4,
seed 0; ``preset`` = its older preset families (pipeline, dp-ring, dp-hd, moe, hybrid) at n in
{8, 16, 32}, d = 8; ``onehop`` = evenly spaced Meta pod matrices (8; ``--quick`` 4) and one
gravity and one sparse synthetic matrix at 16 and 32 pods (``--quick`` 16), on the general
path (``plan()`` would take its exact one-hop fast path there: no entropic solve, no rounding,
the exact optimum, so there is nothing to ablate; its critical path is reported beside as
``exact_cp_s``); ``scale1024`` = ``benchmarks/ocs_scale.py``'s moe and pp-dp jobs at 1,024
pods (d = 16, s = 4). Random draws: seeds 1-3 (one at 1,024 pods and with ``--quick``).
Every wiring is checked against the port limits (``port_limit_violations``). Times are wall
seconds in one process after numba compilation; other work on the machine inflates them.
"""

from __future__ import annotations

import contextlib
import sys
import time

import numpy as np
from _common import emit, parser

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import ablation, baselines, rounding
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.ocs.wiring.families import SIZES, family
from trainfabric.ocs.wiring.planner import EFFORTS, one_hop_wiring
from trainfabric.workloads import build_dag, get_preset

ARMS = ("uniform", "demand", "random")
PRESETS = ("pipeline", "dp-ring", "dp-hd", "moe", "hybrid")
PRESET_SIZES = (8, 16, 32)
SETS = ("hard", "preset", "onehop", "scale1024")
# plan()'s default budgets: solver iterations per annealing stage, rounding work budget
MAX_ITER = EFFORTS["default"]["max_iter"]
MOVES = EFFORTS["default"]["round_max_moves"]
LOW_MOVES = MOVES // 100  # the low budget: 1% of the default
TIE = 1e-9  # relative difference below which two critical paths count as equal


@contextlib.contextmanager
def start_only(model: OcsModel, start: np.ndarray):
    """Within the block, ``round_wiring``'s iterative roundings from the empty wiring (the
    start-independent ones) return the start's floor-and-fill rounding instead, which
    ``round_wiring`` then drops as a duplicate, and its class-uniform start is skipped: every
    rounding it searches comes from the start (module doc). Calls from a non-empty wiring
    (inside the search's moves) are untouched; the class moves still run."""
    x0 = rounding._floor(model, start)
    fill = rounding._fill(model, x0, start - x0)
    saved = rounding._iterative_rounding, rounding.best_class_uniform

    def patched(red, model_, x_in, b2, *rest):
        if x_in.any():
            return saved[0](red, model_, x_in, b2, *rest)
        return fill.copy()

    rounding._iterative_rounding = patched
    rounding.best_class_uniform = lambda *args: (None, np.inf, 0)
    try:
        yield
    finally:
        rounding._iterative_rounding, rounding.best_class_uniform = saved


def checked(model: OcsModel, x: np.ndarray) -> int:
    """1 when ``x`` breaks a port limit (or is not an integer wiring), else 0."""
    try:
        model.check_wiring(x)
    except Exception:  # noqa: BLE001 - any refusal is a violation to count
        return 1
    return 0


def full_planner(cost, model: OcsModel, seed: int) -> dict:
    """The full planner's arm (module doc), timed per stage."""
    t0 = time.perf_counter()
    b1, b2, _ = temperatures(cost, model)
    t1 = time.perf_counter()
    x_frac = ablation.entropic_point(cost, model, b1, b2, MAX_ITER)
    t2 = time.perf_counter()
    r = ablation.round_from(cost, model, x_frac, b2, seed=seed, max_moves=MOVES)
    t3 = time.perf_counter()
    cands = ablation.plan_candidates(cost, model, seed)
    x, cp = ablation.best_of(cost, [r.x, *cands])
    t4 = time.perf_counter()
    with start_only(model, x_frac):
        alone = ablation.round_from(cost, model, x_frac, b2, seed=seed, max_moves=MOVES)
    low = ablation.round_from(cost, model, x_frac, b2, seed=seed, max_moves=LOW_MOVES)
    winner = ("rounding", "best-near-uniform", "demand-proportional")[
        int(np.argmin([cost.hard(w) for w in (r.x, *cands)]))
    ]
    return {
        "b2": b2,
        "cands": cands,
        "cp_s": cp,
        "round_cp_s": r.hard_cp_s,
        "start_only_cp_s": alone.hard_cp_s,
        "initial_cp_s": r.initial_cp_s,
        "low_budget_cp_s": low.hard_cp_s,
        "fractional_cp_s": cost.hard(x_frac),
        "winner": winner,
        "work": r.work,
        "temperatures_s": t1 - t0,
        "solve_s": t2 - t1,
        "round_s": t3 - t2,
        "candidates_s": t4 - t3,
        "wall_s": t4 - t0,
        "violations": sum(checked(model, w) for w in (x, r.x, alone.x, low.x)),
    }


def arm(cost, model: OcsModel, kind: str, full: dict, seed: int, draw: int, timed: bool) -> dict:
    """One ablated arm at equal work (and, when ``timed``, at equal time)."""
    b2, cands = full["b2"], full["cands"]
    t0 = time.perf_counter()
    start = ablation.start_point(kind, cost, model, seed=draw)
    r = ablation.round_from(cost, model, start, b2, seed=seed, max_moves=MOVES)
    wall = time.perf_counter() - t0
    with start_only(model, start):
        alone = ablation.round_from(cost, model, start, b2, seed=seed, max_moves=MOVES)
    low = ablation.round_from(cost, model, start, b2, seed=seed, max_moves=LOW_MOVES)
    out = {
        "kind": kind,
        "draw": draw if kind == "random" else None,
        "start_cp_s": cost.hard(start),
        "round_cp_s": r.hard_cp_s,
        "cp_s": ablation.best_of(cost, [r.x, *cands])[1],
        "start_only_cp_s": alone.hard_cp_s,
        "initial_cp_s": r.initial_cp_s,
        "low_budget_cp_s": low.hard_cp_s,
        "work": r.work,
        "wall_s": wall,
        "violations": sum(checked(model, w) for w in (r.x, alone.x, low.x)),
    }
    if timed:
        budget = full["solve_s"] + full["round_s"]
        rs = ablation.restarts(
            cost, model, kind, budget, b2, seed=draw if kind == "random" else seed, max_moves=MOVES
        )
        out["equal_time"] = {
            "budget_s": budget,
            "wall_s": rs.wall_s,
            "runs": rs.runs,
            "work": rs.work,
            "round_cp_s": rs.cp_s,
            "cp_s": ablation.best_of(cost, [rs.x, *cands])[1],
        }
        out["violations"] += checked(model, rs.x)
    return out


def measure(kind: str, name: str, dag, model: OcsModel, seed: int, draws, extra=None) -> dict:
    """Every arm on one instance; ``extra`` adds fields (the one-hop exact optimum)."""
    t0 = time.perf_counter()
    cost = PathCost(dag, model)
    setup_s = time.perf_counter() - t0
    full = full_planner(cost, model, seed)
    arms = [arm(cost, model, a, full, seed, seed, True) for a in ARMS[:2]]
    arms += [arm(cost, model, "random", full, seed, d, k == 0) for k, d in enumerate(draws)]
    full.pop("cands")
    row = {
        "set": kind,
        "family": name,
        "pods": model.n,
        "ports": int(model.degrees.max()),
        "seed": seed,
        "pairs": model.n_pairs,
        "dag_nodes": dag.n_nodes,
        "setup_s": setup_s,
        "uniform_mesh_cp_s": cost.hard(baselines.uniform_mesh(model)),
        "demand_wiring_cp_s": cost.hard(baselines.demand_proportional(dag, model)),
        "full": full,
        "arms": arms,
        **(extra(cost, model) if extra else {}),
    }
    print(
        f"{kind:>9} {name:>14} n={model.n:<4} d={row['ports']:<3} full={full['cp_s']:.4g}s "
        f"({full['wall_s']:.2f}s) "
        + " ".join(
            f"{a['kind']}={a['cp_s'] / full['cp_s'] - 1:+.2%}"
            f"/{a['round_cp_s'] / full['round_cp_s'] - 1:+.2%}"
            f"/{a['low_budget_cp_s'] / full['low_budget_cp_s'] - 1:+.2%}"
            for a in arms
        ),
        file=sys.stderr,
        flush=True,
    )
    return row


def onehop_exact(cost, model: OcsModel) -> dict:
    """The exact one-hop optimum (``plan()``'s fast path) and its time."""
    t0 = time.perf_counter()
    x = one_hop_wiring(cost, model)
    return {"exact_cp_s": cost.hard(x), "exact_s": time.perf_counter() - t0}


def instances(quick: bool, sets=SETS):
    """``(set, name, dag, model, seed, draws, extra)`` per instance of the instance ``sets``
    (module doc), built lazily."""
    draws = (1,) if quick else (1, 2, 3)
    if "hard" in sets:
        yield from hard_instances(quick, draws)
    if "preset" in sets:
        for name in PRESETS:
            for n in PRESET_SIZES:
                dag = build_dag(get_preset(name, pods=n), 0)
                yield ("preset", name, dag, OcsModel.uniform(n, 8, 4), 0, draws, None)
    if "onehop" in sets:
        yield from onehop_instances(quick, draws)
    if "scale1024" in sets:
        from ocs_scale import job

        for name in ("moe", "pp-dp"):
            dag, model = build_dag(job(name, 1024)), OcsModel.uniform(1024, 16, 4)
            yield ("scale1024", name, dag, model, 0, (1,), None)


def hard_instances(quick: bool, draws):
    for name, sizes in SIZES.items():
        for n in sizes:
            for d in (8,) if quick else (8, 16):
                yield ("hard", name, *family(name, n, d, 0), 0, draws, None)


def onehop_instances(quick: bool, draws):
    from trainfabric.experiments.ocs_onehop_studies import (
        OneHopConfig,
        meta_instances,
        synthetic_instances,
    )
    from trainfabric.ocs.wiring.onehop import to_dag, to_model

    config = OneHopConfig(meta=4 if quick else 8, tms=1, pods=[16] if quick else [16, 32])
    named = [("meta", i) for i in meta_instances(config, 0)] + synthetic_instances(config, 0)
    for source, inst in named:
        name = inst.name or f"{source}-{inst.n}"
        yield ("onehop", name, to_dag(inst), to_model(inst), 0, draws, onehop_exact)


def _gains(rows, kind: str, key: str, full_key: str, timed: bool = False) -> list[float]:
    out = []
    for r in rows:
        for a in r["arms"]:
            if a["kind"] != kind:
                continue
            src = a.get("equal_time") if timed else a
            if src is not None:
                out.append(src[key] / r["full"][full_key] - 1)
    return out


def _stats(g: list[float]) -> dict:
    v = np.asarray(g)
    if v.size == 0:
        return {"n": 0}
    return {
        "n": int(v.size),
        "median": float(np.median(v)),
        "mean": float(v.mean()),
        "min": float(v.min()),
        "max": float(v.max()),
        "helps": int((v > TIE).sum()),
        "ties": int((np.abs(v) <= TIE).sum()),
        "hurts": int((v < -TIE).sum()),
    }


def summarize(rows: list[dict]) -> dict:
    """Per arm: gains with candidates, rounding only, start only (equal work) and at equal
    time, with counts of instances where the entropic start helps / ties / hurts."""
    out = {}
    for kind in ARMS:
        out[kind] = {
            "equal_work": _stats(_gains(rows, kind, "cp_s", "cp_s")),
            "equal_work_rounding_only": _stats(_gains(rows, kind, "round_cp_s", "round_cp_s")),
            "equal_work_start_only": _stats(
                _gains(rows, kind, "start_only_cp_s", "start_only_cp_s")
            ),
            "before_search": _stats(_gains(rows, kind, "initial_cp_s", "initial_cp_s")),
            "low_budget": _stats(_gains(rows, kind, "low_budget_cp_s", "low_budget_cp_s")),
            "equal_time": _stats(_gains(rows, kind, "cp_s", "cp_s", timed=True)),
            "equal_time_rounding_only": _stats(
                _gains(rows, kind, "round_cp_s", "round_cp_s", timed=True)
            ),
            "arm_wall_s_median": float(
                np.median([a["wall_s"] for r in rows for a in r["arms"] if a["kind"] == kind])
            ),
        }
    full = [r["full"] for r in rows]
    out["full"] = {
        "instances": len(rows),
        "wall_s_median": float(np.median([f["wall_s"] for f in full])),
        "solve_s_median": float(np.median([f["solve_s"] for f in full])),
        "round_s_median": float(np.median([f["round_s"] for f in full])),
        "rounding_won": sum(f["winner"] == "rounding" for f in full),
        "uniform_mesh_over_full_median": float(
            np.median([r["uniform_mesh_cp_s"] / r["full"]["cp_s"] - 1 for r in rows])
        ),
        "demand_wiring_over_full_median": float(
            np.median([r["demand_wiring_cp_s"] / r["full"]["cp_s"] - 1 for r in rows])
        ),
    }
    return out


def headline(summary: dict) -> dict:
    """The issue's keys (equal work, with candidates on both sides) and their companions."""
    out = {}
    for kind in ARMS:
        s = summary[kind]
        out[f"gain_vs_{kind}_start_median"] = s["equal_work"]["median"]
        out[f"gain_vs_{kind}_start_median_rounding_only"] = s["equal_work_rounding_only"]["median"]
        out[f"gain_vs_{kind}_start_median_start_only"] = s["equal_work_start_only"]["median"]
        out[f"gain_vs_{kind}_start_median_before_search"] = s["before_search"]["median"]
        out[f"gain_vs_{kind}_start_median_low_budget"] = s["low_budget"]["median"]
        out[f"gain_vs_{kind}_start_equal_time_median"] = s["equal_time"]["median"]
        out[f"gain_vs_{kind}_start_equal_time_median_rounding_only"] = s[
            "equal_time_rounding_only"
        ]["median"]
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sets", default=None, help="comma-separated instance sets (for iterating)")
    args = p.parse_args()
    t0 = time.perf_counter()
    warm = next(iter(instances(True)))  # compile numba and load HiGHS, not reported
    measure(*warm[:5], (1,), None)
    print("-- warm-up done, measuring", file=sys.stderr, flush=True)
    sets = tuple(args.sets.split(",")) if args.sets else SETS
    rows = [measure(*spec) for spec in instances(args.quick, sets)]
    by_set = {s: summarize([r for r in rows if r["set"] == s]) for s in sets}
    overall = summarize(rows)
    onehop = [r for r in rows if r["set"] == "onehop"]
    emit(
        "ocs_ablation",
        {
            **headline(overall),
            "instances": len(rows),
            "port_limit_violations": sum(
                r["full"]["violations"] + sum(a["violations"] for a in r["arms"]) for r in rows
            ),
            "overall": overall,
            "by_set": by_set,
            "onehop_general_over_exact_median": (
                float(np.median([r["full"]["cp_s"] / r["exact_cp_s"] - 1 for r in onehop]))
                if onehop
                else None
            ),
            "sets": list(sets),
            "round_max_moves": MOVES,
            "low_budget_max_moves": LOW_MOVES,
            "max_iter": MAX_ITER,
            "perturb_sigma": ablation.PERTURB_SIGMA,
            "quick": args.quick,
            "wall_s": time.perf_counter() - t0,
            "rows": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
