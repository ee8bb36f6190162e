"""Findings: what a run directory answers, in sentences computed from its results.

Where the sentences come from (the first that applies):

1. ``summary.json["findings"]``: the sentences the command wrote, shown as they are.
2. A summary with ``steps`` (the demo): one sentence per step, headed by its name: the step's
   own ``findings``, else its first comparison (below), else its first result scalars.
3. Otherwise the sweep's best and worst grid point (a ``results`` table of a sweep), then a
   sentence per comparison of the summary and of the tables, :data:`MAX_FINDINGS` in all.

A **comparison** is one metric over named alternatives (modes, methods, policies):

* in the summary, an object of per-name objects of numbers (``modes: {ecmp: {...}, ...}``),
  compared on its primary metric; or an object of numbers keyed by names, under a key that
  names a metric with a direction (``sync_s_p99: {"ecmp@0": 0.57, ...}``);
* in a table, the first column of :data:`COMPARE_BY` with two or more values: the primary
  metric's mean over replicates per name, within each group of the other grouping keys
  (:mod:`.report_tables`' rules); a group of the keys that vary names its context.

Comparisons are ordered by their metric's place in :data:`PRIMARY`, then the summary's before
the tables', the tables of :data:`COMPARE_FIRST` first; the first one gets the findings' bar
chart, so the chart shows the quantity the sentences lead with.

The **primary metric** is the first of :data:`PRIMARY` present, else the first result whose
direction is known. The direction comes from the name's words: times (unit s), slowdowns,
gaps, regrets, violations, losses, stalls, latencies are lower-is-better; goodput, line rate,
throughput, bus bandwidth, isolation are higher-is-better; other quantities have none. The
simulator's own wall-clock time and standard errors are never findings.

A comparison's sentence names the best ``b`` and the worst ``w`` of its first group with their
values: the difference relative to the worst, ``|v_w - v_b| / |v_w|``, as a percentage when
the factor ``max(|v|) / min(|v|)`` is under 2, else that factor ("3.8x"); where a value is 0
or the two differ in sign, the absolute difference. With several groups it says in how many
the same name is best. A sweep's sentence gives the best and worst grid point (means over
seeds) and the factor between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trainfabric.runs.report_headline import UNITS
from trainfabric.runs.report_tables import (
    is_identifier,
    is_verdict,
    replicate_columns,
    split_columns,
    summarize,
    varies,
)
from trainfabric.tables import fmt_number

MAX_FINDINGS = 4
PRIMARY = (
    "iteration_s",
    "hard_critical_path_s",
    "critical_path_s",
    "makespan_s",
    "slo_violation_rate",
    "line_rate_fraction",
    "slowdown",
    "over_lb",
    "regret_s",
)
COMPARE_BY = ("mode", "method", "policy", "scheduler")
COMPARE_FIRST = ("fabric_iteration", "ocs_compare", "diloco_verdicts", "fabric_line_rate")
KEY_STEMS = (  # tables whose own figure carries a finding, in order of preference
    "fabric_iteration_failures",
    "fabric_iteration_critical",
    "diloco_verdicts",
    "ocs_compare",
    "cross_pillar_sync_under_failures",
    "fabric_line_rate",
    "sync_times",
)
LOWER_WORDS = frozenset(
    {"s", "us", "ms", "slowdown", "gap", "regret", "violation", "loss", "stall", "latency"}
    | {"delay", "increase", "lb", "exposed", "makespan", "error", "cost"}
)
HIGHER_WORDS = frozenset(
    {"goodput", "throughput", "busbw", "isolation", "line", "speedup", "bisection"}
)
NOT_FINDINGS = frozenset(  # the run's own cost, errors, interval ends, counts, time stamps
    {"wall", "se", "ci", "seeds", "rows", "events", "start", "finish", "t", "at", "bin"}
)
TIME_NOUNS = frozenset(
    {"time", "path", "makespan", "delay", "latency", "stall", "regret", "duration"}
)
CAPITALS = {"slo": "SLO", "ocs": "OCS", "dp": "DP", "pp": "PP", "ep": "EP", "milp": "MILP"} | {
    "lb": "lower bound"
}
PLURALS = {"modes": "mode", "methods": "method", "policies": "policy", "regimes": "regime"}


@dataclass(frozen=True)
class Comparison:
    """``metric`` over names, per group: ``groups[context] = {name: value}`` (context ""
    for a single group); ``by`` says what the names are ("" when unknown); ``lower``: True
    when lower is better, False when higher is, None when neither; ``detail``: how the
    values were made (e.g. "mean of 4 draws")."""

    metric: str
    by: str
    groups: dict[str, dict[str, float]]
    lower: bool | None
    detail: str = ""


@dataclass(frozen=True)
class Findings:
    """The sentences, and the comparisons found (the first one gets a figure)."""

    sentences: list[str]
    comparisons: list[Comparison]


# -- where findings come from -----------------------------------------------------------------
def findings(
    summary: dict[str, Any] | None,
    tables: dict[str, pd.DataFrame],
    manifest: dict[str, Any],
    sweep_stem: str = "results",
) -> Findings:
    """The run directory's findings (module docs)."""
    summary = summary or {}
    steps = summary.get("steps") if isinstance(summary.get("steps"), dict) else None
    from_tables = [c for _, t in _ordered(tables) if (c := table_comparison(t, manifest))]
    comparisons = _primary_first(summary_comparisons(steps or summary) + from_tables)
    written = summary.get("findings")
    if isinstance(written, list) and written and all(isinstance(s, str) for s in written):
        return Findings(list(written), comparisons)
    swept = sweep_stem in tables and bool(manifest.get("cells"))
    sentences = sweep_sentences(tables[sweep_stem], manifest, 1 if steps else 2) if swept else []
    if steps is not None:
        sentences += [s for name, step in steps.items() if (s := step_sentence(name, step))]
        return Findings(sentences, comparisons)
    sentences += [sentence(c) for c in comparisons]
    return Findings(list(dict.fromkeys(sentences))[:MAX_FINDINGS], comparisons)


