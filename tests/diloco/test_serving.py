"""The continuous-batching engine: hand cases with closed forms, and queue invariants."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.diloco import requests as R
from trainfabric.diloco.serving import (
    FINISHED,
    KV_FRAC,
    LATE,
    LATE_TPOT,
    LATE_TTFT,
    N_COUNTERS,
    RUNNING,
    TPOT_VIOL,
    TTFT_VIOL,
    VIOLATED,
    EngineState,
    ServingModel,
    advance,
    histogram,
    violation_rates,
)


def run(reqs: R.Requests, model: ServingModel, horizon: float, sync_until=-1.0, step=1.0):
    """Simulate one request set to ``horizon``; per-request (first token, finish), counters."""
    arr, pr, out = (x[None, :] for x in (reqs.arrival_s, reqs.prompt_tokens, reqs.output_tokens))
    st_ = EngineState.empty(1, model)
    rec = np.full((1, reqs.n, 2), np.nan)
    tot = np.zeros(N_COUNTERS)
    t = 0.0
    while t < horizon:
        t = min(t + step, horizon)
        tot += advance(
            st_,
            arr,
            pr,
            out,
            np.array([reqs.n]),
            np.array([0]),
            t,
            np.array([sync_until]),
            model,
            rec,
        )[0]
    return rec[0], tot


ONE = ServingModel(replicas=1, prefill_s_per_token=1e-3, decode_base_s=0.01, decode_per_seq_s=0.002)


def test_single_request_closed_form():
    reqs = R.Requests(np.array([0.3]), np.array([100]), np.array([11]))
    rec, tot = run(reqs, ONE, 5.0)
    first, done = rec[0]
    assert first == pytest.approx(0.3 + 100 * 1e-3)  # TTFT = prefill
    assert done - first == pytest.approx(10 * (0.01 + 0.002))  # 10 more tokens, batch of 1
    assert tot[FINISHED] == 1 and tot[VIOLATED] == 0


def test_two_requests_share_decode_iterations():
    """Both arrive at 0: prefills back to back (request 0 does not decode during request
    1's prefill), then both decode their 5 remaining tokens in a batch of 2."""
    reqs = R.Requests(np.zeros(2), np.array([100, 100]), np.array([6, 6]))
    rec, _ = run(reqs, ONE, 5.0)
    assert rec[0, 0] == pytest.approx(0.1) and rec[1, 0] == pytest.approx(0.2)
    assert rec[:, 1] == pytest.approx([0.2 + 5 * 0.014] * 2)
    late = R.Requests(np.array([0.0, 0.15]), np.array([100, 100]), np.array([6, 6]))
    rec, _ = run(late, ONE, 5.0)
    # request 0 decodes alone from 0.1 to 0.15 (0.05 / 0.012 tokens), pauses for the prefill
    alone = 0.05 / 0.012
    assert rec[1, 0] == pytest.approx(0.25)
    assert rec[0, 1] == pytest.approx(0.25 + (5 - alone) * 0.014)
    assert rec[1, 1] == pytest.approx(rec[0, 1] + alone * 0.012)


def test_interference_slows_work_by_one_plus_gamma():
    reqs = R.Requests(np.array([0.0]), np.array([100]), np.array([11]))
    fast, _ = run(reqs, ONE, 5.0)
    slow, _ = run(reqs, ONE.model_copy(update={"interference": 1.0}), 5.0, sync_until=100.0)
    assert slow[0, 0] == pytest.approx(2 * fast[0, 0])
    assert slow[0, 1] == pytest.approx(2 * fast[0, 1])
    # a sync ending mid-prefill: 0.05 s at half speed (25 ms of work), then full speed
    part, _ = run(reqs, ONE.model_copy(update={"interference": 1.0}), 5.0, sync_until=0.05)
    assert part[0, 0] == pytest.approx(0.05 + (0.1 - 0.025))


def test_slo_counters():
    m = ONE.model_copy(update={"ttft_slo_s": 0.15, "tpot_slo_s": 0.0125})
    reqs = R.Requests(np.zeros(2), np.array([100, 100]), np.array([6, 6]))
    _, tot = run(reqs, m, 5.0)
    # TTFTs 0.1 / 0.2 (one too slow); TPOTs 0.0134 / 0.0131 (both too slow)
    assert tot[TTFT_VIOL] == 1 and tot[TPOT_VIOL] == 2 and tot[VIOLATED] == 2


@given(
    st.integers(0, 10**6),
    st.floats(0.5, 6.0),
    st.integers(1, 3),
    st.integers(1, 8),
    st.integers(2_000, 40_000),
)
def test_queue_invariants(seed, rate, replicas, batch, kv):
    """Every request is served exactly once, FIFO per replica, at non-negative times."""
    model = ServingModel(replicas=replicas, max_batch=batch, kv_tokens=kv)
    reqs = R.poisson(rate, 60.0, np.random.default_rng(seed))
    rec, tot = run(reqs, model, 400.0, step=0.7)
    first, done = rec[:, 0], rec[:, 1]
    assert not np.isnan(rec).any()  # all served
    assert tot[FINISHED] == reqs.n  # each once
    assert np.all(first >= reqs.arrival_s + model.prefill_s_per_token * reqs.prompt_tokens - 1e-9)
    assert np.all(done >= first - 1e-12)
    for q in range(replicas):  # FIFO: first tokens in arrival order on each replica
        assert np.all(np.diff(first[q::replicas]) > 0)


def run_last(reqs, model, horizon, step=1.0):
    """Like :func:`run`, also returning the counters of the final window."""
    arr, pr, out = (x[None, :] for x in (reqs.arrival_s, reqs.prompt_tokens, reqs.output_tokens))
    st_ = EngineState.empty(1, model)
    tot, t, last = np.zeros((1, N_COUNTERS)), 0.0, None
    while t < horizon:
        t = min(t + step, horizon)
        last = advance(
            st_, arr, pr, out, np.array([reqs.n]), np.array([0]), t, np.array([-1.0]), model
        )
        tot += last
    return tot, last


def test_a_blocking_prompt_counts_its_queue_as_violations():
    """One replica: a 10^7-token prompt at t = 0 (10^4 s of prefill) blocks two small
    requests; at a 5 s horizon nothing finished, 3 requests arrived, all 3 violate: 100%
    (the old finished-only denominator reported 0%)."""
    reqs = R.Requests(np.array([0.0, 0.1, 1.0]), np.array([10**7, 10, 10]), np.array([2, 2, 2]))
    tot, last = run_last(reqs, ONE, 5.0)
    assert tot[0, FINISHED] == 0
    rates = violation_rates(tot, last)
    assert rates["unfinished_requests"].tolist() == [3.0]
    assert rates["slo_violation_rate"].tolist() == [1.0]


def test_unfinished_requests_join_numerator_and_denominator():
    """Two replicas, round robin: the blocking prompt (request 0) and request 2 sit on
    replica 0, request 1 finishes within its SLOs on replica 1 -> exactly 2 / 3."""
    reqs = R.Requests(np.array([0.0, 0.0, 1.0]), np.array([10**7, 10, 10]), np.array([2, 2, 2]))
    two = ONE.model_copy(update={"replicas": 2})
    tot, last = run_last(reqs, two, 5.0)
    rates = violation_rates(tot, last)
    assert tot[0, FINISHED] == 1 and tot[0, VIOLATED] == 0
    assert rates["requests"].tolist() == [3.0]
    assert rates["slo_violation_rate"].tolist() == [2 / 3]
    assert rates["ttft_violation_rate"].tolist() == [2 / 3]


def test_fleet_reports_the_blocked_queue():
    """The fleet table carries the same rates: the blocked replica is not a 0% run."""
    from trainfabric.diloco.fleet import Block, FleetConfig, Regime, simulate
    from trainfabric.diloco.policies import make_policy

    class Blocked(Regime):
        def requests(self, horizon_s, seed):
            return R.Requests(np.array([0.0, 0.0, 1.0]), np.array([10**7, 10, 10]), np.full(3, 2))

    cfg = FleetConfig(windows=10, serving=ONE.model_copy(update={"replicas": 2}))
    table = simulate(
        cfg, Blocked(name="blocked"), [Block(make_policy("fixed_h"), np.array([0]))]
    ).table
    assert table["slo_violation_rate"].tolist() == [2 / 3]
    assert table["unfinished_requests"].tolist() == [2.0] and table["requests"].tolist() == [3.0]


def test_unfinished_requests_count_only_once_past_their_slo():
    """One replica of batch 1, a 4-s prefill (request 0, arrives at 0) blocks the rest. At 4.5 s
    horizon: request 0 is decoding with its first token at 4.0 (TTFT 4 s, late); request 1
    (arrived 1.0) waits 3.5 s (late); request 2 (arrived 4.3) waits 0.2 s < 0.5 s: no outcome
    yet, in neither numerator nor denominator -> 2 / 2."""
    reqs = R.Requests(np.array([0.0, 1.0, 4.3]), np.array([4000, 10, 10]), np.array([50, 2, 2]))
    tot, last = run_last(reqs, ONE.model_copy(update={"max_batch": 1}), 4.5, step=0.5)
    rates = violation_rates(tot, last)
    assert rates["unfinished_requests"].tolist() == [3.0]
    assert rates["late_unfinished"].tolist() == [2.0]
    assert rates["slo_violation_rate"].tolist() == [1.0]
    assert rates["requests"].tolist() == [3.0]
    # a decoding request whose TPOT is already over its SLO: first token at 0.1, 9 more
    # tokens due; with tpot_slo 0.01 s, (0.3 - 0.1) / 9 = 0.022 > 0.01 while it is unfinished
    slow = ONE.model_copy(update={"tpot_slo_s": 0.01, "decode_base_s": 0.05})
    one = R.Requests(np.array([0.0]), np.array([100]), np.array([10]))
    tot, last = run_last(one, slow, 0.3, step=0.3)
    assert last[0, LATE] == 1 and last[0, LATE_TPOT] == 1 and last[0, LATE_TTFT] == 0
    assert violation_rates(tot, last)["tpot_violation_rate"].tolist() == [1.0]


def test_window_telemetry_histograms_and_kv_in_flight():
    """TTFT observed once per request when its first token is out, ITL (output - 1) times at
    its TPOT when it finishes, both in vLLM's buckets; KV use = tokens in flight."""
    from trainfabric.diloco.telemetry import ITL_BUCKETS, TTFT_BUCKETS

    reqs = R.Requests(np.array([0.0]), np.array([100]), np.array([11]))
    arr, pr, out = (x[None, :] for x in (reqs.arrival_s, reqs.prompt_tokens, reqs.output_tokens))
    st_ = EngineState.empty(1, ONE)
    args = (arr, pr, out, np.array([1]), np.array([0]))
    c = advance(st_, *args, 0.15, np.array([-1.0]), ONE)[0]  # first token at 0.1
    ttft_b, ttft_n = histogram(c, "ttft")
    assert ttft_n == 1 and ttft_b[TTFT_BUCKETS.index(0.1)] == 1 and ttft_b[6] == 0  # (0.08, 0.1]
    # 0.05 s of decoding at 0.012 s/token: prompt + first + 0.05/0.012 tokens in flight
    assert c[KV_FRAC] == pytest.approx((100 + 1 + 0.05 / 0.012) / ONE.kv_tokens)
    assert c[RUNNING] == 1 and histogram(c, "itl")[1] == 0  # no ITL before it finishes
    c = advance(st_, *args, 1.0, np.array([-1.0]), ONE)[0]
    itl_b, itl_n = histogram(c, "itl")
    assert itl_n == 10 and itl_b[ITL_BUCKETS.index(0.025)] == 10 and itl_b[0] == 0  # TPOT 0.012
    assert histogram(c, "ttft")[1] == 0 and c[KV_FRAC] == 0 and c[RUNNING] == 0


def test_link_term_counts_in_time_requests_overlapping_a_sync_as_its_fraction():
    """Sync until 1.0 s. Requests at 0 (TTFT 0.1) and 0.5 (0.1) overlap it and are on time:
    p each; the one at 0.05 waits for the first prefill (TTFT 0.2 > 0.15): 1, not 1 + p;
    at 2.0 (0.1) after the sync: 0; at 2.05 (waits, TTFT 0.25): 1."""
    m = ONE.model_copy(update={"interference": 0.0, "ttft_slo_s": 0.15, "tpot_slo_s": 1.0})
    reqs = R.Requests(np.array([0.0, 0.05, 0.5, 2.0, 2.05]), np.array([100, 150, 100, 100, 200]),
                      np.full(5, 2))  # fmt: skip
    rec0, tot0 = run(reqs, m, 5.0, sync_until=1.0)
    rec, tot = run(reqs, m.model_copy(update={"link_violation_p": 0.3}), 5.0, sync_until=1.0)
    assert np.array_equal(rec, rec0)  # the engine's times are untouched
    assert tot0[VIOLATED] == 2 and tot0[TTFT_VIOL] == 2
    assert tot[VIOLATED] == pytest.approx(2.6) and tot[TTFT_VIOL] == pytest.approx(2.6)
    assert tot[FINISHED] == 5 and tot[TPOT_VIOL] == 0
    # with failures (f = 0.1): on time inside 1 - 0.7 * 0.9 = 0.37 each, outside 0.1
    both = m.model_copy(update={"link_violation_p": 0.3, "failure_p": 0.1})
    _, tot = run(reqs, both, 5.0, sync_until=1.0)
    assert tot[VIOLATED] == pytest.approx(2 + 2 * 0.37 + 0.1)
    assert tot[TTFT_VIOL] == pytest.approx(2.6)  # a failure is no latency


CHUNKED = ONE.model_copy(update={"prefill": "chunked"})


def test_chunked_prefill_keeps_decoding_by_hand():
    """Both arrive at 0: prefills back to back (0.1, 0.2); request 0 decodes its 5 tokens
    alone from 0.1 (0.012 s each) while request 1 prefills, then request 1 alone."""
    reqs = R.Requests(np.zeros(2), np.array([100, 100]), np.array([6, 6]))
    rec, tot = run(reqs, CHUNKED, 5.0)
    assert rec[:, 0] == pytest.approx([0.1, 0.2])
    assert rec[:, 1] == pytest.approx([0.1 + 5 * 0.012, 0.2 + 5 * 0.012])
    assert tot[FINISHED] == 2
    one = R.Requests(np.array([0.3]), np.array([100]), np.array([11]))
    assert np.array_equal(run(one, CHUNKED, 5.0)[0], run(one, ONE, 5.0)[0])


@given(st.integers(0, 10**6), st.floats(0.5, 20.0), st.sampled_from([0.3, 1.0, 0.05]))
def test_chunked_first_tokens_are_a_fifo_queue_of_prefills(seed, rate, step):
    """With slots and KV never binding, the first tokens are Lindley's recursion over the
    prefill times, whatever the decoding (and the window length) does:
    ``first_i = max(arrival_i, first_{i-1}) + c · prompt_i``; every request finishes."""
    rng = np.random.default_rng(seed)
    n = 30
    arr = np.sort(rng.uniform(0, n / rate, n))
    prompt, out = rng.integers(1, 400, n), rng.integers(1, 40, n)
    m = CHUNKED.model_copy(update={"max_batch": 64, "kv_tokens": 10**6})
    rec, tot = run(R.Requests(arr, prompt, out), m, n / rate + 60.0, step=step)
    want, prev = np.empty(n), -np.inf
    for i in range(n):
        prev = want[i] = max(arr[i], prev) + 1e-3 * prompt[i]
    assert rec[:, 0] == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert tot[FINISHED] == n
    gap = rec[:, 1] - rec[:, 0]  # decode: at least (out - 1) iterations of a batch of 1
    assert np.all(gap >= (out - 1) * 0.012 - 1e-9)
