"""E4: end-to-end plan (solve + round + decompose) at n in {64, 128, 256, 512, 1024} pods.

Two job families at every size, d = 16 ports, s = 4 OCSes (CLARIFICATIONS' 1024-pod
setting), 100 Gb/s circuits, 5 Gb/s fallback:

* ``moe``: DeepSeek-V3-width MoE layers (2 layers, 256 experts, top-8), TP8 per pod, data
  parallel over all pods with EP groups of 16 pods (all-to-all inside each group);
* ``pp-dp``: GPT-3 175B as 8 pipeline stages x n/8 data-parallel replicas, 4 micro-batches.

Every headline figure is ``plan()`` with its defaults (what a user gets: ``effort="default"``,
``threads=2``: the rounding's preparation and the baselines beside the solver). At the
defaults each size is planned ``REPEATS`` times in its process, each a first plan (the
baselines' cache cleared), and ``plan_s`` is the median wall time (``plan_s_runs`` all of
them): on these shared 2-core machines one plan's wall time varies by +-25% from run to run
(the same 256-pod MoE plan took 0.85-1.40 s in one hour), the median of three by less.
Beside them, under their own names, the same sizes at the other effort levels
(:data:`trainfabric.ocs.wiring.planner.EFFORTS`): ``by_effort["fast"]`` and
``by_effort["thorough"]`` hold their times, certified gaps and critical paths over the default
plan's. The DAG build is timed separately (it is the
workload, not the plan). Wall time and the peak resident memory of the process are reported
per run; each size and setting runs in a fresh subprocess so that peak memory is its own.

Warm start (at ``WARM_SIZES``): the job's traffic drifts by 10% in l1
(:func:`trainfabric.ocs.online.drift.drift_traffic`, ``||T' − T||_1 = 0.1 ||T||_1``), then the
drifted job is planned cold and warm (``plan(..., warm_start=<the plan of the original
job>)``) side by side in the same process, ``REPEATS`` pairs; ``warm_over_cold`` is the median
of the pairs' ratios of their wall
times and ``warm_quality`` the warm plan's hard critical path over the cold one's, minus 1.
``certified_gap_at_1024`` is read from the plan when it carries one (``certified_gap``), else
null.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from _common import emit, parser, peak_rss_gb

SIZES = (64, 128, 256, 512, 1024)
SETTINGS = ("default", "fast", "thorough")  # effort levels, each reported under its name
WARM_SIZES = (256, 1024)
DRIFT = 0.1  # l1 share of the traffic drift before re-planning
# untimed warm-up plans: 64 pods alone left MoE's sparse-support projection kernels (used
# from 128 pods on) to load from numba's cache inside the timed plan, about 45 ms at 256 pods
WARMUP_SIZES = (64, 128)
REPEATS = 3  # timed plans per size at the defaults (median reported)


def job(family: str, n: int):
    from trainfabric.workloads import Job
    from trainfabric.workloads.presets import DEEPSEEK_V3, GPT3

    if family == "moe":
        model = {**DEEPSEEK_V3, "layers": 2, "first_dense_layers": 0, "name": "deepseek-v3-2l"}
        par = dict(tp=8, dp=n, ep=16, micro_batches=2)
    else:
        model, par = GPT3, dict(tp=8, pp=8, dp=n // 8, micro_batches=4)
    return Job.model_validate(
        dict(name=family, model=model, parallelism=par, placement=dict(gpus_per_pod=8, pods=n))
    )


def measure(family: str, n: int, setting: str = "default") -> dict:
    """One size in this process: build, warm up numba on small instances, plan at the effort
    level ``setting``, report (the warm start only under the defaults)."""
    from trainfabric.ocs.model import OcsModel
    from trainfabric.ocs.online.drift import drift_traffic
    from trainfabric.ocs.wiring import baselines
    from trainfabric.ocs.wiring.planner import plan
    from trainfabric.workloads import build_dag

    for w in WARMUP_SIZES:  # compile or load every kernel the timed plans call, not timed
        small, cluster = build_dag(job(family, w)), OcsModel.uniform(w, 16, 4)
        first = plan(small, cluster)  # and a warm start's (on pp-dp: 4 kernels, 24 ms)
        plan(drift_traffic(small, DRIFT, seed=1), cluster, warm_start=first)
    t0 = time.perf_counter()
    dag = build_dag(job(family, n))
    build_s = time.perf_counter() - t0
    model = OcsModel.uniform(n, 16, 4)
    runs, paths = [], set()  # (wall, stage timings); critical paths (the same plan each time)
    for _ in range(REPEATS if setting == "default" else 1):
        baselines.clear_cache()  # a first plan on this cluster every time
        result = None  # one plan held at a time: its peak memory is one plan's
        t1 = time.perf_counter()
        result = plan(dag, model, effort=setting)
        runs.append((time.perf_counter() - t1, result.timings_s))
        paths.add(result.hard_critical_path_s)
    if len(paths) > 1:
        raise SystemExit(f"{family} at {n} pods: repeated plans differ ({sorted(paths)})")
    wall, timings = _median(runs, key=lambda run: run[0])
    warm = warm_start(dag, model, result) if n in WARM_SIZES and setting == "default" else {}
    return {
        "family": family,
        "setting": setting,
        "hard_critical_path_s": result.hard_critical_path_s,
        "pods": n,
        "pairs": model.n_pairs,
        "dag_nodes": dag.n_nodes,
        "build_s": build_s,
        "plan_s": wall,
        "plan_s_runs": [run[0] for run in runs],
        "timings_s": timings,
        "iterations": result.iterations,
        "peak_gb": peak_rss_gb(),
        "improvement_vs_uniform": 1 - result.hard_critical_path_s / result.uniform_critical_path_s,
        "split_feasible": bool(result.decomposition.feasible),
        "certified_gap": getattr(result, "certified_gap", None),
        **warm,
    }


def _median(items: list, key):
    """The item whose ``key`` is the median (the middle one of an odd count)."""
    return sorted(items, key=key)[len(items) // 2]


def warm_start(dag, model, before) -> dict:
    """Re-plan after a ``DRIFT`` l1 drift of the traffic: cold, then warm from ``before``,
    ``REPEATS`` pairs in turn; ``warm_over_cold`` is the median of the pairs' ratios
    (``warm_over_cold_runs`` all of them), the times the medians of each side."""
    from trainfabric.ocs.online.drift import drift_traffic

    drifted = drift_traffic(dag, DRIFT, seed=1)
    pairs = [_cold_then_warm(drifted, model, before) for _ in range(REPEATS)]
    quality = {pair["warm_quality"] for pair in pairs}
    if len(quality) > 1:
        raise SystemExit(f"repeated warm starts differ ({sorted(quality)})")
    return {
        **_median(pairs, key=lambda pair: pair["warm_over_cold"]),
        "drift_cold_s": statistics.median(pair["drift_cold_s"] for pair in pairs),
        "drift_warm_s": statistics.median(pair["drift_warm_s"] for pair in pairs),
        "warm_over_cold_runs": [pair["warm_over_cold"] for pair in pairs],
    }


def _cold_then_warm(drifted, model, before) -> dict:
    """One cold plan of ``drifted``, then one warm from ``before``; the pair's plans are
    released when it returns, so the next pair's do not add to the peak memory."""
    from trainfabric.ocs.wiring.planner import plan

    t0 = time.perf_counter()
    cold = plan(drifted, model)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = plan(drifted, model, warm_start=before)
    warm_s = time.perf_counter() - t0
    return {
        "drift_cold_s": cold_s,
        "drift_warm_s": warm_s,
        "drift_cold_timings_s": cold.timings_s,
        "drift_warm_timings_s": warm.timings_s,
        "warm_over_cold": warm_s / cold_s,
        "warm_quality": warm.hard_critical_path_s / cold.hard_critical_path_s - 1,
    }


