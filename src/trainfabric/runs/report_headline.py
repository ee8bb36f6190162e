"""A run's ``summary.json`` (what its command's ``--json`` printed) in words and numbers: the
report's "Command output" section, collapsed at the end (the findings open the report).

The summary is strict JSON written by :func:`trainfabric.io.write_json`, so a non-finite
value arrives as ``null`` beside a ``<key>_nonfinite`` reason; it is turned back into the
float it was and shown as "—" with a note. Layout, by shape:

* scalars of one object: one (name, value) table, names in words with their unit
  (``wall_s`` -> "wall (s)"); verdict strings (keys with ``verdict`` or starting ``vs_``) as
  badges;
* an object of objects of scalars (per mode, per policy): one table, a row per outer key;
* counts under a verdict key (``{"beats": 3, "ties": 13}``): a line of badges;
* deeper objects: a heading per key, naming its path (``regimes · bursty``), then recursion;
  when two or more sibling objects hold scalars (``steps.sweep.wall_s``,
  ``steps.fabric.wall_s``), those scalars share one table, a row per sibling;
* a list of objects (per-row data, not a headline figure): a table of its first rows,
  collapsed; a list of scalars: one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from trainfabric import io
from trainfabric.errors import ConfigError
from trainfabric.io import NONFINITE_SUFFIX
from trainfabric.runs.report_tables import (
    MAX_ROWS,
    cell,
    esc,
    is_verdict,
    kv_html,
    notes_html,
    table_html,
)

SKIPPED = ("report",)  # the path of the page itself
UNITS = {
    "_per_s": "/s",
    "_s": "s",
    "_us": "µs",
    "_bps": "bit/s",
    "_gbps": "Gb/s",
    "_bytes": "bytes",
    "_gb": "GB",
}


def read_summary(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is none. Strict JSON: ``NaN`` or
    ``Infinity`` in the file, invalid JSON or a non-object is a ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:  # the latter: not text at all
        raise ConfigError("run_dir", f"cannot read {path}: {exc}") from None
    try:
        summary = io.loads(text)
    except ValueError as exc:
        raise ConfigError("run_dir", f"{path} is not strict JSON: {exc}") from None
    if not isinstance(summary, dict):
        raise ConfigError("run_dir", f"{path} is not a JSON object")
    return summary


def headline_html(summary: dict[str, Any]) -> str:
    """The summary as HTML (module docs), non-finite values restored."""
    return _object_html(restore_nonfinite(summary), ())


def restore_nonfinite(obj: Any) -> Any:
    """Undo :func:`trainfabric.io.jsonable`: ``{"k": null, "k_nonfinite": "inf"}`` becomes
    ``{"k": inf}``, in every nested object and list."""
    if isinstance(obj, list):
        return [restore_nonfinite(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        reason = obj.get(f"{key}{NONFINITE_SUFFIX}")
        if value is None and reason in ("nan", "inf", "-inf"):
            value = float(reason)
        elif key.endswith(NONFINITE_SUFFIX) and obj.get(key[: -len(NONFINITE_SUFFIX)]) is None:
            continue
        out[key] = restore_nonfinite(value)
    return out


def label(key: str) -> str:
    """A key in words with its unit: ``queue_delay_s`` -> "queue delay (s)"."""
    for suffix, unit in UNITS.items():
        if key.endswith(suffix) and len(key) > len(suffix):
            return f"{key[: -len(suffix)].replace('_', ' ')} ({unit})"
    return key.replace("_", " ")


def _object_html(obj: dict[str, Any], path: tuple[str, ...], scalars: bool = True) -> str:
    """Scalars of ``obj`` in one table (under a heading naming ``path``), then each nested
    value: deeper objects recurse, anything else gets its own heading. When two or more
    nested objects hold scalars (per-step timings and counts), those scalars go in one
    table, a row per object."""
    own = _scalars(obj)
    parts = [_heading(path) + kv_html({label(k): v for k, v in own.items()})]
    parts = parts if scalars and own else []
    gathered = {k: _scalars(v) for k, v in obj.items() if _gatherable(k, v) and _scalars(v)}
    gathered = gathered if len(gathered) >= 2 else {}
    if gathered:
        rows = ({(path[-1] if path else ""): k} | v for k, v in gathered.items())
        parts.append(_heading(path) + table_html(_records(rows)))
    for key, value in obj.items():
        where = (*path, key)
        if _is_mixed(value):
            parts.append(_object_html(value, where, scalars=key not in gathered))
        elif not _is_scalar(value) and key not in gathered:
            parts.append(_heading(where) + _value_html(value, where))
    return "".join(parts)


def _gatherable(key: str, value: Any) -> bool:
    """Nested objects whose scalars may share one table (not verdict counts)."""
    flat = _is_flat_object(value) and not is_verdict(key)
    return flat or _is_mixed(value)


def _scalars(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if _is_scalar(v) and k not in SKIPPED}


def _is_mixed(value: Any) -> bool:
    """An object that is neither flat nor a matrix: rendered by recursion."""
    return isinstance(value, dict) and not _is_flat_object(value) and not _is_matrix(value)


def _heading(path: tuple[str, ...]) -> str:
    return f"<h3>{esc(' · '.join(label(p) for p in path))}</h3>\n" if path else ""


def _value_html(value: list[Any] | dict[str, Any], path: tuple[str, ...]) -> str:
    """A list, a flat object or an object of flat objects (a matrix) as HTML."""
    if isinstance(value, list):
        return _list_html(value)
    if _is_matrix(value):
        return table_html(_records({label(path[-1]): k} | v for k, v in value.items()))
    if is_verdict(path[-1]) and all(isinstance(v, int) for v in value.values()):
        return _verdict_counts(value)
    return kv_html({label(k): v for k, v in value.items()})


def _verdict_counts(counts: dict[str, int]) -> str:
    badges = ", ".join(f"{n} x {cell(v, 'verdict', set())}" for v, n in counts.items())
    return f"<p class='verdicts'>{badges}</p>\n"


def _list_html(items: list[Any]) -> str:
    if items and all(_is_flat_object(v) for v in items):
        cut = f"first {MAX_ROWS} of " if len(items) > MAX_ROWS else ""
        table = table_html(_records(items[:MAX_ROWS]))
        return f"<details><summary>{cut}{len(items)} records</summary>\n{table}</details>\n"
    seen: set[str] = set()
    return f"<p>{', '.join(cell(v, '', seen) for v in items)}</p>\n" + notes_html(seen)


def _records(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Flat objects as a frame, a column per key (in words) in order of appearance, verdicts
    right after the first; a key absent from an object is ``None`` (a blank cell, not a NaN's
    "—")."""
    records = list(records)
    columns = list(dict.fromkeys(k for r in records for k in r))
    verdicts = [c for c in columns[1:] if is_verdict(c)]  # shown first, after the row name
    columns = columns[:1] + verdicts + [c for c in columns[1:] if c not in verdicts]
    rows = [[r.get(c) for c in columns] for r in records]
    return pd.DataFrame(rows, columns=[label(c) for c in columns], dtype=object)


def _is_matrix(value: dict[str, Any]) -> bool:
    return bool(value) and all(_is_flat_object(v) and v for v in value.values())


def _is_flat_object(value: Any) -> bool:
    return isinstance(value, dict) and all(_is_scalar(v) for v in value.values())


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
