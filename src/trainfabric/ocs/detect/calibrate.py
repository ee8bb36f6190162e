"""A GLR threshold calibrated to the stream (Monte Carlo on its own fitted null), with a stated
false-alarm bound.

The threshold of :func:`.detectors.glr_threshold` holds for *every* law and every horizon (a
union bound over the method of types): ``2(K-1) log(N+1)`` grows with the counts, so at
``K = 33`` categories and ~1e6 pooled counts it is about 900 nats while the statistic under no
change rarely passes 40. Here the threshold is fitted to the stream instead.

**Null model.** The reduced counts of the stream at its reference slot: ``c_t ~ Mult(n_t, p0)``
with ``p0`` the reference proportions and ``n_t ~ Poisson(nbar)`` (``nbar`` the reference
slot's total), independent over slots.

**Calibration** (:func:`calibrate_glr`). Draw ``B`` null streams of ``L`` slots, run the
two-segment GLR statistic ``G_n`` (the same candidate splits as the detector) and keep each
stream's maximum ``M_b = max_{n <= L} G_n``. The threshold ``h`` is the order statistic
``M_(j)`` with the smallest ``j`` such that ``P(Bin(B, 1 - delta) >= j) <= eta``. Since
``F(M_(j))`` of a continuous law is Beta(j, B + 1 - j), ``P(F(h) < 1 - delta) =
P(Bin(B, 1 - delta) >= j) <= eta`` (the classical distribution-free tolerance bound). Hence,
with confidence ``1 - eta`` over the calibration draw,

    P_null(alarm within a window of L slots) = 1 - F(h) <= delta.

It needs ``B >= log(eta) / log(1 - delta)`` draws (299 for ``delta = 0.01``, ``eta = 0.05``),
otherwise a ConfigError names ``streams``.

**Windows and ARL0** (:class:`CalibratedGlrDetector`). The bound holds for ``L`` slots, so the
detector renews itself (restarts without an alarm) after ``L`` slots; under the null the
windows are independent, each alarming with probability ``q <= delta``, so the number of clean
windows before the first false alarm is geometric and

    ARL0 >= L (1 - delta) / delta   slots          (``arl0_lower_bound_slots``).

**What it assumes** (and the worst-case threshold does not): the null law is the fitted one.
The GLR's null law is asymptotically free of ``p0`` (Wilks: each segment's term tends to
``chi2_{K-1} / 2``), so one calibration serves the later segments of the same stream, whose
reference proportions differ; the tests measure the false-alarm rate by simulation on another
``p0`` and other totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from trainfabric.errors import ConfigError
from trainfabric.ocs.detect.detectors import GlrDetector, _delta, statistic_paths
from trainfabric.ocs.detect.streams import _probability, slot_batches


@dataclass(frozen=True)
class GlrCalibration:
    """A calibrated GLR threshold: ``threshold`` ``h`` (nats), valid for windows of
    ``horizon`` ``L`` slots at false-alarm level ``delta`` with confidence ``1 - eta`` over the
    ``streams`` ``B`` null draws (module doc); ``order`` is ``j``; ``null_max_median`` the
    median of ``M_b`` (nats); ``p0`` and ``counts_per_slot`` the fitted null (None when the
    threshold was given rather than fitted)."""

    threshold: float
    horizon: int
    delta: float
    eta: float
    streams: int
    order: int
    null_max_median: float
    p0: np.ndarray | None = None
    counts_per_slot: float | None = None

    @property
    def arl0_lower_bound_slots(self) -> float:
        """``L (1 - delta) / delta`` (module doc)."""
        return self.horizon * (1.0 - self.delta) / self.delta


def tolerance_order(streams: int, delta: float, eta: float) -> int:
    """The smallest ``j`` (1-based) with ``P(Bin(B, 1 - delta) >= j) <= eta``; ConfigError
    naming ``streams`` when even ``j = B`` fails (``(1 - delta)^B > eta``)."""
    if (1.0 - delta) ** streams > eta:
        need = math.ceil(math.log(eta) / math.log(1.0 - delta))
        raise ConfigError("streams", f"need >= {need} null streams for delta={delta}, eta={eta}")
    j = np.arange(1, streams + 1)
    ok = binom.sf(j - 1, streams, 1.0 - delta) <= eta  # P(Bin >= j) = sf(j - 1)
    return int(j[ok][0])


def calibrate_glr(
    p0,
    counts_per_slot: float,
    horizon: int = 1000,
    delta: float = 0.05,
    eta: float = 0.05,
    streams: int = 200,
    density: int | None = 2,
    seed: int = 0,
) -> GlrCalibration:
    """Fit the GLR threshold to the null ``Mult(Poisson(counts_per_slot), p0)`` (module doc).

    ConfigErrors name ``p0``, ``counts_per_slot``, ``horizon``, ``delta``, ``eta`` or
    ``streams``."""
    p = _probability(p0, "p0")
    delta = _delta(delta)
    if not 0 < eta < 1:
        raise ConfigError("eta", f"must be in (0, 1), got {eta!r}")
    if not (isinstance(horizon, int) and horizon >= 2):
        raise ConfigError("horizon", f"must be an integer >= 2, got {horizon!r}")
    if not (isinstance(streams, int) and streams >= 1):
        raise ConfigError("streams", f"must be a positive integer, got {streams!r}")
    order = tolerance_order(streams, delta, eta)
    rng = np.random.default_rng(seed)
    batches = slot_batches(p, p, horizon + 1, counts_per_slot, streams, rng)
    paths = statistic_paths("glr", batches, horizon, density=density)
    maxima = np.sort(paths.statistic.max(axis=1))
    h, median = float(maxima[order - 1]), float(np.median(maxima))
    return GlrCalibration(h, horizon, delta, eta, streams, order, median, p, counts_per_slot)


def window_false_alarms(
    calibration: GlrCalibration, streams: int, seed: int, density: int | None = 2
) -> int:
    """How many of ``streams`` fresh null streams (the fitted null, drawn with ``seed``: use
    one the calibration did not) alarm within one window of ``horizon`` slots: the measured
    counterpart of the bound ``delta``."""
    cal = calibration
    if cal.p0 is None:
        raise ConfigError("calibration", "has no fitted null to draw from")
    rng = np.random.default_rng(seed)
    batches = slot_batches(cal.p0, cal.p0, cal.horizon + 1, cal.counts_per_slot, streams, rng)
    paths = statistic_paths("glr", batches, cal.horizon, density=density)
    return int((paths.statistic.max(axis=1) >= cal.threshold).sum())


class CalibratedGlrDetector(GlrDetector):
    """The two-segment GLR of :class:`.detectors.GlrDetector` with the calibrated constant
    threshold ``calibration.threshold`` and a renewal (restart without alarm) every
    ``calibration.horizon`` slots (module doc). ``renewals`` counts them."""

    def __init__(self, calibration: GlrCalibration, density: int | None = 2):
        self.calibration = calibration
        self.renewals = 0
        super().__init__(delta=calibration.delta, density=density)

    def _threshold(self, n, total, splits):
        return self.calibration.threshold if splits > 0 else math.inf

    def update(self, counts) -> bool:
        """As :meth:`GlrDetector.update`; a window of ``horizon`` slots without alarm ends in
        a renewal."""
        if self.n_obs >= self.calibration.horizon:
            self.renewals += 1
            self.reset()
        return super().update(counts)
