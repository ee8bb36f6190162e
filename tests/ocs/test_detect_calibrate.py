"""The GLR threshold calibrated on the stream's fitted null: tolerance order, false-alarm rate
by simulation against the stated bound, renewal windows."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs.detect.calibrate import (
    CalibratedGlrDetector,
    GlrCalibration,
    calibrate_glr,
    tolerance_order,
    window_false_alarms,
)
from trainfabric.ocs.detect.detectors import glr_threshold, statistic_paths
from trainfabric.ocs.detect.streams import slot_batches


def _binom_tail(b: int, p: float, j: int) -> float:
    """``P(Bin(b, p) >= j)`` summed term by term (independent of scipy)."""
    return sum(math.comb(b, i) * p**i * (1 - p) ** (b - i) for i in range(j, b + 1))


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 400), delta=st.sampled_from([0.01, 0.05, 0.1, 0.2]), eta=st.floats(0.01, 0.2)
)
def test_tolerance_order_is_the_smallest_valid_order_statistic(b, delta, eta):
    if (1 - delta) ** b > eta:
        with pytest.raises(ConfigError, match="streams"):
            tolerance_order(b, delta, eta)
        return
    j = tolerance_order(b, delta, eta)
    assert _binom_tail(b, 1 - delta, j) <= eta * (1 + 1e-9)
    assert j == 1 or _binom_tail(b, 1 - delta, j - 1) > eta * (1 - 1e-9)


def test_false_alarm_rate_by_simulation_is_below_the_stated_delta():
    """Calibrate on one null, then measure P(alarm within the window) on fresh streams of
    *another* null (other proportions, other totals: the calibration's pivotal claim)."""
    p_fit = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    cal = calibrate_glr(p_fit, 300.0, horizon=150, delta=0.1, streams=120, seed=3)
    rng = np.random.default_rng(11)
    p_other = rng.dirichlet(np.ones(5))
    m = 600
    paths = statistic_paths("glr", slot_batches(p_other, p_other, 10**6, 500.0, m, rng), 150)
    rate = float((paths.statistic.max(axis=1) >= cal.threshold).mean())
    # one-sided 3-sigma allowance for the simulation's own noise
    assert rate <= cal.delta + 3 * math.sqrt(cal.delta * (1 - cal.delta) / m)
    # and the calibrated threshold is far below the worst-case one at the same counts
    worst = glr_threshold(150, 150 * 300.0, 5, paths.splits[-1], cal.delta)
    assert cal.threshold < 0.5 * float(worst)
    assert cal.arl0_lower_bound_slots == pytest.approx(150 * 0.9 / 0.1)
    # the measured counterpart on the fitted null itself, fresh draws
    hits = window_false_alarms(cal, 300, seed=99)
    assert hits / 300 <= cal.delta + 3 * math.sqrt(cal.delta * (1 - cal.delta) / 300)


def test_calibrated_threshold_detects_a_change_the_worst_case_misses():
    p0 = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    p1 = np.array([0.36, 0.33, 0.15, 0.1, 0.06])
    cal = calibrate_glr(p0, 300.0, horizon=300, delta=0.05, streams=100, seed=0)
    rng = np.random.default_rng(5)
    paths = statistic_paths("glr", slot_batches(p0, p1, 100, 300.0, 40, rng), 300)
    hit_cal = (paths.statistic >= cal.threshold).any(axis=1).mean()
    assert hit_cal >= 0.9
    assert np.isnan(paths.first_alarm(0.05)).mean() >= 0.9  # the worst case: mostly missed


def test_detector_alarms_at_the_threshold_and_renews_after_the_window():
    cal = GlrCalibration(8.0, 5, 0.1, 0.05, 100, 95, 4.0)
    det = CalibratedGlrDetector(cal, density=None)
    quiet = np.array([50.0, 50.0])
    for _ in range(5):
        assert not det.update(quiet)
    assert det.n_obs == 5 and det.renewals == 0
    det.update(quiet)  # the 6th slot opens a new window
    assert det.n_obs == 1 and det.renewals == 1
    assert det.update(np.array([100.0, 0.0]))  # G = 100 log 2 ≈ 69 nats >= 8
    assert det.last_alarm["threshold"] == 8.0 and det.last_alarm["split"] == 1


def test_calibration_refuses_bad_input():
    p = np.array([0.5, 0.5])
    for kw, field in (
        ({"horizon": 1}, "horizon"),
        ({"eta": 1.5}, "eta"),
        ({"delta": 0.0}, "delta"),
        ({"streams": 10, "delta": 0.01}, "streams"),
    ):
        with pytest.raises(ConfigError, match=field):
            calibrate_glr(p, 100.0, **kw)
    with pytest.raises(ConfigError, match="p0"):
        calibrate_glr(np.array([1.0]), 100.0)
    with pytest.raises(ConfigError, match="calibration"):
        window_false_alarms(GlrCalibration(8.0, 5, 0.1, 0.05, 100, 95, 4.0), 10, 0)
