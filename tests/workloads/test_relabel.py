"""TaskDAG.relabel against a brute-force relabelling, node by node, on random DAGs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.workloads import build_dag, get_preset
from trainfabric.workloads.dag import BARRIER, COMM, COMPUTE, Phase, TaskDAG, from_arrays


@st.composite
def dags(draw) -> TaskDAG:
    """A random DAG on 2..6 pods: random kinds and columns, random edges between nodes whose
    ids are shuffled (so that :func:`from_arrays` renumbers them), unique node names."""
    k = draw(st.integers(2, 6))
    n = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = rng.integers(0, 3, n).astype(np.int8)
    src = rng.integers(0, k, n)
    pod = np.where(kind == BARRIER, -1, src).astype(np.int32)
    dst = np.where(kind == COMM, (src + rng.integers(1, k, n)) % k, -1).astype(np.int32)
    lo, hi = np.sort(rng.integers(0, n, (2, int(rng.integers(0, 3 * n + 1)))), axis=0)
    ids = rng.permutation(n)
    return from_arrays(
        k,
        kind=kind,
        pod=pod,
        dst=dst,
        duration_s=np.where(kind == COMPUTE, rng.random(n), 0.0),
        nbytes=np.where(kind == COMM, rng.random(n) * 1e9, 0.0),
        latency_s=np.where(kind == COMM, rng.random(n) * 1e-5, 0.0),
        phase=np.where(kind == COMPUTE, -1, rng.integers(0, 3, n)).astype(np.int32),
        edge_src=ids[lo[lo < hi]],
        edge_dst=ids[hi[lo < hi]],
        phases=tuple(Phase("step", f"step {i}") for i in range(3)),
        names=tuple(f"node {i}" for i in range(n)),
    )


def by_name(dag: TaskDAG, rename=lambda v: v) -> tuple[dict, set]:
    """Every node's columns keyed by its name (pods through ``rename``) and the edges as name
    pairs: what a relabelling must keep, whatever the node numbering."""
    nodes = {
        dag.names[i]: (
            int(dag.kind[i]),
            rename(int(dag.pod[i])),
            rename(int(dag.dst[i])),
            float(dag.duration_s[i]),
            float(dag.bytes[i]),
            float(dag.latency_s[i]),
            int(dag.phase[i]),
        )
        for i in range(dag.n_nodes)
    }
    return nodes, {(dag.names[u], dag.names[v]) for u, v in dag.edges.tolist()}


@settings(max_examples=60, deadline=None)
@given(dags(), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_relabel_matches_the_brute_force_relabelling(dag, extra, seed):
    n = dag.n_pods + extra
    perm = np.random.default_rng(seed).permutation(n)[: dag.n_pods]
    out = dag.relabel(perm, n if extra else None)
    assert out.n_pods == n
    assert by_name(out) == by_name(dag, lambda v: int(perm[v]) if v >= 0 else v)
    assert out.phases == dag.phases
    assert (out.edges[:, 0] < out.edges[:, 1]).all()  # still numbered topologically
    assert out.pod.dtype == np.int32 and out.dst.dtype == np.int32
    if not extra:  # a permutation: its inverse restores every node
        assert by_name(out.relabel(np.argsort(perm))) == by_name(dag)


def test_relabel_keeps_the_gpu_transfers_of_every_node():
    dag = build_dag(get_preset("moe", 4), gpu_flows=True)
    out = dag.relabel([2, 0, 3, 1])
    pattern = dict(zip(dag.names, dag.gpu.pattern.tolist(), strict=True))
    assert dict(zip(out.names, out.gpu.pattern.tolist(), strict=True)) == pattern
    assert np.array_equal(out.gpu.share, dag.gpu.share)


@pytest.mark.parametrize(
    ("perm", "n_pods"),
    [([0, 0, 1, 2], None), ([0, 1, 2], None), ([0, 1, 2, 4], None), ([0, 1, 2, -1], 6)],
)
def test_relabel_refuses_a_map_that_is_not_injective_into_the_pods(perm, n_pods):
    dag = build_dag(get_preset("moe", 4))
    with pytest.raises(ConfigError) as err:
        dag.relabel(perm, n_pods)
    assert err.value.field == "perm"
