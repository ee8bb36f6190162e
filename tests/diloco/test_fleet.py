"""Fleet simulator and policies: budgets, the no-sync load match, determinism, sync cost."""

import itertools

import numpy as np
import pytest

from trainfabric.diloco.fleet import REGIMES, Block, FleetConfig, simulate
from trainfabric.diloco.learners import ProgressModel, SyncModel
from trainfabric.diloco.policies import POLICY_NAMES, Schedule, make_policy, matched_schedule
from trainfabric.diloco.serving import FINISHED, N_COUNTERS, VIOLATED, EngineState, advance
from trainfabric.errors import ConfigError, InfeasibleError

CFG = FleetConfig(windows=600)
SEEDS = np.array([3, 4, 5])


def test_sync_duration_closed_form():
    """Ring all-reduce: 2 (M-1) steps of S/M bytes, then the outer step."""
    m = SyncModel(params=1e9, bytes_per_param=4, islands=8, link_gbps=100, step_latency_s=1e-4)
    ring = 2 * 7 * (8 * 4e9 / 8 / 100e9 + 1e-4)
    assert m.duration_s() == pytest.approx(ring + m.outer_step_s, rel=1e-12)


def test_progress_model_closed_forms():
    p = ProgressModel(drift_steps=100.0)
    assert p.efficiency(100.0) == pytest.approx(0.5)
    # Chinchilla at N = 1e9, D = 1e10: 1.69 + 406.4 / 1e9^0.34 + 410.7 / 1e10^0.28
    assert p.loss(1e10, 1e9) == pytest.approx(1.69 + 406.4 / 1e9**0.34 + 410.7 / 1e10**0.28)


def test_same_seed_same_numbers():
    blocks = lambda: [Block(make_policy(n), SEEDS) for n in ("fixed_h", "wa_forecast")]  # noqa: E731
    a = simulate(CFG, REGIMES["bursty"], blocks()).table
    b = simulate(CFG, REGIMES["bursty"], blocks()).table
    assert a.equals(b)


def test_no_sync_run_is_the_bare_serving_load():
    """With syncs removed the fleet serves exactly what the engines serve alone."""
    regime = REGIMES["steady"]
    res = simulate(CFG, regime, [Block(make_policy("fixed_h", H=50), SEEDS)], sync=False)
    assert (res.table["syncs"] == 0).all()
    for i, seed in enumerate(SEEDS):
        r = regime.requests(CFG.horizon_s, int(seed))
        st = EngineState.empty(1, CFG.serving)
        arr = r.arrival_s[None]
        tot = np.zeros(N_COUNTERS)
        for w in range(CFG.windows):
            tot += advance(
                st,
                arr,
                r.prompt_tokens[None],
                r.output_tokens[None],
                np.array([r.n]),
                np.array([0]),
                w + 1.0,
                np.array([-np.inf]),
                CFG.serving,
            )[0]
        assert res.finished[i].sum() == tot[FINISHED]
        assert res.violated[i].sum() == tot[VIOLATED]
    empty = Schedule(name="none", sync_at=np.zeros((SEEDS.size, CFG.windows), bool))
    same = simulate(CFG, regime, [Block(empty, SEEDS)])
    assert np.array_equal(same.violated, res.violated)


def test_schedule_policy_syncs_exactly_where_told():
    sync_at = np.zeros((SEEDS.size, CFG.windows), bool)
    sync_at[:, [100, 250, 400]] = True
    sync_at[1, 101] = True  # during the sync of window 100 (0.57 s < 1 window): allowed
    res = simulate(CFG, REGIMES["steady"], [Block(Schedule(name="s", sync_at=sync_at), SEEDS)])
    assert np.array_equal(res.sync_started, sync_at)


def test_fixed_h_period_and_min_max_guards():
    res = simulate(CFG, REGIMES["steady"], [Block(make_policy("fixed_h", H=100), SEEDS)])
    starts = np.flatnonzero(res.sync_started[0])
    # 100 steps at 1 step/s, plus the window lost to the 0.57 s sync after the first one
    assert starts[0] == 100 and np.all(np.diff(starts) == 101)
    gate = make_policy("pressure_gate", threshold=-1.0)  # always deferring: only max_h syncs
    res = simulate(CFG, REGIMES["steady"], [Block(gate, SEEDS)])
    assert res.table["syncs"].tolist() == [0, 0, 0]  # max_h 1024 > 600 windows
    gate = make_policy("pressure_gate", threshold=-1.0, max_h=200)
    assert (simulate(CFG, REGIMES["steady"], [Block(gate, SEEDS)]).table["syncs"] == 2).all()


def test_sync_heavy_regime_spends_a_quarter_of_the_time_syncing():
    cfg = FleetConfig(windows=10_000)  # the protocol's horizon
    res = simulate(cfg, REGIMES["sync_heavy"], [Block(make_policy("fixed_h"), SEEDS[:1])])
    assert (res.table["sync_time_fraction"] >= 0.25).all()


