"""Closed forms at the DAG level (one-hop pod-pair rate model), the ones the fabric pillar
re-checks on a fabric: a DP-only iteration with the distributed optimiser, and the
pipeline bubble of GPipe and 1F1B."""

import numpy as np
import pytest

from trainfabric.workloads import COMPUTE, Job, build_dag, get_preset
from trainfabric.workloads.attribution import asap_times
from trainfabric.workloads.sizes import iteration_flops


@pytest.mark.parametrize("rate", [1e11, 4e11])
@pytest.mark.parametrize("latency", [0.0, 5e-6])
def test_dp_only_iteration_is_compute_plus_ring_rs_and_ag(rate, latency):
    # Conditions: PP 1, TP = GPUs per pod (one DP rank per pod, so the dp pods form the
    # ring and each pod-pair step carries the tp rings' chunks together: 4W/n bytes for
    # the fp32 reduce-scatter, 2W/n for the bf16 all-gather), uniform pair rate r. Then
    # T = compute + (n-1)(lat + 8*4W/(n r)) + (n-1)(lat + 8*2W/(n r)),
    # compute = 6 x params x tokens / (GPUs x flops/s) per GPU.
    job = get_preset("dp-ring")
    job = job.model_copy(update={"compute": job.compute.model_copy(update={"latency_s": latency})})
    par = job.parallelism
    assert par.pp == 1 and par.tp == job.placement.gpus_per_pod and par.distributed_optimizer
    n, w = par.dp, job.model.params()
    compute = iteration_flops(job) / (par.gpus * job.compute.flops_per_s)
    rs = (n - 1) * (latency + 8 * 4 * w / (n * rate))
    ag = (n - 1) * (latency + 8 * 2 * w / (n * rate))
    assert build_dag(job).critical_path_at(rate) == pytest.approx(compute + rs + ag, rel=1e-9)


def _pipeline(p: int, m: int, schedule: str) -> Job:
    return Job.model_validate(
        dict(
            model=dict(layers=p, hidden=64, heads=4, seq_len=16, vocab=100),
            parallelism=dict(tp=8, pp=p, micro_batches=m, schedule=schedule),
            placement=dict(gpus_per_pod=8, pods=p),
        )
    )


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 1), (2, 4), (4, 8), (5, 3), (8, 16)])
def test_pipeline_bubble(schedule, p, m):
    # Conditions: uniform stages (durations set by hand: every forward f, every backward
    # b = 2f, so the last stage's head adds nothing), DP 1, zero-time communication. Then
    # T = (m + p - 1)(f + b) and each stage idles (p - 1)/(m + p - 1) of it.
    dag = build_dag(_pipeline(p, m, schedule))
    f = 1e-3
    dur = np.zeros(dag.n_nodes)
    for i in np.flatnonzero(dag.kind == COMPUTE):
        dur[i] = f if dag.names[i].startswith("compute F") else 2 * f
    _, finish = asap_times(dag, dur)
    t = finish.max()
    assert t == pytest.approx((m + p - 1) * 3 * f, rel=1e-12)
    for s in range(p):
        busy = dur[(dag.kind == COMPUTE) & (dag.pod == s)].sum()
        assert 1 - busy / t == pytest.approx((p - 1) / (m + p - 1), rel=1e-12)
