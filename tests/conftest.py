"""Test-wide settings (hypothesis profiles: derandomized for `make test`, randomized for
`make test-all`) and shared fixtures: one Ray session for the whole run, small sweeps, an
in-process test experiment."""

import contextlib
import io
import os
import tracemalloc

import matplotlib
import pandas as pd
import pytest
from hypothesis import HealthCheck, settings

from trainfabric.config import Config
from trainfabric.errors import ConfigError
from trainfabric.runs import SweepSpec, registry

matplotlib.use("Agg")

# Hypothesis profiles (HYPOTHESIS_PROFILE; per-test @settings(max_examples=...) still win):
# * "ci" (the default, `make test`): derandomized, so every run replays the same examples
#   and a red build is never a new random draw;
# * "random" (`make test-all`): fresh random examples on every run, from the seed the
#   Makefile prints and passes as --hypothesis-seed (rerun one with
#   `HYPOTHESIS_PROFILE=random pytest --hypothesis-seed=SEED ...`); print_blob adds the
#   @reproduce_failure blob. A failure found this way is kept: its falsifying input goes onto
#   the test as an explicit @example(...), so that "ci" replays it from then on;
# * "dev": more examples, for local exploration.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "random",
    deadline=None,
    derandomize=False,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def strict_loads():
    """``strict_loads(text)``: ``json.loads`` that refuses ``NaN``, ``Infinity`` and
    ``-Infinity`` (which Python's parser accepts but JavaScript's and jq's reject)."""
    from trainfabric.io import loads

    return loads


@pytest.fixture
def cli(capsys):
    """Run ``trainfabric ARGS...`` in-process; returns (exit code, stdout, stderr)."""
    from trainfabric.cli import main
    from trainfabric.io import loads

    def run(*argv):
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
            raise SystemExit(0)
        cap = capsys.readouterr()
        if "--json" in argv and exc.value.code == 0:
            loads(cap.out)  # every --json output of every CLI test is strict JSON
        return exc.value.code, cap.out, cap.err

    return run


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """``trainfabric demo --out DIR --json``, run once per session: (DIR, the JSON printed).
    Shared by the demo test and the browser test of the demo's report."""
    from trainfabric.cli import main

    run_dir = tmp_path_factory.mktemp("demo") / "demo"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), pytest.raises(SystemExit) as exc:
        main(["demo", "--out", str(run_dir), "--json"])
        raise SystemExit(0)
    assert exc.value.code == 0
    return run_dir, stdout.getvalue()


@pytest.fixture(scope="session")
def ray_session():
    """A local two-CPU Ray instance bound to 127.0.0.1, shut down at the end of the session
    (never skipped). It runs beside a watchdog process (its own session) that kills Ray's
    processes if the test run is killed, so a killed run leaves no agents behind."""
    import ray

    from trainfabric.runs.executors import start_local_ray, stop_watchdog

    watchdog = start_local_ray(ray, num_cpus=2)
    try:
        yield ray
    finally:
        ray.shutdown()
        stop_watchdog(watchdog)


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


@pytest.fixture
def allocates_at_most():
    """``with allocates_at_most(mb): ...``: fails unless the block's peak allocation (by
    tracemalloc) stays under ``mb`` megabytes. Guards that refuse "before any work" are held
    to this rather than to a wall-clock bound, which a loaded machine breaks."""

    @contextlib.contextmanager
    def bound(mb: float):
        tracemalloc.start()
        try:
            yield
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= mb * 1e6, f"allocated {peak / 1e6:.1f} MB, more than {mb} MB"

    return bound


@pytest.fixture
def traced():
    """``traced(fn, *args)``: ``(fn(*args), peak bytes allocated while it ran)``, by
    tracemalloc (the size-guard tests check their estimates against it)."""

    def run(fn, *args, **kwargs):
        tracemalloc.start()
        try:
            result = fn(*args, **kwargs)
            return result, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    return run
