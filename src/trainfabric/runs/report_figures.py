"""Figures of the report: shared styling, the generic figures, PNG encoding.

Styling (used by the experiments' own figures too): :func:`line_style` gives series ``i`` its
own marker, dash pattern, line width and marker size, hollow markers and widths shrinking with
``i``, so a line drawn exactly on top of another (spraying under adaptive routing) still
shows: its larger marker rings the later one and its wider line shows beside the later one's
dashes. :func:`legend_outside`
puts one legend for the whole figure to the right of the axes, so no legend covers a bar or
a line.

Generic figures, one per numeric result column that varies (not a boolean): the column's
per-cell mean, averaged over seeds (and over any swept parameters beyond the first two) with
min-max bars, against the first varying swept parameter (numeric preferred), one line per
value of the next; a histogram when nothing is swept.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_FIGURES = 12
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_DASHES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 1)), (0, (8, 2)))


def line_style(i: int, markers: bool = True) -> dict[str, Any]:
    """Keyword arguments of ``Axes.plot``/``errorbar``/``step`` for series ``i`` (module
    docs); ``markers=False`` for dense series (timelines): dashes and widths only."""
    k = i % len(_MARKERS)
    style: dict[str, Any] = {"linestyle": _DASHES[k], "linewidth": max(0.8, 2.2 - 0.4 * k)}
    if markers:
        style |= {
            "marker": _MARKERS[k],
            "markersize": 9.0 - 0.8 * k,
            "markerfacecolor": "none",
            "markeredgewidth": 1.4,
        }
    return style


def legend_outside(fig: Figure, title: str | None = None) -> None:
    """One legend for every labelled artist of ``fig``'s axes, outside them on the right
    (needs the figure's constrained layout); duplicate labels are shown once."""
    entries: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(text, handle)
    if entries:
        fig.legend(
            list(entries.values()),
            list(entries),
            loc="outside right upper",
            fontsize="small",
            title=title,
            title_fontsize="small",
        )


def new_figure(ncols: int = 1, width: float = 6.4, height: float = 4.0) -> tuple[Figure, Any]:
    """A constrained-layout figure on the Agg canvas with ``ncols`` axes side by side
    (an array of axes; a single axes when ``ncols == 1``), ``width`` inches per axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, ncols)


def png_base64(fig: Figure) -> str:
    """``fig`` as a base64-encoded PNG at 100 dpi."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def generic_figures(
    table: pd.DataFrame, swept: list[str], values: list[str]
) -> tuple[list[Figure], str]:
    """The generic figures of ``values`` (module docs) and a note on columns not plotted."""
    varying = [c for c in swept if table[c].nunique() > 1]
    x = next((c for c in varying if pd.api.types.is_numeric_dtype(table[c])), None)
    x = x or (varying[0] if varying else None)
    values = [y for y in values if _varies(table[y])]
    plotted = values[:MAX_FIGURES]
    note = f"{len(values) - len(plotted)} more columns not plotted." if values[MAX_FIGURES:] else ""
    if x is None:
        return [_histogram(table, y) for y in plotted], note
    others = [c for c in varying if c != x]
    return [_sweep_figure(table, y, x, others) for y in plotted], note


def _varies(column: pd.Series) -> bool:
    """A number (not a boolean) with at least two distinct values: worth a figure."""
    return not pd.api.types.is_bool_dtype(column) and column.nunique() > 1


def _sweep_figure(table: pd.DataFrame, y: str, x: str, others: list[str]) -> Figure:
    """Mean of ``y`` per cell, then mean and min-max over seeds (and ``others[1:]``) against
    ``x``, one line per value of ``others[0]``."""
    hue = others[0] if others else None
    cell_keys = [x, *others] + (["seed"] if "seed" in table.columns else [])
    per_cell = table.groupby(cell_keys, sort=False)[y].mean().reset_index()
    keys = [x] + ([hue] if hue else [])
    stats = per_cell.groupby(keys, sort=False)[y].agg(["mean", "min", "max"]).reset_index()
    numeric_x = pd.api.types.is_numeric_dtype(stats[x])
    categories = list(dict.fromkeys(stats[x]))
    fig, ax = new_figure()
    groups = stats.groupby(hue, sort=False) if hue else [(None, stats)]
    for i, (value, group) in enumerate(groups):
        group = group.sort_values(x) if numeric_x else group
        xs = group[x] if numeric_x else [categories.index(v) for v in group[x]]
        spread = [group["mean"] - group["min"], group["max"] - group["mean"]]
        err = np.clip(np.vstack(spread), 0.0, None)  # rounding can put a mean past its min/max
        name = f"{hue} = {value}" if hue else None
        ax.errorbar(xs, group["mean"], yerr=err, capsize=3, label=name, **line_style(i))
    if not numeric_x:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    legend_outside(fig)
    averaged = f", {', '.join(others[1:])}" if others[1:] else ""
    ylabel = f"{y} (mean per cell)" if len(table) > len(per_cell) else y
    ax.set(xlabel=x, ylabel=ylabel, title=f"{y}: mean and min-max over seeds{averaged}")
    return fig


def _histogram(table: pd.DataFrame, y: str) -> Figure:
    values = table[y].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    fig, ax = new_figure()
    ax.hist(values, bins=_bins(values))
    ax.set(xlabel=y, ylabel="rows", title=f"{y}: distribution over {values.size} finite rows")
    return fig


def _bins(values: np.ndarray) -> np.ndarray | int:
    """numpy's ``"auto"`` bin edges; one bin where the spread is below float resolution
    (e.g. 4.8e9 ± 2e-6: numpy refuses ``"auto"`` there); 10 for no values."""
    if values.size == 0:
        return 10
    try:
        return np.histogram_bin_edges(values, bins="auto")
    except ValueError:
        return 1
