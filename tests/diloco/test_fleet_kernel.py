"""The compiled fleet loop against the Python loop, bit for bit, and the exact shortcuts it
rests on: numpy's pairwise sum, ``Generator.choice`` replayed step by step, the bursts of
the MMPP found by one search, the engines' occupied-slot prefix."""

import numba
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.diloco import fleet_kernel
from trainfabric.diloco import requests as R
from trainfabric.diloco.fleet import REGIMES, Block, FleetConfig, simulate
from trainfabric.diloco.policies import (
    FixedH,
    GapTable,
    Schedule,
    make_policy,
    matched_schedule,
    pairwise_sum,
)
from trainfabric.diloco.serving import EngineState, ServingModel, advance
from trainfabric.errors import InfeasibleError

REGIME_NAMES = ["steady", "bursty", "diurnal", "sync_heavy", "azure", "seed_bursty", "seed_mixed"]


def assert_same(a, b):
    """Two FleetResults equal to the bit: the table and every per-run, per-window array."""
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    for name in ("sync_started", "violated", "finished", "arrivals", "seed_row"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert len(a.sync_ends_s) == len(b.sync_ends_s)
    for x, y in zip(a.sync_ends_s, b.sync_ends_s, strict=True):
        np.testing.assert_array_equal(x, y)


@st.composite
def policies(draw, windows: int):
    """Every policy class with guards short enough for several syncs in ``windows``."""
    min_h = draw(st.sampled_from([4.0, 16.0, 40.0]))
    guards = {"min_h": min_h, "max_h": min_h + draw(st.sampled_from([8.0, 60.0, 150.0]))}
    out = [
        make_policy("fixed_h", H=draw(st.sampled_from([10.0, 37.0, 90.0]))),
        make_policy("adaptive_tokens", min_tokens=draw(st.sampled_from([5e7, 2e8]))),
        make_policy("adaptive_load", threshold=draw(st.floats(0.0, 0.9)), **guards),
        make_policy("pressure_gate", threshold=draw(st.floats(0.0, 0.9)), **guards),
        make_policy("random_deferral", p=draw(st.floats(0.05, 0.95)), **guards),
    ]
    for name in ("wa_diloco", "wa_forecast", "wa_calibrated"):
        params = {
            "threshold": draw(st.floats(-0.4, 0.4)),
            "w_serve": draw(st.sampled_from([0.0, 1.0, 2.5])),
            "stale_sign": draw(st.sampled_from([-1.0, 1.0])),
            "loss_scale": draw(st.sampled_from([0.05, 0.5])),
            "tokens_norm": draw(st.sampled_from([4e7, 1e9])),
        }
        out.append(make_policy(name, **params, **guards))
    at = np.random.default_rng(draw(st.integers(0, 99))).random((4, windows)) < 0.03
    out.append(Schedule(name="schedule", sync_at=at))
    return out


@st.composite
def fleets(draw):
    """A regime and a small fleet: tight batches and KV caches, slow or sped-up syncs."""
    serving = ServingModel(
        replicas=draw(st.integers(1, 3)),
        max_batch=draw(st.integers(1, 6)),
        kv_tokens=draw(st.sampled_from([3_000, 20_000, 131_072])),
        interference=draw(st.sampled_from([0.0, 1.0, 4.0])),
    )
    fleet = FleetConfig(
        windows=draw(st.integers(120, 260)),
        window_s=draw(st.sampled_from([0.5, 1.0, 4.0])),
        serving=serving,
        forecast_alpha=draw(st.sampled_from([0.3, 1.0])),
        pressure_tail=draw(st.sampled_from([0.1, 0.5])),
    )
    return draw(st.sampled_from(REGIME_NAMES)), fleet


@settings(max_examples=8)
@given(case=fleets(), data=st.data())
def test_compiled_loop_equals_the_python_loop(case, data):
    """Every policy class, both modes, with and without syncs, the loss projection
    refilled every 3 windows: the same table, syncs, SLO counts and sync ends."""
    name, fleet = case
    regime = REGIMES[name]
    chosen = data.draw(policies(fleet.windows))
    seeds = np.array([0, 1])

    def blocks():  # fresh policies (the random ones draw from their generators)
        return [
            Block(p, np.array([0, 1, 0, 1]) if isinstance(p, Schedule) else seeds)
            for p in (make_copy(p) for p in chosen)
        ]

    sync = data.draw(st.booleans())
    ref = simulate(fleet, regime, blocks(), sync=sync, reference=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fleet_kernel, "LOSS_WINDOWS", 3)
        fast = simulate(fleet, regime, blocks(), sync=sync)
    assert_same(ref, fast)
    if sync:
        assert ref.sync_started.sum() > 0  # the comparison covers decisions


def test_compiled_loop_through_the_artifacts_checkpoint_windows():
    """seed_mixed writes a checkpoint in [900, 1200) s of every 1,200 s: its pressure
    reaches the policies and the sidecar's latency formula only in a longer run."""
    fleet = FleetConfig(windows=1250)
    names = ("adaptive_load", "pressure_gate", "wa_diloco", "random_deferral")
    guards = {"min_h": 30.0, "max_h": 200.0}

    def blocks():
        return [Block(make_policy(n, **guards), np.arange(2)) for n in names]

    ref = simulate(fleet, REGIMES["seed_mixed"], blocks(), reference=True)
    fast = simulate(fleet, REGIMES["seed_mixed"], blocks())
    assert_same(ref, fast)
    assert ref.violated[:, 900:1200].sum() > 0  # the checkpoint's latency term counted


def test_runs_rejoin_their_seeds_engines_only_once_a_sync_is_over():
    """sync_heavy's syncs last several windows: a run whose engines fall idle while its sync
    still slows them must not take its seed's no-sync windows yet."""
    fleet = FleetConfig(windows=700)
    seeds = np.repeat(np.arange(2), 3)

    def blocks():
        return [
            Block(make_policy("fixed_h", H=40.0), seeds),
            Block(make_policy("wa_diloco"), seeds),
        ]

    ref = simulate(fleet, REGIMES["sync_heavy"], blocks(), reference=True)
    assert_same(ref, simulate(fleet, REGIMES["sync_heavy"], blocks()))


def make_copy(policy):
    from copy import deepcopy

    return deepcopy(policy)


def test_threads_and_projection_length_do_not_change_the_result():
    """One thread or two, a long or a one-window loss projection: the same runs."""
    fleet = FleetConfig(windows=400)
    names = ("wa_forecast", "adaptive_load", "random_deferral", "fixed_h")
    blocks = lambda: [Block(make_policy(n), np.arange(3)) for n in names]  # noqa: E731
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = simulate(fleet, REGIMES["bursty"], blocks())
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(fleet_kernel, "LOSS_WINDOWS", 1)
            two = simulate(fleet, REGIMES["bursty"], blocks())
    finally:
        numba.set_num_threads(before)
    assert_same(one, two)
    assert one.sync_started.sum() > 0


def test_other_policy_classes_and_sync_durations_run_the_python_loop():
    """A subclass is not encoded (its decide may differ); sync durations from a
    distribution are drawn in Python: both take the reference loop, same as asked for."""

    class Late(FixedH):
        def decide(self, obs):
            return obs.h >= 2 * self.H

    fleet = FleetConfig(windows=200)
    assert fleet_kernel.encode_policies([Block(Late(name="late"), np.arange(2))], 200) is None

    def blocks():  # a random deferral first: it must not draw before the fallback
        random = make_policy("random_deferral", min_h=5.0, max_h=50.0)
        return [Block(random, np.arange(2)), Block(Late(name="late", H=30.0), np.arange(2))]

    a = simulate(fleet, REGIMES["steady"], blocks())
    b = simulate(fleet, REGIMES["steady"], blocks(), reference=True)
    assert_same(a, b)
    assert a.table["syncs"].tolist()[2:] == [3, 3]  # every 60 steps: the subclass's rule ran


# -- the exact shortcuts ---------------------------------------------------------------------------
@given(st.integers(1, 3000), st.integers(0, 2**32 - 1), st.integers(0, 20))
def test_pairwise_sum_is_numpys_sum(n, seed, lo):
    """Bit for bit numpy's sum of a contiguous float64 array, any length and offset."""
    rng = np.random.default_rng(seed)
    a = rng.random(n + lo) * np.exp(rng.uniform(-30, 30, n + lo))
    assert pairwise_sum(a, lo, n) == a[lo:].sum()


def reference_schedule(budget, windows, gap_min, gap_max, rng, draws):
    """matched_schedule as first written: the table row by row, each gap by rng.choice."""
    r = np.arange(windows + 1)
    rows = [(r <= gap_max).astype(float)]
    for j in range(1, budget + 1):
        prefix = np.r_[0.0, np.cumsum(rows[-1])]
        hi = np.clip(r - gap_min + 1, 0, windows + 1)
        lo = np.clip(r - gap_max, 0, windows + 1)
        support = (r >= j * gap_min) & (r <= (j + 1) * gap_max)
        row = np.where(support, prefix[hi] - prefix[lo], 0.0)
        rows.append(np.maximum(row, 0.0) / max(row.max(), 1e-300))
    out = np.zeros((draws, windows), bool)
    for d in range(draws):
        left, pos = windows, 0
        for j in range(budget, 0, -1):
            gaps = np.arange(gap_min, min(gap_max, left) + 1)
            w = rows[j - 1][left - gaps]
            with np.errstate(invalid="ignore"):  # 0 / 0: rng.choice refuses the NaN
                p = w / w.sum()
            g = int(rng.choice(gaps, p=p))
            pos += g
            out[d, pos - 1] = True
            left -= g
    return out


@given(
    windows=st.integers(10, 1500),
    gap_min=st.integers(1, 60),
    span=st.integers(0, 300),
    share=st.floats(0, 1),
    draws=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    spare=st.integers(0, 3),
)
def test_matched_schedule_replays_rng_choice(windows, gap_min, span, share, draws, seed, spare):
    """The compiled draw equals rng.choice over the table's weights, schedule for schedule,
    with its own table or a shared one built for a larger budget."""
    gap_max = gap_min + span
    lowest = max(0, -(-windows // gap_max) - 1)
    budget = lowest + round(share * (windows // gap_min - lowest))
    args = (budget, windows, gap_min, gap_max)
    if not budget * gap_min <= windows <= (budget + 1) * gap_max:
        with pytest.raises(InfeasibleError):
            matched_schedule(*args, np.random.default_rng(seed), draws)
        return
    table = GapTable.build(budget + spare, windows, gap_min, gap_max)
    try:
        want = reference_schedule(*args, np.random.default_rng(seed), draws)
    except ValueError:  # the scaled counts underflowed to 0 (p = 0 / 0): refused alike
        with pytest.raises(ValueError):
            matched_schedule(*args, np.random.default_rng(seed), draws)
        return
    got = matched_schedule(*args, np.random.default_rng(seed), draws)
    shared = matched_schedule(*args, np.random.default_rng(seed), draws, table)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(shared, want)


def test_matched_blocks_with_shared_tables_draw_the_schedules_of_separate_calls():
    """One table per gap range gives every (policy, seed) the schedule of its own call,
    the guards' gaps when they can hold the budget, else only the sync's own duration."""
    from trainfabric.diloco.protocol import gaps, matched_blocks

    fleet, regime = FleetConfig(windows=3000), REGIMES["bursty"]
    budgets = np.array([[0, 3, 12], [20, 2, 24]])  # 0: the guards force a sync; 24: too many
    seeds = np.array([4, 5, 6])
    policies = [make_policy("fixed_h"), make_policy("wa_diloco")]
    blocks = matched_blocks(policies, budgets, seeds, 3, regime, fleet)
    lo, hi = gaps(make_policy("wa_diloco"), regime, fleet)
    for p, block in enumerate(blocks):
        for i, seed in enumerate(seeds):
            budget = int(budgets[p, i])
            rng = np.random.default_rng([int(seed), p, 7919])
            try:
                want = matched_schedule(budget, 3000, lo, hi, rng, 3)
            except InfeasibleError:
                want = matched_schedule(budget, 3000, 1, 3000, rng, 3)
            np.testing.assert_array_equal(block.policy.sync_at[3 * i : 3 * i + 3], want)


@given(
    seed=st.integers(0, 2**32 - 1),
    burst=st.floats(1.0, 6.0),
    on=st.floats(1.0, 60.0),
    period=st.floats(61.0, 200.0),
    jitter=st.floats(0.0, 120.0),
)
def test_mmpp_bursts_equal_the_all_pairs_test(seed, burst, on, period, jitter):
    """The MMPP keeps a candidate arrival when some burst holds it, ``0 <= t − start <
    on``: found through the latest start at or before t, equal to testing every start
    (overlapping bursts included: the jitter may exceed the gaps)."""
    horizon = 3000.0
    got = R.mmpp(
        2.0, horizon, np.random.default_rng(seed), burst_factor=burst, on_s=on,
        period_s=period, jitter_s=jitter,
    )  # fmt: skip
    rng = np.random.default_rng(seed)  # the generator's draws, with the all-pairs test
    quiet = 2.0 * period / (period + (burst - 1) * on)
    k = int(np.ceil(horizon / period)) + 1
    starts = np.arange(k) * period + rng.uniform(-jitter, jitter, k)
    peak = quiet * burst
    n = rng.poisson(peak * horizon)
    t = np.sort(rng.uniform(0.0, horizon, n))
    phase = t[:, None] - starts[None, :]
    busy = ((phase >= 0) & (phase < on)).any(axis=1)
    keep = rng.uniform(0.0, peak, n) < np.where(busy, quiet * burst, quiet)
    np.testing.assert_array_equal(got.arrival_s, t[keep])


@given(
    seed=st.integers(0, 2**32 - 1),
    max_batch=st.integers(1, 6),
    kv=st.sampled_from([2_500, 8_000, 131_072]),
)
def test_engine_scans_only_its_occupied_slot_prefix(seed, max_batch, kv):
    """After every step the slots at and above ``top`` are free and the one below it is
    taken: scanning ``[0, top)`` visits every running request, in slot order."""
    rng = np.random.default_rng(seed)
    reqs = R.poisson(3.0, 200.0, rng)
    model = ServingModel(replicas=2, max_batch=max_batch, kv_tokens=kv)
    state = EngineState.empty(2, model)
    arr, pr, out = (x[None, :] for x in (reqs.arrival_s, reqs.prompt_tokens, reqs.output_tokens))
    until = np.array([-np.inf, 50.0])
    for t in np.arange(1.0, 201.0):
        advance(state, arr, pr, out, np.array([reqs.n]), np.array([0, 0]), t, until, model)
        slots = np.arange(max_batch)
        taken = state.slot_req >= 0
        assert not (taken & (slots >= state.top[..., None])).any()
        below = np.take_along_axis(taken, np.maximum(state.top - 1, 0)[..., None], -1)[..., 0]
        assert np.all(below | (state.top == 0))
