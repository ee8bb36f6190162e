"""The five hard instance families: determinism per seed, variety across seeds, structure."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs.wiring.families import (
    FAMILIES,
    SIZES,
    combine,
    family,
    moe_dispatch_phase,
    relabel_pods,
)
from trainfabric.workloads.moe import gini
from trainfabric.workloads.traffic import traffic_from_dag

FIELDS = ("kind", "pod", "dst", "duration_s", "bytes", "latency_s", "phase", "indptr", "indices")


def same(a, b) -> bool:
    return a.n_pods == b.n_pods and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS
    )


def phases_of(dag, kind: str) -> list[int]:
    return [k for k, p in enumerate(dag.phases) if p.kind == kind]


def pairs_per_phase(dag) -> np.ndarray:
    return np.diff(traffic_from_dag(dag).offsets)


@pytest.mark.parametrize("name", FAMILIES)
def test_deterministic_per_seed_and_different_across_seeds(name):
    a, model = family(name, 8, 8, 3)
    b, _ = family(name, 8, 8, 3)
    c, _ = family(name, 8, 8, 4)
    assert same(a, b)
    assert not same(a, c)
    assert model.n == 8 and (model.degrees == 8).all() and model.ocs == 4
    assert model.rate_bps == 100e9 and model.fallback_bps == 5e9


def test_moe_layers_has_four_layers_with_their_own_skew():
    n = 16
    dag, _ = family("moe-layers", n, 16, 0)
    dispatch = phases_of(dag, "moe_dispatch")
    assert len(dispatch) == 4  # one micro-batch, four layers
    for kind in ("moe_combine", "moe_combine_bwd", "moe_dispatch_bwd"):
        assert len(phases_of(dag, kind)) == 4
    pairs = pairs_per_phase(dag)
    assert (pairs[dispatch] == n * (n - 1)).all()
    traffic = traffic_from_dag(dag)
    # Bytes to pod j are proportional to its share P_j: one row of each layer's matrix.
    shares = [traffic.matrix(k)[1] / traffic.matrix(k)[1].sum() for k in dispatch]
    for i in range(4):
        # per-expert Gini 0.2, pooled over the 16 experts of a shard: skewed, but less
        assert 0.01 < gini(shares[i][np.arange(n) != 1]) < 0.2
        for j in range(i):
            assert not np.allclose(shares[i], shares[j])


def _op_order(dag, pod: int) -> list[str]:
    """Forward/backward operation tags of ``pod``'s compute chain, in execution order."""
    tags = []
    for i in np.flatnonzero((dag.kind == 0) & (dag.pod == pod)):
        tag = re.match(r"\w+ ([FB]\d+) ", dag.names[i]).group(1)
        if not tags or tags[-1] != tag:
            tags.append(tag)
    return tags


def test_pp_dp_has_four_stages_and_both_schedules():
    n = 16
    even, _ = family("pp-dp", n, 8, 0)
    odd, _ = family("pp-dp", n, 8, 1)
    for dag in (even, odd):
        fwd = phases_of(dag, "pp_fwd")
        assert len(fwd) == 3 * 4 and len(phases_of(dag, "pp_bwd")) == 3 * 4
        assert (pairs_per_phase(dag)[fwd] == n // 4).all()  # one pair per DP replica
    stage1 = n // 4  # first pod of stage 1
    assert _op_order(even, stage1) == ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]  # 1F1B
    assert _op_order(odd, stage1) == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]  # GPipe


def test_perm_pipe_moe_is_a_permuted_pipeline_then_one_moe_phase():
    n = 16
    dag, _ = family("perm-pipe-moe", n, 8, 5)
    traffic = traffic_from_dag(dag)
    fwd = phases_of(dag, "pp_fwd")
    assert len(fwd) == (n - 1) * 4
    hops = {(int(traffic.flows(k)[0][0]), int(traffic.flows(k)[1][0])) for k in fwd}
    assert len(hops) == n - 1
    succ = dict(hops)
    first = (set(succ) - set(succ.values())).pop()
    path = [first]
    while path[-1] in succ:
        path.append(succ[path[-1]])
    assert sorted(path) == list(range(n))  # a Hamiltonian path: every stage on its own pod
    assert path != list(range(n))
    moe = phases_of(dag, "moe_dispatch")
    assert len(moe) == 1 and pairs_per_phase(dag)[moe[0]] == n * (n - 1)
    # In series: the critical path is the pipeline's plus the MoE phase's.
    other, _ = family("perm-pipe-moe", n, 8, 6)
    assert other.names and not same(dag, other)
    rate = 100e9
    phase_cp = moe_dispatch_phase(n, np.random.default_rng(0)).critical_path_at(rate)
    assert dag.critical_path_at(rate) > phase_cp > 0


