"""Size guards of the DiLoCo simulator and protocol: absurd horizons refused by the schema,
memory estimated before any request is drawn, too few windows for the protocol refused."""

import numpy as np
import pytest

from trainfabric.config import validate
from trainfabric.diloco.fleet import REGIMES, Block, FleetConfig, fleet_memory_bytes, simulate
from trainfabric.diloco.policies import make_policy
from trainfabric.diloco.protocol import (
    ProtocolConfig,
    check_protocol_size,
    min_windows,
    run_protocol,
)
from trainfabric.errors import ConfigError
from trainfabric.limits import memory_limit


def _run(windows: int, regime: str, seeds: int, runs_per_seed: int = 1):
    blocks = [Block(make_policy("wa_diloco"), np.repeat(np.arange(seeds), runs_per_seed))]
    return simulate(FleetConfig(windows=windows), REGIMES[regime], blocks)


def test_a_trillion_windows_refused_by_the_schema():
    with pytest.raises(ConfigError) as exc:
        validate(FleetConfig, {"windows": 1_000_000_000_000})
    assert exc.value.field == "windows"
    assert "at most 100,000,000" in exc.value.message


def test_huge_horizon_refused_before_drawing_requests(allocates_at_most):
    with allocates_at_most(1), memory_limit(1.0), pytest.raises(ConfigError) as exc:
        _run(100_000_000, "steady", 4)
    assert exc.value.field == "windows"
    assert "4 runs x 100,000,000 windows" in exc.value.message
    assert "needs about 80 GB" in exc.value.message and "limit of 1 GB" in exc.value.message


def test_memory_closed_form():
    """32 B per run-window, 56 B per request, +512 B per run-window in seed_compat mode;
    runs sharing a seed add its no-sync trajectory, 41 B + 8 B per replica per window."""
    cfg = FleetConfig(windows=1000)
    assert fleet_memory_bytes(cfg, REGIMES["steady"], 5, 5) == 5 * 1000 * 32 + 5 * 3000 * 56
    shared = 20 * 1000 * 32 + 5 * 3000 * 56 + 5 * 1000 * (41 + 8 * 2)
    assert fleet_memory_bytes(cfg, REGIMES["steady"], 20, 5) == shared
    compat = fleet_memory_bytes(cfg, REGIMES["seed_bursty"], 2, 2)
    assert compat == 2 * 1000 * (32 + 512) + 2 * REGIMES["seed_bursty"].rate * 1000 * 56


@pytest.mark.parametrize(
    ("regime", "windows", "seeds", "per_seed"),
    [("steady", 2000, 10, 1), ("seed_bursty", 1000, 10, 1), ("steady", 2000, 4, 10)],
)
def test_estimate_within_a_factor_of_the_measured_peak(traced, regime, windows, seeds, per_seed):
    """Measured: steady 2,000 windows x 10 runs 3.7 MB (estimate 4.0 MB); seed_bursty
    ~0.68 kB per run-window (estimate 0.71 kB); 40 runs sharing 4 seeds (their no-sync
    trajectories kept) within the same factor."""
    _run(20, regime, 2, per_seed)  # compile the serving kernel outside the measurement
    with memory_limit(1.0):  # a moderate size under an explicit limit still runs
        result, peak = traced(_run, windows, regime, seeds, per_seed)
    runs = seeds * per_seed
    assert len(result.table) == runs
    estimate = fleet_memory_bytes(FleetConfig(windows=windows), REGIMES[regime], runs, seeds)
    assert 0.5 * peak <= estimate <= 4.0 * peak


@pytest.mark.parametrize("windows", [10, 1000])
def test_protocol_refuses_too_few_windows_with_the_minimum(allocates_at_most, windows):
    cfg = ProtocolConfig(regimes=["bursty"], fleet=FleetConfig(windows=windows))
    with allocates_at_most(1), pytest.raises(ConfigError) as exc:
        run_protocol(cfg)
    assert exc.value.field == "windows"
    assert "needs at least 1,154 windows on regime bursty" in exc.value.message
    assert f"got {windows:,}" in exc.value.message


def test_protocol_minimum_is_lo_plus_hi_of_the_guards():
    """The seed's guards: min_h 128 steps + the 0.57 s sync -> 129 windows; max_h 1,024 + 1."""
    fleet = FleetConfig()
    assert min_windows(REGIMES["bursty"], fleet) == 129 + 1025
    assert min_windows(REGIMES["sync_heavy"], fleet) == 218 + 1114
    at_min = ProtocolConfig(regimes=["bursty"], fleet=FleetConfig(windows=1154))
    with memory_limit(1.0):
        check_protocol_size(at_min, REGIMES["bursty"])


def test_protocol_refuses_its_largest_simulation_over_the_limit(allocates_at_most):
    cfg = ProtocolConfig(regimes=["steady"], seeds=10_000, envelope_draws=1000)
    with allocates_at_most(1), memory_limit(1.0), pytest.raises(ConfigError) as exc:
        run_protocol(cfg)
    assert exc.value.field == "windows"
    assert "80,000,000 runs x 10,000 windows" in exc.value.message
