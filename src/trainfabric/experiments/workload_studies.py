"""Workload studies: how the critical path of a training iteration responds to bandwidth.

``critical_path``: for a workload (preset or file), a uniform pod-pair rate and an MoE
expert-load skew, the hard critical path of one iteration against its communication-free
length — the exposed-communication share that the OCS and fabric pillars try to shrink.
The seed draws the MoE expert popularity (which experts are hot).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter
from pydantic import Field, field_validator

from trainfabric.config import Config
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside, line_style
from trainfabric.workloads import build_dag, get_preset, load_workload
from trainfabric.workloads.job import MAX_PODS
from trainfabric.workloads.presets import PRESETS
from trainfabric.workloads.workload import is_file_spec


class CriticalPathConfig(Config):
    """One workload at one uniform rate (Gb/s per pod pair, each direction)."""

    workload: str = Field("pipeline", description="preset name or a .json/.toml workload file")
    pods: int | None = Field(
        None, ge=2, le=MAX_PODS, description="re-map the preset onto this many pods (<= 65,536)"
    )
    rate_gbps: float = Field(100.0, gt=0, description="uniform pod-pair rate, Gb/s")
    moe_skew_gini: float = Field(0.2, ge=0, lt=1, description="per-expert load Gini (presets)")

    @field_validator("workload")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in PRESETS and not is_file_spec(name):
            raise ValueError(f"unknown preset '{name}'; known: {', '.join(PRESETS)}")
        return name


@register("critical_path", CriticalPathConfig)
def critical_path(config: CriticalPathConfig, seed: int) -> pd.DataFrame:
    """One row: DAG size, inter-pod bytes, critical path (s), compute-only path (s), and
    ``exposed_comm_fraction = 1 - compute_only / critical_path``."""
    if config.workload in PRESETS:
        job = get_preset(config.workload, config.pods)
        dag = build_dag(job.model_copy(update={"moe_skew_gini": config.moe_skew_gini}), seed)
    else:
        dag = load_workload(config.workload, config.pods, seed).dag
    cp = dag.critical_path_at(config.rate_gbps * 1e9)
    compute = dag.compute_time()
    return pd.DataFrame(
        [
            {
                "nodes": dag.n_nodes,
                "comm_bytes": dag.comm_bytes(),
                "critical_path_s": cp,
                "compute_only_s": compute,
                "exposed_comm_fraction": 1.0 - compute / cp,
            }
        ]
    )


def critical_path_figures(table: pd.DataFrame) -> list[Figure]:
    """Slowdown over the communication-free iteration vs rate, one line per workload (and skew).

    Returns no figure (generic fallback) unless ``rate_gbps`` varies."""
    if "rate_gbps" not in table or table["rate_gbps"].nunique() < 2:
        return []
    table = table.assign(slowdown=table["critical_path_s"] / table["compute_only_s"])
    keys = [c for c in ("workload", "moe_skew_gini") if c in table and table[c].nunique() > 1]
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    groups = table.groupby(keys, sort=False) if keys else [((), table)]
    for i, (label, g) in enumerate(groups):
        mean = g.groupby("rate_gbps")["slowdown"].mean()
        short = {"workload": "", "moe_skew_gini": "gini "}
        parts = zip(keys, label if keys else (), strict=True)
        name = ", ".join(f"{short[k]}{v}" for k, v in parts)
        ax.plot(mean.index, mean.to_numpy(), label=name or None, **line_style(i))
    rates = sorted(table["rate_gbps"].unique())
    ax.set(
        xscale="log",
        yscale="log",
        xticks=rates,
        xticklabels=[f"{r:g}" for r in rates],
        xlabel="uniform pod-pair rate (Gb/s)",
        ylabel="critical path / compute-only path",
        title="Iteration slowdown from inter-pod communication (mean over seeds)",
    )
    ax.xaxis.set_minor_formatter(NullFormatter())
    if keys:
        legend_outside(fig)
    ax.grid(True, which="both", alpha=0.3)
    return [fig]


FIGURES["critical_path"] = critical_path_figures


def presets_figures(table: pd.DataFrame) -> list[Figure]:
    """Critical path at the demo rate beside the communication-free path, per preset (log y)."""
    if not {"preset", "critical_path_s", "compute_only_s"} <= set(table.columns):
        return []
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.subplots()
    idx = np.arange(len(table))
    ax.bar(idx - 0.2, table["critical_path_s"], 0.4, label="critical path, 100 Gb/s per pod pair")
    ax.bar(idx + 0.2, table["compute_only_s"], 0.4, label="communication-free")
    ax.set_xticks(idx, table["preset"], rotation=30, ha="right")
    ax.set(yscale="log", ylabel="one iteration (s)", title="Workload presets: iteration time")
    legend_outside(fig)
    return [fig]


FIGURES["presets"] = presets_figures
