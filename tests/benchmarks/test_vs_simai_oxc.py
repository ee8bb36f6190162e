"""Our side of the SimAI-OXC side by side (benchmarks/vs_simai_oxc.py): its flow files read,
its ring flows (generated here from SimAI-OXC's documented native ring, not by its binary,
which lives outside the repository) folded to pod steps equal to our DAG's, and the serial
timing of those steps equal to our DAG's communication-only critical path."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import vs_simai_oxc as V  # noqa: E402

from trainfabric.ocs import OcsModel, hard_critical_path  # noqa: E402
from trainfabric.workloads.simai import read_simai, simai_dag  # noqa: E402

HEADER = (
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 vpp: 1 ga: 1 "
    "all_gpus: 32 checkpoints: 0 checkpoint_initiates: 0\n"
)
S1, S2 = 16 * 2**20, 48 * 2**20  # the two layers' DP all-reduce bytes


def _workload(tmp_path: Path) -> Path:
    """32 GPUs, TP 8 (inside a pod), DP 4: two layers with a TP and a DP all-reduce each."""
    path = tmp_path / "w.txt"
    path.write_text(
        HEADER
        + "2\n"
        + f"a -1 1000 ALLREDUCE 1048576 1000 NONE 0 1000 ALLREDUCE {S1} 100\n"
        + f"b -1 2000 ALLREDUCE 2097152 2000 NONE 0 2000 ALLREDUCE {S2} 100\n"
    )
    return path


def _ring_flows(layer: str, size: int, domains: list[list[int]], shift: int = 1) -> list[dict]:
    """SimAI-OXC's native ring all-reduce as its design document states it: per domain,
    2(n-1) steps, every rank sends ``size // n`` to the next rank of the domain."""
    flows = []
    for dom in domains:
        n = len(dom)
        for step in range(2 * (n - 1)):
            for k in range(n):
                flows.append(
                    {
                        "layer": layer,
                        "phase": "wg",
                        "src": dom[k],
                        "dst": dom[(k + shift) % n],
                        "size": size // n,
                        "step": step,
                    }
                )
    return flows


def _dp_domains(gpus: int = 32, dp: int = 4) -> list[list[int]]:
    """DP domain ``i``: ranks ``i + j·gpus/dp`` (SimAI's mock NCCL, SimAI-OXC alike)."""
    return [[i + j * (gpus // dp) for j in range(dp)] for i in range(gpus // dp)]


def _dag(tmp_path: Path):
    return simai_dag(read_simai(_workload(tmp_path)), V.GPUS_PER_POD, V.LATENCY_S)


def test_rank_table_places_ranks_on_racks():
    table = V.rank_table(24, 8)
    racks = [r["level_list"][0]["net_instance_id"] for r in table["rank_list"]]
    assert table["rank_count"] == 24 and racks == [f"rack_{r // 8}" for r in range(24)]
    with pytest.raises(ValueError, match="gpus"):
        V.rank_table(20, 8)


def test_read_flows_parses_its_csv():
    text = (
        "op_id,layer,phase,comm_type,group,flow_id,src,dst,size,step,depends_on\n"
        '0,a,wg,ALLREDUCE,DP,0,0,8,4194304,0,"[]"\n'
        '0,a,wg,ALLREDUCE,DP,1,8,0,4194304,1,"[0]"\n'
        '1,b,wg,ALLREDUCE,DP,2,1,9,5,2,"[0,1]"\n'
    )
    flows = V.read_flows(text)
    assert [f["depends_on"] for f in flows] == [[], [0], [0, 1]]
    assert flows[1]["src"] == 8 and flows[2]["size"] == 5 and flows[2]["layer"] == "b"
    assert V.longest_chain(flows) == 3
    with pytest.raises(ValueError, match="no column"):
        V.read_flows("op_id,layer\n0,a\n")


def test_longest_chain_refuses_a_forward_dependency():
    flows = [{"flow_id": 0, "depends_on": [1]}, {"flow_id": 1, "depends_on": []}]
    with pytest.raises(ValueError, match="later flow"):
        V.longest_chain(flows)


def test_ring_flows_fold_to_our_steps(tmp_path):
    theirs, intra = V.flow_steps(
        _ring_flows("a", S1, _dp_domains()) + _ring_flows("b", S2, _dp_domains()), 8
    )
    ours, _ = V.our_steps(_dag(tmp_path))
    assert intra == 0.0
    cmp = V.steps_compare(theirs, ours)
    assert cmp["steps_equal"] and cmp["steps_theirs"] == cmp["steps_ours"] == 12
    # each step: 8 domains x S/4 on each ring pair (0,1), (1,2), (2,3), (3,0)
    assert theirs["a", "wg"][0] == {(u, (u + 1) % 4): 8 * S1 / 4 for u in range(4)}


def test_a_reversed_ring_does_not_match(tmp_path):
    theirs, _ = V.flow_steps(
        _ring_flows("a", S1, _dp_domains(), shift=-1) + _ring_flows("b", S2, _dp_domains()), 8
    )
    ours, _ = V.our_steps(_dag(tmp_path))
    cmp = V.steps_compare(theirs, ours)
    assert not cmp["steps_equal"] and cmp["max_abs_step_bytes_diff"] == 8 * S1 / 4


def test_serial_time_closed_form():
    """Ring steps on a ring wiring of c circuits per ring pair: 6 (L + 8·2S / (B c + B0))
    per all-reduce of S on 4 pods with 8 groups (each step moves 8·S/4 = 2S per pair)."""
    model = OcsModel.uniform(4, 8, 4, rate_bps=V.RATE_BPS, fallback_bps=V.FALLBACK_BPS)
    theirs, _ = V.flow_steps(
        _ring_flows("a", S1, _dp_domains()) + _ring_flows("b", S2, _dp_domains()), 8
    )
    x = np.zeros(model.n_pairs)
    x[model.pair_index(np.arange(4), (np.arange(4) + 1) % 4)] = 4
    rate = V.RATE_BPS * 4 + V.FALLBACK_BPS
    want = sum(6 * (V.LATENCY_S + 8 * 2 * s / rate) for s in (S1, S2))
    assert V.serial_time(theirs, model, x, V.LATENCY_S) == pytest.approx(want, rel=1e-12)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=6, max_size=6))
def test_serial_time_is_our_comm_only_critical_path(tmp_path_factory, x):
    """Any wiring: its ring steps in series take what our DAG takes with compute free (our
    DAG chains the weight-gradient collectives first in, first out; theirs chains them)."""
    dag = _dag(tmp_path_factory.mktemp("w"))
    model = OcsModel.uniform(4, 8, 4, rate_bps=V.RATE_BPS, fallback_bps=V.FALLBACK_BPS)
    theirs, _ = V.flow_steps(
        _ring_flows("a", S1, _dp_domains()) + _ring_flows("b", S2, _dp_domains()), 8
    )
    x = np.array(x, dtype=float)
    comm_only = replace(dag, duration_s=np.zeros(dag.n_nodes))
    ours = hard_critical_path(comm_only, model, x)
    assert V.serial_time(theirs, model, x, V.LATENCY_S) == pytest.approx(ours, rel=1e-12)
    assert hard_critical_path(dag, model, x) > ours  # compute on the path makes it longer


def test_without_a_build_it_says_so(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", ["vs_simai_oxc.py", str(tmp_path), "--out", str(out)])
    V.main()
    assert "no SimAI_oxc build" in capsys.readouterr().err and not out.exists()