def test_every_policy_runs_and_unknown_names_are_errors():
    blocks = [Block(make_policy(n), SEEDS[:1]) for n in POLICY_NAMES]
    table = simulate(FleetConfig(windows=300), REGIMES["seed_mixed"], blocks).table
    assert table["policy"].tolist() == list(POLICY_NAMES)
    assert not table.set_index("policy").loc["wa_calibrated", "deployable"]
    with pytest.raises(ConfigError, match="policy"):
        make_policy("oracle")
    with pytest.raises(ConfigError, match="policy.H"):
        make_policy("wa_diloco", H=3)


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
@pytest.mark.parametrize("W,B,lo,hi", [(9, 2, 2, 4), (12, 3, 2, 5), (8, 1, 3, 6)])
def test_matched_schedule_is_uniform_over_all_valid_schedules(W, B, lo, hi):
    valid = []
    for pos in itertools.combinations(range(W), B):
        gaps = np.diff(np.r_[0, np.array(pos) + 1])
        if all(lo <= g <= hi for g in gaps) and W - (pos[-1] + 1) <= hi:
            valid.append(pos)
    rng = np.random.default_rng(0)
    draws = 400 * len(valid)
    seen = {}
    for _ in range(draws):
        s = matched_schedule(B, W, lo, hi, rng)
        assert s.sum() == B
        key = tuple(np.flatnonzero(s).tolist())
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) == set(valid)
    from scipy.stats import chisquare

    assert chisquare(list(seen.values())).pvalue > 0.001


def test_matched_schedule_budget_and_infeasible():
    s = matched_schedule(39, 10_000, 130, 1024, np.random.default_rng(1))
    assert s.sum() == 39
    gaps = np.diff(np.r_[0, np.flatnonzero(s) + 1])
    assert gaps.min() >= 130 and gaps.max() <= 1024 and 10_000 - np.flatnonzero(s)[-1] - 1 <= 1024
    with pytest.raises(InfeasibleError):
        matched_schedule(2, 100, 60, 70, np.random.default_rng(0))


def test_seed_compat_sidecar_formula_and_window():
    from trainfabric.diloco.fleet import sidecar_latency_ms

    lat = sidecar_latency_ms(
        np.array(0.5), np.array(0.2), np.array(0.8), np.array(True), np.ones(2)
    )
    expect = 55 + 24 * 0.5 + 34 * 0.2 + 16 * 0.8 + 35 * (0.35 + 0.65 * 0.5) + 6
    assert lat.tolist() == pytest.approx([expect, expect])
    sync_at = np.zeros((1, 200), bool)
    sync_at[0, 50] = True
    res = simulate(
        FleetConfig(windows=200),
        REGIMES["seed_clean"],
        [Block(Schedule(sync_at=sync_at), SEEDS[:1])],
    )
    assert res.table["sync_s"].iloc[0] == 8.0
    assert res.table["sync_time_fraction"].iloc[0] == pytest.approx(8.0 / 200)
    assert (res.finished == 32).all()  # the artifact's 32 requests per 1 s interval


def test_seed_compat_random_deferral_needs_every_learner():
    """min_ready = 8: after min_h a sync needs 8 independent 'yes' draws (p = 1/256 per
    window), so syncs come about every min_h + 256 + 8 windows, not every min_h + 2."""
    cfg = FleetConfig(windows=20_000)
    ours = simulate(cfg, REGIMES["steady"], [Block(make_policy("random_deferral"), SEEDS[:1])])
    seed = simulate(cfg, REGIMES["seed_clean"], [Block(make_policy("random_deferral"), SEEDS[:1])])
    gap_ours = 20_000 / ours.table["syncs"].iloc[0]
    gap_seed = 20_000 / seed.table["syncs"].iloc[0]
    assert gap_ours == pytest.approx(128 + 2 + 1, rel=0.1)
    assert gap_seed == pytest.approx(128 + 256 + 8, rel=0.35)


def test_trace_regime_seeds_replay_disjoint_segments_and_refuse_more():
    """azure at 1 request/s: 8,819 s of trace; 1,000-s horizons give 8 disjoint segments, one
    per seed (no request shared); seed 8 is refused unless overlap is allowed."""
    from trainfabric.diloco import requests as R
    from trainfabric.diloco.fleet import check_segments, segment_windows, trace_segments

    reg = REGIMES["azure"]
    assert trace_segments(reg, 1000.0) == 8 and segment_windows(reg, 8) == 1102
    trace = R.azure_trace()
    scale = trace.n / (trace.span_s * trace.n / (trace.n - 1))
    starts = []
    for seed in range(8):
        r = reg.requests(1000.0, seed)
        # the segment's first request is a trace row at trace time >= seed * 1000 s
        i = int(np.searchsorted(trace.arrival_s * scale, seed * 1000.0))
        assert r.arrival_s[0] == pytest.approx(trace.arrival_s[i] * scale - seed * 1000.0)
        starts.append(i)
    assert np.all(np.diff(starts) > 0)
    with pytest.raises(ConfigError, match="seeds"):
        reg.requests(1000.0, 8)
    with pytest.raises(ConfigError, match="--seeds") as exc:
        check_segments(reg, 9, 1000.0)
    assert "holds 8 independent segments" in exc.value.message
    loose = reg.model_copy(update={"overlap": True})
    check_segments(loose, 9, 1000.0)  # allowed: random offsets, wrapped
    assert loose.requests(1000.0, 8).n > 0


