"""A job's iteration on the fabric (trainfabric.fabric.iteration.run): conversion to the DAG's
critical path on a pair mesh, cross-checks against run_collective and NIC sharing, closed
forms, contention, bytes delivered once, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from trainfabric.fabric.flows import HEADER_BYTES, MTU_BYTES
from trainfabric.fabric.iteration import packet as P
from trainfabric.fabric.iteration import report as REP
from trainfabric.fabric.iteration import run as I
from trainfabric.fabric.iteration import scenario as SC
from trainfabric.fabric.scenarios import TopologyConfig, build_topology
from trainfabric.workloads import sizes
from trainfabric.workloads.build import build_dag
from trainfabric.workloads.dag import gpu_transfers
from trainfabric.workloads.job import Job

WIRE = (MTU_BYTES + HEADER_BYTES) / MTU_BYTES

# (preset, pods, layers): small pod counts, models cut to a few layers so each runs in < 1 s
PRESET_CASES = [
    ("gpt3-175b", 16, 8),
    ("llama3-70b", 8, 4),
    ("deepseek-v3", 4, 4),
    ("mixtral-8x7b", 4, 4),
    ("pipeline", 4, 4),
    ("dp-ring", 4, 2),
    ("dp-hd", 4, 2),
    ("moe", 4, 2),
    ("hybrid", 4, 4),
]


def _loaded(job: Job) -> I.LoadedJob:
    dag = build_dag(job, 0, gpu_flows=True)
    return I.LoadedJob(job.name, dag, gpu_transfers(dag, job.placement.gpus_per_pod), job, ())


def _job(layers=2, hidden=1024, gpus_per_pod=8, pods=4, vocab=1024, **par) -> Job:
    model = dict(layers=layers, hidden=hidden, heads=8, seq_len=1024, vocab=vocab)
    model.update(par.pop("model", {}))
    return Job.model_validate(
        dict(
            model=model,
            parallelism=par,
            placement=dict(gpus_per_pod=gpus_per_pod, pods=pods),
            moe_skew_gini=0.0,
        )
    )


def _fabric(gpus, radix=16, planes=4, g=8, **kw):
    return build_topology(
        TopologyConfig(gpus=gpus, switch_radix=radix, planes=planes, **kw), None, g
    )


def _group(tables, prefix: str) -> dict:
    rows = [c for c in tables["collectives"] if c["name"].startswith(prefix)]
    assert rows, prefix
    return rows[0]


# -- conversion -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("preset", "pods", "layers"), PRESET_CASES)
def test_pair_mesh_iteration_equals_the_dag_critical_path(preset, pods, layers):
    """Each directed server pair its own link of rate r, headers 0, hop latency = the DAG's
    latency_s: every comm node takes latency_s + 8 bytes / r, so the iteration is the DAG's
    critical path at rate r. r = 6.4 Tb/s (a server's 8 x 800 Gb/s): no two concurrent comm
    nodes then share a directed pod pair (at 100 Gb/s gpt3-175b's PP sends of successive
    micro-batches overlap on one pair, which the DAG's one-hop model does not share)."""
    loaded = I.load_job(preset, pods=pods, layers=layers)
    rate = 6.4e12
    lat = float(loaded.job.compute.latency_s)
    mesh = I.pair_mesh(loaded.pods, loaded.gpus_per_pod, rate, lat)
    jh = I.JobOnHosts(loaded, np.arange(loaded.pods), channels=4)
    run = I.run_iteration(jh, mesh, "ecmp", header_bytes=0)
    want = loaded.dag.critical_path_at(rate)
    assert run.iteration_s == pytest.approx(want, rel=1e-9)


# -- cross-checks ---------------------------------------------------------------------------------
def test_dp_phase_group_equals_run_collective_step_synchronised():
    """The DP reduce-scatter of a DP-only job (8 concurrent rings, one per GPU index, 4
    channels, ECMP) lasts what run_collective(sync='step') gives for the same rings on the
    same hosts with the same connections and seed."""
    from trainfabric.fabric.flow.collectives import run_collective
    from trainfabric.workloads import collectives as wc

    job = _job(tp=8, dp=4, pods=4)
    loaded = _loaded(job)
    topo = _fabric(32)
    servers = I.place_servers(topo, 4, 8, "random", seed=3)
    jh = I.JobOnHosts(loaded, servers, channels=4, seed=5)
    run = I.run_iteration(jh, topo, "ecmp", seed=5)
    rs = _group(REP.iteration_tables(run), "dp_reduce_scatter")
    size = 4.0 * sizes.stage_weights(job, 0).dense / 8
    rings = [wc.REDUCE_SCATTER["ring"](t + 8 * np.arange(4), size) for t in range(8)]
    steps = [
        wc.Step(
            np.concatenate([s.src for s in parts]),
            np.concatenate([s.dst for s in parts]),
            np.concatenate([s.bytes for s in parts]),
        )
        for parts in zip(*rings, strict=True)
    ]
    hosts = (servers[:, None] * 8 + np.arange(8)).ravel()
    alone = run_collective(
        topo,
        I.make_router(topo, "ecmp", 5),
        steps,
        hosts,
        sync="step",
        channels=4,
        step_latency_s=0.0,
        seed=5,
        job=0,
    )
    assert rs["finish_s"] - rs["start_s"] == pytest.approx(alone.time_s, rel=1e-9)


def test_all_to_all_through_shared_nics_is_slower_by_the_nic_sharing_factor():
    """A uniform all-to-all phase (skew 0, TP = 8: GPU t -> GPU t) of n servers: on a pair
    mesh at r = g x NIC rate each pair has its link; through the NICs of a non-blocking
    sprayed fabric each NIC carries the transfers to all n - 1 peers: n - 1 times slower."""
    n = 4
    job = _job(
        tp=8,
        dp=n,
        ep=n,
        pods=n,
        model=dict(moe_experts=8, moe_top_k=2, moe_ffn_hidden=512),
    )
    loaded = _loaded(job)
    topo = _fabric(8 * n, radix=64, hop_latency_s=0.0)
    jh = I.JobOnHosts(loaded, np.arange(n), channels=4)
    fab = REP.iteration_tables(I.run_iteration(jh, topo, "spray", header_bytes=0))
    mesh = I.pair_mesh(n, 8, 8 * topo.nic_rate_bps, 0.0)
    ref = REP.iteration_tables(I.run_iteration(jh, mesh, "ecmp", header_bytes=0))
    a, b = _group(fab, "moe_dispatch"), _group(ref, "moe_dispatch")
    ratio = (a["finish_s"] - a["start_s"]) / (b["finish_s"] - b["start_s"])
    assert ratio == pytest.approx(n - 1, rel=1e-9)


# -- closed forms ---------------------------------------------------------------------------------
def test_dp_only_with_distributed_optimiser_is_compute_plus_ring_rs_and_ag():
    """Conditions: DP only (TP 8 fills the server, PP 1), distributed optimiser, ring, spray
    on a non-blocking fabric, every server on its own leaf (4 hops of h), headers included.
    Each ring step moves S/n per GPU through its NIC alone: alpha + 8 (S/n) w / R, alpha = 4h;
    RS carries S = 4 W / tp (fp32), AG S = 2 W / tp (bf16)."""
    n, h = 4, 1e-6
    job = _job(tp=8, dp=n, pods=n)
    loaded = _loaded(job)
    topo = _fabric(8 * n, radix=16, hop_latency_s=h)
    run = I.run_iteration(I.JobOnHosts(loaded, np.arange(n), 4), topo, "spray")
    W = sizes.stage_weights(job, 0).dense
    R = topo.nic_rate_bps

    def ring(S):
        return (n - 1) * (4 * h + 8.0 * (S / n) * WIRE / R)

    want = (
        REP.iteration_tables(run)["summary"]["compute_only_s"] + ring(4 * W / 8) + ring(2 * W / 8)
    )
    assert run.iteration_s == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_bubble_with_zero_time_communication(schedule):
    """Conditions: uniform stages (one layer each; vocab 1 makes the last stage's head
    ~1e-4 of a stage), DP 1, communication ~ zero time (1e9 Gb/s NICs, no hop latency):
    the bubble is (p - 1) / (m + p - 1) of the iteration."""
    p, m = 4, 6
    job = _job(layers=p, tp=8, pp=p, pods=p, micro_batches=m, schedule=schedule, vocab=1)
    loaded = _loaded(job)
    topo = _fabric(8 * p, nic_rate_gbps=1e9, hop_latency_s=0.0)
    run = I.run_iteration(I.JobOnHosts(loaded, np.arange(p), 4), topo, "spray")
    dag = loaded.dag
    stage0 = (dag.kind == 0) & (dag.pod == 0)
    busy = float(dag.duration_s[stage0].sum())
    bubble = 1.0 - busy / run.iteration_s
    assert bubble == pytest.approx((p - 1) / (m + p - 1), rel=1e-3)


def test_uniform_all_to_all_takes_n_minus_g_pairs_over_the_nic_rate():
    """Conditions: TP 1 (every GPU its own EP rank), skew 0, spray on a non-blocking fabric,
    headers included, no hop latency: each GPU sends bytes-per-pair to the n - g GPUs of the
    other servers through its own NIC (the g - 1 in its server stay on the scale-up domain)."""
    g, servers = 8, 2
    n = g * servers
    job = _job(
        tp=1,
        dp=n,
        ep=n,
        pods=servers,
        model=dict(moe_experts=16, moe_top_k=2, moe_ffn_hidden=512),
    )
    loaded = _loaded(job)
    topo = _fabric(n, radix=16, hop_latency_s=0.0)
    run = I.run_iteration(I.JobOnHosts(loaded, np.arange(servers), 4), topo, "spray")
    a2a = _group(REP.iteration_tables(run), "moe_dispatch")
    pair = sizes.moe_dispatch_bytes_per_shard(job) / n
    want = (n - g) * 8.0 * pair * WIRE / topo.nic_rate_bps
    assert a2a["finish_s"] - a2a["start_s"] == pytest.approx(want, rel=1e-9)


# -- contention -----------------------------------------------------------------------------------
def test_two_interleaved_jobs_get_their_max_min_share_of_the_uplinks():
    """Two DP-only jobs of 6 one-GPU servers, interleaved on 2 leaves of 6 hosts and 2
    uplinks (3:1), ranks alternating leaves (scattered) so every ring hop crosses: alone, a
    job's 3 flows up a leaf share 2 uplinks (2R/3 each); together 6 flows share them (R/3):
    each ring step, hence the DP phase, takes exactly twice as long."""
    job = _job(tp=1, dp=6, pods=6, gpus_per_pod=1, layers=1)
    loaded = _loaded(job)
    topo = build_topology(
        TopologyConfig(
            kind="leaf_spine", gpus=12, switch_radix=8, oversubscription=3.0, hop_latency_s=0.0
        ),
        None,
        1,
    )
    pools = I.interleaved_pools(topo, 1, [6, 6])
    jobs = [
        I.JobOnHosts(loaded, I.place_servers(topo, 6, 1, "scattered", 0, pool), 1, job_id=j)
        for j, pool in enumerate(pools)
    ]
    assert set(topo.leaf_of(jobs[0].hosts())) == {0, 1}
    alone = REP.iteration_tables(I.run_iteration(jobs[0], topo, "spray"))
    rows = SC.run_tenants(topo, jobs, "spray", iterations=1, draws=1)
    rs_alone = _group(alone, "dp_reduce_scatter")
    dp_alone = rs_alone["finish_s"] - rs_alone["start_s"]
    comm_alone = alone["summary"]["iteration_s"] - alone["summary"]["compute_only_s"]
    W = sizes.stage_weights(job, 0).dense
    R = topo.nic_rate_bps
    step = 8.0 * (4 * W / 6) * WIRE / (2 * R / 3)
    assert dp_alone == pytest.approx(5 * step, rel=1e-9)
    for row in rows:  # offsets are drawn: compare the comm part once both overlap fully
        assert row["slowdown"] >= 1.0 - 1e-12
    both = _together(topo, jobs)
    assert both == pytest.approx(alone["summary"]["compute_only_s"] + 2 * comm_alone, rel=1e-9)


def _together(topo, jobs) -> float:
    """Both jobs from t = 0 (no offset): job 0's iteration time."""
    from trainfabric.fabric.tasks.engine import run_tasks

    graphs = [I.repeat_graph(I.job_graph(jh), 1, 0.0) for jh in jobs]
    combined, firsts = I.concat_graphs(graphs)
    res = run_tasks(topo, combined, I.make_router(topo, "spray"), bin_s=1e-3)
    return float(np.diff(SC._iteration_bounds(res, int(firsts[0]), graphs[0].n - 2, 1))[0])


def test_an_ecmp_collision_raises_the_iteration_by_the_hand_count():
    """DP-only job (8 rings, 4 channels) on 4 leaves of one server each, 4 planes of R/4
    links, no hop latency. Every ring step runs all the job's connections at once with
    equal flows, so under max-min it lasts (most flows on one link) x flow bits / (R/4);
    under spray the NIC bounds it: 8 (S/n) w / R. The iteration is CP0 + (n-1) RS steps +
    (n-1) AG steps either way."""
    n, c = 4, 4
    job = _job(tp=8, dp=n, pods=n)
    loaded = _loaded(job)
    topo = _fabric(8 * n, radix=16, hop_latency_s=0.0)
    jh = I.JobOnHosts(loaded, np.arange(n), channels=c, seed=1)
    graph = I.job_graph(jh)
    conns = graph.conn_table()
    routes = I.make_router(topo, "ecmp", 1).route(conns, np.arange(conns.n))
    links = routes.group[routes.group >= 0]
    k_max = int(np.bincount(links, minlength=topo.n_links).max())
    assert k_max >= 2  # the seed makes a collision: two connections share a link
    W = sizes.stage_weights(job, 0).dense
    R = topo.nic_rate_bps

    def steps(per_flow_bits, ecmp):
        t = k_max * per_flow_bits * WIRE / (R / 4) if ecmp else c * per_flow_bits * WIRE / R
        return (n - 1) * t

    def predicted(ecmp):
        rs, ag = 8.0 * 4 * W / 8 / n / c, 8.0 * 2 * W / 8 / n / c
        cp0 = REP.iteration_tables(run)["summary"]["compute_only_s"]
        return cp0 + steps(rs, ecmp) + steps(ag, ecmp)

    run = I.run_iteration(jh, topo, "ecmp", seed=1, graph=graph)
    spray = I.run_iteration(jh, topo, "spray", seed=1, graph=graph)
    assert run.iteration_s == pytest.approx(predicted(True), rel=1e-9)
    assert spray.iteration_s == pytest.approx(predicted(False), rel=1e-9)
    assert run.iteration_s > spray.iteration_s


def test_every_byte_of_every_comm_node_is_delivered_once_and_runs_repeat():
    """A PP x DP x EP job on a 2-plane fabric with ECMP: each comm node's delivered payload
    equals its DAG bytes; the same seed gives the same numbers."""
    loaded = I.load_job("hybrid", pods=4, layers=4)
    topo = _fabric(64, radix=16, planes=2)
    servers = I.place_servers(topo, 4, 8, "random", seed=2)
    jh = I.JobOnHosts(loaded, servers, channels=2, seed=2)
    a = I.run_iteration(jh, topo, "ecmp", seed=2)
    b = I.run_iteration(jh, topo, "ecmp", seed=2)
    dag = loaded.dag
    comm = dag.comm_nodes
    np.testing.assert_allclose(a.result.delivered_bytes[comm], dag.bytes[comm], rtol=1e-9)
    assert (a.result.delivered_bytes[dag.kind != 1] == 0).all()
    np.testing.assert_array_equal(a.result.finish_s, b.result.finish_s)
    ta, tb = REP.iteration_tables(a), REP.iteration_tables(b)
    ta["summary"].pop("wall_s"), tb["summary"].pop("wall_s")
    assert ta == tb


# -- CLI and scenario -----------------------------------------------------------------------------
def test_fabric_job_json_and_bad_input(cli):
    from trainfabric.io import loads

    code, out, _ = cli(
        "fabric",
        "job",
        "--workload",
        "dp-ring",
        "--pods",
        "4",
        "--layers",
        "2",
        "--mode",
        "adaptive",
        "--json",
    )
    assert code == 0
    res = loads(out)
    assert res["iteration_s"] > res["compute_only_s"] > 0
    assert res["exposed_comm_s"] == pytest.approx(res["iteration_s"] - res["compute_only_s"])
    kinds = {row["kind"]: row for row in res["phase_kinds"]}
    assert set(kinds) == {"PP", "DP", "EP", "other"}
    assert kinds["DP"]["exposed_s"] == pytest.approx(res["exposed_comm_s"])
    assert any("replaces" in note for note in res["notes"])
    for args, field in [
        (["--mode", "bogus"], "--mode"),
        (["--workload", "llama3-70b", "--pods", "6"], "--pods"),  # 48 GPUs, TP x PP = 32
        (["--pods", "6000"], "--pods"),  # 48,000 GPUs: more than the fabric's 32,768
        (["--placement", "nowhere"], "--placement"),
        (["--overlap", "always"], "--overlap"),
        (["--failures", "1.5"], "--failures"),
        (["--workload", "no-such-model"], "--workload"),
    ]:
        code, out, err = cli("fabric", "job", *args)
        assert code == 2 and out == "", args
        assert err.startswith(f"error: {field}") and err.count("\n") == 1, err


def test_fabric_job_iteration_holds_its_bounds(cli):
    """``fabric job --json`` on dp-ring (TP8 x DP over the pods, no overlap: the DP
    reduce-scatter and all-gather run after the backward pass and are all the fabric
    carries; 800 Gb/s NICs, 64 B headers per 4096 B):

    * iteration = compute-only + exposed comm, the exposed fraction their ratio, in [0, 1];
      the phase kinds' bytes and exposed times add up to the totals, every byte delivered;
    * the DP bytes leave ``gpus`` NICs, so the exposed comm is at least
      ``bytes x 8 x 4160/4096 / (gpus x NIC rate)``; spraying over the 4 healthy planes
      reaches that within 2% (per-step latency) and ECMP (4 QPs hashed on 4 planes) does not
      beat it;
    * 32 pods (256 GPUs) span two leaves per plane, so failed leaf-spine cables reach the
      ring: the slowdown of the failure draws is >= 1, the worst >= the median, and under
      ECMP the worst draw slows the iteration down."""
    from trainfabric.io import loads

    def job(*argv):
        code, out, err = cli("fabric", "job", "--workload", "dp-ring", *argv, "--json")
        assert code == 0, err
        res = loads(out)
        it, cp0, exposed = res["iteration_s"], res["compute_only_s"], res["exposed_comm_s"]
        assert it == pytest.approx(cp0 + exposed, rel=1e-12) and cp0 > 0
        assert 0 <= res["exposed_comm_fraction"] <= 1
        assert res["exposed_comm_fraction"] == pytest.approx(exposed / it, rel=1e-12)
        kinds = {row["kind"]: row for row in res["phase_kinds"]}
        assert sum(row["bytes"] for row in kinds.values()) == res["comm_bytes"]
        assert res["delivered_bytes"] == pytest.approx(res["comm_bytes"], rel=1e-9)
        assert sum(row["exposed_s"] for row in kinds.values()) == pytest.approx(exposed)
        assert kinds["DP"]["bytes"] == res["comm_bytes"] > 0 and kinds["DP"]["collectives"] == 2
        nic = res["fabric"]["nic_rate_gbps"] * 1e9
        bound = res["comm_bytes"] * 8 * WIRE / (res["gpus"] * nic)
        assert exposed >= bound * (1 - 1e-9)
        return res, bound

    spray, bound = job("--pods", "4", "--layers", "2", "--mode", "spray")
    assert spray["gpus"] == 32 and spray["exposed_comm_s"] <= 1.02 * bound
    ecmp, _ = job("--pods", "4", "--layers", "2", "--mode", "ecmp")
    assert ecmp["compute_only_s"] == spray["compute_only_s"]
    assert ecmp["exposed_comm_s"] >= spray["exposed_comm_s"]
    failed, _ = job("--pods", "32", "--layers", "1", "--failures", "0.25", "--draws", "3")
    f = failed["failures"]
    assert (f["fraction"], f["draws"]) == (0.25, 3)
    assert f["failure_slowdown_worst"] >= f["failure_slowdown_median"] >= 1 - 1e-12
    assert f["failure_slowdown_worst"] > 1


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_fabric_job_subprocess_exit_code():
    """The real exit path: a pod count whose GPUs the preset's degrees do not divide."""
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("trainfabric")
    args = [str(exe), "fabric", "job", "--workload", "llama3-70b", "--pods", "6"]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: --pods") and "Traceback" not in proc.stderr


def test_iteration_scenario_runs_into_a_run_directory(tmp_path):
    from trainfabric.fabric import scenarios as S

    sc = S.parse_scenario(
        {
            "kind": "iteration",
            "modes": ["ecmp", "spray"],
            "topology": {"gpus": 64, "switch_radix": 32, "planes": 2},
            "workload": {"name": "llama3-70b", "pods": 4, "layers": 4, "overlap": ["none"]},
            "tenants": {
                "iterations": 2,
                "draws": 2,
                "jobs": [
                    {"name": "dp-ring", "pods": 2, "layers": 1},
                    {"name": "dp-ring", "pods": 2, "layers": 1},
                ],
            },
        }
    )
    res = S.run_to_dir(sc, tmp_path / "run")
    assert (tmp_path / "run" / "report.html").exists()
    for stem in (SC.STEM, *SC.STEMS.values()):
        assert (tmp_path / "run" / f"{stem}.parquet").exists(), stem
    for mode in ("ecmp", "spray"):
        figures = res["modes"][mode]
        assert figures["iteration_s"] > 0 and 0 <= figures["exposed_comm_fraction"] < 1
        assert figures["tenant_slowdown_max"] >= figures["tenant_slowdown_median"] >= 1 - 1e-9
    bad = {"kind": "iteration", "workload": {"name": "llama3-70b", "pods": 6}}
    with pytest.raises(Exception, match="workload.pods"):
        S.run_scenario(S.parse_scenario(bad))


def test_iteration_scenario_with_faults(tmp_path):
    """[faults] runs iteration.faults' static failures and flaps per mode into the tables."""
    from trainfabric.fabric import scenarios as S
    from trainfabric.fabric.iteration import faults as IF

    sc = S.parse_scenario(
        {
            "kind": "iteration",
            "modes": ["ecmp", "adaptive"],
            "topology": {"gpus": 64, "switch_radix": 16, "planes": 2},
            "workload": {"name": "dp-ring", "pods": 4, "layers": 1, "overlap": ["none"]},
            "faults": {
                "failed_fractions": [0.25],
                "failure_draws": 2,
                "flap_draws": 4,
                "flap_durations_s": [1e-3],
                "flap_sides": ["nic", "fabric"],
            },
        }
    )
    tables = S.run_scenario(sc)
    assert {IF.FAILURES_STEM, IF.FLAPS_STEM} <= set(tables)
    for figures in S.summarize("iteration", tables).values():
        assert figures["failure_slowdown_worst"] >= figures["failure_slowdown_median"] >= 1 - 1e-9
        assert figures["flap_slowdown_max"] >= 1 - 1e-9


# -- packet engine --------------------------------------------------------------------------------
def test_dag_flow_table_reproduces_the_task_engine():
    """The DAG as a flow table (compute as delays, relays for unequal ones) gives the task
    engine's iteration on the flow engine, for PP x DP x EP jobs, to the relays' few us."""
    from trainfabric.fabric.flow.engine import simulate

    for name, pods, layers in [("llama3-70b", 8, 4), ("hybrid", 4, 4), ("deepseek-v3", 4, 4)]:
        loaded = I.load_job(name, pods=pods, layers=layers)
        topo = _fabric(8 * pods, radix=64, planes=2)
        jh = I.JobOnHosts(loaded, np.arange(pods), channels=1)
        table, node = P.dag_flow_table(jh, topo)
        flow = simulate(topo, table, I.make_router(topo, "spray"))
        got = P._table_end(loaded.dag, flow.finish_s, node)
        assert got == pytest.approx(I.run_iteration(jh, topo, "spray").iteration_s, rel=1e-6)


def test_packet_engine_runs_a_small_iteration():
    """A PP2 x DP2 x TP8 job (2 layers, small width) on the packet engine: every flow
    finishes, and its iteration is within 30% of the flow engine's on the same table."""
    job = _job(layers=2, hidden=512, tp=8, pp=2, dp=2, pods=4, micro_batches=2)
    jh = I.JobOnHosts(_loaded(job), np.arange(4), channels=1)
    topo = _fabric(32, radix=16, planes=2)
    res = P.packet_iteration(jh, topo, "spray")
    assert res["unfinished_flows"] == 0
    assert res["flow_table_s"] == pytest.approx(res["task_engine_s"], rel=1e-3)
    assert res["packet_s"] == pytest.approx(res["flow_table_s"], rel=0.3)


def test_task_dag_json_gets_the_even_split_named_as_an_assumption(tmp_path):
    """A task-DAG JSON has no GPU transfers: each comm node is split GPU k -> GPU k over
    --gpus-per-pod NICs, which the output names; for a TP = 8 job that is exact, so the
    iteration equals the one built from the job."""
    from trainfabric.io import dumps
    from trainfabric.workloads.interchange import dag_to_dict

    loaded = I.load_job("llama3-70b", pods=8, layers=4, phase_nodes=False)
    path = tmp_path / "llama.json"
    path.write_text(dumps(dag_to_dict(loaded.dag)))
    res = SC.job_command(str(path), mode="spray", gpus_per_pod=8)
    assert any(
        note.startswith("assumption: the task DAG has no GPU transfers") for note in res["notes"]
    )
    direct = SC.job_command("llama3-70b", pods=8, layers=4, mode="spray")
    assert res["iteration_s"] == pytest.approx(direct["iteration_s"], rel=1e-12)


def test_busy_time_is_the_length_of_the_union_of_intervals():
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = rng.uniform(0, 10, 6)
        b = a + rng.uniform(0, 3, 6)
        cuts = np.unique(np.r_[a, b])  # elementary segments: each wholly covered or not
        mid = (cuts[1:] + cuts[:-1]) / 2
        covered = ((mid[:, None] >= a) & (mid[:, None] <= b)).any(axis=1)
        assert REP.busy_time(a, b) == pytest.approx(np.diff(cuts)[covered].sum(), rel=1e-12)


def test_iteration_scenario_on_the_packet_engine_with_a_job_toml(tmp_path):
    """engine = "packet": a job TOML's iteration on the packet engine beside the flow engine
    on the same flow table and the task engine (fabric_iteration_packet)."""
    from trainfabric.fabric import scenarios as S

    job = tmp_path / "tiny.toml"
    job.write_text(
        'name = "tiny"\n[model]\nlayers = 2\nhidden = 512\nheads = 4\nseq_len = 256\n'
        "vocab = 512\n[parallelism]\ntp = 8\npp = 2\ndp = 2\nmicro_batches = 2\n"
        "[placement]\ngpus_per_pod = 8\npods = 4\n"
    )
    sc = S.parse_scenario(
        {
            "kind": "iteration",
            "engine": "packet",
            "modes": ["spray"],
            "topology": {"gpus": 32, "switch_radix": 16, "planes": 2},
            "workload": {"name": str(job), "overlap": ["none"], "channels": 1},
        }
    )
    (row,) = S.run_scenario(sc)[SC.PACKET_STEM].to_dict(orient="records")
    assert row["job"] == "tiny" and row["unfinished_flows"] == 0
    # a 35 us iteration: the relays' sub-us serialisation is ~1% of it
    assert row["flow_table_s"] == pytest.approx(row["task_engine_s"], rel=2e-2)
    assert row["packet_s"] == pytest.approx(row["flow_table_s"], rel=0.3)
