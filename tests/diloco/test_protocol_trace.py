"""``diloco protocol`` on a real trace answers *when*: windows per seed chosen from the trace
(its segment length) and said; one refusal naming the values that fit, which then run;
regimes that the trace makes identical run once, named for what differs; every verdict with
its reason; findings first; the sync times over the request rate in the run directory."""

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from trainfabric.diloco import protocol
from trainfabric.diloco import stats as S
from trainfabric.diloco.fleet import FleetConfig, get_regime, segment_windows, trace_regime
from trainfabric.diloco.protocol import ProtocolConfig, check_protocol, min_windows
from trainfabric.errors import ConfigError
from trainfabric.io import loads

AZURE_CSV = "src/trainfabric/diloco/data/azure_llm_code_2023.csv"
# Small enough for the default suite: 2 policies, 6 seeds (the fewest the design accepts),
# no calibration seeds; bursty merges with steady on a trace, sync_heavy does not.
SMALL = dict(
    regimes=["steady", "bursty", "sync_heavy"],
    policies=["fixed_h", "wa_forecast"],
    seeds=6,
    envelope_draws=2,
)


@pytest.fixture
def small_quick(monkeypatch):
    monkeypatch.setattr(protocol, "quick_config", lambda: ProtocolConfig(**SMALL))


def _need() -> int:
    """The most windows any of the small config's regimes needs (sync_heavy: 218 + 1,114)."""
    return max(min_windows(get_regime(n), FleetConfig()) for n in SMALL["regimes"])


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_refusal_names_a_rate_scale_that_then_runs(cli, small_quick, tmp_path):
    """At the trace's own rate 6 segments are 572 s, under the 1,332 windows sync_heavy
    needs: one line naming --rate-scale, the largest at 3 significant digits that fits
    (the next step up does not). That value then runs: every seed gets the segment length
    of 6 seeds, which the stderr and --json say."""
    code, out, err = cli("diloco", "protocol", "--quick", "--trace", AZURE_CSV)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "needs 1,332 windows" in err and "of 572 s" in err
    rate = float(re.search(r"--rate-scale ([0-9.]+) fits 6 seeds", err).group(1))
    base = get_regime("steady")

    def windows(scale):
        return segment_windows(trace_regime(AZURE_CSV, scale, base), 6)

    assert windows(rate) >= _need() > windows(rate + 10 ** (np.floor(np.log10(rate)) - 2))
    argv = ["--quick", "--trace", AZURE_CSV, "--rate-scale", str(rate), "--json"]
    code, out, err = cli("diloco", "protocol", *argv, "--out", str(tmp_path))
    assert code == 0, err
    res = loads(out)
    assert res["windows_per_seed"] == {"steady": windows(rate), "sync_heavy": windows(rate)}
    assert res["windows"] == windows(rate)
    assert f"windows per seed: {windows(rate):,} of 1 s, the segment length" in err
    assert res["windows_note"] in " ".join(err.split())
    runs = pd.read_parquet(tmp_path / "diloco_runs.parquet")
    assert (runs["windows"] == windows(rate)).all()
    # steady and bursty only differ by arrivals, which the trace replaces: one experiment
    assert res["merged_regimes"] == {"steady": ["steady", "bursty"], "sync_heavy": ["sync_heavy"]}
    assert set(res["regimes"]) == {"steady", "sync_heavy"}
    labels = res["regime_labels"]
    assert "1B-parameter sync over 100 Gb/s" in labels["steady"]
    assert "8B-parameter sync over 5 Gb/s" in labels["sync_heavy"]
    _check_reasons_and_findings(res)
    _check_sync_times(res, tmp_path)


def _check_reasons_and_findings(res: dict) -> None:
    for rows in res["regimes"].values():
        for row in rows.values():
            guard = row["verdict_reason"].startswith("loss guard")
            assert guard == (row["vs_matched_random"] == "loses" and row["slo_verdict"] != "worse")
    findings = res["findings"]
    assert findings and all(re.search(r"\d", f) and "matched random" in f for f in findings)
    assert findings[0].startswith(f"On {res['regime_labels']['steady']}, wa_forecast ")


def _check_sync_times(res: dict, run_dir) -> None:
    """sync_times.parquet: seed 0's request rate per window with the primary's sync windows
    and its matched random's; as many sync windows as seed 0's syncs occupy."""
    t = pd.read_parquet(run_dir / "sync_times.parquet")
    assert {"regime", "policy", "seed", "t_s", "request_rate_per_s", "in_sync"} <= set(t)
    runs = pd.read_parquet(run_dir / "diloco_runs.parquet")
    for (regime, policy), rows in t.groupby(["regime", "policy"]):
        assert policy in ("wa_forecast", "matched_random[wa_forecast]")
        assert len(rows) == res["windows"] and rows["t_s"].is_monotonic_increasing
        run = runs[(runs["regime"] == regime) & (runs["policy"] == policy) & (runs["seed"] == 0)]
        run = run.iloc[0]
        assert rows["request_rate_per_s"].sum() == run["requests"]  # 1 s windows
        # syncs start on window boundaries, never overlap, and only the last may be cut
        span = np.ceil(run["sync_s"])
        assert (run["syncs"] - 1) * span < rows["in_sync"].sum() <= run["syncs"] * span
    timing = res["sync_timing"]["steady"]
    assert timing["policy"] == "wa_forecast" and timing["syncs"] > 0
    assert timing["request_rate_mean_per_s"] > 0


