"""Serving requests: trace files (line-numbered errors) and seeded arrival generators."""

import numpy as np
import pytest

from trainfabric.diloco import requests as R
from trainfabric.errors import FormatError

GOOD = "timestamp,prompt_tokens,output_tokens\n0.5,10,3\n0.0,20,1\n2.25,5,7\n"


def test_parse_sorts_and_rebases():
    r = R.parse_trace(GOOD)
    assert r.arrival_s.tolist() == [0.0, 0.5, 2.25]
    assert r.prompt_tokens.tolist() == [20, 10, 5]
    assert r.output_tokens.tolist() == [1, 3, 7]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD + "3.0,abc,4\n", "line 5"),
        (GOOD.replace("2.25,5,7", "2.25,5"), "line 4: missing column"),
        (GOOD.replace("0.5,10,3", "0.5,10,0"), "line 2"),
        ("time,foo\n1,2\n", "line 1: no prompt column"),
        ("", "empty file"),
    ],
)
def test_malformed_rows_name_the_line(text, needle):
    with pytest.raises(FormatError) as exc:
        R.parse_trace(text, "t.csv")
    assert needle in str(exc.value) and exc.value.field == "trace"


def test_azure_trace_is_the_shipped_file():
    a = R.azure_trace()
    assert a.n == 8819
    assert 3400 < a.span_s < 3440  # ~57 minutes
    assert a.prompt_tokens[0] == 4808 and a.output_tokens[0] == 10  # the first data row


@pytest.mark.parametrize("gen", [R.poisson, R.diurnal, R.mmpp, R.hawkes])
def test_generators_are_seeded_and_hit_the_mean_rate(gen):
    a = gen(3.0, 20_000, np.random.default_rng(4))
    b = gen(3.0, 20_000, np.random.default_rng(4))
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert a.n / 20_000 == pytest.approx(3.0, rel=0.06)
    assert np.all(np.diff(a.arrival_s) >= 0) and a.arrival_s.max() < 20_000


def test_poisson_gaps_are_exponential():
    from scipy import stats

    a = R.poisson(5.0, 4_000, np.random.default_rng(1))
    assert stats.kstest(np.diff(a.arrival_s), "expon", args=(0, 1 / 5.0)).pvalue > 0.01


def test_mmpp_bursts_carry_burst_factor_times_the_quiet_rate():
    a = R.mmpp(2.0, 12_000, np.random.default_rng(2), burst_factor=4.0, jitter_s=0.0)
    phase = a.arrival_s % 120.0
    on = (phase < 30.0).sum() / (100 * 30.0)
    off = (phase >= 30.0).sum() / (100 * 90.0)
    assert on / off == pytest.approx(4.0, rel=0.1)


def test_replay_keeps_the_trace_order_and_scales_the_rate():
    trace = R.parse_trace(GOOD)
    r = R.replay(trace, 1.0, 300.0, np.random.default_rng(0))
    assert set(r.prompt_tokens.tolist()) <= {20, 10, 5}
    assert r.n / 300.0 == pytest.approx(1.0, rel=0.05)
