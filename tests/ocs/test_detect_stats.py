"""Change detectors (ocs.detect), statistical behaviour over many seeded streams:

- false alarms: with no change, the one-sided 99% Clopper-Pearson *lower* bound of
  P(any alarm within the horizon) must not exceed delta (chosen large, 0.2, so that a wrong
  threshold shows with a few hundred streams); the same check rejects a deliberately too-low
  threshold (log(2/delta) without the dimension and union-bound terms), so it can fail;
- detection delay after a planted change of known KL: mean delay within [0.5, 1.5] x the
  Lorden-type bound h / (n KL) of docs/ocs.md §1.11, h being the threshold at the alarm (it holds
  log(1/delta) plus the (K-1) log N and union-bound terms; the spec's log(1/delta) / (n KL) is
  that bound without them). A detector that never alarms fails the same check.
"""

import numpy as np
import pytest
from scipy.stats import binomtest

from trainfabric.ocs.detect.detectors import kl_divergence, statistic_paths
from trainfabric.ocs.detect.streams import planted_change, slot_batches

DELTA = 0.2
STREAMS, HORIZON, K, N_PER_SLOT = 300, 300, 4, 50


def fa_lower_bound(alarms: int, streams: int) -> float:
    """One-sided 99% Clopper-Pearson lower confidence bound of the alarm probability."""
    return binomtest(alarms, streams).proportion_ci(confidence_level=0.98, method="exact").low


def no_change_paths(kind: str, seed: int):
    rng = np.random.default_rng(seed)
    p0 = rng.dirichlet(np.ones(K))
    batches = slot_batches(p0, p0, HORIZON, N_PER_SLOT, STREAMS, rng)
    return statistic_paths(kind, batches, HORIZON, p0=p0 if kind == "cusum" else None)


@pytest.mark.parametrize("kind", ["cusum", "glr"])
def test_false_alarm_rate_below_delta(kind):
    paths = no_change_paths(kind, seed=11)
    alarms = int(np.isfinite(paths.first_alarm(DELTA)).sum())
    assert fa_lower_bound(alarms, STREAMS) <= DELTA
    # the check can fail: a threshold of log(2/delta) alone alarms on most streams
    naive = int((paths.statistic >= np.log(2 / DELTA)).any(1).sum())
    assert fa_lower_bound(naive, STREAMS) > DELTA


def delays_after_change(kind: str, kl: float, change_at: int, seed: int, streams: int = 40):
    """(delays in slots, Lorden-type bounds h_tau / (n KL)) of the streams with no alarm
    before the change."""
    rng = np.random.default_rng(seed)
    p0 = rng.dirichlet(np.ones(6))
    mask = np.zeros(6, bool)
    mask[np.argsort(p0)[2]] = True
    p1 = planted_change(p0, mask, kl)
    assert kl_divergence(p1, p0) == pytest.approx(kl, rel=1e-9)
    n_per_slot = 200
    batches = slot_batches(p0, p1, change_at, n_per_slot, streams, rng)
    paths = statistic_paths(kind, batches, change_at + 400, p0=p0 if kind == "cusum" else None)
    tau = paths.first_alarm(0.01)
    ok = ~(tau <= change_at)
    idx = np.where(np.isfinite(tau), tau - 1, -1).astype(int)
    h = paths.threshold(0.01)[np.arange(streams), idx]
    return (tau - change_at)[ok], (h / (n_per_slot * kl))[ok]


def delay_within_factor(delays: np.ndarray, bounds: np.ndarray) -> bool:
    """Every stream alarmed, and the mean delay is within [0.5, 1.5] x the mean bound."""
    if not (delays.size and np.isfinite(delays).all()):
        return False
    return 0.5 <= delays.mean() / bounds.mean() <= 1.5


@pytest.mark.parametrize(("kind", "change_at"), [("cusum", 30), ("glr", 400)])
def test_planted_change_delay_within_bound(kind, change_at):
    delays, bounds = delays_after_change(kind, kl=0.05, change_at=change_at, seed=5)
    assert delays.size >= 35
    assert delay_within_factor(delays, bounds)


def test_never_alarming_detector_fails_the_delay_check():
    delays, bounds = delays_after_change("cusum", kl=0.05, change_at=30, seed=5, streams=5)
    assert delay_within_factor(delays, bounds)
    assert not delay_within_factor(np.full(5, np.nan), bounds)
    assert not delay_within_factor(delays * 0 + 10 * bounds.mean(), bounds)  # far too slow
