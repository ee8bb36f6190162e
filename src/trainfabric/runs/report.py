"""HTML reports of run directories: tables and matplotlib figures in one self-contained file.

:func:`render_report` renders every ``*.parquet`` table at the top level of a run directory
(for a sweep, ``results.parquet``), with the manifest summary when ``manifest.json`` exists.
Per table: a summary (means per grid point, or ``describe()`` without swept parameters), the
first :data:`MAX_ROWS` rows, and figures (PNG, base64-embedded, rendered with Agg).

Generic figures, one per numeric result column (not ``seed``, ``cell_id``, swept parameters
or the experiment's identifier ``keys``): the column's per-cell mean, averaged over seeds (and
over any swept parameters beyond the first two) with min-max bars, against the first varying
swept parameter (numeric preferred), one line per value of the next; a histogram when nothing
is swept.

A table can have its own figures: ``FIGURES[key] = fn`` where ``fn(table)`` returns a list of
:class:`matplotlib.figure.Figure` (build them with ``Figure()``, not pyplot). ``key`` is the
table's file stem (e.g. ``ocs_compare`` for ``ocs_compare.parquet``) or, for
``results.parquet``, the experiment named by the manifest. An empty list falls back to the
generic figures.
"""

from __future__ import annotations

import base64
import html
import io as stdlib_io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from trainfabric import io
from trainfabric.errors import ConfigError
from trainfabric.runs import registry
from trainfabric.runs.store import RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES: dict[str, Callable[[pd.DataFrame], list[Figure]]] = {}
MAX_ROWS = 50
MAX_FIGURES = 12
BOOKKEEPING = ("seed", "cell_id")

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f3f3f3; }
img { max-width: 100%; margin: 0.5em 0; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; }
.note { color: #666; }
"""


def render_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report.html`` (atomically) and return its path.

    Works for any directory holding Parquet tables at its top level; ``manifest.json`` is
    optional. A missing directory, no tables or an unreadable table is a ConfigError.
    """
    store = RunDir(run_dir)
    if not store.path.is_dir():
        raise ConfigError("run_dir", f"not a directory: {store.path}")
    paths = sorted(store.path.glob("*.parquet"))
    if not paths:
        hint = " (an unfinished sweep? re-run it to finish)" if store.cells_dir.is_dir() else ""
        raise ConfigError("run_dir", f"no Parquet tables in {store.path}{hint}")
    manifest = store.read_manifest() or {}
    registry.load_library()  # tables' own figures register on import
    title = f"trainfabric report: {manifest.get('spec', {}).get('name') or store.path.name}"
    sections = [_manifest_section(manifest)]
    sections += [_table_section(p.stem, _read_table(p), manifest) for p in paths]
    return io.write_text(store.report_path, _page(title, sections))


def _read_table(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise ConfigError("run_dir", f"cannot read {path}: {exc}") from None


def _page(title: str, sections: list[str]) -> str:
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{_esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{_esc(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def _manifest_section(manifest: dict[str, Any]) -> str:
    """Experiment, seeds, cells, timing, git commit and package versions."""
    if not manifest:
        return "<p class='note'>No manifest.json in this directory.</p>"
    git = manifest.get("git")
    commit = (
        "not a git checkout" if not git else git["commit"] + (" (dirty)" if git["dirty"] else "")
    )
    seeds = manifest.get("seeds", [])
    rows = {
        "experiment": manifest.get("experiment"),
        "description": manifest.get("description"),
        "seeds": f"{len(seeds)}: {_abbrev(seeds)}",
        "cells": len(manifest.get("cells", [])),
        "swept": ", ".join(manifest.get("swept", [])) or "nothing",
        "fixed config": json.dumps(manifest.get("config", {}), sort_keys=True),
        "executor": manifest.get("executor"),
        "host": manifest.get("hostname"),
        "started (UTC)": manifest.get("started"),
        "finished (UTC)": manifest.get("finished"),
        "computed / skipped": f"{manifest.get('computed')} / {manifest.get('skipped')}",
        "git commit": commit,
    }
    versions = manifest.get("versions", {})
    spec = json.dumps(manifest.get("spec", {}), indent=2, sort_keys=True)
    return (
        "<h2>Run</h2>\n"
        + _kv_table(rows)
        + "<h3>Versions</h3>\n"
        + _kv_table(versions)
        + f"<h3>Sweep spec</h3>\n<pre>{_esc(spec)}</pre>\n"
    )


def _table_section(name: str, table: pd.DataFrame, manifest: dict[str, Any]) -> str:
    swept = [c for c in manifest.get("swept", []) if c in table.columns and _is_scalar(table[c])]
    values = _value_columns(table, [*swept, *manifest.get("keys", [])])
    parts = [
        f"<h2>Table {_esc(name)}</h2>\n",
        f"<p>{len(table)} rows x {len(table.columns)} columns.</p>\n",
    ]
    if values:
        if swept:
            summary = table.groupby(swept, sort=False)[values].mean().reset_index()
            caption = "Mean per grid point (over seeds and rows)"
        else:
            with np.errstate(invalid="ignore"):  # inf entries (e.g. unstable queues) give nan
                summary = table[values].describe().reset_index(names="statistic")
            caption = "Summary statistics"
        parts.append(f"<h3>{caption}</h3>\n" + _html_table(summary))
    shown = min(len(table), MAX_ROWS)
    parts.append(f"<h3>Rows</h3>\n<p class='note'>First {shown} of {len(table)} rows.</p>\n")
    parts.append(_html_table(table.head(MAX_ROWS)))
    key = manifest.get("experiment") if name == "results" else name
    figures, note = _figures(table, key, swept, values)
    parts += [f'<img src="data:image/png;base64,{_png(fig)}" alt="figure">\n' for fig in figures]
    if note:
        parts.append(f"<p class='note'>{_esc(note)}</p>\n")
    return "".join(parts)


def _figures(
    table: pd.DataFrame, key: str | None, swept: list[str], values: list[str]
) -> tuple[list[Figure], str]:
    """The table's own figures if any were registered, else the generic ones; and a note."""
    hook = FIGURES.get(key) if key else None
    if hook is not None:
        own = hook(table)
        if own:
            return own, ""
    varying = [c for c in swept if table[c].nunique() > 1]
    x = next((c for c in varying if pd.api.types.is_numeric_dtype(table[c])), None)
    x = x or (varying[0] if varying else None)
    plotted = values[:MAX_FIGURES]
    note = f"{len(values) - len(plotted)} more columns not plotted." if values[MAX_FIGURES:] else ""
    if x is None:
        return [_histogram(table, y) for y in plotted], note
    others = [c for c in varying if c != x]
    return [_sweep_figure(table, y, x, others) for y in plotted], note


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
    fig, ax = _new_figure()
    for label, group in stats.groupby(hue, sort=False) if hue else [(None, stats)]:
        group = group.sort_values(x) if numeric_x else group
        xs = group[x] if numeric_x else [categories.index(v) for v in group[x]]
        spread = [group["mean"] - group["min"], group["max"] - group["mean"]]
        err = np.clip(np.vstack(spread), 0.0, None)  # rounding can put a mean past its min/max
        name = f"{hue} = {label}" if hue else None
        ax.errorbar(xs, group["mean"], yerr=err, marker="o", capsize=3, label=name)
    if not numeric_x:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    if hue:
        ax.legend(fontsize="small")
    averaged = f", {', '.join(others[1:])}" if others[1:] else ""
    ylabel = f"{y} (mean per cell)" if len(table) > len(per_cell) else y
    ax.set(xlabel=x, ylabel=ylabel, title=f"{y}: mean and min-max over seeds{averaged}")
    return fig


def _histogram(table: pd.DataFrame, y: str) -> Figure:
    values = table[y].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    fig, ax = _new_figure()
    ax.hist(values, bins="auto" if values.size else 10)
    ax.set(xlabel=y, ylabel="rows", title=f"{y}: distribution over {values.size} rows")
    return fig


def _new_figure() -> tuple[Figure, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _png(fig: Figure) -> str:
    buffer = stdlib_io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _value_columns(table: pd.DataFrame, exclude: list[str]) -> list[str]:
    """Numeric (non-boolean) columns not in ``exclude`` nor bookkeeping: the results."""
    skip = set(exclude) | set(BOOKKEEPING)
    return [
        c
        for c in table.columns
        if c not in skip
        and pd.api.types.is_numeric_dtype(table[c])
        and not pd.api.types.is_bool_dtype(table[c])
    ]


def _is_scalar(column: pd.Series) -> bool:
    return bool(column.map(lambda v: isinstance(v, str | int | float | bool | np.generic)).all())


def _html_table(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, border=0, float_format=lambda v: f"{v:.6g}") + "\n"


def _kv_table(rows: dict[str, Any]) -> str:
    cells = "".join(
        f"<tr><th>{_esc(k)}</th><td>{_esc('' if v is None else v)}</td></tr>"
        for k, v in rows.items()
    )
    return f"<table>{cells}</table>\n"


def _abbrev(items: list[Any], limit: int = 20) -> str:
    text = ", ".join(str(i) for i in items[:limit])
    return text + (", ..." if len(items) > limit else "")


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
