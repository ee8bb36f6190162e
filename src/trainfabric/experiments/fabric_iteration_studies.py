"""Figures of a training iteration on the fabric (the ``iteration`` scenario's tables).

* the critical path as a Gantt chart: its compute stretches and the collectives it waits for,
  one lane per category (compute, PP, DP, EP, other); and every collective (phase group) of the
  iteration, one lane per category, solid where the critical path walks through it;
* link utilisation over time per tier and plane (bits carried per bin over capacity x bin);
* slowdown distributions per load-balancing mode: static failed cables (per draw) and link
  flaps (per flap duration and side, as empirical CDFs), each against 1 (no slowdown).

Registered for the tables' file stems (:data:`trainfabric.runs.report.FIGURES`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from trainfabric.fabric.iteration import faults as IF
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside, line_style

COLLECTIVES_STEM = "fabric_iteration_collectives"
UTILISATION_STEM = "fabric_iteration_utilisation"
CRITICAL_STEM = "fabric_iteration_critical"
KIND_ORDER = ("PP", "DP", "EP", "other")


def _grid(nrows: int, ncols: int, width: float = 5.0, height: float = 3.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False))


def _first(table: pd.DataFrame, column: str):
    """The first value of ``column`` (one panel per job / mode / overlap: the report shows
    the first; the tables hold every one)."""
    return table[column].iloc[0] if column in table.columns and len(table) else None


def _one_run(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Rows of the first (job, mode, overlap) of ``table`` and a label for it."""
    keys = [k for k in ("job", "mode", "overlap") if k in table.columns]
    rows, label = table, []
    for k in keys:
        v = _first(rows, k)
        rows = rows[rows[k] == v]
        label.append(f"{k} {v}")
    return rows, ", ".join(label)


def _lanes(ax, rows: pd.DataFrame, lane: str, solid: np.ndarray | None, order) -> list:
    """Bars ``[start_s, finish_s)`` of ``rows``, one lane per value of ``lane`` (``order``
    first); hollow where ``solid`` is False."""
    names = [k for k in order if k in set(rows[lane])]
    names += [k for k in dict.fromkeys(rows[lane]) if k not in names]
    for i, name in enumerate(names):
        mine = (rows[lane] == name).to_numpy()
        for fill in (False, True):
            pick = mine & (solid == fill if solid is not None else fill)
            if not pick.any():
                continue
            part = rows[pick]
            spans = np.c_[part["start_s"], part["finish_s"] - part["start_s"]]
            ax.broken_barh(
                spans,
                (i - 0.35, 0.7),
                facecolors=f"C{i}" if fill else "none",
                edgecolors=f"C{i}",
                linewidth=0.6,
                label=f"{name} (on the critical path)" if fill and solid is not None else name,
            )
    ax.set_yticks(range(len(names)), names)
    return names


def gantt_figures(table: pd.DataFrame) -> list[Figure]:
    """Every collective (phase group) of the iteration over time, one lane per category
    (PP, DP, EP, other); those the critical path walks through solid, the others hollow."""
    if not {"start_s", "finish_s"} <= set(table.columns) or table.empty:
        return []
    rows, label = _one_run(table)
    lane = "category" if "category" in rows.columns else "kind"
    solid = rows["on_critical_path"].to_numpy(bool) if "on_critical_path" in rows else None
    fig, ax = _grid(1, 1, 11.0, 1.2 + 0.5 * rows[lane].nunique())
    _lanes(ax[0, 0], rows, lane, solid, KIND_ORDER)
    ax[0, 0].set(xlabel="time (s)", title=f"Collectives of one iteration ({label})")
    legend_outside(fig)
    return [fig]


def critical_figures(table: pd.DataFrame) -> list[Figure]:
    """The critical path as a Gantt chart: its compute stretches and the collectives it waits
    for, one lane per category (compute at the bottom), over the iteration."""
    if not {"start_s", "finish_s", "category"} <= set(table.columns) or table.empty:
        return []
    rows, label = _one_run(table)
    fig, ax = _grid(1, 1, 11.0, 1.2 + 0.5 * rows["category"].nunique())
    ax = ax[0, 0]
    _lanes(ax, rows, "category", None, ("compute", *KIND_ORDER))
    comm = rows[rows["category"] != "compute"]
    exposed = float((comm["finish_s"] - comm["start_s"]).sum())
    total = float(rows["finish_s"].max() - rows["start_s"].min())
    ax.set(
        xlabel="time (s)",
        title=f"Critical path ({label}): {total:.4g} s, of which communication {exposed:.4g} s",
    )
    legend_outside(fig)
    return [fig]


