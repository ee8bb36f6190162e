"""HTML reports of run directories, read like a results section; one self-contained file.

:func:`render_report` renders a run directory (any directory holding ``*.parquet`` tables at
its top level; ``manifest.json`` and ``summary.json`` optional) into ``report.html``:

1. the title and the run's full description (the manifest's);
2. **Headline**: ``summary.json`` -- what the command's ``--json`` printed -- in words and
   numbers (:mod:`.report_headline`); for a sweep without one, the per-grid-point mean of
   each result column of ``results.parquet``;
3. **Figures**, per table;
4. **Tables**, each summarised per method and per grid point, never averaged across a
   categorical column, a design column or an id (:mod:`.report_tables`);
5. **Run**: the manifest (seeds, cells, timing, commit; versions and spec collapsed);
6. **Raw rows**, the first rows of each table, collapsed.

Every table scrolls sideways inside its own box, so the page itself keeps the window's width;
non-finite values are shown as "—" with a note under the table.

A table can have its own figures: ``FIGURES[key] = fn`` where ``fn(table)`` returns a list of
:class:`matplotlib.figure.Figure` (build them with ``Figure()``, not pyplot; see
:mod:`.report_figures` for the shared styling). ``key`` is the table's file stem (e.g.
``ocs_compare`` for ``ocs_compare.parquet``) or, for ``results.parquet``, the experiment
named by the manifest. An empty list falls back to the generic figures.
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
from trainfabric.runs.report_figures import generic_figures, png_base64
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
    headline, shown = _headline_section(summary, tables, manifest)
    sections = [
        _header(f"trainfabric report: {name}", manifest),
        headline,
        _figures_section(tables, manifest),
        _tables_section({k: t for k, t in tables.items() if k != shown}, manifest),
        _run_section(manifest),
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


def _headline_section(
    summary: dict[str, Any] | None, tables: dict[str, pd.DataFrame], manifest: dict[str, Any]
) -> tuple[str, str | None]:
    """The headline section and the stem of the table it shows (None if no table)."""
    if summary is not None:
        lead = "<p>What the command printed with <code>--json</code>.</p>\n"
        return _section("headline", "Headline", lead + headline_html(summary)), None
    if SWEEP_STEM in tables and manifest.get("cells"):
        table = tables[SWEEP_STEM]
        frame, caption = _summary(table, manifest)
        seeds, cells = len(manifest.get("seeds", [])), len(manifest["cells"])
        lead = (
            f"<p>Sweep of <b>{esc(manifest.get('experiment'))}</b>: {cells} cells "
            f"({cells // max(seeds, 1)} grid points x {seeds} seeds), {len(table)} rows.</p>\n"
        )
        body = table_html(frame, caption) if frame is not None else f"<p>{esc(caption)}</p>\n"
        return _section("headline", "Headline", lead + body), SWEEP_STEM
    listed = ", ".join(f"{esc(k)} ({len(t)} rows)" for k, t in tables.items())
    body = f"<p>No {SUMMARY_NAME} in this directory; its tables: {listed}.</p>\n"
    return _section("headline", "Headline", body), None


def _summary(table: pd.DataFrame, manifest: dict[str, Any]) -> tuple[pd.DataFrame | None, str]:
    return summarize(table, _swept(table, manifest), list(manifest.get("keys", [])))


def _swept(table: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    """The manifest's swept parameters that are columns of ``table`` with scalar values."""
    return [
        c
        for c in manifest.get("swept", [])
        if c in table.columns and table[c].map(lambda v: isinstance(v, str | int | float)).all()
    ]


def _figures_section(tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> str:
    parts = []
    for stem, table in tables.items():
        key = manifest.get("experiment") if stem == SWEEP_STEM else stem
        figures, note = _figures(table, key, manifest)
        images = "".join(
            f"<img src='data:image/png;base64,{png_base64(f)}' alt='{esc(stem)}: figure {i + 1}'>\n"
            for i, f in enumerate(figures)
        )
        note_html = f"<p class='note'>{esc(note)}</p>\n" if note else ""
        parts.append(f"<h3>{esc(stem)}</h3>\n{images}{note_html}" if images else "")
    return _section("figures", "Figures", "".join(parts) or "<p>No figures.</p>\n")


def _figures(
    table: pd.DataFrame, key: str | None, manifest: dict[str, Any]
) -> tuple[list[Figure], str]:
    """The table's own figures if any were registered, else the generic ones; and a note."""
    hook = FIGURES.get(key) if key else None
    own = hook(table) if hook is not None else []
    if own:
        return own, ""
    swept = _swept(table, manifest)
    replicates = replicate_columns(table, manifest.get("keys", []))
    _, values = split_columns(table, swept, replicates)
    return generic_figures(table, swept, values)


def _tables_section(tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> str:
    parts = []
    for stem, table in tables.items():
        frame, caption = _summary(table, manifest)
        body = table_html(frame, caption) if frame is not None else f"<p>{esc(caption)}</p>\n"
        parts.append(f"<h3>{esc(stem)}</h3>\n{body}")
    if not parts:
        return ""
    return _section("tables", "Tables", "".join(parts))


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
