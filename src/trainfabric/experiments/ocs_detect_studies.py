"""OCS experiment E8 (docs/ocs.md §3.2): the multinomial GLR-CUSUM change detectors.

``ocs-e8`` returns one table with three kinds of rows (column ``part``):

- ``false_alarm``: no change; ``streams`` seeded streams of ``fa_slots`` slots per
  (detector, statistic, pods); ``alarms`` = streams with any alarm within the horizon at each
  ``delta`` in ``fa_deltas``, the empirical rate and its 95% Clopper-Pearson interval. The
  bound is for an infinite horizon, so a rate above ``delta`` on a finite one refutes it.
- ``delay``: for each planted change in ``changes`` a change of ``KL(p1||p0) = kl`` over the
  pairs (:func:`trainfabric.ocs.detect.streams.synthetic_change`; one instance per
  (pods, change, kl), shared by every detector and statistic; ``hot-pod`` is carried whole by
  the per-source marginals and ``heavy-pairs`` by the gradient categories, by their
  definitions, ``random-pairs`` by neither) after ``cusum_change_at`` slots
  (``glr_change_at`` for the unknown-``p0`` GLR, whose statistic is capped by
  ``N_pre KL(p0||p1)``: it needs a long pre-change segment); per ``delta`` in
  ``delay_deltas``: the share of streams detected within ``max_delay_slots``, the mean delay
  in slots (integer: slots observed after the change at the alarm), the spec's bound
  ``log(1/delta) / (n KL_stat)``, the Lorden-type bound ``h / (n KL_stat)`` with ``h`` the
  mean threshold at the alarm, and the mean fractional crossing time (linear interpolation of
  the statistic between slots) for the slope fits. ``KL_stat`` is the divergence visible to the
  statistic (the reduced ``p1`` against the reduced ``p0``; at most ``kl``).
- ``ablation``: ``K = n(n-1)`` (``pairs``; its work per slot is ``n(n-1) |C_n|`` per stream)
  beside the three reduced statistics and their union (each at ``delta / 3``, alarm at the
  first: P(false alarm) <= delta by the union bound) on the *same* ``pairs_streams``
  pair-level streams, at ``ablation_kls`` and the smallest delta, for the GLR up to
  ``glr_pairs_max_pods`` pods; ``delay_<statistic>`` is the mean delay (nan unless every stream
  detected within ``max_delay_slots``), ``detected_<statistic>`` the share detected.

In the ``delay`` rows the reduced statistics are drawn directly from the reduced probabilities
(a sum of multinomial cells is multinomial, so the law is that of drawing pairs and reducing
them); the ``ablation`` rows draw pairs and reduce them.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field
from scipy.stats import binomtest

from trainfabric.config import Config
from trainfabric.ocs.detect.detectors import kl_divergence, reduce_counts, statistic_paths
from trainfabric.ocs.detect.streams import offdiag_mask, slot_batches, synthetic_change
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside

REDUCED = ("marginals", "topr", "gradient")


MAX_PODS = 4096  # as `ocs detect --pods`
MAX_PAIRS = MAX_PODS * (MAX_PODS - 1)
Slots = Annotated[int, Field(ge=1, le=10_000_000)]  # as `ocs detect --slots`
Streams = Annotated[int, Field(ge=1, le=1_000_000)]


class OcsE8Config(Config):
    """E8 sweep; counts per slot are Poisson with mean ``n_per_slot``."""

    pods: list[Annotated[int, Field(le=MAX_PODS)]] = Field(
        [16, 64], description="pod counts n (each <= 4,096)"
    )
    detectors: list[str] = Field(["cusum", "glr"], description="cusum (known p0) and/or glr")
    statistics: list[str] = Field(
        ["marginals", "topr", "gradient", "pairs"], description="categories the detector sees"
    )
    changes: list[str] = Field(
        ["hot-pod", "heavy-pairs", "random-pairs"],
        description="planted changes: hot-pod, heavy-pairs, random-pairs (no-change: first)",
    )
    n_per_slot: float = Field(1000.0, gt=0, description="mean counts (flows) per slot")
    top_r: int = Field(
        8, ge=1, le=MAX_PAIRS, description="r of the top-r + other statistic (<= 16,773,120)"
    )
    density: int = Field(2, ge=0, le=8, description="candidate splits per octave = 2^density")
    fa_deltas: list[float] = Field([0.1, 0.01, 0.001], description="false-alarm deltas")
    fa_streams: Streams = Field(400, description="no-change streams (<= 1,000,000)")
    fa_slots: Slots = Field(
        1000, ge=2, description="horizon of the no-change streams (slots, <= 10,000,000)"
    )
    kls: list[float] = Field([0.001, 0.01, 0.1], description="planted KL(p1||p0) over pairs")
    delay_deltas: list[float] = Field([1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6])
    delay_streams: Streams = Field(20, description="streams per delay point (<= 1,000,000)")
    cusum_change_at: Slots = Field(
        50, description="pre-change slots, known-p0 CUSUM (<= 10,000,000)"
    )
    glr_change_at: Slots = Field(
        2000, description="pre-change slots, unknown-p0 GLR (<= 10,000,000)"
    )
    max_delay_slots: Slots = Field(4000, description="longest delay waited for (<= 10,000,000)")
    ablation_kls: list[float] = Field([0.1], description="KLs at which K = n(n-1) is run")
    pairs_streams: Streams = Field(
        4, description="streams for the K = n(n-1) statistic (<= 1,000,000)"
    )
    glr_pairs_max_pods: int = Field(
        16, ge=3, le=MAX_PODS, description="largest n for the GLR on pairs (<= 4,096)"
    )


QUICK = {
    "fa_streams": 60,
    "fa_slots": 300,
    "delay_streams": 8,
    "glr_change_at": 1000,
    "max_delay_slots": 2000,
    "pairs_streams": 2,
}


@register("ocs-e8", OcsE8Config, keys=("part", "detector", "statistic", "pods"), quick=QUICK)
def ocs_e8(config: OcsE8Config, seed: int) -> pd.DataFrame:
    """E8: false alarms vs delta, detection delay vs log(1/delta), reduced K vs K = n(n-1)."""
    rng = np.random.default_rng(seed)
    rows = []
    for pods in config.pods:  # one instance per (pods, change, kl), shared by every statistic
        inst = synthetic_change(pods, config.kls[0], rng, config.changes[0], config.top_r)
        for detector, statistic in itertools.product(config.detectors, config.statistics):
            rows += _false_alarms(config, inst, detector, statistic, rng)
        for change, kl in itertools.product(config.changes, config.kls):
            inst = synthetic_change(pods, kl, rng, change, config.top_r)
            for detector, statistic in itertools.product(config.detectors, config.statistics):
                if statistic != "pairs":
                    cells = _delays(config, inst, detector, statistic, kl, rng)
                    rows += [{"change": change} | c for c in cells]
                elif _runs_ablation(config, pods, detector, kl):
                    rows.append({"change": change} | _ablation(config, inst, detector, kl, rng))
    return pd.DataFrame(rows)


def _runs_ablation(config: OcsE8Config, pods: int, detector: str, kl: float) -> bool:
    return kl in config.ablation_kls and (detector == "cusum" or pods <= config.glr_pairs_max_pods)


def _ablation(config, inst, detector, kl, rng) -> dict:
    """K = n(n-1) against each reduced statistic and their union, on the same pair-level
    streams (replayed from one seed), at the smallest delta. The union runs the reduced
    detectors at ``delta / 3`` each and alarms at the first of their alarms: P(any false
    alarm) <= delta by the union bound, and as no component restarts before the union's first
    alarm, its alarm time is the minimum of theirs."""
    pods = inst.p0.shape[0]
    change_at = config.cusum_change_at if detector == "cusum" else config.glr_change_at
    delta = min(config.delay_deltas)
    seed = int(rng.integers(2**63))
    row = {"part": "ablation", "detector": detector, "statistic": "pairs", "pods": pods}
    row |= {"categories": pods * (pods - 1), "kl": kl, "delta": delta, "change_at": change_at}
    row["streams"] = config.pairs_streams
    union = np.full(config.pairs_streams, np.inf)
    for statistic in ("pairs", *REDUCED):
        split = delta if statistic == "pairs" else delta / len(REDUCED)
        paths = _replay(config, inst, detector, statistic, change_at, seed, split)
        tau = paths.first_alarm(split)
        if statistic != "pairs":
            union = np.fmin(union, tau)
        row |= _ablation_delay(statistic, tau, change_at)
    return row | _ablation_delay("union", np.where(np.isfinite(union), union, np.nan), change_at)


def _ablation_delay(name: str, tau: np.ndarray, change_at: int) -> dict:
    """Share of streams alarmed after the change, and the mean delay (nan unless all did)."""
    after = tau > change_at
    delay = float(np.mean(tau - change_at)) if after.all() else math.nan
    return {f"detected_{name}": float(after.mean()), f"delay_{name}": delay}


def _replay(config, inst, detector, statistic, change_at, seed, delta):
    """Statistic paths on the pair-level streams drawn from ``seed``, reduced to ``statistic``,
    until every stream alarmed at ``delta`` (or the horizon)."""
    pods = inst.p0.shape[0]
    off = offdiag_mask(pods)
    kw = inst.reduction(statistic)
    draws = slot_batches(
        inst.p0[off], inst.p1[off], change_at, config.n_per_slot, config.pairs_streams,
        np.random.default_rng(seed),
    )  # fmt: skip
    matrix = np.zeros((config.pairs_streams, pods, pods))

    def reduced():
        for batch in draws:
            matrix[:, off] = batch
            yield reduce_counts(matrix, statistic, **kw)

    p0 = reduce_counts(inst.p0, statistic, **kw) if detector == "cusum" else None
    return statistic_paths(
        detector, reduced(), change_at + config.max_delay_slots, p0=p0, density=config.density,
        stop=lambda paths: bool(np.isfinite(paths.first_alarm(delta)).all()),
    )  # fmt: skip


def _false_alarms(config, inst, detector, statistic, rng) -> list[dict]:
    pods = inst.p0.shape[0]
    p0, _ = inst.reduced(statistic)
    streams = config.pairs_streams if statistic == "pairs" else config.fa_streams
    batches = slot_batches(p0, p0, config.fa_slots, config.n_per_slot, streams, rng)
    paths = statistic_paths(
        detector,
        batches,
        config.fa_slots,
        p0=p0 if detector == "cusum" else None,
        density=config.density,
    )
    rows = []
    for delta in config.fa_deltas:
        alarms = int(np.isfinite(paths.first_alarm(delta)).sum())
        ci = binomtest(alarms, streams).proportion_ci(0.95, method="exact")
        rows.append(
            {
                "part": "false_alarm",
                "detector": detector,
                "statistic": statistic,
                "pods": pods,
                "categories": p0.size,
                "delta": delta,
                "streams": streams,
                "slots": config.fa_slots,
                "alarms": alarms,
                "false_alarm_rate": alarms / streams,
                "ci_low": ci.low,
                "ci_high": ci.high,
                "margin_nats": float(np.max(paths.statistic - paths.threshold(delta))),
            }
        )
    return rows


def _delays(config, inst, detector, statistic, kl, rng) -> list[dict]:
    pods = inst.p0.shape[0]
    p0, p1 = inst.reduced(statistic)
    kl_stat = kl_divergence(p1, p0)
    change_at = config.cusum_change_at if detector == "cusum" else config.glr_change_at
    streams = config.delay_streams
    slots = change_at + config.max_delay_slots
    deltas = config.delay_deltas
    batches = slot_batches(p0, p1, change_at, config.n_per_slot, streams, rng)

    def done(paths) -> bool:  # every stream past the smallest delta's threshold
        return bool(np.isfinite(paths.first_alarm(min(deltas))).all())

    paths = statistic_paths(
        detector,
        batches,
        slots,
        p0=p0 if detector == "cusum" else None,
        density=config.density,
        stop=done,
    )
    rate = config.n_per_slot * kl_stat
    head = {"part": "delay", "detector": detector, "statistic": statistic, "pods": pods}
    head |= {"categories": p0.size, "kl": kl, "kl_stat": kl_stat, "nats_per_slot": rate}
    return [
        head
        | {"delta": d, "change_at": change_at}
        | _delay_summary(paths, d, change_at, streams, rate)
        for d in deltas
    ]


def _delay_summary(paths, delta, change_at, streams, rate) -> dict:
    """Detection share, mean delay, fractional crossing and the two bounds at ``delta``."""
    tau = paths.first_alarm(delta)
    valid = ~(tau <= change_at)  # conditional on no alarm before the change
    hit = valid & np.isfinite(tau)
    idx = np.where(hit, tau - 1, 0).astype(int)
    rows = np.arange(streams)
    thr = paths.threshold(delta)
    stat = paths.statistic
    h = thr[rows, idx]
    prev = np.where(idx > 0, stat[rows, np.maximum(idx - 1, 0)], 0.0)
    frac = (h - prev) / np.maximum(stat[rows, idx] - prev, 1e-300)
    crossing = idx + np.clip(frac, 0, 1) - change_at  # slots after the change, fractional
    detected = hit.sum() / max(valid.sum(), 1)
    return {
        "streams": int(valid.sum()),
        "detected": float(detected),
        "mean_delay": float((tau - change_at)[hit].mean()) if detected == 1 else math.nan,
        "crossing": float(crossing[hit].mean()) if detected == 1 else math.nan,
        "threshold_at_alarm": float(h[hit].mean()) if hit.any() else math.nan,
        "spec_bound": math.log(1 / delta) / rate if rate > 0 else math.inf,
        "lorden_bound": float(h[hit].mean()) / rate if hit.any() and rate > 0 else math.nan,
    }


def e8_figures(table: pd.DataFrame) -> list[Figure]:
    """False alarms vs delta (pooled per detector, with the diagonal) and the extra delay
    vs log(1/delta) in nats of information (median over cells; slope 1 = ``1/(n KL)``)."""
    if "part" not in table.columns:
        return []
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax_fa, ax_d = fig.subplots(1, 2)
    _false_alarm_panel(ax_fa, table[table["part"] == "false_alarm"])
    _delay_panel(ax_d, table[table["part"] == "delay"])
    legend_outside(fig)
    return [fig]


def _false_alarm_panel(ax, fa: pd.DataFrame) -> None:
    for det, g in fa.groupby("detector"):
        g = g.groupby("delta")[["alarms", "streams"]].sum().reset_index()
        rate = g["alarms"] / g["streams"]
        upper = [
            binomtest(int(a), int(n)).proportion_ci(0.95, method="exact").high
            for a, n in zip(g["alarms"], g["streams"], strict=True)
        ]
        ax.errorbar(
            g["delta"],
            rate,
            yerr=[np.zeros(len(g)), upper - rate],
            fmt="o",
            capsize=3,
            label=f"{det}: empirical, bar to 95% upper",
        )
    deltas = np.sort(fa["delta"].unique())
    ax.plot(deltas, deltas, "k-", lw=1, label="rate = delta")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_ylim(bottom=0)
    ax.set(
        xlabel="delta",
        ylabel="P(any false alarm within the horizon)",
        title="False alarms under no change",
    )


def _delay_panel(ax, dl: pd.DataFrame) -> None:
    cells = ["detector", "statistic", "pods", "change", "kl"]
    curves: dict[tuple[str, str], list[pd.Series]] = {}
    for key, g in dl.groupby(cells):
        if len(g) < 3 or (g["detected"] < 1).any():
            continue
        g = g.sort_values("delta", ascending=False)
        nats = (g["crossing"] - g["crossing"].iloc[0]) * g["nats_per_slot"]
        x = np.log(1 / g["delta"]) - np.log(1 / g["delta"].iloc[0])
        curves.setdefault(key[:2], []).append(pd.Series(nats.to_numpy(), index=x.to_numpy()))
    xmax = 0.0
    for (det, stat), series in sorted(curves.items()):
        median = pd.concat(series, axis=1).median(axis=1)
        ax.plot(median.index, median.to_numpy(), ".-", label=f"{det}/{stat} ({len(series)} cells)")
        xmax = max(xmax, float(median.index.max()))
    ax.plot([0, xmax], [0, xmax], "k--", lw=1, label="slope 1/(n KL)")
    ax.set(
        xlabel="log(1/delta) - log(1/delta_max)",
        ylabel="extra delay x n KL_stat (nats)",
        title="Detection delay vs log(1/delta)",
    )


FIGURES["ocs-e8"] = e8_figures