def test_refusal_names_the_seeds_that_fit_at_this_rate():
    """At --rate-scale 0.05 the trace lasts 68,719 s; 60 seeds are 1,145 s each, under 1,332:
    the refusal names the most seeds that fit, floor(68,719 / 1,332) = 51, and a rate for 60;
    both pass every check."""
    cfg = ProtocolConfig(**SMALL | {"seeds": 60, "trace": AZURE_CSV, "rate_scale": 0.05})
    with pytest.raises(ConfigError) as exc:
        check_protocol(cfg)
    assert exc.value.field == "seeds"
    said = exc.value.message
    assert "--seeds 51 fits at this rate" in said
    rate = float(re.search(r"--rate-scale ([0-9.]+) fits 60 seeds", said).group(1))
    check_protocol(cfg.model_copy(update={"seeds": 51}))
    check_protocol(cfg.model_copy(update={"rate_scale": rate}))
    with pytest.raises(ConfigError):
        check_protocol(cfg.model_copy(update={"seeds": 52}))


def test_azure_regime_refusal_without_a_rate_to_change():
    """The azure regime has its rate fixed (1 request/s, 8,819 s): 13 segments are 678 s;
    it holds 7 of 1,154 s, 4 after 3 calibration seeds, fewer than the design's 6."""
    cfg = ProtocolConfig(regimes=["azure"], seeds=10, calibration_seeds=3)
    with pytest.raises(ConfigError) as exc:
        check_protocol(cfg)
    assert "holds 4 such seeds, the design needs 6: --windows 1154 --allow-overlap" in str(
        exc.value
    )
    fixed = cfg.model_copy(
        update={"segment_horizon": False, "allow_overlap": True, "fleet": FleetConfig(windows=1154)}
    )
    check_protocol(fixed)


def test_distinct_regimes_merge_only_what_a_trace_makes_identical():
    synthetic = ProtocolConfig()
    assert synthetic.distinct_regimes() == {n: [n] for n in synthetic.regimes}
    assert synthetic.regime_label("bursty") == "bursty"
    trace = synthetic.model_copy(update={"trace": AZURE_CSV})
    assert trace.distinct_regimes() == {
        "steady": ["steady", "diurnal", "bursty"],
        "sync_heavy": ["sync_heavy"],
    }


def _row(**kw):
    base = dict(
        role="secondary",
        p_value=0.5,
        effect_size=-1.0,
        slo_verdict=S.NO_DIFFERENCE,
        loss_verdict=S.NO_DIFFERENCE,
        loss_diff=0.0,
        loss_diff_ci_low=-0.001,
        loss_diff_ci_high=0.001,
        p_loss_adjusted=0.5,
    )
    return SimpleNamespace(**base | kw)


@pytest.mark.parametrize(
    ("row", "verdict", "reason"),
    [
        (_row(), "ties", "no SLO difference, Holm p 0.5"),
        (_row(role="primary", p_value=0.094), "ties", "no SLO difference, p 0.094"),
        (_row(slo_verdict=S.WORSE, p_value=0.01), "loses", "more SLO violations, Holm p 0.01"),
        # a lower SLO that loses: the loss guard decided, and says so with its numbers
        (
            _row(loss_verdict=S.WORSE, loss_diff=0.0224, loss_diff_ci_low=0.0221),
            "loses",
            "loss guard: final loss +0.0224 nats, CI above 0.002 nats",
        ),
        (_row(slo_verdict=S.BETTER, p_value=0.002), "beats", "fewer SLO violations, Holm p 0.002"),
        (
            _row(slo_verdict=S.BETTER, p_value=0.002, loss_diff_ci_high=0.003),
            "ties",
            "but loss CI up to +0.003 nats",
        ),
    ],
)
def test_every_verdict_names_its_reason(row, verdict, reason):
    said, why = protocol._decide(row, ProtocolConfig())
    assert said == verdict and reason in why


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_protocol_text_findings_first_and_fits_80_columns(cli, monkeypatch, tmp_path):
    """Text at 80 columns: the findings (sentences with numbers) before any table, every
    policy named in full (adaptive_tokens and adaptive_load both), no cut header, no line
    over 80 characters; the run directory's summary holds the same findings."""
    from trainfabric.clikit import out as console

    policies = ["adaptive_tokens", "adaptive_load", "wa_forecast"]
    cfg = ProtocolConfig(**SMALL | {"regimes": ["bursty"], "policies": policies})
    monkeypatch.setattr(protocol, "quick_config", lambda: cfg)
    monkeypatch.setattr(console, "width", 80)
    code, text, err = cli(
        "diloco", "protocol", "--quick", "--windows", "1154", "--out", str(tmp_path)
    )
    assert code == 0, err
    summary = loads((tmp_path / "summary.json").read_text())
    assert text.startswith(summary["findings"][0][:60])
    assert text.index("matched random") < text.index("policy: ")
    assert "policy: adaptive_tokens" in text and "policy: adaptive_load" in text
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert text.count("  why ") == len(policies)


def test_rate_scale_without_trace_is_refused(cli, tmp_path):
    code, out, err = cli("diloco", "protocol", "--quick", "--rate-scale", "2",
                         "--out", str(tmp_path / "p"))  # fmt: skip
    assert code == 2 and out == "" and err.startswith("error: --rate-scale:") and "--trace" in err
    assert not (tmp_path / "p").exists()
