"""Tables of the report: how a table is summarised, and how any frame becomes HTML.

Summaries answer the question the table was built for, per method and per grid point:

* **Grouping keys** are every categorical column (strings), every swept parameter,
  and every numeric *design* column: one whose set of values is the same, with at least two
  values, in every group of the categorical columns, swept parameters and replicates (e.g. the
  message sizes of a line-rate table, the failed fractions of a failure table).
* **Replicates** are ``seed``, ``draw`` and the experiment's id ``keys`` (e.g. ``shard``):
  the summary averages over them, and only over them. Identifiers are dropped: ``cell_id``,
  ``*_id``, and the indices of things a row is about (``link``, ``cable``, ``plane``,
  ``src_node``, ``*_node``, ``*_index``; the link a draw failed is not a quantity). Neither is
  ever averaged as a value, nor plotted.
* A table whose groups hold one row each is shown as it is (keys first). A table whose groups
  hold several rows but that has no replicate column is a series (a timeline): it gets no
  summary, since a mean over it would average different things.

Means keep non-finite values (``skipna=False``): a group with an ``inf`` (an unstable queue)
or an undefined value has an undefined mean, shown as "—" with a note under the table.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pandas as pd

REPLICATES = ("seed", "draw")
IDENTIFIERS = ("cell_id", "id", "link", "cable", "plane", "node", "group", "index")
IDENTIFIER_SUFFIXES = ("_id", "_node", "_index", "_idx")
CONSTANT_RTOL = 1e-9  # a spread below this fraction of the magnitude is rounding, not variation
MAX_ROWS = 50
DASH = "—"
NOTES = {
    "inf": "not finite (an infinite value, as an unstable queue or a zero rate gives)",
    "nan": "not a number (undefined: a missing value, or 0/0)",
}


# -- summaries --------------------------------------------------------------------------------
def summarize(
    table: pd.DataFrame, swept: list[str], keys: list[str]
) -> tuple[pd.DataFrame | None, str]:
    """The table's summary and a caption saying what it holds, or ``(None, reason)``.

    ``swept``: the sweep's swept parameters; ``keys``: the experiment's id columns
    (replicates). See the module docs for the grouping rules.
    """
    replicates = replicate_columns(table, keys)
    by, values = split_columns(table, swept, replicates)
    if not values:
        return None, "no numeric result columns"
    if not by:
        if not replicates:
            return None, "no grouping column and no replicates: see the raw rows"
        return table[values].agg(
            _mean_keep_nonfinite
        ).to_frame().T, f"mean over {_words(replicates)}"
    sizes = table.groupby(by, sort=False, dropna=False).size()
    if (sizes == 1).all():
        return table[by + values], f"one row per {_words(by)}"
    if not replicates:
        return None, f"{len(table)} rows, a series per {_words(by)}: see the figures"
    grouped = table.groupby(by, sort=False, dropna=False)[values]
    summary = grouped.agg(_mean_keep_nonfinite)
    summary.insert(0, "rows", sizes)
    return summary.reset_index(), f"mean per {_words(by)}, over {_words(replicates)}"


def replicate_columns(table: pd.DataFrame, keys: list[str]) -> list[str]:
    """The columns of ``table`` a summary averages over: seeds, draws and the id ``keys``."""
    return [c for c in (*REPLICATES, *keys) if c in table.columns]


def split_columns(
    table: pd.DataFrame, swept: list[str], replicates: list[str]
) -> tuple[list[str], list[str]]:
    """(grouping keys, value columns) of ``table`` (module docs)."""
    skip = set(replicates) | {c for c in table.columns if is_identifier(c)}
    categorical = [
        c for c in table.columns if c not in skip and (c in swept or _is_categorical(table[c]))
    ]
    numeric = [
        c for c in table.columns if c not in skip | set(categorical) and _is_number(table[c])
    ]
    subgroups = categorical + replicates
    design = [c for c in numeric if _is_design(table, c, subgroups)]
    by = [c for c in table.columns if c in set(categorical) | set(design)]
    return by, [c for c in numeric if c not in design]


def _is_design(table: pd.DataFrame, column: str, subgroups: list[str]) -> bool:
    """True when numeric ``column`` takes the same set of >= 2 values in every subgroup."""
    values = table[column]
    if pd.api.types.is_bool_dtype(values) or not subgroups or values.nunique(dropna=False) < 2:
        return False
    sets = values.groupby([table[c] for c in subgroups], sort=False, dropna=False).agg(frozenset)
    return len(sets) >= 2 and sets.nunique() == 1


def _mean_keep_nonfinite(column: pd.Series) -> float:
    """Mean that propagates NaN and inf (``Series.mean`` would skip NaN)."""
    with np.errstate(invalid="ignore"):
        return float(np.mean(column.to_numpy(dtype=float)))


def is_identifier(name: str) -> bool:
    """Names of identifiers and indices (module docs): never a value, never a figure."""
    return name in IDENTIFIERS or name.endswith(IDENTIFIER_SUFFIXES)


def varies(column: pd.Series) -> bool:
    """A number (not a boolean) whose finite values spread by more than rounding:
    ``max - min > CONSTANT_RTOL * max|v|`` (4.8e9 +- 2e-6 is constant)."""
    if pd.api.types.is_bool_dtype(column) or not pd.api.types.is_numeric_dtype(column):
        return False
    values = column.to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if values.size < 2:
        return False
    spread = float(values.max() - values.min())
    return spread > CONSTANT_RTOL * float(np.abs(values).max())


def _is_categorical(column: pd.Series) -> bool:
    """Strings (and missing values): method, mode, regime, policy, verdict."""
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        return False
    return bool(column.map(lambda v: v is None or v is pd.NA or isinstance(v, str)).all())


def _is_number(column: pd.Series) -> bool:
    """Numbers and booleans (a boolean's mean is the fraction of rows where it holds)."""
    return pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)


