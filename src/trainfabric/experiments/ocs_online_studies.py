"""OCS experiments E7 (online regret of the lazy threshold policy) and E10 (churn).

**Setting** (:mod:`trainfabric.ocs.online.threshold`, one-hop model). ``pods`` pods with ``ports``
ports on ``ocs`` switches, 100 Gb/s circuits, 5 Gb/s fallback, so ``Γ = 8/B0 = 1.6e-9`` s per
byte. Traffic from :func:`trainfabric.ocs.traffic.generate` (mean 100 MB per ordered pair and
slot) with the variation ``V1 = v1_share · n(n−1)·1e8 · (T / T_min)^v1_power`` bytes
(``v1_power = 0``: V1 held fixed as ``T`` grows, the regime of the ``sqrt(T)`` shape).
The switching cost is ``C = c_rel · u*(m)`` seconds, ``u*(m)`` the exact one-hop optimum of
the seed's base matrix (one slot's cost; the same for every ``T`` and generator of a seed).

**E7** rows (``part``):

* ``curve``: per generator and ``T``, the threshold policy at ``θ*`` (from the measured V1
  and the analytic Γ) and never-switch: measured regret against the exact per-slot optimum,
  the bound ``C(V1/θ + 1) + 2ΓθT``, ``regret / sqrt(Γ C V1 T)``, switches.
* ``compare``: at ``compare_slots`` slots, every ``c_rel`` of ``compare_c_rel``: threshold
  (θ*), oracle-tuned θ (best of ``θ* · 2^{k/2}``, ``k = −6..14``, in hindsight), always,
  never, GLR-triggered (:mod:`trainfabric.ocs.online.glr`, ``glr_delta``).
* ``theta``: switches and regret of every θ of that grid (the "#switches vs θ" figure).

**E10** rows: one per reconfiguration that changes the wiring of the threshold policy at
``θ*`` (:mod:`trainfabric.ocs.online.churn`): cross-connects added by a fresh split
(``naive``), by the churn-aware split alone (``aware_raw``) and deployed (``aware``), the
least possible (``wiring_moves``) and whether the churn-aware split kept every surviving
circuit in place (``kept_all``).
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field

from trainfabric.config import Config
from trainfabric.errors import ConfigError
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online.churn import churn, replay
from trainfabric.ocs.online.glr import glr_mask
from trainfabric.ocs.online.threshold import ORACLE_GRID, OneHopCost, evaluate
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside, new_figure

PAIR_BYTES = 1e8


MAX_PODS = 4096  # as `ocs online --pods`
Slots = Annotated[int, Field(ge=2, le=10_000_000)]  # as `ocs online --slots`


class OnlineConfig(Config):
    """E7/E10 settings (module doc)."""

    generators: list[str] = Field(
        list(tr.GENERATORS), min_length=1, description="traffic generators"
    )
    pods: int = Field(16, ge=2, le=MAX_PODS, description="pods (<= 4,096)")
    ports: int = Field(8, ge=1, le=4096, description="OCS-facing ports per pod (<= 4,096)")
    ocs: int = Field(4, ge=1, le=4096, description="parallel OCSes (<= 4,096)")
    slots: list[Slots] = Field(
        [1_000, 3_000, 10_000, 30_000, 100_000],
        min_length=1,
        description="T values (each <= 10,000,000)",
    )
    v1_share: float = Field(0.2, ge=0, description="V1 at the smallest T / one slot's bytes")
    v1_power: float = Field(0.0, ge=0, le=1, description="V1 ∝ T^v1_power")
    c_rel: float = Field(1.0, gt=0, description="C in units of one slot's optimal cost")
    charge: str = Field("reconfiguration", description="reconfiguration | circuit")
    compare_slots: Slots = Field(10_000, description="T of the comparison (<= 10,000,000)")
    compare_c_rel: list[float] = Field([0.1, 1.0, 10.0], min_length=1)
    glr_delta: float = Field(0.01, gt=0, lt=1)


def cost_of(config: OnlineConfig) -> OneHopCost:
    return OneHopCost(OcsModel.uniform(config.pods, config.ports, config.ocs))


def switch_cost(cost: OneHopCost, pods: int, seed: int, c_rel: float) -> float:
    """``C = c_rel · u*(m)``, ``m`` the seed's base matrix (module doc)."""
    m = tr.base_matrix(pods, np.random.default_rng(seed), PAIR_BYTES)
    return c_rel * cost.slot_optimum(m)[0]


