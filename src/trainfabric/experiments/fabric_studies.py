"""Fabric studies: the four evaluation scenarios as sweepable experiments, and their figures.

Each scenario kind of :mod:`trainfabric.fabric.scenarios` is an experiment
(``fabric_line_rate``, ``fabric_isolation``, ``fabric_failures``, ``fabric_flaps``) whose config
is the scenario itself, so ``trainfabric sweep`` can vary any field (planes, radix, modes,
sizes) over seeds. The figures put every result beside its physical limit and, where the
seed paper gives a number, beside that number (labelled as the paper's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from trainfabric.fabric import scenarios as S
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside, line_style

PAPER_LINE_RATE = 0.98  # "98% of theoretical line rate" (NVIDIA, arXiv 2605.21187)
PAPER_LATENCY_AT_10PCT = 0.07  # "+7% latency at 10% fabric link failures" (same paper)


def _experiment(kind: str):
    model = S.SCENARIOS[kind]

    def run(config, seed: int) -> pd.DataFrame:
        return S.RUNNERS[kind][0](config, seed)

    run.__name__ = run.__qualname__ = f"fabric_{kind}"
    run.__doc__ = model.__doc__.strip().split("\n\n")[0]
    return register(f"fabric_{kind}", model, quick=QUICK[kind])(run)


# `experiments run fabric_<kind> --quick`: the scenario of `fabric eval --quick`.
QUICK = {sc.kind: sc.model_dump(exclude={"name"}) for sc in S.eval_scenarios(quick=True)}
for _kind in S.SCENARIOS:
    _experiment(_kind)


# -- figures ----------------------------------------------------------------------------------
def _figure(ncols: int = 1, width: float = 6.4) -> tuple[Figure, np.ndarray]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(width * ncols, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, np.atleast_1d(fig.subplots(1, ncols))


def line_rate_figures(table: pd.DataFrame) -> list[Figure]:
    """busbw / NIC line rate against message size, one panel per collective."""
    if not {"collective", "size_bytes", "mode", "line_rate_fraction"} <= set(table.columns):
        return []
    kinds = list(dict.fromkeys(table["collective"]))
    modes = list(dict.fromkeys(table["mode"]))
    fig, axes = _figure(len(kinds), 5.2)
    for ax, kind in zip(axes, kinds, strict=True):
        part = table[table["collective"] == kind]
        for mode, rows in part.groupby("mode", sort=False):
            rows = rows.sort_values("size_bytes")
            style = line_style(modes.index(mode))
            ax.plot(rows["size_bytes"], rows["line_rate_fraction"], label=mode, **style)
        ax.axhline(S.HEADER_BOUND, color="k", ls=":", lw=1, label="header bound 4096/4160")
        ax.axhline(PAPER_LINE_RATE, color="tab:red", ls="--", lw=1, label="paper: 98% (theirs)")
        ax.set(
            xscale="log",
            ylim=(0, 1.02),
            xlabel="per-rank buffer S (bytes)",
            ylabel="busbw / NIC line rate",
            title=f"{kind} ({int(part['ranks'].iloc[0])} ranks)",
        )
    legend_outside(fig)
    return [fig]


def isolation_figures(table: pd.DataFrame) -> list[Figure]:
    """Victim time alone / next to the aggressor, per mode, oversubscription and failures."""
    if not {"mode", "oversubscription", "isolation_ratio"} <= set(table.columns):
        return []
    fig, (ax,) = _figure(width=7.2)
    modes = list(dict.fromkeys(table["mode"]))
    cases = table[["oversubscription", "failed_fraction"]].drop_duplicates().to_numpy()
    width = 0.8 / len(cases)
    for i, (over, frac) in enumerate(cases):
        rows = table[(table["oversubscription"] == over) & (table["failed_fraction"] == frac)]
        rows = rows.set_index("mode").reindex(modes)
        label = f"{over:g}:1, {frac:.0%} failed"
        ax.bar(np.arange(len(modes)) + i * width, rows["isolation_ratio"], width, label=label)
    ax.axhline(0.95, color="tab:red", ls="--", lw=1, label="F4: within 5% of solo")
    ax.set_xticks(np.arange(len(modes)) + 0.4 - width / 2, modes)
    ax.set(ylim=(0, 1.05), ylabel="victim solo time / shared time", title="Tenant isolation")
    legend_outside(fig, title="oversubscription, failures")
    return [fig]


def failures_figures(table: pd.DataFrame) -> list[Figure]:
    """Permutation throughput vs failed fraction (with LP and 1 - f), collective slowdown
    and the estimated latency increase."""
    if not {"failed_fraction", "mode", "mean_permutation_goodput"} <= set(table.columns):
        return []
    fig, axes = _figure(3, 4.6)
    stats = table.groupby(["mode", "failed_fraction"], sort=False)
    measured = "latency_increase" in table.columns  # packet engine; else the M/M/1 estimate
    lat_col = "latency_increase" if measured else "latency_increase_est"
    for i, mode in enumerate(dict.fromkeys(table["mode"])):
        rows = table[table["mode"] == mode].groupby("failed_fraction")
        for ax, col in zip(
            axes[:2], ("mean_permutation_goodput", "collective_increase"), strict=True
        ):
            m = rows[col].agg(["mean", "min", "max"])
            ax.errorbar(
                m.index,
                m["mean"],
                yerr=[m["mean"] - m["min"], m["max"] - m["mean"]],
                capsize=3,
                label=mode,
                **line_style(i),
            )
        lat = rows[lat_col].mean().replace([np.inf, -np.inf], np.nan)
        axes[2].plot(lat.index, lat.values, label=mode, **line_style(i))
    lp = stats["max_concurrent_flow_lp"].mean().groupby("failed_fraction").mean()
    cut = stats["maxflow_bisection"].mean().groupby("failed_fraction").mean()
    f = np.sort(table["failed_fraction"].unique())
    axes[0].plot(lp.index, lp.values, "k--", label="max-concurrent-flow LP (min flow)")
    axes[0].plot(cut.index, cut.values, "k-.", label="max-flow bisection (leaf-order cut)")
    axes[0].plot(f, 1 - f, "k:", label="capacity-proportional 1 - f")
    axes[0].set(
        xlabel="failed leaf-spine cables",
        ylabel="goodput / line rate",
        title="Mean permutation goodput",
        ylim=(0, 1.05),
    )
    axes[1].set(
        xlabel="failed leaf-spine cables",
        ylabel="time / time without failures - 1",
        title=f"{table['collective'].iloc[0]} completion",
    )
    axes[2].axhline(
        PAPER_LATENCY_AT_10PCT, color="tab:red", ls="--", lw=1, label="paper: +7% at 10% (theirs)"
    )
    axes[2].set(
        xlabel="failed leaf-spine cables",
        ylabel="p50 latency increase" + ("" if measured else " (estimate)"),
        title="Packet latency, " + ("measured (packet engine)" if measured else "M/M/1 estimate"),
    )
    legend_outside(fig)
    return [fig]


def flaps_figures(table: pd.DataFrame) -> list[Figure]:
    """Measured impairment and stall per mode and flapped link (log scale)."""
    if not {"mode", "flap", "stall_s", "impaired_until_s"} <= set(table.columns):
        return []
    fig, axes = _figure(2, 5.2)
    modes = list(dict.fromkeys(table["mode"]))
    flaps = list(dict.fromkeys(table["flap"]))
    width = 0.8 / len(flaps)
    for ax, col, title in zip(
        axes,
        ("impaired_until_s", "stall_s"),
        ("Traffic into the dead link until (s after the flap)", "Longest stall of the job (s)"),
        strict=True,
    ):
        for i, flap in enumerate(flaps):
            rows = table[table["flap"] == flap].set_index("mode").reindex(modes)
            vals = np.maximum(rows[col].to_numpy(float), 1e-7)
            ax.bar(np.arange(len(modes)) + i * width, vals, width, label=flap)
        ax.set_xticks(np.arange(len(modes)) + 0.4 - width / 2, modes)
        ax.set(yscale="log", ylim=(1e-7, 10), title=title)
        for r, name in ((5e-6, "hardware"), (5e-3, "host software"), (1.0, "routing")):
            ax.axhline(r, color="grey", ls=":", lw=1)
            ax.text(len(modes) - 0.5, r, name, fontsize="x-small", va="bottom", ha="right")
    legend_outside(fig, title="flapped link")
    return [fig]


def flap_timeline_figures(table: pd.DataFrame) -> list[Figure]:
    """Goodput of the training job over time, one panel per flap, one line per mode."""
    if not {"mode", "flap", "t_s", "goodput_gbps"} <= set(table.columns):
        return []
    flaps = [f for f in dict.fromkeys(table["flap"]) if f != "none"] or ["none"]
    modes = list(dict.fromkeys(table["mode"]))
    fig, axes = _figure(len(flaps), 5.2)
    for ax, flap in zip(axes, flaps, strict=True):
        for mode, rows in table[table["flap"] == flap].groupby("mode", sort=False):
            style = line_style(modes.index(mode), markers=False)
            ax.step(rows["t_s"], rows["goodput_gbps"], where="post", label=mode, **style)
        ax.set(xlabel="time (s)", ylabel="job goodput (Gb/s)", title=f"flap {flap}")
    legend_outside(fig)
    return [fig]


def topology_figures(table: pd.DataFrame) -> list[Figure]:
    """Switches and switch-to-switch capacity of each build that fits, per GPU count."""
    if not {"gpus", "build", "fits", "switches"} <= set(table.columns):
        return []
    fits = table[table["fits"]]
    fig, axes = _figure(2, 4.8)
    for ax, col, title in zip(
        axes,
        ("switches", "fabric_cable_tbps"),
        ("Switches", "Switch-to-switch cables (Tb/s)"),
        strict=True,
    ):
        counts = list(dict.fromkeys(fits["gpus"]))
        builds = list(dict.fromkeys(fits["build"]))
        width = 0.8 / len(builds)
        for i, build in enumerate(builds):
            rows = fits[fits["build"] == build].set_index("gpus").reindex(counts)
            ax.bar(np.arange(len(counts)) + i * width, rows[col], width, label=build)
        ax.set_xticks(np.arange(len(counts)) + 0.4 - width / 2, [f"{n:,} GPUs" for n in counts])
        ax.set(yscale="log", title=title)
    legend_outside(fig)
    return [fig]


FIGURES["fabric_topologies"] = topology_figures
FIGURES[S.STEMS["line_rate"]] = line_rate_figures
FIGURES[S.STEMS["isolation"]] = isolation_figures
FIGURES[S.STEMS["failures"]] = failures_figures
FIGURES[S.STEMS["flaps"]] = flaps_figures
FIGURES[S.TIMELINE_STEM] = flap_timeline_figures
