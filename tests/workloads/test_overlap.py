"""Bucketed overlap of DP gradient collectives with the last backward: a hand-computed
timeline, never longer than no overlap (latency 0; hypothesis over jobs), zero-time
communication gives the compute-only path, bytes unchanged, Megatron's default bucket."""

from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.workloads import Job, build_dag, get_preset
from trainfabric.workloads.attribution import (
    asap_times,
    compute_only_critical_path,
    zero_comm_durations,
)
from trainfabric.workloads.buckets import MIB, bucket_bounds, cut_segment
from trainfabric.workloads.build import _n_buckets, dag_size
from trainfabric.workloads.sizes import stage_weights

FPS = 989e12 * 0.4


def _with(job: Job, **par) -> Job:
    return job.model_copy(update={"parallelism": job.parallelism.model_copy(update=par)})


def _hand_job(overlap: str) -> Job:
    """DP 2 over 2 pods of 1 GPU, 2 layers of h = 64 (4h^2 + 8h^2 = 49,152 params each),
    tied embedding 100 x 64 = 6,400; buckets of 49,152 fp32 gradients."""
    return Job.model_validate(
        dict(
            model=dict(layers=2, hidden=64, heads=4, seq_len=16, vocab=100),
            parallelism=dict(dp=2, micro_batches=1, overlap=overlap, bucket_mb=49152 * 4 / MIB),
            placement=dict(gpus_per_pod=1, pods=2),
            compute=dict(latency_s=0.0),
        )
    )


@pytest.mark.parametrize("rate", [1e11, 1e18])
def test_hand_computed_timeline(rate):
    # backward order: head (0 params, 2*2*100*64 = 25,600 FLOP/token), L1 and L0 (49,152
    # params, 196,608 FLOP/token each), embedding (6,400 params, no FLOPs). Buckets end at
    # 49,152 (end of L1: 222,208 FLOP), 98,304 and 104,704 (both at the end). Ring of 2:
    # one step of S/2 each way, S = 4 bytes x bucket params; AG of 2 x 104,704 bytes.
    t_f = (2 * 2 * 49152 + 2 * 100 * 64) * 16 / FPS
    c0, c1 = 222208 * 16 / FPS, 196608 * 16 / FPS
    rs = [8 * 2 * p / rate for p in (49152, 49152, 6400)]
    ag = 8 * 104704 / rate
    e0 = t_f + c0 + rs[0]
    want = max(e0, t_f + c0 + c1) + rs[1] + rs[2] + ag
    got = build_dag(_hand_job("bucketed")).critical_path_at(rate)
    assert got == pytest.approx(want, rel=1e-12)
    none = build_dag(_hand_job("none")).critical_path_at(rate)
    assert none == pytest.approx(t_f + c0 + c1 + 8 * 2 * 104704 / rate + ag, rel=1e-12)
    assert got <= none


def test_cut_segment_by_hand():
    items = [(0, 25600.0), (49152, 196608.0), (49152, 196608.0), (6400, 0.0)]
    chunks = cut_segment(items, 0.0, bucket_bounds(104704, 49152))
    assert chunks == [(222208.0, [0]), (196608.0, [1, 2])]
    # a boundary inside a weight falls at the interpolated FLOPs; an offset shifts it
    chunks = cut_segment([(100, 1000.0)], 30.0, bucket_bounds(200, 50))
    assert chunks == [(pytest.approx(200.0), [0]), (pytest.approx(500.0), [1]), (300.0, [])]


@st.composite
def jobs(draw):
    tp = draw(st.sampled_from([1, 2]))
    pp = draw(st.integers(1, 3))
    dp = draw(st.sampled_from([2, 4]))
    moe = draw(st.booleans())
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if dp % e == 0])) if moe else 1
    layers = draw(st.integers(pp, 2 * pp))
    gpus = tp * pp * dp
    gpp = draw(st.sampled_from([g for g in (1, 2, 4) if g % tp == 0 and gpus % g == 0]))
    model = dict(
        layers=layers,
        hidden=64,
        heads=4,
        seq_len=16,
        vocab=draw(st.integers(50, 300)),
        tied_embeddings=draw(st.booleans()),
    )
    if moe:
        model |= dict(moe_experts=ep * 2, moe_top_k=1, first_dense_layers=0)
    par = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        micro_batches=draw(st.integers(1, 3)),
        schedule=draw(st.sampled_from(["gpipe", "1f1b"])),
        dp_collective=draw(st.sampled_from(["ring", "halving_doubling"])),
        distributed_optimizer=draw(st.booleans()),
        bucket_mb=draw(st.sampled_from([0.02, 0.1, 1.0])),
    )
    return Job.model_validate(
        dict(
            model=model,
            parallelism=par,
            placement=dict(gpus_per_pod=gpp, pods=gpus // gpp),
            compute=dict(latency_s=draw(st.sampled_from([0.0, 5e-6]))),
        )
    )


def _bytes_by_kind(dag) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for ph in dag.phases:
        out[ph.kind] += ph.intra_pod_bytes
    for i in dag.comm_nodes:
        out[dag.phases[dag.phase[i]].kind] += dag.bytes[i]
    return dict(out)


@given(jobs(), st.integers(0, 100))
def test_bucketed_is_never_longer_and_moves_the_same_bytes(job, seed):
    none = build_dag(job, seed)
    bucketed = build_dag(_with(job, overlap="bucketed"), seed)
    assert dag_size(_with(job, overlap="bucketed")).nodes >= bucketed.n_nodes
    cp0 = compute_only_critical_path(none)
    assert compute_only_critical_path(bucketed) == pytest.approx(cp0, rel=1e-12)
    _, finish = asap_times(bucketed, zero_comm_durations(bucketed))
    assert finish.max() == pytest.approx(cp0, rel=1e-12)  # zero-time comm: compute only
    got, want = _bytes_by_kind(bucketed), _bytes_by_kind(none)
    assert got.keys() == want.keys()
    for kind, total in want.items():
        assert got[kind] == pytest.approx(total, rel=1e-9), kind
    extra = len(bucketed.phases) - len(none.phases)  # each may add one latency at most
    for rate in (1e9, 1e11):
        slack = extra * job.compute.latency_s
        assert bucketed.critical_path_at(rate) <= none.critical_path_at(rate) * (1 + 1e-12) + slack


def test_megatron_default_bucket_on_llama3_70b_at_16k_gpus():
    # stage 0: 20 layers x 855,638,016 + the embedding 1,050,673,152 = 18,163,433,472 params,
    # 2,270,429,184 per GPU (tp 8); Megatron's bucket at dp 512: max(4e7, 5.12e8) elements
    job = _with(get_preset("llama3-70b", pods=2048), overlap="bucketed")
    assert stage_weights(job, 0).dense == 18_163_433_472
    assert _n_buckets(job, stage_weights(job, 0).dense, 8) == 5  # ceil(2.27e9 / 5.12e8)
    assert _n_buckets(_with(job, bucket_mb=25.0), stage_weights(job, 0).dense, 8) == 347
