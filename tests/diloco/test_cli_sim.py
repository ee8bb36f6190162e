"""``diloco sim`` says when the syncs ran: every sync's start, end and the request rate
around it in ``--json``, one sentence and a table that fits 80 columns in text."""

import numpy as np
import pytest

from trainfabric.clikit import out as console
from trainfabric.diloco.fleet import Block, FleetConfig, SyncDurations, get_regime, simulate
from trainfabric.diloco.policies import make_policy
from trainfabric.io import loads

SIM = ("diloco", "sim", "--policy", "wa_forecast", "--regime", "azure", "--windows", "2000")


def test_sim_json_lists_every_sync_inside_the_horizon(cli):
    """As many sync times as syncs; each starts on a window boundary inside the horizon, ends
    after it by the sync duration (cut at the horizon), before the next starts; the rate
    around a sync of under one window is that window's arrivals; the mean rate is the
    requests that arrived over the horizon."""
    code, text, err = cli(*SIM, "--json")
    assert code == 0, err
    row = loads(text)
    times = row["sync_times"]
    assert len(times) == row["syncs"] > 0
    start = np.array([t["start_s"] for t in times])
    end = np.array([t["end_s"] for t in times])
    assert (start >= 0).all() and (end <= row["windows"]).all()
    assert np.array_equal(start, np.floor(start))
    assert end == pytest.approx(np.minimum(start + row["sync_s"], row["windows"]))
    assert (end[:-1] <= start[1:]).all()
    rates = np.array([t["request_rate_per_s"] for t in times])
    assert np.array_equal(rates, np.round(rates)) and (rates >= 0).all()  # one 1 s window
    assert row["request_rate_during_syncs_per_s"] == pytest.approx(rates.mean())
    assert row["request_rate_mean_per_s"] == pytest.approx(row["requests"] / row["windows"])
    assert isinstance(row["requests"], int) and isinstance(row["unfinished_requests"], int)


def test_sync_times_follow_drawn_durations():
    """With a duration distribution each sync lasts its own drawn duration (the table's
    ``sync_s`` is their mean), and the windows marked in sync are those the syncs overlap."""
    fleet = FleetConfig(windows=1500)
    durations = SyncDurations([0.5, 2.5, 7.25])
    res = simulate(
        fleet,
        get_regime("bursty"),
        [Block(make_policy("fixed_h"), np.arange(2))],
        durations=durations,
    )
    for k in range(2):
        t = res.sync_times(k)
        assert len(t) == res.table["syncs"][k] > 1
        drawn = res.sync_ends_s[k] - t["start_s"].to_numpy()
        assert set(np.round(drawn, 9)) <= {0.5, 2.5, 7.25}
        assert drawn.mean() == pytest.approx(res.table["sync_s"][k])
        marked = res.in_sync(k)
        assert marked.sum() == np.ceil(np.minimum(t["end_s"], 1500) - t["start_s"]).sum()
        assert marked[t["start_s"].to_numpy().astype(int)].all()


def test_sim_text_fits_80_columns(cli, monkeypatch):
    """First the answer (a sentence with numbers), then one block that fits: no cut header,
    no line over 80 characters, counts as integers with separators."""
    monkeypatch.setattr(console, "width", 80)
    code, text, err = cli(*SIM, "--regime", "steady")
    assert code == 0, err
    lines = text.splitlines()
    assert lines[0].startswith("wa_forecast on steady: ") and "requests missed their SLO" in text
    assert "…" not in text and max(map(len, lines)) <= 80
    assert "requests arrived" in text and "SLO violation rate (%)" in text
    assert ".0\n" not in text  # no count printed as a float


def test_sim_on_a_trace_says_which_windows_it_chose(cli):
    code, text, err = cli("diloco", "sim", "--regime", "azure", "--seed", "1", "--json")
    assert code == 0, err
    assert loads(text)["windows"] == 4409  # 8,819 s cut in 2
    assert "windows: 4,409 of 1 s, the trace's segment length for seeds 0..1" in err


def test_rate_scale_without_trace_is_refused(cli):
    code, out, err = cli("diloco", "sim", "--windows", "20", "--rate-scale", "2")
    assert code == 2 and out == "" and err.startswith("error: --rate-scale:") and "--trace" in err
