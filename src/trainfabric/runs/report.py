"""HTML reports of run directories, read like a results section; one self-contained file.

:func:`render_report` renders a run directory (any directory holding ``*.parquet`` tables at
its top level; ``manifest.json`` and ``summary.json`` optional) into ``report.html``, the
answer first and the details after it:

1. the title and the run's full description (the manifest's);
2. **Findings**: the answer in sentences with numbers and a comparison
   (:mod:`.report_findings`: the command's ``summary.json["findings"]``, else computed from
   the summary and the tables), then the one or two figures that carry it;
3. **Figures**: the other tables' own figures;
4. **Tables**, each summarised per method and per grid point, never averaged across a
   categorical column, a design column or an id (:mod:`.report_tables`);
5. **Run**: the manifest (seeds, cells, timing, commit; versions and spec collapsed);
6. **Command output**: ``summary.json`` -- what the command's ``--json`` printed -- in words
   and numbers (:mod:`.report_headline`), collapsed;
7. **Raw rows**, the first rows of each table, collapsed.

Which figures, and how (the figure-choice rules):

* The findings' figures: a bar chart of the first comparison the findings found (the metric
  per mode, method or policy, :func:`.report_figures.comparison_figure`), then the first
  figure of the key table: the sweep's ``results`` when the directory is a sweep, else the
  first of :data:`.report_findings.KEY_STEMS` present (failure slowdowns, the critical path,
  DiLoCo verdicts, OCS methods, ...).
* Every other figure is a table's own: ``FIGURES[key] = fn`` where ``fn(table)`` returns a
  list of :class:`matplotlib.figure.Figure` (build them with ``Figure()``, not pyplot; see
  :mod:`.report_figures` for the shared styling). ``key`` is the table's file stem (e.g.
  ``ocs_compare`` for ``ocs_compare.parquet``) or, for ``results.parquet``, the experiment
  named by the manifest. A sweep with none gets the generic sweep figures (per varying result
  column against the swept parameters); any other table gets no figure, only its summary
  table: no histogram of every column.
* Never an identifier nor a constant: identifiers and indices (``*_id``, ``link``,
  ``plane``, ``src_node``, ``seed``, ``draw``) and columns constant up to rounding are not
  plotted.
* Never an empty axis: the data artists of each axes are counted
  (:func:`.report_figures.data_artists`); an axes with none is removed, and a figure with no
  axes left is replaced by a sentence saying so. Each ``<img>`` carries ``data-artists``
  (data artists drawn) and ``data-min-artists`` (the fewest on one axes, so > 0).
* Legends outside the data (:func:`.report_figures.legend_outside`), axes titles wrapped to
  their axes (:func:`.report_figures.fit_titles`), and no image wider than the page's column
  (:data:`.report_figures.MAX_WIDTH_PX`).

Every table scrolls sideways inside its own box, so the page itself keeps the window's width;
non-finite values are shown as "—" with a note under the table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from trainfabric import io
from trainfabric.errors import ConfigError
from trainfabric.runs import registry
from trainfabric.runs.report_figures import (
    comparison_figure,
    data_artists,
    data_axes,
    fit_titles,
    generic_figures,
    png_base64,
)
from trainfabric.runs.report_findings import (
    KEY_STEMS,
    Comparison,
    Findings,
    findings,
    unit_of,
)
from trainfabric.runs.report_findings import words as metric_words
from trainfabric.runs.report_headline import headline_html, read_summary
from trainfabric.runs.report_tables import (
    esc,
    kv_html,
    raw_rows_html,
    replicate_columns,
    split_columns,
    summarize,
    table_html,
)
from trainfabric.runs.store import RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES: dict[str, Callable[[pd.DataFrame], list[Figure]]] = {}
SUMMARY_NAME = "summary.json"
SWEEP_STEM = "results"
_LITERAL = re.compile(r"``(.+?)``")  # reStructuredText literals in docstring descriptions

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em;
       max-width: 72em; color: #222; line-height: 1.4; }
.table-wrap { overflow-x: auto; max-width: 100%; margin: 0.5em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.9em; }
caption { caption-side: top; text-align: left; color: #555; padding: 0.2em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; }
table.kv th { text-align: left; }
table.kv td { text-align: left; white-space: normal; overflow-wrap: anywhere; }
img { display: block; max-width: 100%; height: auto; margin: 0.5em 0 1em; }
pre { background: #f7f7f7; padding: 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; }
.description { font-size: 1.05em; max-width: 60em; }
.note { color: #666; font-size: 0.9em; margin: -0.8em 0 1em; }
.verdict { font-weight: 600; padding: 0 0.4em; border-radius: 0.3em; background: #eee; }
.verdict-beats { background: #d7f0d7; color: #145214; }
.verdict-loses { background: #f6d5d5; color: #7a1010; }
p.verdicts { font-size: 1.1em; }
#findings p.finding { font-size: 1.15em; max-width: 60em; margin: 0.4em 0; }
details { margin: 0.3em 0; }
summary { cursor: pointer; }
"""


