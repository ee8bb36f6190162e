"""OCS experiment E9 (docs/ocs.md §1.12, §3.2): several jobs on one wiring, fairness along p.

``ocs-e9``: for every job count ``J`` in ``jobs``, ``J`` jobs cycling through ``mix``
(pipeline = PP, dp-ring = DP, moe = MoE by default), each re-mapped onto ``job_pods`` pods and
placed on a seeded random subset of the ``pods`` pods of one OCS fabric (so jobs share pods
and pairs: [A12] byte-share splitting, :mod:`trainfabric.ocs.fairness`). For every ``p`` in
``ps`` the planner minimises ``Φ_p`` of the jobs' values (slowdowns against the uniform mesh
when ``normalise``, else seconds) and rounds on the hard ``Φ_p``
(:func:`trainfabric.ocs.fairness.study`).

One row per (``jobs``, ``method``, ``p``): ``method = "ours"`` for the planner's integer
wiring at ``p``, ``"near-uniform"`` and ``"demand-proportional"`` for the baselines (``p``
NaN). Columns: ``mean`` (weighted), ``max``, ``min`` and ``jain`` of the integer wiring's hard
values; ``phi``; ``fractional_max``/``fractional_mean`` of the regularised fractional optimum
(hard values); ``unreg_max``/``unreg_mean`` of the exact unregularised optimum (smoothed
values; the fractional front on which "max non-increasing in p" is a theorem for ``J = 2``);
the α-fair check at ``α = p + 1`` (``alpha_rel_objective``, ``alpha_rel_values``,
``alpha_rel_wiring`` over the determined pairs, ``alpha_rel_wiring_all``,
``alpha_undetermined``, ``alpha_agree``); per ``J`` the trade-off counts along ``p`` of the
integer wirings (``mean_decreases``, ``max_increases``) and ``unreg_max_non_increasing``.
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field, field_validator

from trainfabric.config import Config
from trainfabric.ocs.fairness import DEFAULT_EVALS, place_jobs, study
from trainfabric.ocs.model import OcsModel
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside

INF = math.inf


MAX_PODS = 4096  # as `ocs fairness --pods`
MAX_WORK = 1_000_000_000


class OcsE9Config(Config):
    """E9 sweep: job counts, the job mix and the powers p (``slowest``: also ``p = inf``;
    kept out of ``ps`` because a run manifest is strict JSON, which has no infinity)."""

    jobs: list[Annotated[int, Field(le=MAX_PODS)]] = Field(
        [2, 4, 8], description="job counts J (each <= 4,096)"
    )
    mix: list[str] = Field(
        ["pipeline", "dp-ring", "moe"], description="workloads the jobs cycle through"
    )
    pods: int = Field(8, ge=2, le=MAX_PODS, description="pods of the shared fabric (<= 4,096)")
    job_pods: int = Field(
        4, ge=2, le=MAX_PODS, description="pods per job (a random subset of pods, <= 4,096)"
    )
    ports: int = Field(4, ge=1, le=4096, description="OCS-facing ports per pod (d, <= 4,096)")
    ocs: int = Field(2, ge=1, le=4096, description="parallel OCSes (s, <= 4,096)")
    ps: list[float] = Field([1.0, 2.0, 4.0, 8.0], description="finite powers p >= 1")
    slowest: bool = Field(True, description="also p = inf (minimise the slowest job)")
    normalise: bool = Field(True, description="fairness on slowdowns vs the uniform mesh")
    alpha_check: bool = Field(True, description="direct alpha-fair solve at alpha = p + 1")
    b1_rel: float = Field(1.0, gt=0)
    b2_rel: float = Field(50.0, gt=0)
    max_evals: int = Field(
        DEFAULT_EVALS, ge=1, le=MAX_WORK, description="rounding search evaluations (<= 10^9)"
    )
    max_iter: int = Field(
        1000, ge=1, le=MAX_WORK, description="solver iterations per annealing stage (<= 10^9)"
    )

    @field_validator("ps")
    @classmethod
    def _finite_powers(cls, ps: list[float]) -> list[float]:
        if not all(math.isfinite(p) and p >= 1 for p in ps):
            raise ValueError(f"every p must be finite and >= 1 (inf is 'slowest'), got {ps}")
        return ps

    @field_validator("jobs")
    @classmethod
    def _job_counts(cls, jobs: list[int]) -> list[int]:
        if not jobs or min(jobs) < 1:
            raise ValueError(f"need job counts >= 1, got {jobs}")
        return jobs

    @field_validator("mix")
    @classmethod
    def _mix(cls, mix: list[str]) -> list[str]:
        if not mix:
            raise ValueError("name at least one workload")
        return mix


QUICK = {"pods": 6, "max_evals": 300, "max_iter": 150}


def _row(jobs: int, method: str, p: float, scored: dict) -> dict:
    v = np.array(scored["job_values"])
    return {
        "jobs": jobs,
        "method": method,
        "p": p,
        "mean": scored["mean"],
        "max": scored["max"],
        "min": float(v.min()),
        "jain": scored["jain"],
    }


def _check_columns(row: dict) -> dict:
    chk = row.get("alpha_fair")
    if chk is None:
        return {}
    return {
        "alpha": chk["alpha"],
        "alpha_rel_objective": chk["rel_objective"],
        "alpha_rel_values": chk["rel_values"],
        "alpha_rel_wiring": chk["rel_wiring"],
        "alpha_rel_wiring_all": chk["rel_wiring_all"],
        "alpha_undetermined": chk["undetermined"],
        "alpha_agree": chk["agree"],
    }


@register("ocs-e9", OcsE9Config, keys=("jobs", "method", "p"), quick=QUICK)
def ocs_e9(config: OcsE9Config, seed: int) -> pd.DataFrame:
    """E9: Pareto front of mean vs max iteration time along p, Jain index, alpha-fair check."""
    rows = []
    for j in config.jobs:
        specs = [config.mix[i % len(config.mix)] for i in range(j)]
        model = OcsModel.uniform(config.pods, config.ports, config.ocs)
        jobs = place_jobs(specs, config.pods, [config.job_pods] * j, seed=seed + 1000 * j)
        res = study(
            jobs,
            model,
            [*config.ps, *([INF] if config.slowest else [])],
            config.b1_rel,
            config.b2_rel,
            config.normalise,
            seed,
            config.alpha_check,
            config.max_evals,
            config.max_iter,
        )
        per_j = {
            "mean_decreases": res["trade_off"]["mean_decreases"],
            "max_increases": res["trade_off"]["max_increases"],
            "unreg_max_non_increasing": res.get("unregularised_max_non_increasing"),
            "mix": ",".join(specs),
        }
        for r in res["plans"]:
            p = INF if r["p"] == "inf" else float(r["p"])
            unreg = r.get("unregularised", {})
            rows.append(
                _row(j, "ours", p, r)
                | {
                    "phi": r["phi"],
                    "fractional_max": r["fractional_max"],
                    "fractional_mean": r["fractional_mean"],
                    "unreg_max": unreg.get("max", math.nan),
                    "unreg_mean": unreg.get("mean", math.nan),
                    "solver_iterations": r["solver_iterations"],
                    "rounding_source": r["rounding_source"],
                }
                | _check_columns(r)
                | per_j
            )
        for name, scored in res["baselines"].items():
            rows.append(_row(j, name.replace("_", "-"), math.nan, scored) | per_j)
    return pd.DataFrame(rows)


def _p_position(p: np.ndarray) -> np.ndarray:
    """x positions of p on a log2 axis with ``inf`` one step past the largest finite p."""
    finite = p[np.isfinite(p)]
    top = np.log2(finite.max()) + 1 if finite.size else 0.0
    return np.where(np.isfinite(p), np.log2(np.where(np.isfinite(p), p, 1.0)), top)


def e9_figures(table: pd.DataFrame) -> list[Figure]:
    """Pareto front (mean vs max, one point per p, the unregularised fractional front dashed,
    baselines as crosses) and Jain's index vs p: one colour per job count, one line per
    seed."""
    from matplotlib.ticker import NullFormatter

    fig = Figure(figsize=(11, 4.2))
    ax_f, ax_j = fig.subplots(1, 2)
    ours = table[table["method"] == "ours"]
    seeds = table["seed"] if "seed" in table else pd.Series(0, index=table.index)
    for k, j in enumerate(sorted(ours["jobs"].unique())):
        colour = f"C{k}"
        for n, seed in enumerate(sorted(seeds[table["jobs"] == j].unique())):
            here = (table["jobs"] == j) & (seeds == seed)
            g = ours[here[ours.index]].sort_values("p")
            first = n == 0
            ax_f.plot(g["mean"], g["max"], "o-", color=colour,
                      label=f"J={j} integer" if first else None)  # fmt: skip
            for _, r in g.iterrows():
                label = "inf" if not np.isfinite(r["p"]) else f"{r['p']:g}"
                ax_f.annotate(label, (r["mean"], r["max"]), fontsize=6, color=colour)
            if g["unreg_max"].notna().any():
                ax_f.plot(g["unreg_mean"], g["unreg_max"], ".--", color=colour, alpha=0.5,
                          label=f"J={j} fractional (unregularised)" if first else None)  # fmt: skip
            base = table[here & (table["method"] != "ours")]
            ax_f.plot(base["mean"], base["max"], "x", color=colour, ms=7)
            ax_j.plot(_p_position(g["p"].to_numpy()), g["jain"], "o-", color=colour, alpha=0.8)
    ax_f.set(
        xlabel="weighted mean value",
        ylabel="max value (slowest job)",
        title="Pareto front along p (x: near-uniform, demand)",
        xscale="log",
        yscale="log",
    )
    for axis in (ax_f.xaxis, ax_f.yaxis):
        axis.set_minor_formatter(NullFormatter())
    ps = np.sort(ours["p"].unique())
    ax_j.set_xticks(_p_position(ps), ["inf" if not np.isfinite(p) else f"{p:g}" for p in ps])
    ax_j.set(xlabel="p", ylabel="Jain index of throughputs 1/value", title="Jain index vs p")
    legend_outside(fig, title="jobs")
    return [fig]


FIGURES["ocs-e9"] = e9_figures
