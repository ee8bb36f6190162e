"""Size guards of the workloads engine: caps on absurd job fields, the DAG node count before
building, and a memory estimate checked against the builder's measured peak."""

import subprocess
import sys

import pytest

from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.limits import memory_limit
from trainfabric.workloads.build import build_dag, dag_size
from trainfabric.workloads.job import Job, remap_onto_pods
from trainfabric.workloads.presets import PRESETS, get_preset


def _job_data(**model) -> dict:
    return {
        "model": {"layers": 4, "hidden": 64, "seq_len": 16, "vocab": 100, **model},
        "parallelism": {"dp": 2},
        "placement": {"gpus_per_pod": 1, "pods": 2},
    }


def test_absurd_layers_refused_by_the_schema_in_no_time(allocates_at_most):
    with allocates_at_most(1), pytest.raises(ConfigError) as exc:
        validate(Job, _job_data(layers=1_000_000_000))
    assert exc.value.field == "model.layers"
    assert "at most 10,000" in exc.value.message


@pytest.mark.parametrize(
    ("section", "key", "value", "cap"),
    [
        ("placement", "pods", 1_000_000_000, "65,536"),
        ("parallelism", "micro_batches", 10**6, "4,096"),
        ("placement", "gpus_per_pod", 10**6, "4,096"),
    ],
)
def test_other_caps_name_their_field(section, key, value, cap):
    data = _job_data()
    data[section][key] = value
    with pytest.raises(ConfigError) as exc:
        validate(Job, data)
    assert exc.value.field == f"{section}.{key}"
    assert f"at most {cap}" in exc.value.message


@pytest.mark.parametrize("pods", [1_000_000_000, 0, -3])
def test_remap_refuses_pods_out_of_range_by_name(pods):
    with pytest.raises(ConfigError) as exc:
        remap_onto_pods(PRESETS["moe"].job, pods)
    assert exc.value.field == "pods"
    assert "1..65,536" in exc.value.message


@pytest.mark.parametrize("name", list(PRESETS))
def test_node_count_before_building_matches_the_built_dag(name):
    """Exact for dense jobs; MoE phases may share pod pairs across EP groups (<= 3% over)."""
    job = get_preset(name)
    built = build_dag(job).n_nodes
    counted = dag_size(job).nodes
    if job.model.is_moe:
        assert built <= counted <= 1.03 * built
    else:
        assert counted == built


def test_huge_pod_count_refused_before_building_naming_pods_and_estimate(allocates_at_most):
    job = get_preset("moe", 65_536)
    with allocates_at_most(20), memory_limit(1.0), pytest.raises(ConfigError) as exc:
        build_dag(job)
    assert exc.value.field == "pods"
    assert "task DAG of ~8,892,187,672 nodes" in exc.value.message
    assert "3.57e+03 GB" in exc.value.message and "limit of 1 GB" in exc.value.message


def test_compute_heavy_job_names_layers(allocates_at_most):
    """10,000 MoE layers without EP: compute nodes outnumber the (one-barrier) phases."""
    data = _job_data(layers=10_000, moe_experts=2, moe_top_k=1)
    data["parallelism"]["micro_batches"] = 4_096
    with allocates_at_most(1), memory_limit(1.0), pytest.raises(ConfigError) as exc:
        build_dag(validate(Job, data))
    assert exc.value.field == "layers"
    assert "327,696,384 compute" in exc.value.message


@pytest.mark.parametrize(("name", "pods"), [("moe", 64), ("dp-ring", 128)])
def test_estimate_within_a_factor_of_the_measured_peak(traced, name, pods):
    """Measured here: ~405 B per node for both (tracemalloc peak of the builder)."""
    job = get_preset(name, pods)
    with memory_limit(1.0):  # a moderate size under an explicit limit still builds
        dag, peak = traced(build_dag, job)
    size = dag_size(job)
    assert size.nodes == dag.n_nodes
    assert 0.5 * peak <= size.memory_bytes <= 4.0 * peak


def test_dag_module_does_not_import_networkx():
    code = "import sys, trainfabric.workloads.dag; print('networkx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
