"""GPU-level transfers of comm nodes: a hand-enumerated ring, exactness of the even split when
TP fills the pod (llama3-70b), cross-rail pairs when it does not (deepseek-v3), bytes
conservation, and the even-split assumption for a DAG read from JSON."""

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.workloads import COMM, Job, build_dag, get_preset
from trainfabric.workloads import interchange as ix
from trainfabric.workloads.dag import even_split, gpu_transfers


def _tiny_ring_job() -> Job:
    """DP 4 over 2 pods of 2 GPUs (tp 1): ranks 0, 1 on pod 0 and 2, 3 on pod 1."""
    return Job.model_validate(
        dict(
            model=dict(layers=1, hidden=64, heads=4, seq_len=16, vocab=100),
            parallelism=dict(dp=4, micro_batches=1),
            placement=dict(gpus_per_pod=2, pods=2),
        )
    )


def test_ring_transfers_by_hand():
    # ring 0->1->2->3->0: 0->1 and 2->3 stay in their pods; 1->2 is pod 0 GPU 1 -> pod 1
    # GPU 0, 3->0 is pod 1 GPU 1 -> pod 0 GPU 0; each carries S/4 per step
    job = _tiny_ring_job()
    dag = build_dag(job, gpu_flows=True)
    weights = job.model.params()
    for i in dag.comm_nodes:
        src, dst, nbytes = dag.gpu.transfers(i, dag.bytes[i])
        ph = dag.phases[dag.phase[i]]
        grad = 4 if ph.kind == "dp_reduce_scatter" else 2
        assert (int(src[0]), int(dst[0])) == (1, 0) and src.size == 1
        assert nbytes[0] == pytest.approx(grad * weights / 4, rel=1e-12)
        assert ph.intra_pod_bytes == pytest.approx(2 * grad * weights / 4, rel=1e-12)


def _rows(g, node_bytes, i) -> np.ndarray:
    """Transfers of node ``i`` as sorted rows (src GPU, dst GPU, bytes)."""
    s, d, b = g.transfers(i, node_bytes[i])
    return np.array(sorted(zip(s.tolist(), d.tolist(), b.tolist(), strict=True)))


def test_even_split_is_exact_when_tp_fills_the_pod():
    job = get_preset("llama3-70b")
    assert job.parallelism.tp == job.placement.gpus_per_pod
    plain = build_dag(job)
    dag = build_dag(job, gpu_flows=True)
    np.testing.assert_allclose(dag.bytes, plain.bytes, rtol=1e-15)
    even = even_split(plain, 8)
    assert even.assumed_even_split and not dag.gpu.assumed_even_split
    for i in dag.comm_nodes:
        np.testing.assert_allclose(
            _rows(dag.gpu, dag.bytes, i), _rows(even, plain.bytes, i), rtol=1e-15
        )


def test_tp1_jobs_have_cross_rail_pairs_that_the_even_split_hides():
    job = get_preset("deepseek-v3")  # tp 1, 8 GPUs per pod, EP 32 over 4 pods
    dag = build_dag(job, gpu_flows=True)
    counts = dag.gpu.counts()
    kinds = np.array([ph.kind for ph in dag.phases])[dag.phase[dag.comm_nodes]]
    ring = dag.comm_nodes[kinds == "dp_reduce_scatter"]
    a2a = dag.comm_nodes[kinds == "moe_dispatch"]
    assert set(counts[ring].tolist()) == {1}  # a DP ring hop is one GPU pair
    assert set(counts[a2a].tolist()) == {64}  # 8 x 8 GPU pairs between two pods
    cross = 0.0
    for i in (ring[0], a2a[0]):
        src, dst, nbytes = dag.gpu.transfers(i, dag.bytes[i])
        cross += nbytes[src != dst].sum()
        assert nbytes.sum() == pytest.approx(dag.bytes[i], rel=1e-12)
    assert cross > 0  # the even split (GPU k -> GPU k) has none
    np.testing.assert_allclose(np.add.reduceat(dag.gpu.share, dag.gpu.indptr[:-1]), 1.0)
    even = even_split(dag, 8)
    assert np.all(even.src_gpu == even.dst_gpu)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "hybrid", "moe", "gpt3-175b"])
def test_transfers_conserve_bytes_and_stay_inter_pod(name):
    job = get_preset(name)
    dag = build_dag(job, seed=3, gpu_flows=True)
    g = dag.gpu
    assert np.all((g.pattern >= 0) == (dag.kind == COMM))
    sums = np.add.reduceat(g.share, g.indptr[:-1])
    np.testing.assert_allclose(sums, 1.0, rtol=1e-12)
    assert g.src_gpu.max() < job.placement.gpus_per_pod and g.src_gpu.min() >= 0
    np.testing.assert_allclose(dag.bytes, build_dag(job, seed=3).bytes, rtol=1e-12)
    assert np.all(g.share > 0)


def test_patterns_keep_the_16k_gpu_dag_small():
    dag = build_dag(get_preset("llama3-70b", pods=64), gpu_flows=True)
    assert dag.gpu.n_patterns == 1
    assert dag.gpu.nbytes <= 4 * dag.n_nodes + 256  # one int32 per node, one tiny pattern


def test_dag_from_json_gets_the_even_split_named_as_assumption(tmp_path):
    job = _tiny_ring_job()
    back = ix.load(ix.save(build_dag(job, gpu_flows=True), tmp_path / "d.json"))
    assert back.gpu is None
    g = gpu_transfers(back, 2)
    assert g.assumed_even_split
    i = int(back.comm_nodes[0])
    src, dst, nbytes = g.transfers(i, back.bytes[i])
    assert src.tolist() == dst.tolist() == [0, 1]
    np.testing.assert_allclose(nbytes, back.bytes[i] / 2)
    with pytest.raises(ConfigError, match="for 2 GPUs per pod, not 4") as exc:
        gpu_transfers(build_dag(job, gpu_flows=True), 4)
    assert exc.value.field == "gpus_per_pod"
