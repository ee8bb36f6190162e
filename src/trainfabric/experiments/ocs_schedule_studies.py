"""OCS experiment E5 (docs/ocs.md §1.9 B, §3.2): circuit scheduling with reconfiguration delay.

``ocs-e5``: every scheduler (BvN+LPT, Solstice+LPT, Eclipse+LPT, Spectra-like, ours) on the
GPT, pipeline, MoE and sparse-skewed random demand families, for every pod count, OCS count
``s`` and delay fraction ``rho`` (δ = ``rho`` × the ideal makespan ``max_v L_v / (s B)``),
:func:`trainfabric.ocs.schedule.study.study_rows`. One row per (family, pods, s, rho,
scheduler): ``makespan_s`` (verified by ``check_schedule``), ``lower_bound_s``, ``over_lb``,
``configurations``, ``wall_s``. The figure: mean makespan / lower bound per scheduler and family.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field

from trainfabric.config import Config
from trainfabric.ocs.schedule.study import study_rows
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside


class OcsE5Config(Config):
    """E5 sweep; rate in Gb/s."""

    families: list[str] = Field(
        ["gpt", "pp", "moe", "random"],
        min_length=1,
        description="demand families (gpt, pp, moe, random)",
    )
    pods: list[Annotated[int, Field(ge=2, le=512)]] = Field(
        [16, 32, 64, 128], min_length=1, description="pod counts n (2..512, as ocs schedule)"
    )
    ocs: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        [1, 2, 4, 8], min_length=1, description="parallel OCS counts s (1..4,096, as ocs schedule)"
    )
    rhos: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        [0.01, 0.1, 0.5],
        min_length=1,
        description="δ as a fraction of the ideal makespan max L_v/(s B)",
    )
    rate_gbps: float = Field(100.0, gt=0, description="circuit rate B")


@register(
    "ocs-e5",
    OcsE5Config,
    keys=("family", "pods", "ocs", "rho", "scheduler"),
    quick={"pods": [16, 32], "ocs": [1, 4], "rhos": [0.1]},
)
def ocs_e5(config: OcsE5Config, seed: int) -> pd.DataFrame:
    """Makespan of every circuit scheduler against the lower bound (E5)."""
    rows = study_rows(
        config.families, config.pods, config.ocs, config.rhos, config.rate_gbps * 1e9 / 8, seed
    )
    return pd.DataFrame(list(rows))


def ocs_e5_figures(table: pd.DataFrame) -> list[Figure]:
    """Mean makespan / lower bound per scheduler, one group of bars per demand family."""
    if not {"family", "scheduler", "over_lb"} <= set(table.columns):
        return []
    mean = table.groupby(["family", "scheduler"], sort=False)["over_lb"].mean()
    families = list(dict.fromkeys(table["family"]))
    schedulers = list(dict.fromkeys(table["scheduler"]))
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(schedulers)
    idx = np.arange(len(families))
    for i, name in enumerate(schedulers):
        ax.bar(idx + i * width, [mean.get((f, name), np.nan) for f in families], width, label=name)
    ax.set_xticks(idx + 0.4 - width / 2, families)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(
        yscale="log",
        ylabel="makespan / lower bound (mean)",
        title="Circuit schedules with reconfiguration delay (lower is better)",
    )
    legend_outside(fig, title="scheduler")
    return [fig]


FIGURES["ocs-e5"] = ocs_e5_figures