def _ordered(tables: dict[str, pd.DataFrame]) -> list[tuple[str, pd.DataFrame]]:
    """The tables, those of :data:`COMPARE_FIRST` first (in that order), then the others."""
    first = [s for s in COMPARE_FIRST if s in tables]
    return [(s, tables[s]) for s in first + [s for s in tables if s not in first]]


def _primary_first(comparisons: list[Comparison]) -> list[Comparison]:
    rank = {m: i for i, m in enumerate(PRIMARY)}
    return sorted(comparisons, key=lambda c: rank.get(c.metric, len(PRIMARY)))


def step_sentence(name: str, step: Any) -> str | None:
    """One sentence for a demo step (module docs), or None for a step with no result."""
    if not isinstance(step, dict):
        return None
    own = step.get("findings")
    if isinstance(own, list) and own:
        return f"{name}: {' '.join(str(s) for s in own)}"
    comparisons = _primary_first(summary_comparisons(step))
    if comparisons:
        said = sentence(comparisons[0])
        return f"{name}: {said if said[:2].isupper() else said[:1].lower() + said[1:]}"
    scalars = {
        k: v
        for k, v in step.items()
        if isinstance(v, int | float) and k != "resumed" and not _excluded(k)
    }
    if not scalars:
        return None
    said = ", ".join(_scalar_text(k, v) for k, v in list(scalars.items())[:3])
    return f"{name}: {said}."


def _scalar_text(key: str, value: Any) -> str:
    """ "bound held: yes", "critical path 1.787 s"."""
    if isinstance(value, bool):
        return f"{words(key)}: {value_text(value, key)}"
    return f"{words(key)} {value_text(value, key)}"


