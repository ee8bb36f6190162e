"""The install-time warm-up (``trainfabric.warmup``) runs real commands: each must succeed,
or the kernels it should compile are silently left to the first user command."""

import pytest

from trainfabric.fabric.scenarios import parse_scenario
from trainfabric.warmup import _MODES, _TOPOLOGY, JOB_COMMANDS, OCS_COMMANDS, SCENARIOS, run


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
@pytest.mark.parametrize("argv", OCS_COMMANDS + JOB_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_warm_up_command_exits_0(argv):
    assert run(argv) == 0


@pytest.mark.parametrize("engine", ["flow", "packet"])
def test_every_warm_up_scenario_is_valid_on_both_engines(engine):
    kinds = [
        parse_scenario({**sc, "engine": engine, "modes": _MODES, "topology": _TOPOLOGY}).kind
        for sc in SCENARIOS
    ]
    assert kinds == ["line_rate", "isolation", "failures", "flaps"]