def v1_for(config: OnlineConfig, slots: int) -> float:
    total = config.pods * (config.pods - 1) * PAIR_BYTES
    return config.v1_share * total * (slots / min(config.slots)) ** config.v1_power


def _check(config: OnlineConfig) -> None:
    bad = [g for g in config.generators if g not in tr.GENERATORS]
    if bad or not config.generators:
        raise ConfigError("generators", f"unknown {bad}; known: {', '.join(tr.GENERATORS)}")
    if min(config.slots) < 2:
        raise ConfigError("slots", "every T must be >= 2")


def curve_rows(config: OnlineConfig, cost: OneHopCost, kind: str, seed: int) -> list[dict]:
    """``curve`` rows of one generator (module doc)."""
    c = switch_cost(cost, config.pods, seed, config.c_rel)
    rows = []
    for slots in sorted(config.slots):
        seq = tr.generate(kind, slots, v1_for(config, slots), pods=config.pods, seed=seed)
        res = evaluate(cost, seq, c, config.charge, extra=("never",))
        th, nv = res.summary("threshold"), res.summary("never")
        rows.append(
            {
                "part": "curve",
                "generator": kind,
                "slots": slots,
                "v1": res.v1,
                "switch_cost_s": c,
                "theta_star": res.theta_star,
                **{k: th[k] for k in ("regret_s", "regret_bound_s", "normalised_regret")},
                "switches": th["switches"],
                "switches_bound": th["switches_bound"],
                "never_regret_s": nv["regret_s"],
                "optimum_s": res.optimum_s,
            }
        )
    return rows


def compare_rows(config: OnlineConfig, cost: OneHopCost, kind: str, seed: int) -> list[dict]:
    """``compare`` and ``theta`` rows of one generator at ``compare_slots`` (module doc)."""
    slots = config.compare_slots
    seq = tr.generate(kind, slots, v1_for(config, slots), pods=config.pods, seed=seed)
    mask = glr_mask(seq, delta=config.glr_delta, seed=seed)
    rows = []
    for c_rel in config.compare_c_rel:
        c = switch_cost(cost, config.pods, seed, c_rel)
        res = evaluate(cost, seq, c, config.charge, grid=ORACLE_GRID, masks={"glr": mask})
        common = {"generator": kind, "slots": slots, "c_rel": c_rel, "v1": res.v1}
        for name in ("threshold", "oracle", "always", "never", "glr"):
            rows.append({"part": "compare", **common, **res.summary(name)})
        for name, run in res.runs.items():
            if name.startswith("theta="):
                rows.append(
                    {
                        "part": "theta",
                        **common,
                        "policy": name,
                        "theta": run.theta,
                        "theta_rel": run.theta / res.theta_star,
                        "switches": run.switches,
                        "switches_bound": res.v1 / run.theta + 1,
                        "regret_s": run.regret_s,
                    }
                )
    return rows


@register(
    "ocs-e7",
    OnlineConfig,
    keys=("part", "generator", "slots", "c_rel", "policy"),
    quick={"slots": [250, 1_000, 4_000, 16_000], "compare_slots": 4_000, "compare_c_rel": [1.0]},
)
def ocs_e7(config: OnlineConfig, seed: int) -> pd.DataFrame:
    """E7: regret of the lazy threshold policy vs T against the exact per-slot one-hop optimum
    (curve, with the bound), and against always/never/oracle-θ/GLR-triggered (compare).

    Rows as in the module doc of :mod:`trainfabric.experiments.ocs_online_studies`."""
    _check(config)
    cost = cost_of(config)
    rows = []
    for kind in config.generators:
        rows += curve_rows(config, cost, kind, seed)
        rows += compare_rows(config, cost, kind, seed)
    return pd.DataFrame(rows)


class ChurnConfig(Config):
    """E10 settings: threshold policy at θ* on ``slots`` slots with a larger drift."""

    generators: list[str] = Field(list(tr.GENERATORS), min_length=1)
    pods: int = Field(16, ge=2, le=MAX_PODS, description="pods (<= 4,096)")
    ports: int = Field(8, ge=1, le=4096, description="OCS-facing ports per pod (<= 4,096)")
    ocs: int = Field(4, ge=1, le=4096, description="parallel OCSes (<= 4,096)")
    slots: Slots = Field(2_000, description="slots T (<= 10,000,000)")
    v1_share: float = Field(2.0, ge=0, description="V1 / one slot's bytes")
    c_rel: float = Field(1.0, gt=0)


