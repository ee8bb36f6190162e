"""Phase nodes (one DAG node per communication phase, its pod pairs in a pair set) against
the per-pair form: the same job, the same iteration on the fabric, the same critical path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.fabric.iteration import run as I
from trainfabric.fabric.iteration.report import iteration_tables
from trainfabric.fabric.iteration.scenario import job_fabric
from trainfabric.workloads.build import build_dag, dag_size
from trainfabric.workloads.dag import COMM
from trainfabric.workloads.interchange import dag_to_dict

JOBS = [("llama3-70b", 16, 4), ("gpt3-175b", 16, 8), ("deepseek-v3", 4, 4), ("moe", 8, None)]


def _run(workload, pods, layers, mode, phase_nodes, seed=0):
    loaded = I.load_job(workload, pods=pods, layers=layers, phase_nodes=phase_nodes)
    topo = job_fabric(loaded.pods, loaded.gpus_per_pod)
    servers = I.place_servers(topo, loaded.pods, loaded.gpus_per_pod, "random", seed)
    jh = I.JobOnHosts(loaded, servers, 4, seed=seed)
    return I.run_iteration(jh, topo, mode, seed=seed)


@pytest.mark.parametrize("workload,pods,layers", JOBS)
@pytest.mark.parametrize("mode", ["ecmp", "adaptive"])
def test_phase_nodes_give_the_per_pair_iteration(workload, pods, layers, mode):
    pairs = _run(workload, pods, layers, mode, phase_nodes=False)
    phases = _run(workload, pods, layers, mode, phase_nodes=True)
    assert phases.jh.dag.n_nodes <= pairs.jh.dag.n_nodes
    assert phases.iteration_s == pytest.approx(pairs.iteration_s, rel=1e-9)
    a, b = iteration_tables(pairs)["summary"], iteration_tables(phases)["summary"]
    for key in ("compute_only_s", "exposed_comm_s", "comm_bytes", "delivered_bytes"):
        assert b[key] == pytest.approx(a[key], rel=1e-9), key
    np.testing.assert_allclose(phases.result.link_bits, pairs.result.link_bits, rtol=1e-9, atol=1)


@settings(max_examples=6)
@given(st.sampled_from(JOBS), st.integers(0, 2**16))
def test_phase_nodes_keep_every_pair_and_the_critical_path(job, seed):
    """Each phase node's pair set is the multiset of the per-pair form's comm nodes of that
    phase (source, destination, bytes, GPU pattern), and the one-hop critical path at any
    uniform rate is the same (a phase takes its largest pair's time)."""
    workload, pods, layers = job
    kw = {"pods": pods, "layers": layers}
    per_pair = I.load_job(workload, **kw, phase_nodes=False)
    per_phase = I.load_job(workload, **kw, phase_nodes=True)
    a, b = per_pair.dag, per_phase.dag
    ja = I.JobOnHosts(per_pair, np.arange(pods), 1)
    jb = I.JobOnHosts(per_phase, np.arange(pods), 1)
    rows_a, rows_b = ja.pair_rows(a.comm_nodes), jb.pair_rows(b.comm_nodes)
    for k in range(len(a.phases)):
        sel_a, sel_b = a.phase[rows_a[0]] == k, b.phase[rows_b[0]] == k
        want = sorted(zip(*(r[sel_a].tolist() for r in rows_a[1:]), strict=True))
        got = sorted(zip(*(r[sel_b].tolist() for r in rows_b[1:]), strict=True))
        assert got == want, a.phases[k].name
    rate = float(np.random.default_rng(seed).uniform(1e9, 1e12))
    assert b.critical_path_at(rate) == pytest.approx(a.critical_path_at(rate), rel=1e-12)
    assert b.comm_bytes() == pytest.approx(a.comm_bytes(), rel=1e-12)


@pytest.mark.parametrize("workload,pods,layers", JOBS)
def test_the_size_count_matches_the_built_phase_dag(workload, pods, layers):
    job = I.resolve_job(workload, pods=pods, layers=layers)
    for phase_nodes in (False, True):
        dag = build_dag(job, 0, gpu_flows=True, phase_nodes=phase_nodes)
        assert dag_size(job, phase_nodes).nodes == dag.n_nodes


def test_a_ring_step_is_one_node_and_its_steps_share_one_pair_set():
    """llama3-70b on 64 servers (DP 16 per stage): every DP ring step is one comm node, and
    the steps of one ring all point to one pair set of 16 pairs."""
    dag = I.load_job("llama3-70b", pods=64).dag
    comm = dag.comm_nodes
    dp = [i for i in comm if dag.phases[dag.phase[i]].kind.startswith("dp_")]
    sets = dag.pairs.node_set[dp]
    assert (sets >= 0).all()
    assert np.unique(sets).size <= 8  # 4 stages x (reduce-scatter, all-gather) at most
    assert set(np.diff(dag.pairs.ptr)[np.unique(sets)].tolist()) == {16}
    assert (dag.pod[dp] == -1).all() and (dag.kind[dp] == COMM).all()


def test_a_phase_dag_has_no_interchange_form():
    dag = I.load_job("llama3-70b", pods=8, layers=4).dag
    with pytest.raises(ValueError, match="phase_nodes=False"):
        dag_to_dict(dag)


def test_a_medium_job_with_set_level_replays_equals_the_run_without_reuse():
    """llama3-70b on 64 servers (512 GPUs), adaptive: the DP ring steps run as set-level
    replays; every task's start and finish and the link bits equal the run that reuses
    nothing."""
    loaded = I.load_job("llama3-70b", pods=64)
    topo = job_fabric(loaded.pods, loaded.gpus_per_pod)
    servers = I.place_servers(topo, loaded.pods, loaded.gpus_per_pod, "random", 0)
    jh = I.JobOnHosts(loaded, servers, 4, seed=0)
    fast = I.run_iteration(jh, topo, "adaptive", seed=0)
    slow = I.run_iteration(jh, topo, "adaptive", seed=0, reuse=False)
    assert fast.result.set_replays > 0 and slow.result.set_replays == 0
    np.testing.assert_allclose(fast.result.start_s, slow.result.start_s, rtol=1e-9)
    np.testing.assert_allclose(fast.result.finish_s, slow.result.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.result.link_bits, slow.result.link_bits, rtol=1e-9, atol=1)
