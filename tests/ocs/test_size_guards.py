"""Size guards of the OCS planner: the model's pair structures and the planner's per-node
arrays are estimated before any work and refused over an explicit memory limit."""

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.limits import memory_limit
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.planner import compare, plan, plan_memory_bytes
from trainfabric.workloads.build import build_dag
from trainfabric.workloads.presets import get_preset


def test_model_of_a_million_pods_refused_before_its_pairs_naming_pods(allocates_at_most):
    with allocates_at_most(50), memory_limit(4.0), pytest.raises(ConfigError) as exc:
        OcsModel.uniform(1_000_000, 8, 4)
    assert exc.value.field == "pods"
    assert "1,000,000 pods (499,999,500,000 pod pairs" in exc.value.message
    assert "limit of 4 GB" in exc.value.message


def test_model_memory_closed_form():
    m = OcsModel.uniform(100, 8, 4)
    assert m.memory_bytes() == 300 * 4950 + 8 * 6 * 100 * 100


def test_planner_refuses_a_dag_too_large_for_the_limit(allocates_at_most):
    dag = build_dag(get_preset("moe", 32))  # 18,652 nodes: ~4.9 MB to plan
    model = OcsModel.uniform(32, 8, 4)
    with allocates_at_most(1), memory_limit(0.002), pytest.raises(ConfigError) as exc:
        plan(dag, model)
    with allocates_at_most(1), memory_limit(0.002), pytest.raises(ConfigError):
        compare(dag, model, methods=("uniform",))
    assert exc.value.field == "pods"
    assert "planning a 18,652-node task DAG on 32 pods needs about 0.00486 GB" in exc.value.message


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
@pytest.mark.parametrize(("name", "pods"), [("moe", 32), ("pipeline", 64)])
def test_estimate_within_a_factor_of_the_measured_peak(traced, name, pods):
    """Measured: moe 32 pods 4.6 MB (estimate 4.9), pipeline 64 pods 1.6 MB (estimate 1.3)."""
    dag = build_dag(get_preset(name, pods))
    model = OcsModel.uniform(pods, 8, 4)
    plan(build_dag(get_preset("moe")), OcsModel.uniform(16, 8, 4), max_iter=5)  # compile first
    with memory_limit(1.0):  # a moderate instance under an explicit limit still plans
        result, peak = traced(plan, dag, model)
    assert np.array_equal(model.pod_degrees(result.x), model.degrees)
    assert 0.5 * peak <= plan_memory_bytes(dag, model) <= 4.0 * peak