def summary_comparisons(obj: dict[str, Any], path: tuple[str, ...] = ()) -> list[Comparison]:
    """The comparisons of a summary object, depth first (module docs); sibling per-name
    objects (``regimes: {steady: {policy: {...}}, bursty: ...}``) make one comparison with a
    group each."""
    found = []
    for key, value in obj.items():
        if not isinstance(value, dict) or is_verdict(key) or _excluded(key):
            continue
        if _is_numbers_matrix(value):
            context = " · ".join((*path, key)[1:])
            found += _matrix_comparison({context: value}, PLURALS.get(key, ""))
        elif value and all(isinstance(v, dict) and _is_numbers_matrix(v) for v in value.values()):
            found += _matrix_comparison(value, "")
        elif _is_numbers(value) and direction(key) is not None:
            per_name = {n: v for n, v in value.items() if _finite(v)}
            if len(per_name) >= 2:
                context = " · ".join(path[1:])
                found.append(Comparison(key, "", {context: per_name}, direction(key)))
        else:
            found.extend(summary_comparisons(value, (*path, key)))
    return found


def _matrix_comparison(matrices: dict[str, dict[str, Any]], by: str) -> list[Comparison]:
    """Per-name objects compared on their primary metric, a group per matrix."""
    metrics = [k for matrix in matrices.values() for v in matrix.values() for k in v]
    metric = primary_metric(list(dict.fromkeys(metrics)))
    if metric is None:
        return []
    groups = {}
    for context, matrix in matrices.items():
        per_name = {n: v[metric] for n, v in matrix.items() if _finite(v.get(metric))}
        if len(per_name) >= 2:
            groups[context] = per_name
    return [Comparison(metric, by, groups, direction(metric))] if groups else []


def table_comparison(table: pd.DataFrame, manifest: dict[str, Any]) -> Comparison | None:
    """The table's comparison (module docs), or None."""
    by = next((c for c in COMPARE_BY if c in table.columns and table[c].nunique() >= 2), None)
    if by is None:
        return None
    replicates = replicate_columns(table, list(manifest.get("keys", [])))
    keys, values = split_columns(table, [], replicates)
    metric = primary_metric([v for v in values if varies(table[v])])
    if metric is None or by not in keys:
        return None
    others = [k for k in keys if k != by]
    sizes = table.groupby([*others, by], sort=False, dropna=False).size()
    if (sizes > 1).any() and not replicates:
        return None  # a series: a mean over it would average different things
    shown = _naming_keys(table, others)
    groups: dict[str, dict[str, float]] = {}
    parts = table.groupby(others, sort=False, dropna=False) if others else [((), table)]
    for key, part in parts:
        key = key if isinstance(key, tuple) else (key,)
        means = part.groupby(by, sort=False)[metric].mean()
        means = {str(n): float(v) for n, v in means.items() if _finite(v)}
        context = ", ".join(
            f"{words(k)} {value_text(v, k, setting=True)}"
            for k, v in zip(others, key, strict=True)
            if k in shown
        )
        if len(means) >= 2:
            groups[context] = means
    if not groups:
        return None
    n = int(sizes.max())
    detail = f"mean of {n} {' x '.join(replicates)}s" if replicates and n > 1 else ""
    return Comparison(metric, by, groups, direction(metric), detail)


def _naming_keys(table: pd.DataFrame, keys: list[str]) -> list[str]:
    """The fewest leading keys that vary and tell the groups of ``keys`` apart (a failed
    fraction names its group; the failed links and bounds that follow from it need not)."""
    varying = [k for k in keys if table[k].nunique(dropna=False) > 1]
    groups = table.groupby(keys, sort=False, dropna=False).ngroups if keys else 1
    for n in range(len(varying) + 1):
        named = varying[:n]
        if (table.groupby(named, sort=False, dropna=False).ngroups if named else 1) == groups:
            return named
    return varying


