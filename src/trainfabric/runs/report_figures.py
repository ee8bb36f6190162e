"""Figures of the report: shared styling, the figures the report draws itself, what a figure
shows, PNG encoding.

Styling (used by the experiments' own figures too): :func:`line_style` gives series ``i`` its
own marker, dash pattern, line width and marker size, hollow markers and widths shrinking with
``i``, so a line drawn exactly on top of another (spraying under adaptive routing) still
shows: its larger marker rings the later one and its wider line shows beside the later one's
dashes. :func:`legend_outside` puts one legend for the whole figure to the right of the axes,
so no legend covers a bar or a line; :func:`fit_titles` wraps an axes title to its axes'
width, so no title runs into that legend.

Figures the report draws itself:

* :func:`comparison_figure`: the metric of a finding per named alternative (mode, method,
  policy), a horizontal bar each with its value written beside it, one colour per group of
  the other keys; a log axis when the values span more than :data:`LOG_SPAN`;
* :func:`generic_figures`, for a sweep with no figures of its own: per result column that
  varies (not an identifier, not a boolean, not constant up to rounding), the per-cell mean,
  averaged over seeds (and over any swept parameters beyond the first two) with min-max bars,
  against the first varying swept parameter (numeric preferred), one line per value of the
  next. Nothing is drawn for a table without a swept parameter (no histograms of columns).

What a figure shows: :func:`data_artists` counts, per axes, the artists that put data on the
visible area (module docs of :mod:`.report`); an axes with none is empty.
"""

from __future__ import annotations

import base64
import io
import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from trainfabric.runs.report_tables import is_identifier, varies

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_FIGURES = 6  # generic figures of one sweep
MAX_WIDTH_PX = 1100  # a figure's PNG is at most this wide (the page's column is 72em)
DPI = 100
LOG_SPAN = 50.0  # a comparison whose largest value is more than this times its smallest: log x
MAX_GROUPS = 6
LEGEND_CHARS = 32  # a group's description wraps at this width in the legend
_MIN_EXTENT = 1e-3  # of the axes: a bar thinner than this is not seen
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


def png_base64(fig: Figure) -> tuple[str, int]:
    """``fig`` as a base64-encoded PNG and its width in pixels: :data:`DPI` dots per inch,
    fewer where the figure would be wider than :data:`MAX_WIDTH_PX`."""
    width_in = float(fig.get_size_inches()[0])
    dpi = min(DPI, MAX_WIDTH_PX / width_in)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return base64.b64encode(buffer.getvalue()).decode("ascii"), int(width_in * dpi)


def fit_titles(fig: Figure) -> None:
    """Wrap each axes title to about its axes' width (characters of ~0.55 em), so a long
    title stays above its axes instead of running under a legend outside them."""
    width_in = float(fig.get_size_inches()[0])
    for ax in fig.axes:
        text = ax.get_title()
        size_pt = ax.title.get_fontsize()
        chars = int(ax.get_position().width * width_in * 72.0 / (0.55 * size_pt))
        if text and chars > 10 and any(len(line) > chars for line in text.split("\n")):
            lines = [textwrap.fill(line, chars) for line in text.split("\n")]
            ax.set_title("\n".join(lines))


# -- what a figure shows ----------------------------------------------------------------------
def data_axes(fig: Figure) -> list[Axes]:
    """The axes of ``fig`` meant to show data (visible, axis on, not a colorbar)."""
    return [
        ax
        for ax in fig.axes
        if ax.get_visible() and ax.axison and getattr(ax, "_colorbar", None) is None
    ]


def data_artists(ax: Axes) -> int:
    """How many artists of ``ax`` put data inside its view: lines in data coordinates (not
    reference lines such as ``axhline``) with a marker on a point inside the view, or a
    stretch of at least two distinct points crossing it; patches (bars) and collections
    (scatter, error bars, Gantt bars, fills) whose extent inside the view is at least
    :data:`_MIN_EXTENT` of the axes; and images."""
    ax.get_xlim(), ax.get_ylim()  # settle autoscaled limits before reading transforms
    to_axes = ax.transAxes.inverted()
    shown = sum(_line_shows(line, ax, to_axes) for line in ax.lines if line.get_visible())
    shown += sum(
        _extent_shows(p.get_path().get_extents(p.get_transform() + to_axes))
        for p in ax.patches
        if p.get_visible()
    )
    shown += sum(_collection_shows(c, to_axes) for c in ax.collections if c.get_visible())
    return shown + len(ax.images)