def churn_rows(config: ChurnConfig, kind: str, seed: int) -> list[dict]:
    """E10 rows of one generator (module doc)."""
    cost = OneHopCost(OcsModel.uniform(config.pods, config.ports, config.ocs))
    v1 = config.v1_share * config.pods * (config.pods - 1) * PAIR_BYTES
    seq = tr.generate(kind, config.slots, v1, pods=config.pods, seed=seed)
    c = switch_cost(cost, config.pods, seed, config.c_rel)
    run = evaluate(cost, seq, c, extra=()).runs["threshold"]
    return [
        {"generator": kind, **{k: getattr(r, k) for k in r.__dataclass_fields__}}
        for r in churn(cost, replay(cost, seq, run))
    ]


@register("ocs-e10", ChurnConfig, keys=("generator", "slot"), quick={"slots": 800})
def ocs_e10(config: ChurnConfig, seed: int) -> pd.DataFrame:
    """E10: cross-connects added per reconfiguration by a fresh (naive) and a churn-aware split
    onto the OCSes, for the threshold policy's reconfigurations.

    One row per reconfiguration that changes the wiring (module doc)."""
    _check(OnlineConfig(generators=config.generators))
    rows = [r for kind in config.generators for r in churn_rows(config, kind, seed)]
    return pd.DataFrame(
        rows,
        columns=["generator", "slot", "wiring_moves", "naive", "aware_raw", "aware", "kept_all"]
        + ["feasible"],
    )


# -- figures ----------------------------------------------------------------------------------


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` on ``log x`` (NaN with < 2 positive points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def ocs_e7_figures(table: pd.DataFrame) -> list[Figure]:
    """Regret vs T (log-log) with the bound per generator; switches vs θ/θ* (compare T)."""
    if "part" not in table.columns:
        return []
    curve = table[table["part"] == "curve"]
    theta = table[table["part"] == "theta"]
    fig, (ax, ax_s) = new_figure(2, 5.4)
    for i, (kind, part) in enumerate(curve.groupby("generator", sort=False)):
        g = part.groupby("slots")[["regret_s", "regret_bound_s", "never_regret_s"]].mean()
        slope = loglog_slope(g.index, g["regret_s"])
        ax.plot(g.index, g["regret_s"], "o-", color=f"C{i}", label=f"{kind} (slope {slope:.2f})")
        ax.plot(g.index, g["regret_bound_s"], "--", color=f"C{i}", lw=1)
        ax.plot(g.index, g["never_regret_s"], ":", color=f"C{i}", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="slots T", ylabel="regret (s)")
    ax.set_title("Threshold at θ* (solid), bound (dashed), never (dotted)\nexact oracle")
    for i, (_, part) in enumerate(theta.groupby("generator", sort=False)):
        g = part.groupby("theta_rel")[["switches", "switches_bound"]].mean()
        ax_s.plot(g.index, g["switches"], "o-", color=f"C{i}", ms=3)
        ax_s.plot(g.index, g["switches_bound"], "--", color=f"C{i}", lw=1)
    ax_s.set_yscale("symlog", linthresh=1.0)
    ax_s.set(xscale="log", xlabel="θ / θ*", ylabel="reconfigurations")
    ax_s.set_ylim(bottom=0)
    ax_s.set_title(f"Switches vs θ at T = {int(theta['slots'].max()) if len(theta) else 0:,}"
                   "\n(dashed: V1/θ + 1)")  # fmt: skip
    legend_outside(fig)
    return [fig]


def ocs_e10_figures(table: pd.DataFrame) -> list[Figure]:
    """Cross-connects added per reconfiguration: naive vs churn-aware, per generator."""
    if not {"generator", "naive", "aware", "wiring_moves"} <= set(table.columns):
        return []
    fig, ax = new_figure(1, 6.4)
    sums = table.groupby("generator", sort=False)[["wiring_moves", "aware", "naive"]].sum()
    idx = np.arange(len(sums))
    for j, (col, label) in enumerate(
        (("wiring_moves", "least possible"), ("aware", "churn-aware"), ("naive", "fresh split"))
    ):
        ax.bar(idx + 0.27 * j, sums[col], 0.27, label=label)
    ax.set_xticks(idx + 0.27, sums.index)
    ax.set(ylabel="cross-connects added (all reconfigurations)")
    ax.set_title("E10: churn of the threshold policy's reconfigurations")
    legend_outside(fig)
    return [fig]


FIGURES["ocs-e7"] = ocs_e7_figures
FIGURES["ocs-e10"] = ocs_e10_figures
