"""What ``fabric job`` answers, in sentences and in one comparison table.

* :func:`job_findings`: plain sentences computed from one or several modes' results
  (:func:`~trainfabric.fabric.iteration.scenario.job_command`), each with its numbers and a
  comparison: the iteration against its compute alone (one mode) or each mode against the
  first (``(t_m - t_0) / t_0``), the cost of failed cables per mode (median slowdown - 1
  over the draws), and a job whose servers share one leaf (no transfer crosses a
  leaf-spine cable, so failed cables cannot slow it and the modes differ only in how they
  spread connections over the planes).
* :data:`QUANTITIES` and :func:`differences`: the figures a person compares between modes,
  with their units, and each mode's change against the first mode (relative, or in
  percentage points for a figure in %).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainfabric.tables import fmt_number
from trainfabric.workloads.attribution import CATEGORIES

MODE_NAMES = {
    "ecmp": "ECMP",
    "flowlet": "flowlet switching",
    "pinning": "pinning",
    "spray": "packet spraying",
    "adaptive": "adaptive routing",
}
SAME = 1e-9  # relative difference below which two iteration times are the same


def mode_name(mode: str, capital: bool = False) -> str:
    """``ecmp`` -> ``ECMP``, ``adaptive`` -> ``adaptive routing`` (``capital``: first letter
    upper case, for the start of a sentence)."""
    name = MODE_NAMES.get(mode, mode)
    return name[0].upper() + name[1:] if capital else name


def change(value: float, base: float) -> float | None:
    """Relative change ``(value - base) / base``; 0 when both are 0, None when only ``base``
    is 0 (no finite ratio)."""
    if base == 0:
        return 0.0 if value == 0 else None
    return (value - base) / base


def percent(x: float) -> str:
    """A fraction as a percentage with one decimal (``0.177`` -> ``17.7%``)."""
    return f"{100 * x:.1f}%"


def seconds(x: float) -> str:
    return f"{fmt_number(x)} s"


# -- quantities compared between modes ------------------------------------------------------------
@dataclass(frozen=True)
class Quantity:
    """One row of the mode comparison: ``key`` (of a mode's result, and of
    :func:`differences`), ``label`` and ``unit`` as shown, ``scale`` (raw -> shown: 100 for
    a fraction shown in %) and ``source`` (a mode's result -> the raw value; default its
    ``key``; None when absent)."""

    key: str
    label: str
    unit: str
    scale: float = 1.0
    source: Callable[[dict], Any] | None = None

    def shown(self, res: dict) -> float | None:
        v = res.get(self.key) if self.source is None else self.source(res)
        return v if v is None or self.scale == 1 else v * self.scale


def _failure_cost(key: str) -> Callable[[dict], float | None]:
    """slowdown - 1 of the failed-cable draws (``failures[key]``), None without them."""

    def get(res: dict) -> float | None:
        f = res.get("failures")
        return None if f is None else f[key] - 1.0

    return get


QUANTITIES = (
    Quantity("iteration_s", "iteration", "s"),
    Quantity("compute_only_s", "compute alone", "s"),
    Quantity("exposed_comm_s", "exposed communication", "s"),
    Quantity("exposed_comm_fraction", "exposed share", "%", 100.0),
    *(Quantity(f"exposed_{c}_s", f"exposed {c}", "s") for c in CATEGORIES),
    Quantity("comm_bytes", "data sent", "GB", 1e-9),
    Quantity("flows_peak", "flows at peak", ""),
    Quantity(
        "failure_cost_median",
        "failed cables cost, median",
        "%",
        100.0,
        _failure_cost("failure_slowdown_median"),
    ),
    Quantity(
        "failure_cost_worst",
        "failed cables cost, worst",
        "%",
        100.0,
        _failure_cost("failure_slowdown_worst"),
    ),
)


def differences(per_mode: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """Per mode after the first, for every :data:`QUANTITIES` value both modes have: the
    relative change against the first mode (:func:`change`, a fraction) under the
    quantity's key, or for a quantity in % the difference in percentage points under
    ``<key>_pp``."""
    first, *rest = per_mode
    out = {}
    for mode in rest:
        row = {}
        for q in QUANTITIES:
            base, value = q.shown(per_mode[first]), q.shown(per_mode[mode])
            if base is None or value is None:
                continue
            if q.unit == "%":
                row[f"{q.key}_pp"] = value - base
            else:
                row[q.key] = change(value, base)
        out[mode] = row
    return out


# -- sentences ------------------------------------------------------------------------------------
def job_findings(job: dict, per_mode: dict[str, dict]) -> list[str]:
    """The answer first: sentences with numbers and a comparison (module doc). ``job``: the
    common fields (``workload``, ``servers``, ``gpus``, ``leaves``); ``per_mode``: each
    mode's result, in the order asked."""
    first = next(iter(per_mode))
    if len(per_mode) == 1:
        out = [_iteration_sentence(job, first, per_mode[first])]
    else:
        out = [_vs_sentence(m, first, per_mode) for m in list(per_mode)[1:]]
    failure = _failures_sentence(per_mode)
    if failure:
        out.append(failure)
    if job.get("leaves") == 1:
        out.append(_one_leaf_sentence(job["servers"], len(per_mode) > 1, failure is not None))
    return out