def test_dp_ep_has_rings_and_ep_groups():
    n = 16
    dag, _ = family("dp-ep", n, 8, 0)
    traffic = traffic_from_dag(dag)
    a2a = phases_of(dag, "moe_dispatch")
    assert len(a2a) == 2 * 2  # two MoE layers, two micro-batches
    half = n // 2
    for k in a2a:
        s, d, _ = traffic.flows(k)
        assert s.size == 2 * half * (half - 1)
        assert ((s < half) == (d < half)).all()  # inside an EP group of n/2 pods
    ring = phases_of(dag, "dp_reduce_scatter")
    assert len(ring) == n - 1
    s, d, _ = traffic.flows(ring[0])
    assert sorted(zip(s.tolist(), d.tolist(), strict=True)) == [(i, (i + 1) % n) for i in range(n)]
    expert = phases_of(dag, "dp_expert_reduce_scatter")
    s, d, _ = traffic.flows(expert[0])
    assert (np.abs(s - d) == half).all() and s.size == n


def test_two_jobs_are_side_by_side_on_the_same_pods():
    n = 8
    dag, _ = family("two-jobs", n, 8, 0)
    pipe = [k for k, p in enumerate(dag.phases) if p.name.startswith("pipe:")]
    moe = [k for k, p in enumerate(dag.phases) if p.name.startswith("moe:")]
    assert len(pipe) == (n - 1) * 4 * 2 and len(moe) == 2 * 4 + 2 * (n - 1)
    traffic = traffic_from_dag(dag)
    pods = {int(v) for k in pipe + moe for v in traffic.flows(k)[0]}
    assert pods == set(range(n))
    # No edge between the jobs: the node sets are two weakly connected components.
    import networkx as nx

    assert nx.number_weakly_connected_components(dag.to_networkx()) == 2


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.floats(1e9, 1e12))
def test_combine_series_adds_and_side_by_side_takes_the_max(seed, rate):
    rng = np.random.default_rng(seed)
    a, _ = family("pp-dp", 8, 8, seed)
    b = relabel_pods(moe_dispatch_phase(8, rng), rng.permutation(8))
    cp_a, cp_b = a.critical_path_at(rate), b.critical_path_at(rate)
    series = combine(a, b, series=True)
    side = combine(a, b, series=False)
    assert series.critical_path_at(rate) == pytest.approx(cp_a + cp_b, rel=1e-12)
    assert side.critical_path_at(rate) == pytest.approx(max(cp_a, cp_b), rel=1e-12)
    assert len(series.phases) == len(a.phases) + len(b.phases)
    assert len({p.name for p in side.phases}) == len(side.phases)
    assert series.comm_bytes() == pytest.approx(a.comm_bytes() + b.comm_bytes())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16))
def test_relabel_pods_maps_pods_and_inverts(seed):
    dag, _ = family("dp-ep", 8, 8, 0)
    perm = np.random.default_rng(seed).permutation(8)
    moved = relabel_pods(dag, perm)
    comm = dag.comm_nodes
    assert np.array_equal(moved.pod[comm], perm[dag.pod[comm]])
    assert np.array_equal(moved.dst[comm], perm[dag.dst[comm]])
    assert moved.critical_path_at(50e9) == pytest.approx(dag.critical_path_at(50e9), rel=1e-12)
    assert same(relabel_pods(moved, np.argsort(perm)), dag)


def test_bad_inputs_are_config_errors():
    with pytest.raises(ConfigError) as err:
        family("nope", 8, 8, 0)
    assert err.value.field == "family"
    for pods in (4, 12, 512):
        with pytest.raises(ConfigError) as err:
            family("moe-layers", pods, 8, 0)
        assert err.value.field == "pods"
    with pytest.raises(ConfigError) as err:
        family("pp-dp", 8, 6, 0)  # 4 OCSes do not divide 6 ports
    assert err.value.field == "ocs"
    dag, _ = family("pp-dp", 8, 8, 0)
    with pytest.raises(ConfigError) as err:
        relabel_pods(dag, np.zeros(8, dtype=int))
    assert err.value.field == "perm"


def test_every_benchmark_size_builds():
    """Every family at its largest benchmark size but 64 builds on the requested pods."""
    for name, sizes in SIZES.items():
        n = max(s for s in sizes if s <= 32)
        dag, model = family(name, n, 16, 0)
        assert dag.n_pods == model.n == n and dag.comm_nodes.size > 0
