"""The compressed sweeps (ocs/compress.py) against the uncompressed DAG, to 1e-12 relative.

The reference is computed on the full TaskDAG: node durations ``t(x)``, the uncompressed
forward-backward sweep (``PathCost._sweeps``) and the chain rule
``∂U/∂x_e = −Σ_{m on e} μ_m 8 b_m B / (B x_e + B0)^2`` summed node by node; the hard path
by the DAG's own longest-path sweep. Instances: presets with many identical phases (ring
all-reduce, MoE), a hand-built DAG where comm nodes follow comm nodes, share endpoints with
compute nodes and sit at the roots and leaves, and random DAGs from test_cost's strategy.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import PathCost, _forward_value
from trainfabric.workloads import build_dag, get_preset
from trainfabric.workloads.dag import DagBuilder

from .test_cost import instances

RTOL = 1e-12


def reference(cost: PathCost, x: np.ndarray, b2: float) -> dict:
    """U, μ, ∂U/∂x, CP and log|Π| from the uncompressed DAG."""
    t = cost.durations(x)
    u_scaled, mu = cost._sweeps(b2 * t)
    rate = cost.model.rate_bps * x[cost.comm_pair] + cost.model.fallback_bps
    bits = 8.0 * cost.dag.bytes[cost.comm_nodes]
    dt_dx = -bits * cost.model.rate_bps / rate**2
    grad = np.bincount(cost.comm_pair, mu[cost.comm_nodes] * dt_dx, cost.model.n_pairs)
    pindptr, pindices = cost._pred_csr
    log_paths = _forward_value(pindptr, pindices, cost.leaves, np.zeros(cost.dag.n_nodes))
    return dict(
        u=u_scaled / b2, mu=mu, grad=grad, cp=cost.dag.critical_path(t), log_paths=log_paths
    )


def assert_matches(cost: PathCost, x: np.ndarray, b2: float) -> None:
    ref = reference(cost, x, b2)
    u, grad = cost.value_and_grad(x, b2)
    assert u == pytest.approx(ref["u"], rel=RTOL)
    assert cost.smoothed(x, b2) == pytest.approx(ref["u"], rel=RTOL)
    scale = np.abs(ref["grad"]).max()
    np.testing.assert_allclose(grad, ref["grad"], rtol=RTOL, atol=RTOL * scale)
    np.testing.assert_allclose(cost.marginals(x, b2), ref["mu"], rtol=RTOL, atol=RTOL)
    assert cost.hard(x) == ref["cp"]  # max commutes with rounding: bit-identical
    assert cost.log_paths() == pytest.approx(ref["log_paths"], rel=RTOL, abs=RTOL)


@pytest.mark.parametrize(
    ("name", "pods"), [("moe", 8), ("dp-ring", 8), ("dp-hd", 8), ("hybrid", 8), ("pipeline", 8)]
)
@pytest.mark.parametrize("b2_rel", [1.0, 50.0, 500.0])
def test_presets_match_the_uncompressed_dag(name, pods, b2_rel):
    dag = build_dag(get_preset(name, pods=pods))
    model = OcsModel.uniform(pods, 8, 2)
    cost = PathCost(dag, model)
    x = np.random.default_rng(1).uniform(0.05, 3.0, model.n_pairs)
    b2 = b2_rel * max(cost.log_paths(), 1.0) / cost.hard(x)
    assert_matches(cost, x, b2)


def test_ring_all_reduce_is_one_type_per_kind_of_step():
    """The 2(n-1) steps of a ring all-reduce are identical bundles: a handful of types, and
    far fewer compressed nodes than DAG nodes."""
    dag = build_dag(get_preset("dp-ring", pods=16))
    cost = PathCost(dag, OcsModel.uniform(16, 8, 2))
    c = cost.compressed
    assert c.n_types <= 4
    assert c.n_nodes < dag.n_nodes / 3
    assert c.m_pair.size <= 4 * 16


def test_comm_chains_roots_leaves_and_shared_endpoints():
    """Comm nodes in series (a plain one feeding another), a comm root and a comm leaf, a
    bundle whose exit also has a compute predecessor, and two identical bundles."""
    b = DagBuilder(4)
    a = b.compute(0, 1e-3)
    root = b.comm(1, 2, 3e7, 5e-6, -1)
    z1 = b.compute(1, 2e-3)
    for s, d, nb in ((0, 1, 1e7), (0, 2, 4e7), (3, 1, 2e7)):
        m = b.comm(s, d, nb, 5e-6, -1)
        b.edge(a, m)
        b.edge(m, z1)
    b.edge(a, z1)
    b.edge(root, z1)
    c1 = b.comm(1, 3, 5e7, 5e-6, -1)
    c2 = b.comm(3, 0, 6e7, 5e-6, -1)
    b.edge(z1, c1)
    b.edge(c1, c2)
    z2 = b.compute(0, 1e-3)
    b.edge(c2, z2)
    _, z3 = b.phase(
        "a2a", "p0", np.array([0, 2]), np.array([1, 3]), np.array([1e7, 9e7]), 5e-6, 0.0, preds=[z2]
    )
    _, z4 = b.phase(
        "a2a", "p1", np.array([0, 2]), np.array([1, 3]), np.array([1e7, 9e7]), 5e-6, 0.0, preds=[z3]
    )
    leaf = b.comm(2, 0, 7e7, 5e-6, -1)
    b.edge(z4, leaf)
    b.edge(z2, leaf)
    dag = b.build()
    model = OcsModel.uniform(4, 4, 1)
    cost = PathCost(dag, model)
    assert cost.compressed.n_nodes < dag.n_nodes
    x = np.array([0.3, 1.7, 0.9, 2.2, 0.1, 1.0])
    for b2 in (10.0, 1e3, 1e5):
        assert_matches(cost, x, b2)


@settings(max_examples=60, deadline=None)
@given(instances(max_nodes=30), st.sampled_from([0.3, 30.0, 3000.0]))
def test_random_dags_match_the_uncompressed_dag(inst, sharpness):
    cost, x = inst
    assert_matches(cost, x, sharpness / cost.hard(x))