# -- metrics ----------------------------------------------------------------------------------
def direction(key: str) -> bool | None:
    """True when lower is better, False when higher is, None when the name does not say
    (module docs)."""
    parts = set(key.lower().removesuffix("_per_s").split("_"))  # a rate is not a time
    if parts & LOWER_WORDS:
        return True
    if parts & HIGHER_WORDS:
        return False
    return None


def primary_metric(metrics: list[str]) -> str | None:
    """The first of :data:`PRIMARY` in ``metrics``, else the first with a direction."""
    usable = [m for m in metrics if not _excluded(m) and not is_identifier(m)]
    named = [p for p in PRIMARY if p in usable]
    if named:
        return named[0]
    return next((m for m in usable if direction(m) is not None), None)


def _excluded(key: str) -> bool:
    """Not a finding: a name with a word of :data:`NOT_FINDINGS`."""
    return bool(set(key.lower().split("_")) & NOT_FINDINGS)


def unit_of(key: str) -> str:
    """The unit a key's name states (``_s`` suffix or ``_s_`` inside: seconds)."""
    for suffix, unit in UNITS.items():
        if key.endswith(suffix) and len(key) > len(suffix):
            return unit
    return "s" if "_s_" in key else ""


def words(key: str) -> str:
    """A key in words without its unit: ``iteration_s`` -> "iteration time",
    ``slo_violation_rate`` -> "SLO violation rate", ``rate_gbps`` -> "rate"."""
    stem = key
    for suffix in UNITS:
        if key.endswith(suffix) and len(key) > len(suffix):
            stem = key[: -len(suffix)]
            break
    parts = [p for p in stem.split("_") if p != "s" or stem == key]
    text = " ".join(CAPITALS.get(p, p) for p in parts)
    if unit_of(key) == "s" and stem != key and parts[-1] not in TIME_NOUNS:
        text += " time"
    return text


def value_text(value: Any, key: str, setting: bool = False) -> str:
    """A value with the unit its key states: an integer in full (thousands separated), a
    float at 4 significant digits, a ``setting`` (a swept parameter, a group key) at 6."""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if not isinstance(value, int | float | np.integer | np.floating):
        return str(value)
    unit = unit_of(key)
    if isinstance(value, int | np.integer):
        text = fmt_number(value)
    else:
        text = f"{value:.6g}" if setting else f"{value:.4g}"
    return text + (f" {unit}" if unit else "")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_numbers(value: dict[str, Any]) -> bool:
    return bool(value) and all(_finite(v) for v in value.values())


def _is_numbers_matrix(value: dict[str, Any]) -> bool:
    """An object of two or more objects that each hold a number (per mode, per policy)."""
    inner = list(value.values())
    return len(inner) >= 2 and all(
        isinstance(v, dict) and any(_finite(x) for x in v.values()) for v in inner
    )


# -- sentences --------------------------------------------------------------------------------
def sentence(c: Comparison) -> str:
    """The comparison in one sentence (module docs)."""
    context, values = next(iter(c.groups.items()))
    name = _capital(words(c.metric))
    vs = np.array(list(values.values()), dtype=float)
    names = list(values)
    best_v = float(vs.min() if c.lower in (True, None) else vs.max())
    worst_v = float(vs.max() if c.lower in (True, None) else vs.min())
    best = _names([n for n, v in zip(names, vs, strict=True) if math.isclose(v, best_v)])
    worst = _names([n for n, v in zip(names, vs, strict=True) if math.isclose(v, worst_v)])
    where = "; ".join(s for s in (context, c.detail) if s)
    if math.isclose(best_v, worst_v):
        said = f" ({where})" if where else ""
        return f"{name} is {value_text(best_v, c.metric)} for all of {best}{said}."
    if c.lower is None:
        values_said = f"{value_text(worst_v, c.metric)} vs {value_text(best_v, c.metric)}"
        rel = relative(worst_v, best_v, c.metric)
        return (
            f"{name} is {rel} higher with {worst} than with {best} ({values_said}{_semi(where)})."
        )
    values_said = f"{value_text(best_v, c.metric)} vs {value_text(worst_v, c.metric)}"
    rel = relative(best_v, worst_v, c.metric)
    better = "lower" if c.lower else "higher"
    return (
        f"{name} is {rel} {better} with {best} than with {worst} "
        f"({values_said}{_semi(where)}){_consistency(c, best)}."
    )


