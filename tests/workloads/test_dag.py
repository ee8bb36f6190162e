"""Task-DAG invariants over random jobs, and byte totals against hand-derived closed forms.

The closed forms below are derived from the textbook collectives, not from the builder:
e.g. a ring or halving-doubling reduce-scatter of a per-rank buffer S over n ranks moves
(n-1)·S bytes in total, so the DP reduce-scatter of all dense weights W (fp32 grads) over
dp replicas moves (dp-1)·4·W bytes, whatever the TP and PP split.
"""

from collections import defaultdict

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.workloads import COMM, COMPUTE, Job, build_dag, get_preset, schedule
from trainfabric.workloads.sizes import iteration_flops


@st.composite
def jobs(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.integers(1, 4))
    dp = draw(st.sampled_from([1, 2, 4, 8]))
    moe = draw(st.booleans())
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if dp % e == 0])) if moe else 1
    layers = draw(st.integers(pp, 3 * pp))
    gpus = tp * pp * dp
    gpp = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16) if g % tp == 0 and gpus % g == 0]))
    model = dict(
        layers=layers,
        hidden=draw(st.sampled_from([64, 128])),
        heads=4,
        seq_len=draw(st.sampled_from([16, 64])),
        vocab=draw(st.integers(50, 500)),
        gated_ffn=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()),
    )
    if moe:
        model.update(
            moe_experts=ep * draw(st.integers(1, 3)),
            moe_shared_experts=draw(st.integers(0, 1)),
            first_dense_layers=draw(st.integers(0, layers)),
        )
        model["moe_top_k"] = draw(st.integers(1, model["moe_experts"]))
    par = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        micro_batches=draw(st.integers(1, 4)),
        micro_batch_size=draw(st.integers(1, 2)),
        schedule=draw(st.sampled_from(["gpipe", "1f1b"])),
        dp_collective=draw(st.sampled_from(["ring", "halving_doubling"])),
        distributed_optimizer=draw(st.booleans()),
    )
    return Job.model_validate(
        dict(
            model=model,
            parallelism=par,
            placement=dict(gpus_per_pod=gpp, pods=gpus // gpp),
            moe_skew_gini=draw(st.floats(0, 0.4)),
        )
    )


def closed_form_bytes(job: Job) -> dict[str, float]:
    """Bytes per phase kind (inter + intra pod) of one iteration, by hand."""
    m, par = job.model, job.parallelism
    dt, gt, b, s, h = m.dtype_bytes, par.grad_dtype_bytes, par.micro_batch_size, m.seq_len, m.hidden
    mb, dp, ep = par.micro_batches, par.dp, par.ep
    act = dt * b * s * h
    moe_layers = sum(m.is_moe_layer(i) for i in range(m.layers))
    routed = m.moe_experts * m.expert_params * moe_layers
    dense = m.params() - routed
    out: dict[str, float] = defaultdict(float)
    if par.pp > 1:
        out["pp_fwd"] = out["pp_bwd"] = (par.pp - 1) * mb * dp * act
    if ep > 1 and moe_layers:
        a2a = moe_layers * mb * (dp // ep) * (ep - 1) * act * m.moe_top_k
        for k in ("dispatch", "combine", "dispatch_bwd", "combine_bwd"):
            out[f"moe_{k}"] = a2a
    for label, weights, n in (("dp", dense, dp), ("dp_expert", routed, dp // ep)):
        if n < 2 or weights == 0:
            continue
        if par.distributed_optimizer:
            out[f"{label}_reduce_scatter"] = (n - 1) * gt * weights
            out[f"{label}_all_gather"] = (n - 1) * dt * weights
        else:
            out[f"{label}_all_reduce"] = 2 * (n - 1) * gt * weights
    return dict(out)


def bytes_by_kind(dag) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for ph in dag.phases:
        out[ph.kind] += ph.intra_pod_bytes
    for i in dag.comm_nodes:
        out[dag.phases[dag.phase[i]].kind] += dag.bytes[i]
    return {k: v for k, v in out.items() if v}


def reference_longest_path(dag, dur):
    g = dag.to_networkx()
    finish = {}
    for v in nx.topological_sort(g):
        finish[v] = dur[v] + max((finish[u] for u in g.predecessors(v)), default=0.0)
    return max(finish.values())


@given(jobs(), st.integers(0, 1000))
def test_dag_invariants(job, seed):
    dag = build_dag(job, seed)
    g = dag.to_networkx()
    assert nx.is_directed_acyclic_graph(g)
    assert np.all(dag.edges[:, 0] < dag.edges[:, 1])  # numbered in topological order
    comm = dag.kind == COMM
    assert np.all(dag.bytes[comm] > 0)
    assert np.all(dag.pod[comm] != dag.dst[comm])
    assert np.all((dag.pod[comm] >= 0) & (dag.dst[comm] < job.placement.pods))
    assert np.all(dag.duration_s[dag.kind == COMPUTE] > 0)
    got, want = bytes_by_kind(dag), closed_form_bytes(job)
    assert set(got) == set(want)
    for kind, total in want.items():
        assert got[kind] == pytest.approx(total, rel=1e-9), kind


@given(jobs(), st.integers(0, 1000))
def test_compute_flops_and_critical_path(job, seed):
    dag = build_dag(job, seed)
    if job.placement.gpus_per_pod == job.parallelism.tp:  # one shard per pod node: durations add up
        gpu_seconds = dag.duration_s.sum() * job.parallelism.tp
        assert gpu_seconds * job.compute.flops_per_s == pytest.approx(
            iteration_flops(job), rel=1e-9
        )
    for rate in (1e9, 1e11):
        dur = dag.durations(rate)
        assert dag.critical_path(dur) == pytest.approx(reference_longest_path(dag, dur), rel=1e-12)
    assert dag.critical_path_at(1e9) >= dag.critical_path_at(1e11) >= dag.compute_time() > 0


@given(st.integers(1, 8), st.integers(1, 12), st.sampled_from(["gpipe", "1f1b"]))
def test_schedule_is_a_valid_pipeline_order(stages, micro, kind):
    for p in range(stages):
        ops = schedule(stages, micro, p, kind)
        assert sorted(ops) == sorted(
            [("F", j) for j in range(micro)] + [("B", j) for j in range(micro)]
        )
        pos = {op: i for i, op in enumerate(ops)}
        assert all(pos["F", j] < pos["B", j] for j in range(micro))
        assert [j for d, j in ops if d == "F"] == list(range(micro))
        if kind == "1f1b":  # at most pp - p micro-batches in flight (1F1B's memory bound)
            live = peak = 0
            for d, _ in ops:
                live += 1 if d == "F" else -1
                peak = max(peak, live)
            assert peak <= max(1, stages - p)


def test_gpt3_pp_send_pinned():
    dag = build_dag(get_preset("gpt3-175b"))
    pp = [i for i in dag.comm_nodes if dag.phases[dag.phase[i]].kind == "pp_fwd"]
    # 2 bytes x 1 x 2048 x 12288 per replica and boundary; one pod per stage shard: 8 replicas
    # x 7 boundaries x 8 micro-batches, each a separate pod pair
    assert len(pp) == 8 * 7 * 8
    np.testing.assert_allclose(dag.bytes[pp], 2 * 2048 * 12288)


def test_moe_skew_slows_the_hot_shard_and_seed_is_reproducible():
    job = get_preset("moe")
    flat = build_dag(job.model_copy(update={"moe_skew_gini": 0.0}))
    skew = build_dag(job.model_copy(update={"moe_skew_gini": 0.38}), seed=3)
    again = build_dag(job.model_copy(update={"moe_skew_gini": 0.38}), seed=3)
    np.testing.assert_array_equal(skew.bytes, again.bytes)
    assert skew.compute_time() > flat.compute_time()
    assert skew.comm_bytes() == pytest.approx(flat.comm_bytes(), rel=1e-9)
    a2a = [i for i in flat.comm_nodes if flat.phases[flat.phase[i]].kind == "moe_dispatch"]
    np.testing.assert_allclose(flat.bytes[a2a], flat.bytes[a2a][0])  # uniform routing


@given(jobs(), st.integers(0, 1000))
def test_gpu_transfers_reassemble_the_pod_pairs(job, seed):
    """GPU transfers sum to their pod pair's bytes; with TP filling the pod they are exactly
    the even split (GPU k -> GPU k, 1/g each), whatever the job."""
    dag = build_dag(job, seed, gpu_flows=True)
    np.testing.assert_allclose(dag.bytes, build_dag(job, seed).bytes, rtol=1e-12)
    g, gpp = dag.gpu, job.placement.gpus_per_pod
    for i in dag.comm_nodes:
        src, dst, nbytes = g.transfers(i, dag.bytes[i])
        assert nbytes.sum() == pytest.approx(dag.bytes[i], rel=1e-12)
        assert src.min() >= 0 and max(src.max(), dst.max()) < gpp
        if job.parallelism.tp == gpp:
            assert sorted(src.tolist()) == sorted(dst.tolist()) == list(range(gpp))
            assert np.array_equal(src, dst)
            np.testing.assert_allclose(nbytes, dag.bytes[i] / gpp, rtol=1e-12)
