"""Shared fixtures: one Ray session for the whole test run, small sweeps, a test experiment."""

from __future__ import annotations

import pandas as pd
import pytest

from trainfabric.config import Config
from trainfabric.errors import ConfigError
from trainfabric.experiments import SweepSpec, registry


@pytest.fixture(scope="session")
def ray_session():
    """A local two-CPU Ray instance, shut down at the end of the session (never skipped)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def small_spec() -> SweepSpec:
    """2 x 2 grid x 2 seeds = 8 cells of moe_skew."""
    return SweepSpec(
        experiment="moe_skew",
        seeds=2,
        base={"experts": 16},
        grid={"gini": [0.1, 0.3], "ep": [2, 4]},
        name="small",
    )


class StepConfig(Config):
    """Config of the in-process test experiment ``step``."""

    x: int = 0


STEP = {"fail_at": None, "error": RuntimeError}


def step(config: StepConfig, seed: int) -> pd.DataFrame:
    """One row ``y = 10 x + seed``; raises at ``x == STEP['fail_at']`` (a simulated crash)."""
    if config.x == STEP["fail_at"]:
        if STEP["error"] is ConfigError:
            raise ConfigError("x", "simulated user error")
        raise RuntimeError("simulated crash")
    return pd.DataFrame({"y": [10.0 * config.x + seed]})


@pytest.fixture
def step_experiment(monkeypatch):
    """Register ``step`` for this test only (serial executor: it lives in this process)."""
    registry.names()  # load the library into the real registry before copying it
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register("step", StepConfig)(step)
    monkeypatch.setitem(STEP, "fail_at", None)
    monkeypatch.setitem(STEP, "error", RuntimeError)
    return STEP
