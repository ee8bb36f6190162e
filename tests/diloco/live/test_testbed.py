"""The serving testbed's pieces (``live_testbed.py``): the link rate derived from INTELLECT-1
against hand-computed numbers, the ratio of medians and its bootstrap CI (exact value,
scaling, coverage on samples with a known ratio), inside/outside by lifetime overlap, and
bad configurations naming the field."""

import numpy as np
import pandas as pd
import pytest

from trainfabric.diloco import live_analysis as LA
from trainfabric.diloco import live_testbed as tb
from trainfabric.diloco import placement
from trainfabric.diloco.train.controller import Progress
from trainfabric.errors import ConfigError


def test_link_rate_from_intellect1_by_hand():
    # 834,304 fp32 parameters = 3,337,216 B; M = 2: each uplink carries S once per ring.
    assert placement.ring_bytes(834_304, 4, 2) == 3_337_216
    assert placement.ring_bytes(834_304, 4, 4) == 1.5 * 3_337_216  # 2 (M - 1) / M = 1.5
    # f = 7 / 38; T_inner = 10 s: T_sync = 70 / 38 s; R = 8 * 3,337,216 * 38 / 70 bit/s.
    assert placement.SYNC_FRACTION == 7 / 38
    want = 8 * 3_337_216 * 38 / 70 / 1e6  # 14.4930... Mbit/s
    assert placement.link_rate_mbit(834_304, 2, 10.0, 7 / 38) == pytest.approx(want, rel=1e-12)
    assert round(want, 3) == 14.493


def test_ratio_of_medians_value_and_scaling():
    rng = np.random.default_rng(1)
    x, y = rng.lognormal(0, 0.5, 41), rng.lognormal(0, 0.5, 77)
    r = LA.ratio_of_medians(x, np.r_[y, np.nan], draws=500)
    assert r["ratio"] == np.median(x) / np.median(y)
    assert (r["n_inside"], r["n_outside"]) == (41, 77)
    assert r["ci"][0] < r["ratio"] < r["ci"][1]
    scaled = LA.ratio_of_medians(3.0 * x, y, draws=500)  # same draws: everything x 3
    assert scaled["ratio"] == pytest.approx(3 * r["ratio"], rel=1e-12)
    assert scaled["ci"] == pytest.approx([3 * c for c in r["ci"]], rel=1e-12)


def test_ratio_of_medians_ci_covers_the_true_ratio():
    """Lognormal groups whose medians are 1.5 and 1: the 95% CI holds 1.5 in most of 60
    independent samples (percentile bootstrap of a median: roughly nominal at n = 150)."""
    rng = np.random.default_rng(7)
    hits = 0
    for k in range(60):
        x = 1.5 * rng.lognormal(0, 0.6, 150)
        y = rng.lognormal(0, 0.6, 150)
        lo, hi = LA.ratio_of_medians(x, y, draws=400, seed=k)["ci"]
        hits += lo <= 1.5 <= hi
    assert hits >= 51  # >= 85%; a CI of the wrong scale or centre fails this


def test_ratio_of_medians_empty_group():
    r = LA.ratio_of_medians([], [1.0, 2.0])
    assert r["ratio"] is None and r["ci"] == [None, None] and r["median_outside"] == 1.5


def test_inside_is_lifetime_overlap_unfinished_to_horizon():
    requests = pd.DataFrame(
        {
            "sent_s": [0.0, 2.0, 5.5, 9.0, 12.0],
            "finish_s": [1.0, 3.0, 6.0, np.nan, 13.0],
            "ttft_s": [0.1, 0.2, 0.3, np.nan, 0.1],
            "tpot_s": [0.01] * 5,
            "tokens": [5] * 5,
        }
    )
    run = tb.TestbedRun(100.0, 0, requests, np.array([[2.5, 4.0], [10.0, 11.0]]), 20.0, 0,
                        (1.0, 1.0), 5.0)  # fmt: skip
    # [0,1] before; [2,3] overlaps [2.5,4); [5.5,6] between; unfinished [9,20] overlaps
    # [10,11); [12,13] after.
    assert run.inside().tolist() == [False, True, False, True, False]


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"serve_core": 1, "train_core": 1}, "train_core"),
        ({"headline_queue_ms": 50.0}, "headline_queue_ms"),
        ({"train_core": 4000}, "train_core"),
    ],
)
def test_bad_config_names_the_field(update, field):
    with pytest.raises(ConfigError) as e:
        tb.check_config(tb.TestbedConfig(**update))
    assert e.value.field == field


def _at(since_s: float, syncs: int) -> Progress:
    return Progress(step=1, h=1, tokens=0, tokens_since_sync=0, loss=1.0, loss_at_sync=1.0,
                    syncs=syncs, wall_s=since_s, since_sync_s=since_s, last_sync_s=0.0)  # fmt: skip


def test_periodic_controller_waits_the_phase_once():
    ctl = tb.Periodic(10.0, phase_s=4.0)
    assert not ctl.started.is_set()
    assert not ctl.decide(_at(13.9, 0)) and ctl.started.is_set()
    assert ctl.decide(_at(14.0, 0))
    assert not ctl.decide(_at(9.9, 1)) and ctl.decide(_at(10.0, 3))


def test_phase_is_seeded_and_within_the_period():
    cfg = tb.TestbedConfig(period_s=7.0)
    phases = [tb.phase(cfg, k) for k in range(50)]
    assert all(0.0 <= p < 7.0 for p in phases) and len(set(phases)) == 50
    assert phases == [tb.phase(cfg, k) for k in range(50)]
    assert tb.phase(cfg.model_copy(update={"seed": 23}), 0) != phases[0]
