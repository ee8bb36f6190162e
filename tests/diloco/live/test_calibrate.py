"""The calibration fit recovers known parameters from synthetic runs."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.diloco import calibrate as C
from trainfabric.errors import ConfigError
from trainfabric.io import dumps, loads


@given(
    st.lists(st.tuples(st.floats(0, 50), st.floats(0, 10)), min_size=1, max_size=8),
    st.floats(0, 70),
)
def test_occupancy_integral_equals_a_riemann_sum(raw, t):
    starts = np.array([a for a, _ in raw])
    ends = starts + np.array([d for _, d in raw])
    grid = np.linspace(0, t, 20001)[:-1] + t / 40000  # midpoints
    count = ((starts[None] <= grid[:, None]) & (grid[:, None] < ends[None])).sum(axis=1)
    brute = count.sum() * t / 20000
    assert C.occupancy_integral(starts, ends)(t) == pytest.approx(brute, abs=len(raw) * t / 5000)


def test_in_flight_before_by_hand():
    starts, ends = [0.0, 1.0, 2.0], [3.0, 1.5, np.inf]
    assert C.in_flight_before(starts, ends, [0.0, 1.2, 2.0, 5.0]).tolist() == [0, 2, 1, 1]


TRUE = {"E": 2.0, "B": 60.0, "beta": 0.35, "drift_steps": 40.0}
TPS = 512.0  # tokens per inner step


def _progress_runs(rng, noise=0.002):
    runs = []
    for pattern in ([8] * 12, [32] * 6, [64] * 3, list(rng.integers(8, 64, 8))):
        h = np.asarray(pattern, float)
        d = C.effective_tokens(h, TPS, TRUE["drift_steps"])
        loss = TRUE["E"] + TRUE["B"] * d ** -TRUE["beta"] + rng.normal(0, noise, h.size)
        runs.append(
            {"syncs": pd.DataFrame({"steps": h}), "evals": pd.DataFrame({"eval_loss": loss})}
        )
    return runs


def test_fit_progress_recovers_known_parameters():
    fit = C.fit_progress(_progress_runs(np.random.default_rng(0)), TPS)
    assert fit["drift_steps"] == pytest.approx(TRUE["drift_steps"], rel=0.25)
    assert fit["beta"] == pytest.approx(TRUE["beta"], rel=0.15)
    assert fit["E"] == pytest.approx(TRUE["E"], abs=0.15)
    assert fit["rmse"] < 0.004 and fit["points"] == 12 + 6 + 3 + 8


def test_effective_tokens_by_hand():
    assert C.effective_tokens([10, 30], 2.0, 10.0).tolist() == pytest.approx([10.0, 25.0])


def _serving_run(rng, base=0.01, per_seq=0.002, interference=0.8, n=600):
    arrival = np.sort(rng.uniform(0, 300, n))
    prompt = rng.integers(50, 500, n).astype(float)
    idle_ttft = 1e-4 * prompt
    ttft = idle_ttft + rng.exponential(0.05, n) * (rng.uniform(size=n) < 0.5)
    first = arrival + ttft
    finish = first + rng.uniform(0.2, 2.0, n)
    syncs = pd.DataFrame({"start_s": [50.0, 150.0, 250.0], "end_s": [65.0, 170.0, 260.0]})
    nn = C.mean_over(C.occupancy_integral(first, finish), first, finish)
    s = C.mean_over(C.occupancy_integral(syncs["start_s"], syncs["end_s"]), first, finish)
    tpot = (base + per_seq * nn) * (1 + interference * s) * rng.lognormal(0, 0.01, n)
    req = pd.DataFrame(
        {
            "arrival_s": arrival,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "finish_s": finish,
            "prompt_tokens": prompt,
            "output_tokens": np.full(n, 20),
            "status": np.where(np.arange(n) % 50 == 7, "error", "ok"),  # 2% failed streams
        }
    )
    return req, syncs


def test_fit_decode_recovers_interference():
    req, syncs = _serving_run(np.random.default_rng(2))
    fit = C.fit_decode(req, syncs)
    assert fit["interference"] == pytest.approx(0.8, rel=0.05)
    assert fit["decode_base_s"] == pytest.approx(0.01, rel=0.1)
    assert fit["decode_per_seq_s"] == pytest.approx(0.002, rel=0.1)
    assert fit["interference_identified"]


def test_fit_prefill_uses_idle_arrivals():
    rng = np.random.default_rng(5)
    n = 50
    arrival = np.arange(n) * 10.0  # far apart: every arrival finds the server idle
    prompt = rng.integers(100, 1000, n).astype(float)
    ttft = 2e-4 * prompt
    req = pd.DataFrame(
        {
            "arrival_s": arrival,
            "ttft_s": ttft,
            "finish_s": arrival + ttft + 1,
            "prompt_tokens": prompt,
        }
    )
    syncs = pd.DataFrame({"start_s": [5.0], "end_s": [25.0]})  # hides the arrivals at 10, 20
    fit = C.fit_prefill(req, syncs)
    assert fit["prefill_s_per_token"] == pytest.approx(2e-4) and fit["requests"] == n - 2


def _write_run(path, rng, h):
    from trainfabric.io import write_parquet

    req, syncs = _serving_run(rng)
    steps = np.cumsum(h)
    syncs = pd.DataFrame({"start_s": syncs["start_s"], "end_s": syncs["end_s"], "steps": h[:3]})
    d = C.effective_tokens(h[:3], TPS, TRUE["drift_steps"])
    evals = pd.DataFrame(
        {
            "wall_s": syncs["end_s"],
            "tokens": steps[:3] * TPS,
            "eval_loss": TRUE["E"] + TRUE["B"] * d ** -TRUE["beta"],
        }
    )
    st_ = pd.DataFrame(
        {
            "wall_s": np.linspace(0, 300, 31),
            "step": np.arange(31) * 4,
            "tokens": np.arange(31) * 4 * TPS,
        }
    )
    path.mkdir()
    for name, table in (("requests", req), ("syncs", syncs), ("evals", evals), ("steps", st_)):
        write_parquet(path / f"{name}.parquet", table)


def test_calibrate_writes_a_fleet_config(tmp_path):
    from trainfabric.config import validate
    from trainfabric.diloco.fleet import FleetConfig

    rng = np.random.default_rng(7)
    _write_run(tmp_path / "a", rng, np.array([8.0, 16, 24]))
    _write_run(tmp_path / "b", rng, np.array([40.0, 40, 40]))
    doc = C.calibrate([tmp_path / "a", tmp_path / "b"])
    fleet = validate(FleetConfig, doc["fleet"])
    assert fleet.serving.interference == pytest.approx(0.8, rel=0.1)
    assert fleet.progress.tokens_per_step == pytest.approx(TPS)
    # 120 steps in 300 s of which 45 s syncing
    assert fleet.progress.steps_per_s == pytest.approx(120 / 255)
    assert doc["sync_duration_samples_s"] == [15.0, 20.0, 10.0] * 2
    assert fleet.serving.failure_p == 24 / 1200 and doc["fit"]["failures"]["failed"] == 24
    loads(dumps(doc))  # strict JSON


def test_calibrate_refuses_a_directory_without_tables(tmp_path):
    with pytest.raises(ConfigError, match="RUN_DIRS.*requests.parquet"):
        C.calibrate([tmp_path])


def test_fit_decode_reports_a_speed_up_during_syncs_and_floors_it():
    req, syncs = _serving_run(np.random.default_rng(3), interference=-0.3)
    fit = C.fit_decode(req, syncs)
    assert fit["interference_raw"] == pytest.approx(-0.3, abs=0.03)
    assert fit["interference"] == 0.0


def _spoil(path, name, change):
    """Rewrite table ``name`` of the run at ``path`` as ``change(table)``."""
    from trainfabric.io import write_parquet

    write_parquet(path / f"{name}.parquet", change(pd.read_parquet(path / f"{name}.parquet")))


def _nan_at(column, row):
    def change(table):
        table.loc[row, column] = np.nan
        return table

    return change


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("requests", lambda t: t.drop(columns="ttft_s"), "requests.parquet: no column ttft_s"),
        ("syncs", lambda t: t.drop(columns="end_s"), "syncs.parquet: no column end_s"),
        ("evals", _nan_at("eval_loss", 1), "evals.parquet: column eval_loss, row 1 is NaN"),
        (
            "syncs",
            lambda t: t.assign(steps=-t["steps"]),
            "syncs.parquet: column steps, row 0 is neg",
        ),
        ("requests", lambda t: t.assign(ttft_s=t["ttft_s"].astype(str)), "ttft_s is not numeric"),
        ("syncs", lambda t: t.assign(end_s=t["start_s"] - 1), "syncs.parquet: row 0: end_s is bef"),
    ],
)
def test_calibrate_names_the_table_and_column_of_a_bad_value(tmp_path, name, change, message):
    _write_run(tmp_path / "a", np.random.default_rng(7), np.array([8.0, 16, 24]))
    _spoil(tmp_path / "a", name, change)
    with pytest.raises(ConfigError, match=f"RUN_DIRS: .*{message}"):
        C.calibrate([tmp_path / "a"])


def test_calibrate_refuses_a_corrupt_table(tmp_path):
    _write_run(tmp_path / "a", np.random.default_rng(7), np.array([8.0, 16, 24]))
    (tmp_path / "a" / "syncs.parquet").write_bytes(b"PAR1 truncated")
    with pytest.raises(ConfigError, match="syncs.parquet: not a readable Parquet file"):
        C.calibrate([tmp_path / "a"])


def test_calibrate_refuses_a_run_with_empty_tables(tmp_path):
    _write_run(tmp_path / "a", np.random.default_rng(7), np.array([8.0, 16, 24]))
    for name in C.TABLES:
        _spoil(tmp_path / "a", name, lambda t: t.iloc[:0])
    with pytest.raises(ConfigError, match="no inner steps recorded in any steps.parquet"):
        C.calibrate([tmp_path / "a"])


def test_fit_progress_skips_evals_before_the_first_inner_step():
    runs = _progress_runs(np.random.default_rng(0))
    for run in runs:
        run["syncs"] = pd.DataFrame({"steps": np.r_[0.0, run["syncs"]["steps"]]})
        run["evals"] = pd.DataFrame({"eval_loss": np.r_[9.0, run["evals"]["eval_loss"]]})
    fit = C.fit_progress(runs, TPS)
    assert fit["points"] == 12 + 6 + 3 + 8 and fit["rmse"] < 0.004