FAMILIES = ("moe", "pp-dp")


def _max_or_none(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def run_one(family: str, n: int, setting: str) -> dict:
    """:func:`measure` in a fresh subprocess (its peak memory is that size's alone)."""
    out = subprocess.run(
        [sys.executable, __file__, "--one", family, str(n), setting],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def effort_level(by: dict, setting: str) -> dict:
    """An effort level's headline figures, and its critical paths over the default plan's."""
    rows = {(f, n): by[f, n, setting] for f in FAMILIES for n in SIZES}
    return {
        "seconds_at_1024": max(rows[f, 1024]["plan_s"] for f in FAMILIES),
        "seconds_at_256": max(rows[f, 256]["plan_s"] for f in FAMILIES),
        "certified_gap_at_1024": _max_or_none(rows[f, 1024]["certified_gap"] for f in FAMILIES),
        "critical_path_over_default_max": max(
            r["hard_critical_path_s"] / by[f, n, "default"]["hard_critical_path_s"]
            for (f, n), r in rows.items()
        ),
        "critical_path_over_default_min": min(
            r["hard_critical_path_s"] / by[f, n, "default"]["hard_critical_path_s"]
            for (f, n), r in rows.items()
        ),
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--one", nargs=3, metavar=("FAMILY", "N", "SETTING"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.one[2])))
        return
    rows = [run_one(f, n, s) for n in SIZES for f in FAMILIES for s in SETTINGS]
    by = {(r["family"], r["pods"], r["setting"]): r for r in rows}
    default = {(f, n): r for (f, n, s), r in by.items() if s == "default"}
    emit(
        "ocs_scale",
        {
            "quick": args.quick,
            "seconds_at_1024": max(default[f, 1024]["plan_s"] for f in FAMILIES),
            "peak_gb_at_1024": max(default[f, 1024]["peak_gb"] for f in FAMILIES),
            "seconds_at_256": max(default[f, 256]["plan_s"] for f in FAMILIES),
            "certified_gap_at_1024": _max_or_none(
                default[f, 1024]["certified_gap"] for f in FAMILIES
            ),
            "warm_over_cold_at_1024": max(default[f, 1024]["warm_over_cold"] for f in FAMILIES),
            "warm_quality_at_1024": max(default[f, 1024]["warm_quality"] for f in FAMILIES),
            "round_share_at_1024": max(
                default[f, 1024]["timings_s"]["round"] / default[f, 1024]["plan_s"]
                for f in FAMILIES
            ),
            "effort": "default",
            "by_effort": {s: effort_level(by, s) for s in SETTINGS},
            "targets": {
                "seconds_at_1024": 10,
                "peak_gb_at_1024": 4,
                "seconds_at_256": 1,
                "warm_over_cold_at_1024": 0.2,
            },
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
