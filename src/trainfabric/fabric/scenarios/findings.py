"""The per-mode figures of a scenario (``fabric run``, ``fabric eval``) for a person: each
figure's label and unit (:func:`metric_label`) and sentences comparing the modes on the
headline figures (:func:`mode_findings`).

A sentence names the best and the worst mode on one figure with both values and how far
apart they are: ``b / a - 1`` as a percentage below a factor 2, the factor ``b / a`` above
(``a`` the smaller value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainfabric.fabric.iteration.findings import SAME, mode_name
from trainfabric.tables import fmt_number

_TAGS = (
    (re.compile(r"_(nic|fabric)_([0-9.e+-]+)ms$"), r", \1 flap \2 ms"),
    (re.compile(r"_at_(\d+)pct(_failures)?$"), r", \1% failed"),
    (re.compile(r"_(bucketed)$"), r", \1"),
)
_UNITS = (  # key suffix (or word) -> unit, scale, whether the label drops the suffix
    ("_fraction", "%", 100.0, False),
    ("_rate", "%", 100.0, False),
    ("_us", "us", 1.0, True),
    ("_s", "s", 1.0, True),
    ("slowdown", "x", 1.0, False),
)


def metric_label(key: str) -> tuple[str, str, float]:
    """``(label, unit, scale)`` of a per-mode figure: ``iteration_s_bucketed`` ->
    ``("iteration, bucketed", "s", 1)``, ``exposed_comm_fraction`` -> ``("exposed comm
    fraction", "%", 100)``, ``flap_slowdown_p99_nic_1ms`` -> ``("flap slowdown p99, nic
    flap 1 ms", "x", 1)``; shown value = value x scale."""
    tail = ""
    for pattern, repl in _TAGS:
        m = pattern.search(key)
        if m:
            tail = m.expand(repl) + tail
            key = key[: m.start()]
    for suffix, unit, scale, drop in _UNITS:
        if key.endswith(suffix) or (not suffix.startswith("_") and suffix in key):
            name = key.removesuffix(suffix) if drop else key
            return name.replace("_", " ") + tail, unit, scale
    return key.replace("_", " ") + tail, "", 1.0


@dataclass(frozen=True)
class Headline:
    """A figure the findings compare: its ``key``, what it is (``what``), whether higher
    is better, and the words for the best and the worst value (default: highest and
    lowest, or the reverse)."""

    key: str
    what: str
    higher_is_better: bool
    words: tuple[str, str] | None = None

    @property
    def best_worst(self) -> tuple[str, str]:
        if self.words is not None:
            return self.words
        return ("highest", "lowest") if self.higher_is_better else ("lowest", "highest")


HEADLINES = (
    Headline("line_rate_fraction", "line-rate fraction for the largest messages", True),
    Headline("p99_latency_us", "p99 latency", False),
    Headline("isolation_ratio", "isolation ratio (victim alone / shared; 1 is perfect)", True),
    Headline(
        "goodput_over_maxflow_at_10pct_failures",
        "goodput over the max-flow bound with 10% failed cables",
        True,
    ),
    Headline("flap_recovery_s", "worst stall after a link flap", False, ("shortest", "longest")),
    Headline("iteration_s", "iteration time", False),
    Headline("iteration_s_bucketed", "iteration time with bucketed DP overlap", False),
    Headline("failure_slowdown_median", "median slowdown under failed cables", False),
    Headline("tenant_slowdown_median", "median slowdown beside the other tenants", False),
    Headline("flap_slowdown_p99", "p99 slowdown under link flaps", False),
)


def mode_findings(modes: dict[str, dict[str, float]]) -> list[str]:
    """One sentence per :data:`HEADLINES` figure the modes report (module doc)."""
    out = []
    for h in HEADLINES:
        values = {m: row[h.key] for m, row in modes.items() if row.get(h.key) is not None}
        if values:
            out.append(_sentence(h, values))
    return out


def _shown(key: str, v: float) -> str:
    _, unit, scale = metric_label(key)
    if unit == "%":
        return f"{100 * v:.1f}%"
    return f"{fmt_number(v * scale)}{'' if unit in ('', 'x') else ' '}{unit}"


def _names(modes: list[str], capital: bool = False) -> str:
    names = [mode_name(m) for m in modes]
    text = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return text[0].upper() + text[1:] if capital else text


def _sentence(h: Headline, values: dict[str, float]) -> str:
    best_v = max(values.values()) if h.higher_is_better else min(values.values())
    worst_v = min(values.values()) if h.higher_is_better else max(values.values())
    best = [m for m, v in values.items() if abs(v - best_v) <= SAME * abs(best_v)]
    worst = [m for m, v in values.items() if abs(v - worst_v) <= SAME * abs(worst_v)]
    if len(best) == len(values):
        every = "all modes" if len(values) > 1 else _names(best)
        return f"{every[0].upper() + every[1:]}: {h.what} {_shown(h.key, best_v)}."
    high, low = h.best_worst
    verb = "has" if len(best) == 1 else "have"
    apart = _apart(best_v, worst_v)
    return (
        f"{_names(best, capital=True)} {verb} the {high} {h.what} at {_shown(h.key, best_v)}; "
        f"{_names(worst)} the {low} at {_shown(h.key, worst_v)}{f' ({apart})' if apart else ''}."
    )


def _apart(a: float, b: float) -> str:
    lo, hi = sorted((abs(a), abs(b)))
    if lo == 0:
        return ""
    ratio = hi / lo
    return f"{ratio:.1f}x apart" if ratio >= 2 else f"{100 * (ratio - 1):.1f}% apart"
