"""Test-wide settings: a deterministic, deadline-free hypothesis profile for CI."""

import os

import matplotlib
import pytest
from hypothesis import HealthCheck, settings

matplotlib.use("Agg")

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def cli(capsys):
    """Run ``trainfabric ARGS...`` in-process; returns (exit code, stdout, stderr)."""
    from trainfabric.cli import main

    def run(*argv):
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
            raise SystemExit(0)
        cap = capsys.readouterr()
        return exc.value.code, cap.out, cap.err

    return run