def _one_leaf_sentence(servers: int, modes: bool, failures: bool) -> str:
    """A job on one leaf switch: its transfers never cross a leaf-spine cable."""
    why = []
    if failures:
        why.append("failed cables cannot slow it")
    if modes:
        why.append("the modes differ only in how they spread connections over the planes")
    head = f"All {servers} servers of the job sit on one leaf switch"
    if not why:
        return f"{head}: no transfer crosses a leaf-spine cable."
    return (
        f"{head}, so no transfer crosses a leaf-spine cable: {' and '.join(why)} (more "
        "--pods or a smaller --radix spread the job over leaves)."
    )


def _iteration_sentence(job: dict, mode: str, r: dict) -> str:
    it, comp = r["iteration_s"], r["compute_only_s"]
    head = (
        f"Under {mode_name(mode)} an iteration of {job['workload']} on {job['servers']} "
        f"servers ({job['gpus']} GPUs) takes {seconds(it)}"
    )
    extra = change(it, comp)
    if r["exposed_comm_s"] <= 0 or extra is None:
        return f"{head}, no longer than its compute alone: all communication is hidden."
    top = max(CATEGORIES, key=lambda c: r[f"exposed_{c}_s"])
    return (
        f"{head}, {percent(extra)} longer than its {seconds(comp)} of compute alone: "
        f"{seconds(r['exposed_comm_s'])} of communication is exposed "
        f"({percent(r['exposed_comm_fraction'])} of the iteration), most of it {top} "
        f"({seconds(r[f'exposed_{top}_s'])})."
    )


def _vs_sentence(mode: str, first: str, per_mode: dict[str, dict]) -> str:
    t, t0 = per_mode[mode]["iteration_s"], per_mode[first]["iteration_s"]
    name, base = mode_name(mode, capital=True), mode_name(first)
    if abs(t - t0) <= SAME * t0:
        return f"{name} and {base} finish an iteration in the same time ({seconds(t)})."
    word = "faster" if t < t0 else "slower"
    return (
        f"{name} finishes an iteration {percent(abs(t - t0) / t0)} {word} than {base} "
        f"({fmt_number(t)} s vs {fmt_number(t0)} s)."
    )


def _extra(slowdown: float) -> str:
    """The extra iteration time of a slowdown, in % (``inf``: the iteration never ends)."""
    return percent(slowdown - 1) if math.isfinite(slowdown) else "forever"


def _failures_sentence(per_mode: dict[str, dict]) -> str | None:
    """``With 10% failed leaf-spine cables the iteration takes 5.1% longer under ECMP and
    1.7% longer under adaptive routing (median of 20 draws; worst 9.0% and 2.2%).``"""
    failed = {m: r["failures"] for m, r in per_mode.items() if r.get("failures")}
    if not failed:
        return None
    f = next(iter(failed.values()))
    medians = []
    for m, x in failed.items():
        extra = _extra(x["failure_slowdown_median"])
        medians.append(f"{extra}{'' if extra == 'forever' else ' longer'} under {mode_name(m)}")
    worst = [_extra(x["failure_slowdown_worst"]) for x in failed.values()]
    return (
        f"With {f['fraction']:.0%} failed leaf-spine cables the iteration takes "
        f"{_and(medians)} (median of {f['draws']} draws; worst {_and(worst)})."
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