def relative(a: float, b: float, key: str) -> str:
    """``a`` against ``b``: the factor when 2 or more, else the percentage of ``b``; the
    absolute difference where either is 0 or they differ in sign."""
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return value_text(abs(a - b), key)
    factor = max(abs(a), abs(b)) / min(abs(a), abs(b))
    return f"{factor:.3g}x" if factor >= 2 else f"{100 * abs(a - b) / abs(b):.3g}%"


def _consistency(c: Comparison, best: str) -> str:
    """ "; spray is best in 2 of 2 groups" over the comparison's groups (several only)."""
    if len(c.groups) < 2 or " and " in best:
        return ""
    pick = min if c.lower else max
    wins = sum(pick(values, key=values.__getitem__) == best for values in c.groups.values())
    return f"; {best} is best in {wins} of {len(c.groups)} groups"


def sweep_sentences(table: pd.DataFrame, manifest: dict[str, Any], limit: int = 2) -> list[str]:
    """The best and worst grid point of a sweep's results, per result column that varies,
    and the factor between them (module docs): those of :data:`PRIMARY` first, then those
    with a direction, then the others from the last column back (an experiment's derived
    results come after its inputs)."""
    swept = [c for c in manifest.get("swept", []) if c in table.columns]
    frame, _ = summarize(table, swept, list(manifest.get("keys", [])))
    if frame is None:
        return []
    keys = [c for c in swept if c in frame.columns and frame[c].nunique() > 1]
    metrics = [c for c in frame.columns if c not in swept and c != "rows"]
    metrics = [m for m in metrics if not _excluded(m) and varies(frame[m])]
    rank = {m: i for i, m in enumerate(PRIMARY)}
    directed = [m for m in metrics if direction(m) is not None]
    directed.sort(key=lambda m: rank.get(m, len(rank)))
    # with no direction known, the later columns first: an experiment's derived results
    metrics = directed + [m for m in reversed(metrics) if direction(m) is None]
    seeds = len(manifest.get("seeds", []))
    return [_sweep_sentence(frame, m, keys, seeds) for m in metrics[:limit]]


def _sweep_sentence(frame: pd.DataFrame, metric: str, keys: list[str], seeds: int) -> str:
    finite = frame[np.isfinite(frame[metric].to_numpy(dtype=float))]
    lower = direction(metric)
    low, high = finite[metric].idxmin(), finite[metric].idxmax()
    best, worst = (low, high) if lower in (True, None) else (high, low)
    v_best, v_worst = float(finite.at[best, metric]), float(finite.at[worst, metric])

    def point(i: Any) -> str:
        return ", ".join(f"{words(k)} {value_text(finite.at[i, k], k, setting=True)}" for k in keys)

    lead = f"Over {len(frame)} grid points" + (
        f" (each the mean of {seeds} seeds)" if seeds else ""
    )
    rel = relative(v_worst, v_best, metric)
    if lower is None:
        return (
            f"{lead}, {words(metric)} ranges from {value_text(v_best, metric)} ({point(best)}) "
            f"to {value_text(v_worst, metric)} ({point(worst)}): {rel} higher than the lowest."
        )
    return (
        f"{lead}, the best {words(metric)} is {value_text(v_best, metric)} ({point(best)}) and "
        f"the worst {value_text(v_worst, metric)} ({point(worst)}): {rel} worse than the best."
    )


def _names(names: list[str]) -> str:
    """ "a", "a and b", "a, b and c", or "a and 4 others"."""
    if len(names) > 3:
        return f"{names[0]} and {len(names) - 1} others"
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]


def _semi(text: str) -> str:
    return f"; {text}" if text else ""


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