def render_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report.html`` (atomically) and return its path.

    A missing directory, no tables, an unreadable table or an unreadable ``summary.json``
    is a ConfigError naming ``run_dir``.
    """
    store = RunDir(run_dir, field="run_dir")
    if not store.path.is_dir():
        raise ConfigError("run_dir", f"not a directory: {store.path}")
    paths = sorted(store.path.glob("*.parquet"))
    if not paths:
        hint = " (an unfinished sweep? re-run it to finish)" if store.cells_dir.is_dir() else ""
        raise ConfigError("run_dir", f"no Parquet tables in {store.path}{hint}")
    manifest = store.read_manifest() or {}
    summary = read_summary(store.path / SUMMARY_NAME)
    tables = {p.stem: _read_table(p) for p in paths}
    registry.load_library()  # tables' own figures register on import
    name = manifest.get("spec", {}).get("name") or store.path.name
    figures = {
        stem: _figures(t, _figure_key(stem, manifest), manifest) for stem, t in tables.items()
    }
    key = _key_stem(tables, manifest, figures)
    sections = [
        _header(f"trainfabric report: {name}", manifest),
        _findings_section(findings(summary, tables, manifest, SWEEP_STEM), figures, key),
        _figures_section(figures, key),
        _tables_section(tables, manifest),
        _run_section(manifest),
        _command_section(summary),
        _raw_section(tables),
    ]
    return io.write_text(store.report_path, _page(f"trainfabric report: {name}", sections))


def _read_table(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise ConfigError("run_dir", f"cannot read {path}: {exc}") from None


def _page(title: str, sections: list[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "".join(sections)
        + "</body>\n</html>\n"
    )


def _section(key: str, title: str, body: str) -> str:
    return f"<section id='{key}'>\n<h2>{esc(title)}</h2>\n{body}</section>\n"


def _header(title: str, manifest: dict[str, Any]) -> str:
    """Title, and the run's description in full (never cut)."""
    what = manifest.get("experiment")
    lines = [f"<h1>{esc(title)}</h1>\n"]
    if manifest.get("description"):
        lead = f"<b>{esc(what)}</b>: " if what else ""
        text = _LITERAL.sub(r"<code>\1</code>", esc(manifest["description"]))
        lines.append(f"<p class='description'>{lead}{text}</p>\n")
    return "<header>\n" + "".join(lines) + "</header>\n"


# -- findings ---------------------------------------------------------------------------------
def _findings_section(found: Findings, figures: dict[str, list[Figure]], key: str | None) -> str:
    """The sentences, then the comparison's figure and the key table's first figure."""
    sentences = found.sentences or ["No comparison was recognised in this run's results."]
    parts = [f"<p class='finding'>{esc(s)}</p>\n" for s in sentences]
    if found.comparisons:
        parts.append(_images("comparison", [_comparison_figure(found.comparisons[0])]))
    if key is not None:
        parts.append(_images(key, figures[key][:1]))
    return _section("findings", "Findings", "".join(parts))


def _comparison_figure(c: Comparison) -> Figure:
    name, unit = metric_words(c.metric), unit_of(c.metric)
    better = {True: "lower is better", False: "higher is better", None: ""}[c.lower]
    said = "; ".join(s for s in (better, c.detail) if s)
    per = f" per {c.by}" if c.by else ""
    (context,) = c.groups if len(c.groups) == 1 else ("",)  # several: the legend names them
    where = f", {context}" if context else ""
    title = f"{name[:1].upper()}{name[1:]}{per}{where}" + (f" ({said})" if said else "")
    return comparison_figure(c.groups, f"{name} ({unit})" if unit else name, c.by, title)


def _key_stem(
    tables: dict[str, pd.DataFrame], manifest: dict[str, Any], figures: dict[str, list[Figure]]
) -> str | None:
    """The table whose first figure joins the findings: the sweep's, else the first of
    :data:`KEY_STEMS` with a figure."""
    sweep = [SWEEP_STEM] if SWEEP_STEM in tables and manifest.get("cells") else []
    return next((s for s in (*sweep, *KEY_STEMS) if figures.get(s)), None)


# -- figures ----------------------------------------------------------------------------------
def _figure_key(stem: str, manifest: dict[str, Any]) -> str | None:
    return manifest.get("experiment") if stem == SWEEP_STEM else stem


def _figures(table: pd.DataFrame, key: str | None, manifest: dict[str, Any]) -> list[Figure]:
    """The table's own figures if any were registered, else the generic sweep figures."""
    hook = FIGURES.get(key) if key else None
    own = hook(table) if hook is not None else []
    if own:
        return own
    swept = _swept(table, manifest)
    replicates = replicate_columns(table, manifest.get("keys", []))
    _, values = split_columns(table, swept, replicates)
    return generic_figures(table, swept, values)