def utilisation_figures(table: pd.DataFrame) -> list[Figure]:
    """Utilisation over time, one panel per tier, one line per plane."""
    if not {"t_s", "tier", "plane", "utilisation"} <= set(table.columns) or table.empty:
        return []
    rows, label = _one_run(table)
    tiers = list(dict.fromkeys(rows["tier"]))
    fig, axes = _grid(1, len(tiers), 4.6)
    for ax, tier in zip(axes[0], tiers, strict=True):
        for i, (plane, part) in enumerate(rows[rows["tier"] == tier].groupby("plane")):
            part = part.sort_values("t_s")
            style = line_style(i, markers=False)
            ax.step(part["t_s"], part["utilisation"], where="post", label=f"plane {plane}", **style)
        ax.set(xlabel="time (s)", ylabel="utilisation", ylim=(0, 1.05), title=f"{tier}")
    fig.suptitle(f"Link utilisation over time per tier and plane ({label})", fontsize="medium")
    legend_outside(fig)
    return [fig]


def _ecdf(ax, values: np.ndarray, label: str, i: int) -> None:
    v = np.sort(values)
    ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label, **line_style(i, False))


def failures_figures(table: pd.DataFrame) -> list[Figure]:
    """Iteration slowdown per draw of failed cables, per mode (points, median marked)."""
    if not {"mode", "slowdown", "failed_fraction"} <= set(table.columns) or table.empty:
        return []
    modes = list(dict.fromkeys(table["mode"]))
    fig, axes = _grid(1, 1, 7.0)
    ax = axes[0, 0]
    rng = np.random.default_rng(0)
    for i, mode in enumerate(modes):
        v = table.loc[table["mode"] == mode, "slowdown"].to_numpy(float)
        x = i + rng.uniform(-0.15, 0.15, v.size)
        ax.plot(x, v, "o", ms=4, mfc="none", color=f"C{i}", label=mode)
        ax.plot([i - 0.3, i + 0.3], [np.median(v)] * 2, "k-", lw=2)
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    frac = ", ".join(f"{f:.0%}" for f in sorted(table["failed_fraction"].unique()))
    ax.set_xticks(range(len(modes)), modes)
    ax.set(
        ylabel="iteration time / healthy iteration time",
        title=f"Static failed leaf-spine cables ({frac}): slowdown per draw (bar: median)",
    )
    legend_outside(fig)
    return [fig]


def flaps_figures(table: pd.DataFrame) -> list[Figure]:
    """Empirical CDFs of the iteration slowdown per mode, one panel per side x duration."""
    if not {"mode", "side", "duration_s", "slowdown"} <= set(table.columns) or table.empty:
        return []
    sides = list(dict.fromkeys(table["side"]))
    durations = sorted(table["duration_s"].unique())
    modes = list(dict.fromkeys(table["mode"]))
    fig, axes = _grid(len(sides), len(durations), 4.4, 3.4)
    for r, side in enumerate(sides):
        for c, dur in enumerate(durations):
            ax = axes[r, c]
            part = table[(table["side"] == side) & (table["duration_s"] == dur)]
            for i, mode in enumerate(modes):
                v = part.loc[part["mode"] == mode, "slowdown"].to_numpy(float)
                if v.size:
                    _ecdf(ax, v, mode, i)
            ax.set(
                xlabel="iteration time / healthy iteration time",
                ylabel="share of draws",
                title=f"{side} flap, {dur * 1e3:g} ms",
            )
    legend_outside(fig)
    return [fig]


FIGURES[COLLECTIVES_STEM] = gantt_figures
FIGURES[CRITICAL_STEM] = critical_figures
FIGURES[UTILISATION_STEM] = utilisation_figures
FIGURES[IF.FAILURES_STEM] = failures_figures
FIGURES[IF.FLAPS_STEM] = flaps_figures
