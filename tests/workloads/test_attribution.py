"""Exposed communication and per-collective bandwidth: hand-computed DAGs, the NCCL-tests
bus-bandwidth identities at line rate, and invariants on the presets."""

from dataclasses import replace

import numpy as np
import pytest

from trainfabric.workloads import Job, build_dag, get_preset
from trainfabric.workloads import interchange as ix
from trainfabric.workloads.attribution import (
    CATEGORIES,
    asap_times,
    bus_bandwidth,
    category,
    collectives,
    compute_only_critical_path,
    critical_path_nodes,
    exposed_comm,
    node_categories,
    phase_groups,
    releasing_predecessors,
    zero_comm_durations,
)
from trainfabric.workloads.dag import DagBuilder, Phase

RATE = 8e9  # bits/s: 1 GB/s, so a transfer of B bytes takes B / 1e9 s


def _two_path_dag(pp_bytes: float, dp_bytes: float):
    """A (1 s) -> PP send -> DP send -> B (1 s), and C (2.5 s) -> B; pods 0 and 1."""
    b = DagBuilder(2)
    a = b.compute(0, 1.0, "A")
    c = b.compute(1, 2.5, "C")
    end = b.compute(1, 1.0, "B")
    _, x = b.phase("pp_fwd", "pp", [0], [1], [pp_bytes], 0.0, 0.0, preds=[a])
    b.phase("dp_reduce_scatter", "dp k0", [1], [0], [dp_bytes], 0.0, 0.0, preds=[x], succs=[end])
    b.edge(c, end)
    return b.build()


def test_exposed_comm_by_hand():
    # comm 1 s + 1 s: B starts at 3 (released by the DP send), T = 4; CP0 = C + B = 3.5, so
    # X = 0.5; the walked path A -> PP -> DP -> B spends 1 s in PP and 1 s in DP -> 0.25 each
    dag = _two_path_dag(1e9, 1e9)
    start, finish = asap_times(dag, dag.durations(RATE))
    e = exposed_comm(dag, start, finish)
    assert e.iteration_s == pytest.approx(4.0)
    assert e.compute_only_s == pytest.approx(3.5)
    assert e.exposed_comm_s == pytest.approx(0.5)
    assert e.by_category == pytest.approx({"PP": 0.25, "DP": 0.25, "EP": 0.0, "other": 0.0})
    assert e.path_s == pytest.approx({"PP": 1.0, "DP": 1.0, "EP": 0.0, "other": 0.0})
    assert e.path_compute_s == pytest.approx(2.0)
    assert [dag.names[i] for i in e.path] == ["A", "pp 0->1", "dp k0 1->0", "B"]
    cats = node_categories(dag)
    assert [CATEGORIES[c] if c >= 0 else None for c in cats[e.path]] == [None, "PP", "DP", None]
    # an engine's own releasing predecessors give the same walk
    pred = releasing_predecessors(dag, finish)
    again = exposed_comm(dag, start, finish, pred)
    assert again.path.tolist() == e.path.tolist()
    late = exposed_comm(dag, start + 7.0, finish + 7.0)  # an iteration started at 7 s
    assert late.iteration_s == pytest.approx(4.0) and late.by_category == e.by_category


def test_hidden_comm_is_not_exposed():
    # comm 0.5 + 0.5 s ends at 2 < 2.5: C releases B, nothing is exposed
    dag = _two_path_dag(5e8, 5e8)
    e = exposed_comm(dag, *asap_times(dag, dag.durations(RATE)))
    assert e.exposed_comm_s == pytest.approx(0.0, abs=1e-12)
    assert sum(e.by_category.values()) == pytest.approx(0.0, abs=1e-12)
    assert [dag.names[i] for i in e.path] == ["C", "B"]


def test_ties_go_to_the_earlier_node():
    b = DagBuilder(2)
    x = b.compute(0, 1.0, "x")
    y = b.compute(1, 1.0, "y")
    z = b.compute(0, 1.0, "z")
    b.edge(x, z)
    b.edge(y, z)
    dag = b.build()
    start, finish = asap_times(dag, dag.duration_s)
    pred = releasing_predecessors(dag, finish)
    ix_, iy, iz = (dag.names.index(n) for n in "xyz")
    assert pred[iz] == min(ix_, iy) and pred[ix_] == pred[iy] == -1
    assert critical_path_nodes(dag, finish).tolist() == [min(ix_, iy), iz]


@pytest.mark.parametrize("name", ["llama3-70b", "hybrid", "mixtral-8x7b"])
@pytest.mark.parametrize("rate", [1e10, 1e12])
def test_split_sums_to_exposed_comm_on_presets(name, rate):
    dag = build_dag(get_preset(name))
    start, finish = asap_times(dag, dag.durations(rate))
    assert finish.max() == pytest.approx(dag.critical_path_at(rate), rel=1e-12)
    e = exposed_comm(dag, start, finish)
    assert sum(e.by_category.values()) == pytest.approx(e.exposed_comm_s, rel=1e-9)
    cp0 = dag.critical_path(dag.duration_s)  # comm nodes and their latency take no time
    assert e.compute_only_s == pytest.approx(cp0, rel=1e-12)
    assert e.exposed_comm_s == pytest.approx(dag.critical_path_at(rate) - cp0, rel=1e-9)
    assert e.exposed_comm_s > 0
    assert e.path_compute_s <= e.compute_only_s * (1 + 1e-12)
    assert sum(e.path_s.values()) + e.path_compute_s == pytest.approx(e.iteration_s, rel=1e-9)
    path = e.path.tolist()
    edges = set(map(tuple, dag.edges.tolist()))
    assert all((u, v) in edges for u, v in zip(path, path[1:], strict=False))
    # zero-time communication: the iteration is the compute-only critical path
    z = exposed_comm(dag, *asap_times(dag, zero_comm_durations(dag)))
    assert z.exposed_comm_s == pytest.approx(0.0, abs=1e-9 * z.iteration_s)
    assert z.iteration_s == pytest.approx(compute_only_critical_path(dag), rel=1e-12)