def _figures_section(figures: dict[str, list[Figure]], key: str | None) -> str:
    """Every table's figures, but the key table's first (shown with the findings)."""
    figures = {stem: figs[1:] if stem == key else figs for stem, figs in figures.items()}
    parts = [
        f"<h3>{esc(stem)}</h3>\n{html}"
        for stem, figs in figures.items()
        if figs and (html := _images(stem, figs, first=2 if stem == key else 1))
    ]
    return _section("figures", "Figures", "".join(parts) or "<p>No other figures.</p>\n")


def _images(stem: str, figures: list[Figure], first: int = 1) -> str:
    """Each figure as an ``<img>`` (its empty axes removed, module docs), or a sentence for a
    figure with nothing to draw; numbered from ``first``."""
    return "".join(_image(fig, f"{stem}: figure {i}") for i, fig in enumerate(figures, first))


def _image(fig: Figure, alt: str) -> str:
    axes = data_axes(fig)
    counts = [data_artists(ax) for ax in axes]
    empty = [ax for ax, n in zip(axes, counts, strict=True) if n == 0]
    titles = ", ".join(repr(ax.get_title()) for ax in empty if ax.get_title())
    titles = f" ({titles})" if titles else ""
    if len(empty) == len(axes):
        said = f"{alt}: nothing to draw, no panel has visible data{titles}."
        return f"<p class='note'>{esc(said)}</p>\n"
    for ax in empty:
        fig.delaxes(ax)
    shown = [n for n in counts if n]
    fit_titles(fig)
    data, width = png_base64(fig)
    note = (
        f"<p class='note'>{len(empty)} panel(s) with no visible data not drawn{esc(titles)}.</p>\n"
        if empty
        else ""
    )
    return (
        f"<img src='data:image/png;base64,{data}' alt='{esc(alt)}' width='{width}' "
        f"data-artists='{sum(shown)}' data-min-artists='{min(shown)}'>\n{note}"
    )


# -- tables and the rest ----------------------------------------------------------------------
def _summary(table: pd.DataFrame, manifest: dict[str, Any]) -> tuple[pd.DataFrame | None, str]:
    return summarize(table, _swept(table, manifest), list(manifest.get("keys", [])))


def _swept(table: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    """The manifest's swept parameters that are columns of ``table`` with scalar values."""
    return [
        c
        for c in manifest.get("swept", [])
        if c in table.columns and table[c].map(lambda v: isinstance(v, str | int | float)).all()
    ]


def _tables_section(tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> str:
    parts = []
    for stem, table in tables.items():
        frame, caption = _summary(table, manifest)
        body = table_html(frame, caption) if frame is not None else f"<p>{esc(caption)}</p>\n"
        parts.append(f"<h3>{esc(stem)}</h3>\n{body}")
    return _section("tables", "Tables", "".join(parts))


def _command_section(summary: dict[str, Any] | None) -> str:
    """What the command printed with ``--json`` (its ``summary.json``), collapsed."""
    if summary is None:
        return _section(
            "command",
            "Command output",
            f"<p class='note'>No {SUMMARY_NAME} in this directory.</p>\n",
        )
    body = (
        "<details><summary>What the command printed with <code>--json</code></summary>\n"
        + headline_html(summary)
        + "</details>\n"
    )
    return _section("command", "Command output", body)


def _run_section(manifest: dict[str, Any]) -> str:
    """Experiment, seeds, cells, timing and git commit; versions and spec collapsed."""
    if not manifest:
        return _section("run", "Run", "<p class='note'>No manifest.json in this directory.</p>\n")
    git = manifest.get("git")
    commit = (
        "not a git checkout" if not git else git["commit"] + (" (dirty)" if git["dirty"] else "")
    )
    seeds = manifest.get("seeds", [])
    rows = {
        "experiment": manifest.get("experiment"),
        "seeds": f"{len(seeds)}: {_abbrev(seeds)}",
        "cells": len(manifest.get("cells", [])) or None,
        "swept": ", ".join(manifest.get("swept", [])) or "nothing",
        "fixed config": json.dumps(manifest.get("config", {}), sort_keys=True),
        "executor": manifest.get("executor"),
        "host": manifest.get("hostname"),
        "started (UTC)": manifest.get("started"),
        "finished (UTC)": manifest.get("finished"),
        "git commit": commit,
    }
    spec = json.dumps(manifest.get("spec", {}), indent=2, sort_keys=True)
    body = (
        kv_html({k: v for k, v in rows.items() if v is not None})
        + "<details><summary>package versions</summary>\n"
        + kv_html(manifest.get("versions", {}))
        + "</details>\n"
        + f"<details><summary>spec</summary>\n<pre>{esc(spec)}</pre>\n</details>\n"
    )
    return _section("run", "Run", body)


def _raw_section(tables: dict[str, pd.DataFrame]) -> str:
    body = "".join(raw_rows_html(stem, table) for stem, table in tables.items())
    return _section("raw", "Raw rows", body)


def _abbrev(items: list[Any], limit: int = 20) -> str:
    text = ", ".join(str(i) for i in items[:limit])
    return text + (", ..." if len(items) > limit else "")