def _line_shows(line: Any, ax: Axes, to_axes: Any) -> bool:
    transform = line.get_transform()
    if not transform.contains_branch(ax.transData):
        return False  # axhline/axvline: a reference, not data
    xy = (transform + to_axes).transform(np.asarray(line.get_xydata(), dtype=float))
    xy = xy[np.isfinite(xy).all(axis=1)]
    inside = xy[((xy >= 0.0) & (xy <= 1.0)).all(axis=1)]
    if line.get_marker() not in (None, "None", "", " ") and len(inside):
        return True
    drawn = line.get_linestyle() not in ("None", "", " ")
    return (
        drawn
        and len(np.unique(np.round(xy, 6), axis=0)) >= 2
        and _extent_shows(_bounds(xy), either=True)
    )


def _collection_shows(collection: Any, to_axes: Any) -> bool:
    from matplotlib.collections import PathCollection

    if isinstance(collection, PathCollection):  # scatter: markers at the offsets
        xy = (collection.get_offset_transform() + to_axes).transform(collection.get_offsets())
        xy = xy[np.isfinite(xy).all(axis=1)]
        return bool(((xy >= 0.0) & (xy <= 1.0)).all(axis=1).any())
    transform = collection.get_transform() + to_axes
    return any(_extent_shows(p.get_extents(transform), either=True) for p in collection.get_paths())


def _bounds(xy: np.ndarray) -> Any:
    from matplotlib.transforms import Bbox

    return Bbox([xy.min(axis=0), xy.max(axis=0)])


def _extent_shows(box: Any, either: bool = False) -> bool:
    """True when ``box`` (axes coordinates) overlaps the view by at least :data:`_MIN_EXTENT`
    in both directions (``either``: in one, for lines)."""
    w = min(box.x1, 1.0) - max(box.x0, 0.0)
    h = min(box.y1, 1.0) - max(box.y0, 0.0)
    if not (np.isfinite(w) and np.isfinite(h)) or w < 0 or h < 0:
        return False
    return (w >= _MIN_EXTENT or h >= _MIN_EXTENT) if either else min(w, h) >= _MIN_EXTENT


# -- the report's own figures -----------------------------------------------------------------
def comparison_figure(
    groups: dict[str, dict[str, float]], xlabel: str, ylabel: str, title: str
) -> Figure:
    """A horizontal bar per name and group (module docs), values written beside the bars;
    ``groups`` maps a group's description ("" for one group) to ``{name: value}``."""
    groups = dict(list(groups.items())[:MAX_GROUPS])
    names = list(dict.fromkeys(n for values in groups.values() for n in values))
    height = 0.8 / len(groups)
    fig, ax = new_figure(width=7.5, height=1.4 + 0.32 * len(names) * len(groups))
    for j, (context, values) in enumerate(groups.items()):
        ys = [i + j * height for i, n in enumerate(names) if n in values]
        vs = [float(values[n]) for n in names if n in values]
        label = textwrap.fill(context, LEGEND_CHARS) if context else None
        bars = ax.barh(ys, vs, height, color=f"C{j}", label=label)
        ax.bar_label(bars, labels=[f"{v:.4g}" for v in vs], padding=3, fontsize="small")
    ax.set_yticks([i + height * (len(groups) - 1) / 2 for i in range(len(names))], names)
    ax.invert_yaxis()
    finite = np.array([v for values in groups.values() for v in values.values()], dtype=float)
    if finite.min() > 0 and finite.max() > LOG_SPAN * finite.min():
        ax.set_xscale("log")
    ax.margins(x=0.18)  # room for the values written beside the bars
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if len(groups) > 1:
        legend_outside(fig)
    return fig


def generic_figures(table: pd.DataFrame, swept: list[str], values: list[str]) -> list[Figure]:
    """The generic figures of ``values`` (module docs), of the first :data:`MAX_FIGURES`
    that vary (the report's tables hold every column)."""
    varying = [c for c in swept if table[c].nunique() > 1]
    x = next((c for c in varying if pd.api.types.is_numeric_dtype(table[c])), None)
    x = x or (varying[0] if varying else None)
    values = [y for y in values if not is_identifier(y) and varies(table[y])]
    if x is None:
        return []
    others = [c for c in varying if c != x]
    return [_sweep_figure(table, y, x, others) for y in values[:MAX_FIGURES]]


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
