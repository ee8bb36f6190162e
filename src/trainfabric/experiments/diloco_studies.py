"""DiLoCo studies: figures of the protocol's verdicts (policy vs matched random vs no sync),
of its runs (SLO against progress, per regime) and of when the syncs ran (the request rate
over time with the sync windows shaded, per regime: the policy above its matched random)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside, line_style

PAPER_BURSTY = {"matched random": 6.54, "WA + EWMA forecast": 5.09}  # SLO %, their replay


def verdict_figures(table: pd.DataFrame) -> list[Figure]:
    """Per regime: SLO violation rate of every policy, its matched-random control and the
    no-sync floor; and the paired effect (pp) with its bootstrap CI, marked by verdict."""
    need = {"regime", "policy", "slo_violation_rate", "matched_random_slo", "effect_size"}
    if not need <= set(table.columns):
        return []
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figs = []
    colours = {"beats": "tab:green", "ties": "tab:grey", "loses": "tab:red"}
    for regime, rows in table.groupby("regime", sort=False):
        fig = Figure(figsize=(11, 4.0), layout="constrained")
        FigureCanvasAgg(fig)
        ax, ax_e = fig.subplots(1, 2)
        x = np.arange(len(rows))
        ax.bar(x - 0.2, 100 * rows["slo_violation_rate"], 0.4, label="policy")
        ax.bar(x + 0.2, 100 * rows["matched_random_slo"], 0.4, label="matched random")
        ax.axhline(100 * rows["no_sync_slo"].iloc[0], color="k", ls=":", label="no-sync floor")
        ax.set_xticks(x, rows["policy"], rotation=30, ha="right")
        ax.set(ylabel="SLO violations (%)", title=f"{regime}: SLO violation rate")
        legend_outside(fig)
        err = [
            rows["effect_size"] - rows["effect_ci_low"],
            rows["effect_ci_high"] - rows["effect_size"],
        ]
        ax_e.errorbar(
            x, rows["effect_size"], yerr=np.clip(np.vstack(err), 0, None), fmt="none", ecolor="k"
        )
        ax_e.scatter(
            x, rows["effect_size"], c=[colours[v] for v in rows["vs_matched_random"]], zorder=3
        )
        ax_e.axhline(0, color="k", lw=0.8)
        ax_e.set_xticks(x, rows["policy"], rotation=30, ha="right")
        ax_e.set(
            ylabel="policy - matched random (pp)",
            title=f"{regime}: paired effect, 95% CI\n(green beats, red loses)",
        )
        figs.append(fig)
    return figs


def run_figures(table: pd.DataFrame) -> list[Figure]:
    """Per regime: SLO violation rate (%) against final loss, the trade-off every verdict
    weighs; a policy's mean over seeds with its min-max range, its matched-random draws as
    grey dots behind."""
    if not {"regime", "policy", "slo_violation_rate", "final_loss"} <= set(table.columns):
        return []
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    regimes = list(dict.fromkeys(table["regime"]))
    ncols = min(2, len(regimes))
    nrows = -(-len(regimes) // ncols)
    fig = Figure(figsize=(5.5 * ncols + 2.5, 3.8 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    for ax in axes[len(regimes) :]:
        ax.set_axis_off()
    random = table["policy"].str.startswith("matched_random")
    policies = list(dict.fromkeys(table.loc[~random, "policy"]))
    for ax, regime in zip(axes, regimes, strict=False):
        rows = table[table["regime"] == regime]
        controls = rows[random.loc[rows.index]]
        ax.scatter(
            controls["final_loss"],
            100 * controls["slo_violation_rate"],
            s=6,
            color="0.75",
            label="matched random (draws)",
        )
        for i, policy in enumerate(policies):
            stats = rows[rows["policy"] == policy][["final_loss", "slo_violation_rate"]]
            x, y = stats["final_loss"], 100 * stats["slo_violation_rate"]
            err = [[y.mean() - y.min()], [y.max() - y.mean()]]
            style = line_style(i) | {"linestyle": "none"}
            ax.errorbar([x.mean()], [y.mean()], yerr=err, capsize=2, label=policy, **style)
        ax.set(xlabel="final loss", ylabel="SLO violations (%)", title=regime)
    legend_outside(fig, title="policy (mean, min-max over seeds)")
    return [fig]


def sync_time_figures(table: pd.DataFrame) -> list[Figure]:
    """Per regime (seed 0): the request rate over time (requests/s per 1 s window, and its
    60 s moving mean), one panel per policy, each window in which a sync ran shaded: when
    each policy chose to sync."""
    if not {"regime", "policy", "t_s", "request_rate_per_s", "in_sync"} <= set(table.columns):
        return []
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figs = []
    for regime, rows in table.groupby("regime", sort=False):
        policies = list(dict.fromkeys(rows["policy"]))
        fig = Figure(figsize=(11, 2.2 * len(policies) + 0.6), layout="constrained")
        FigureCanvasAgg(fig)
        axes = np.atleast_1d(fig.subplots(len(policies), 1, sharex=True))
        for ax, policy in zip(axes, policies, strict=True):
            r = rows[rows["policy"] == policy].sort_values("t_s")
            t, rate = r["t_s"].to_numpy(), r["request_rate_per_s"].to_numpy()
            ax.plot(t, rate, lw=0.4, color="0.7", label="requests/s (1 s)")
            mean = pd.Series(rate).rolling(60, min_periods=1, center=True).mean()
            ax.plot(t, mean, lw=1.2, color="tab:blue", label="60 s moving mean")
            for k, start in enumerate(t[r["in_sync"].to_numpy(bool)]):
                ax.axvspan(start, start + 1.0, color="tab:orange", alpha=0.5, lw=0,
                           label="sync running" if k == 0 else None)  # fmt: skip
            ax.set(ylabel="requests/s", title=f"{regime}: {policy}")
        axes[-1].set_xlabel("time (s)")
        legend_outside(fig)
        figs.append(fig)
    return figs


FIGURES["diloco_verdicts"] = verdict_figures
FIGURES["sync_times"] = sync_time_figures
FIGURES["diloco_runs"] = run_figures