def _words(columns: list[str]) -> str:
    return " x ".join(columns)


# -- HTML -------------------------------------------------------------------------------------
def esc(value: Any) -> str:
    """``value`` as HTML-escaped text."""
    return html.escape(str(value), quote=True)


def is_verdict(name: str) -> bool:
    """Columns and keys whose strings are verdicts (shown as badges), named in code
    (``vs_matched_random``) or in words ("vs matched random")."""
    name = name.replace(" ", "_")
    return "verdict" in name or name.startswith("vs_")


def cell(value: Any, column: str, seen: set[str]) -> str:
    """One value as HTML: floats to 4 significant digits, non-finite as "—" (its kind added
    to ``seen``), missing as empty, verdict strings as badges."""
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, float | np.floating):
        if math.isfinite(value):
            return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.4g}"
        kind = "nan" if math.isnan(value) else "inf"
        seen.add(kind)
        return f"<span title='{'NaN' if kind == 'nan' else value}'>{DASH}</span>"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{value:,}"
    if isinstance(value, str) and is_verdict(column):
        return f"<span class='verdict verdict-{esc(value)}'>{esc(value)}</span>"
    return esc(value)


def table_html(frame: pd.DataFrame, caption: str = "") -> str:
    """``frame`` as a table inside a div that scrolls sideways on its own, then a note for
    each kind of non-finite value it shows."""
    seen: set[str] = set()
    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{cell(v, c, seen)}</td>" for c, v in zip(frame.columns, r, strict=True))
        + "</tr>"
        for r in frame.itertuples(index=False, name=None)
    )
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    table = f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    return f"<div class='table-wrap'>{table}</div>\n" + notes_html(seen)


def kv_html(rows: dict[str, Any], caption: str = "") -> str:
    """A two-column (name, value) table with the same cell formatting and notes."""
    seen: set[str] = set()
    body = "".join(
        f"<tr><th>{esc(k)}</th><td>{cell(v, k, seen)}</td></tr>" for k, v in rows.items()
    )
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<div class='table-wrap'><table class='kv'>{cap}{body}</table></div>\n" + notes_html(
        seen
    )


def notes_html(seen: set[str]) -> str:
    """One note line per kind of non-finite value shown ("—: not finite ...")."""
    return "".join(f"<p class='note'>{DASH} : {NOTES[k]}</p>\n" for k in sorted(seen))


def raw_rows_html(name: str, table: pd.DataFrame) -> str:
    """The first :data:`MAX_ROWS` rows inside a collapsed ``<details>``."""
    shown = min(len(table), MAX_ROWS)
    label = f"{name}: first {shown} of {len(table)} rows" if shown < len(table) else name
    label += f" ({len(table)} rows x {len(table.columns)} columns)" if shown == len(table) else ""
    return (
        f"<details><summary>{esc(label)}</summary>\n"
        + table_html(table.head(MAX_ROWS))
        + "</details>\n"
    )
