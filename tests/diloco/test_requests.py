"""Serving requests: trace files (line-numbered errors) and seeded arrival generators."""

import numpy as np
import pytest

from trainfabric.diloco import requests as R
from trainfabric.errors import ConfigError

GOOD = "arrival_s,prompt_tokens,output_tokens\n0.5,10,3\n0.5,20,1\n2.25,5,7\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_parse_keeps_order_and_rebases():
    r = R.parse_trace(GOOD)
    assert r.arrival_s.tolist() == [0.0, 0.0, 1.75]
    assert r.prompt_tokens.tolist() == [10, 20, 5]
    assert r.output_tokens.tolist() == [3, 1, 7]


def test_azure_and_generic_layouts_agree():
    azure = AZURE + "2023-11-16 18:17:03.5000000,10,3\n2023-11-16 18:17:05.2500000,5,7\n"
    generic = "id,arrival_s,output_tokens,prompt_tokens\nx,100.5,3,10\ny,102.25,7,5\n"
    a, g = R.parse_trace(azure), R.parse_trace(generic)
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        assert getattr(a, field).tolist() == getattr(g, field).tolist(), field
    assert a.arrival_s.tolist() == [0.0, 1.75]


def test_naive_timestamps_are_utc_not_local(monkeypatch):
    """Berlin skips 02:00-03:00 on 2023-03-26: read as local time, 01:59:59 -> 03:00:01 is
    2 s; as UTC (the rule) it is 3,602 s. A zone given in the file is honoured."""
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        text = AZURE + "2023-03-26 01:59:59,1,1\n2023-03-26 03:00:01,1,1\n"
        assert R.parse_trace(text).arrival_s.tolist() == [0.0, 3602.0]
        zoned = AZURE + "2023-03-26 01:59:59+01:00,1,1\n2023-03-26 03:00:01+02:00,1,1\n"
        assert R.parse_trace(zoned).arrival_s.tolist() == [0.0, 2.0]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


H = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD + "3.0,abc,4\n", "t.csv:5: prompt_tokens: not a whole number of tokens: 'abc'"),
        (GOOD.replace("2.25,5,7", "2.25,5"), "t.csv:4: output_tokens: not a whole number"),
        (GOOD.replace("0.5,10,3", "0.5,10,0"), "t.csv:2: output_tokens: must be >= 1"),
        (H + "0,1e30,1\n", "t.csv:2: prompt_tokens: not a whole number of tokens: '1e30'"),
        (H + "0,-5,1\n", "t.csv:2: prompt_tokens: not a whole number"),
        (H + "0,1,20000000\n", "t.csv:2: output_tokens: must be <= 10,000,000 tokens"),
        (H + "nan,1,1\n", "t.csv:2: arrival_s: not a number of seconds"),
        (H + "inf,1,1\n", "t.csv:2: arrival_s: not a number of seconds"),
        (H + "1e308,1,1\n", "t.csv:2: arrival_s: not a number of seconds"),
        (H + "0,1," + "9" * 200_000 + "\n", "t.csv:2: output_tokens: longer than 256"),
        (H + "1,1,1\n0.5,1,1\n", "t.csv:3: arrival_s: '0.5' is before the previous row"),
        (H + "1,1,1\n\n\n0,1,1\n", "t.csv:5: arrival_s: '0' is before"),
        (H + "1,1,1\n2,1,1,9\n", "t.csv:3: 4 fields, the header has 3"),
        (AZURE + "2023-11-16 18:17:03,1,1\nyesterday,1,1\n", "t.csv:3: TIMESTAMP: not an ISO"),
        ("time,foo\n1,2\n", "t.csv:1: header must name TIMESTAMP"),
        (H, "no requests"),
        (H + "\n\n", "no requests"),
        ("", "empty file"),
    ],
)
def test_malformed_rows_name_the_line(text, needle):
    with pytest.raises(ConfigError) as exc:
        R.parse_trace(text, "t.csv")
    assert needle in str(exc.value) and exc.value.field == "trace"
    assert len(str(exc.value)) < 400  # a 200 KB field is not echoed back


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"arrival_s\xff,prompt_tokens\n"), "not a UTF-8 text file"),
        (lambda p: None, "file not found"),
    ],
)
def test_unreadable_trace_files(tmp_path, make, words):
    path = tmp_path / "t.csv"
    make(path)
    with pytest.raises(ConfigError) as exc:
        R.read_trace(path)
    assert exc.value.field == "trace" and words in exc.value.message


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


def test_cli_names_the_option_and_the_line(cli, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(H + "0,1,1\n1,1e30,1\n")
    code, out, err = cli("diloco", "sim", "--trace", str(bad), "--windows", "20")
    assert code == 2 and out == ""
    assert err == f"error: --trace: {bad}:3: prompt_tokens: not a whole number of tokens: '1e30'\n"


def test_segments_are_disjoint_consecutive_pieces_of_the_scaled_trace():
    """At mean rate r the trace's n requests last n / r s; segment i is [iH, (i+1)H) of it,
    shifted to 0: the segments hold disjoint requests, in trace order, and together every
    request of the first floor(n / (r H)) H seconds."""
    trace = R.azure_trace()
    rate, H = 2.0, 500.0
    held = R.segments(trace, rate, H)
    assert held == int(trace.n / (rate * H))  # 8,819 / 1,000 -> 8
    parts = [R.segment(trace, rate, H, i) for i in range(held)]
    assert all(p.arrival_s.min() >= 0 and p.arrival_s.max() < H for p in parts)
    joined = np.concatenate([p.arrival_s + i * H for i, p in enumerate(parts)])
    scale = (trace.n / (trace.span_s * trace.n / (trace.n - 1))) / rate
    inside = trace.arrival_s * scale < held * H
    np.testing.assert_allclose(joined, trace.arrival_s[inside] * scale, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(
        np.concatenate([p.prompt_tokens for p in parts]), trace.prompt_tokens[inside]
    )
    assert sum(p.n for p in parts) / (held * H) == pytest.approx(rate, rel=0.1)
    with pytest.raises(ConfigError, match="seeds") as exc:
        R.segment(trace, rate, H, held)
    assert f"holds {held} disjoint segments" in exc.value.message