def test_sync_duration_distribution_degenerate_equals_the_scalar():
    from trainfabric.diloco.fleet import SyncDurations

    regime = REGIMES["bursty"]
    blocks = lambda: [Block(make_policy(n), SEEDS) for n in ("fixed_h", "wa_forecast")]  # noqa: E731
    scalar = simulate(CFG, regime, blocks())
    same = simulate(CFG, regime, blocks(), durations=SyncDurations([regime.sync_s] * 3))
    assert scalar.table.equals(same.table)
    assert np.array_equal(scalar.sync_started, same.sync_started)
    again = simulate(
        CFG,
        regime,
        blocks(),
        durations=SyncDurations(fn=lambda rng, n: np.full(n, regime.sync_s), max_s=1.0),
    )
    assert scalar.table.equals(again.table)


def test_sync_duration_samples_drive_the_simulated_durations():
    """Each sync draws from the samples (common random numbers per seed): the syncs' mean
    duration tends to the samples' mean, the time spent syncing is their sum, and two
    policies on one seed draw the same sequence."""
    from trainfabric.diloco.fleet import SyncDurations

    samples = np.array([0.2, 0.9, 3.0, 6.5])
    cfg = FleetConfig(windows=4000)
    fixed = make_policy("fixed_h", H=10)
    res = simulate(cfg, REGIMES["steady"], [Block(fixed, SEEDS)], durations=SyncDurations(samples))
    t = res.table
    n = t["syncs"].to_numpy()
    assert n.min() > 200
    mean = float((t["sync_s"] * n).sum() / n.sum())
    se = samples.std() / np.sqrt(n.sum())
    assert abs(mean - samples.mean()) < 4 * se
    # the time spent syncing is the sum of the drawn durations (the last may be cut off)
    total = t["sync_s"] * n
    assert np.all(t["sync_time_fraction"] * cfg.horizon_s <= total + 1e-9)
    assert np.all(t["sync_time_fraction"] * cfg.horizon_s >= total - samples.max() - 1e-9)
    # common random numbers: a 2nd policy's first syncs draw the same durations on a seed
    one = simulate(
        FleetConfig(windows=300),
        REGIMES["steady"],
        [
            Block(make_policy("fixed_h", H=100), SEEDS[:1]),
            Block(make_policy("fixed_h", H=140), SEEDS[:1]),
        ],
        durations=SyncDurations(samples),
    ).table
    assert one["syncs"].tolist() == [2, 2] and one["sync_s"].iloc[0] == one["sync_s"].iloc[1]
    with pytest.raises(ConfigError, match="sync_durations"):
        SyncDurations([0.5, -1.0])
    with pytest.raises(ConfigError, match="sync_durations"):
        SyncDurations(fn=lambda rng, n: np.ones(n))  # no max_s
    bad = SyncDurations(fn=lambda rng, n: np.full(n, 5.0), max_s=1.0)
    with pytest.raises(ConfigError, match="sync_durations"):
        simulate(
            FleetConfig(windows=300), REGIMES["steady"], [Block(fixed, SEEDS[:1])], durations=bad
        )


def test_seed_compat_matched_random_obeys_the_8_s_window():
    """The matched schedules of a seed_compat regime keep the 8 s window apart (gaps of at
    least min_h + 8 windows), so every scheduled sync happens: the budget is met exactly."""
    from trainfabric.diloco.protocol import gaps, matched_blocks

    fleet = FleetConfig(windows=2000)
    reg = REGIMES["seed_bursty"]
    assert gaps(make_policy("wa_diloco"), reg, fleet) == (128 + 8, 1024 + 8)
    assert gaps(make_policy("wa_diloco"), REGIMES["steady"], fleet) == (128 + 1, 1024 + 1)
    budgets = np.array([[12, 14]])
    blocks = matched_blocks([make_policy("wa_diloco")], budgets, SEEDS[:2], 5, reg, fleet)
    sched = blocks[0].policy.sync_at
    for row in sched:
        assert np.diff(np.flatnonzero(row)).min() >= 136
    res = simulate(fleet, reg, blocks)
    assert res.table["syncs"].tolist() == [12] * 5 + [14] * 5