def test_category_names():
    kinds = ["pp_fwd", "pp_bwd", "dp_all_gather", "dp_expert_reduce_scatter", "moe_combine", "x"]
    assert [category(k) for k in kinds] == ["PP", "PP", "DP", "DP", "EP", "other"]
    assert CATEGORIES == ("PP", "DP", "EP", "other")


def _job(**par) -> Job:
    """One GPU per pod (tp = 1): every collective rank is a pod with its own pair links."""
    moe = par.pop("moe", False)
    model = dict(layers=2, hidden=64, heads=4, seq_len=16, vocab=100)
    if moe:
        model |= dict(moe_experts=8, moe_top_k=2, first_dense_layers=0)
    gpus = par.get("dp", 1) * par.get("pp", 1)
    return Job.model_validate(
        dict(
            model=model,
            parallelism=dict(micro_batches=1, **par),
            placement=dict(gpus_per_pod=1, pods=gpus),
            compute=dict(latency_s=0.0),
            moe_skew_gini=0.0,
        )
    )


def _by_op(dag, rate):
    rows = collectives(dag, *asap_times(dag, dag.durations(rate)))
    return {r.op: r for r in rows}


@pytest.mark.parametrize("dist", [True, False])
def test_ring_busbw_is_the_link_rate(dist):
    # a ring at line rate with zero latency: busbw = the per-rank link rate (NCCL-tests'
    # point), here r/8 bytes/s; algbw = busbw * n / (n-1) (RS/AG) or n / (2(n-1)) (AR)
    n, rate = 4, 1e11
    dag = build_dag(_job(dp=n, distributed_optimizer=dist))
    rows = _by_op(dag, rate)
    for op in ("reduce_scatter", "all_gather") if dist else ("all_reduce",):
        r = rows[op]
        assert (r.n_ranks, r.n_collectives) == (n, 1)
        assert r.busbw_GBps * 1e9 == pytest.approx(rate / 8, rel=1e-12)
        factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
        assert r.algbw_GBps == pytest.approx(r.busbw_GBps / factor, rel=1e-12)


def test_send_recv_and_all_to_all_busbw_by_hand():
    rate = 1e11
    pp = _by_op(build_dag(_job(pp=2)), rate)["send_recv"]
    assert pp.busbw_GBps * 1e9 == pytest.approx(rate / 8, rel=1e-12)  # factor 1
    assert pp.size_bytes == pytest.approx(2 * 16 * 64)  # bf16 x s x h
    # uniform all-to-all over n = 4 pods, one pair link each: t = (S/n) / (r/8) and
    # busbw = S/t (n-1)/n = (n-1) r/8 (each rank sends over n-1 links at once)
    n = 4
    a2a = _by_op(build_dag(_job(dp=n, ep=n, moe=True)), rate)["all_to_all"]
    assert a2a.busbw_GBps * 1e9 == pytest.approx((n - 1) * rate / 8, rel=1e-12)
    assert a2a.size_bytes == pytest.approx(2 * 16 * 64 * 2)  # dt b s h k per rank


def test_bus_bandwidth_table():
    # NCCL-tests doc/PERFORMANCE.md factors; S from the bytes moved by c collectives of n
    assert bus_bandwidth("all_reduce", 4, 2, 2 * 2 * 3 * 100.0, 1.0) == (100.0, 100.0, 150.0)
    assert bus_bandwidth("reduce_scatter", 4, 1, 300.0, 2.0) == (100.0, 50.0, 37.5)
    assert bus_bandwidth("send_recv", 2, 8, 800.0, 4.0) == (100.0, 25.0, 25.0)
    assert bus_bandwidth("all_to_all", 4, 1, 300.0, 0.0) == (100.0, None, None)
    assert bus_bandwidth("", 4, 1, 300.0, 1.0) == (None, None, None)


def test_groups_survive_json_and_fall_back_to_names(tmp_path):
    dag = build_dag(get_preset("hybrid"))
    back = ix.load(ix.save(dag, tmp_path / "h.json"))
    g, h = phase_groups(dag), phase_groups(back)
    np.testing.assert_array_equal(g.group_of_phase, h.group_of_phase)
    assert (g.names, g.ops, g.n_ranks, g.n_collectives) == (
        h.names,
        h.ops,
        h.n_ranks,
        h.n_collectives,
    )
    rs = [n for n in g.names if n.startswith("dp_reduce_scatter")]
    steps = [p for p in dag.phases if p.group == rs[0]]
    assert len(steps) == get_preset("hybrid").parallelism.dp - 1  # ring steps in one group
    # without metadata (an external JSON), the group is the name less " k<step>"
    bare_phases = tuple(Phase(p.kind, p.name, p.intra_pod_bytes) for p in dag.phases)
    bare = phase_groups(replace(dag, phases=bare_phases))
    assert bare.names == g.names and bare.ops == g.ops
    assert set(bare.n_ranks) == {0}
