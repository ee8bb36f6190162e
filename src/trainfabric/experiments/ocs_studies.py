"""OCS studies: the planner as a sweepable experiment, and the comparison figure.

``ocs_plan``: plan one workload's wiring (solve + round + decompose) for one setting of the
dimensionless temperatures; one row with the hard critical path of the integer wiring, the
uniform mesh's beside it, KL to the prior, circuits moved and the stage timings.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field

from trainfabric.config import Config
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.planner import plan
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside
from trainfabric.workloads import load_workload
from trainfabric.workloads.job import MAX_PODS


class OcsPlanConfig(Config):
    """One planning instance; rates in Gb/s."""

    workload: str = Field("moe", description="preset name or a .json/.toml workload file")
    pods: int | None = Field(
        None, ge=2, le=MAX_PODS, description="re-map the preset onto this many pods (<= 65,536)"
    )
    ports: int = Field(8, ge=1, le=4096, description="OCS-facing ports per pod (d, <= 4,096)")
    ocs: int = Field(4, ge=1, le=4096, description="parallel OCSes (s, <= 4,096)")
    b1_rel: float = Field(1.0, gt=0, description="prior weight, b1 = b1_rel / CP0")
    b2_rel: float = Field(50.0, gt=0, description="smoothing, b2 = b2_rel log|paths| / CP0")
    rate_gbps: float = Field(100.0, gt=0)
    fallback_gbps: float = Field(5.0, gt=0)


@register("ocs_plan", OcsPlanConfig)
def ocs_plan(config: OcsPlanConfig, seed: int) -> pd.DataFrame:
    """One row of plan figures (seconds, dimensionless KL, circuit counts)."""
    w = load_workload(config.workload, config.pods, seed)
    model = OcsModel.uniform(
        w.dag.n_pods,
        config.ports,
        config.ocs,
        rate_bps=config.rate_gbps * 1e9,
        fallback_bps=config.fallback_gbps * 1e9,
    )
    p = plan(w.dag, model, config.b1_rel, config.b2_rel, seed)
    return pd.DataFrame(
        [
            {
                "hard_critical_path_s": p.hard_critical_path_s,
                "uniform_critical_path_s": p.uniform_critical_path_s,
                "improvement_vs_uniform": 1 - p.hard_critical_path_s / p.uniform_critical_path_s,
                "kl_to_prior": p.kl_to_prior,
                "circuits_moved_vs_prior": p.circuits_moved_vs_prior,
                "iterations": p.iterations,
                "plan_s": p.solve_time_s,
            }
        ]
    )


def ocs_compare_figures(table: pd.DataFrame) -> list[Figure]:
    """Hard critical path of every method relative to the best one, per workload."""
    if not {"workload", "method", "hard_critical_path_s"} <= set(table.columns):
        return []
    best = table.groupby("workload")["hard_critical_path_s"].transform("min")
    table = table.assign(rel=table["hard_critical_path_s"] / best)
    workloads = list(dict.fromkeys(table["workload"]))
    methods = list(dict.fromkeys(table["method"]))
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax, ax_t = fig.subplots(1, 2)
    width = 0.8 / len(methods)
    idx = np.arange(len(workloads))
    for i, m in enumerate(methods):
        rows = table[table["method"] == m].set_index("workload").reindex(workloads)
        ax.bar(idx + i * width, rows["rel"], width, label=m)
        ax_t.bar(idx + i * width, rows["wall_s"], width, label=m)
    for a in (ax, ax_t):
        a.set_xticks(idx + 0.4 - width / 2, workloads)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(
        yscale="log", ylabel="hard critical path / best", title="Wiring quality (lower is better)"
    )
    ax_t.set(yscale="log", ylabel="wall time (s)", title="Time to wiring")
    legend_outside(fig, title="method")
    return [fig]


FIGURES["ocs_compare"] = ocs_compare_figures
