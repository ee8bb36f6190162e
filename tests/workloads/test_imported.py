"""Someone else's job through every pillar: Chakra traces and SimAI files as ``workloads
show``, ``fabric job``, ``ocs plan`` / ``ocs compare`` and ``diloco sim`` inputs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from trainfabric.diloco.learners import SyncModel
from trainfabric.io import loads

DATA = Path(__file__).resolve().parents[1] / "data"
ALL_REDUCE_8 = DATA / "chakra" / "all_reduce" / "8npus_1MB"
GPT7B = DATA / "simai" / "gpt7b-64gpu-tp8.txt"
MIB = 1 << 20


def simai_entries(path: Path) -> tuple[int, int]:
    """(collectives, their bytes) re-counted from the raw text: the non-NONE comm entries
    (columns 3, 6 and 9 of each layer line, sizes after them), independent of the reader."""
    lines = path.read_text().splitlines()
    n, total = 0, 0
    for line in lines[2 : 2 + int(lines[1])]:
        cols = line.split()
        for k in (3, 6, 9):
            if cols[k] != "NONE":
                n, total = n + 1, total + int(cols[k + 1])
    return n, total


def test_show_counts_a_chakra_trace_and_its_ring_closed_form(cli):
    """8 ranks, one 1 MiB all-reduce each; critical path 2 (n-1) (L + 8 S / (n r))."""
    code, out, _ = cli("workloads", "show", str(ALL_REDUCE_8), "--rate-gbps", "100", "--json")
    assert code == 0
    s = loads(out)
    assert (s["ranks"], s["collectives"], s["collective_bytes"]) == (8, 8, 8 * MIB)
    assert (s["p2p_messages"], s["p2p_bytes"], s["compute_nodes"]) == (0, 0, 0)
    n, size, lat = 8, MIB, 5e-6
    assert s["critical_path_s"] == pytest.approx(2 * (n - 1) * (lat + 8 * size / (n * 100e9)))
    assert s["dp_gradient_bytes"] == MIB  # one replica's gradients: the all-reduced buffer


def test_show_counts_a_simai_file_as_its_text_states(cli):
    code, out, _ = cli("workloads", "show", str(GPT7B), "--json")
    assert code == 0
    s = loads(out)
    collectives, nbytes = simai_entries(GPT7B)
    assert (s["ranks"], s["collectives"], s["collective_bytes"]) == (64, collectives, nbytes)
    assert s["pods"] == 8  # 64 GPUs, 8 per pod by default


def test_fabric_job_runs_a_trace_on_its_own_gpu_transfers(cli):
    """No even-split assumption; every byte delivered; the fabric can only be slower than
    the DAG at the NIC rate on private links (800 Gb/s, the fabric's NICs)."""
    code, out, _ = cli(
        "fabric", "job", "--workload", str(ALL_REDUCE_8), "--gpus-per-pod", "1", "--json"
    )
    assert code == 0
    r = loads(out)
    assert (r["servers"], r["gpus"]) == (8, 8)
    assert not any("assumption" in n for n in r["notes"])
    assert r["delivered_bytes"] == pytest.approx(r["comm_bytes"], rel=1e-9)
    n = 8
    assert r["iteration_s"] >= 2 * (n - 1) * 8 * MIB / (n * 800e9)


def test_ocs_plan_on_an_imported_trace_matches_the_milp(cli, tmp_path):
    """A preset exported to Chakra and read back: the planner's wiring reaches HiGHS' proven
    optimum on it, and beats the uniform mesh."""
    trace = tmp_path / "hybrid"
    assert (
        cli("workloads", "export", "hybrid", str(trace), "--format", "chakra", "--pods", "8")[0]
        == 0
    )
    code, out, _ = cli(
        "ocs", "compare", "--workload", str(trace), "--ports", "4", "--ocs", "2", "--json"
    )
    assert code == 0
    rows = {r["method"]: r for r in loads(out)["methods"]}
    assert rows["milp"]["status"] == "optimal"
    ours, best = rows["entropic"]["hard_critical_path_s"], rows["milp"]["hard_critical_path_s"]
    assert best <= ours * (1 + 1e-9) and ours <= best * (1 + 1e-6)
    assert ours < rows["uniform"]["hard_critical_path_s"]


def test_diloco_sync_carries_the_traces_gradients(cli):
    code, out, _ = cli(
        "diloco", "sim", "--workload", str(ALL_REDUCE_8), "--windows", "10", "--json"
    )
    assert code == 0
    r = loads(out)
    assert r["sync_payload_bytes"] == MIB
    assert r["sync_s"] == pytest.approx(SyncModel(params=MIB / 4.0).duration_s())


def test_diloco_refuses_a_trace_without_gradients(cli):
    trace = DATA / "chakra" / "all_gather" / "8npus_1MB"
    code, _, err = cli("diloco", "sim", "--workload", str(trace), "--json")
    assert code == 2 and "--workload" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_a_trace_on_one_pod_names_gpus_per_pod(cli, tmp_path, command):
    """8 ranks in pods of 8 GPUs: one pod, so the option that placed it is named, not the
    --pods the user never gave."""
    argv = ["ocs", command, "--workload", str(ALL_REDUCE_8), "--gpus-per-pod", "8"]
    code, out, err = cli(*argv, *(["--out", str(tmp_path / "p")] if command == "plan" else []))
    assert code == 2 and out == ""
    assert err.startswith("error: --gpus-per-pod: ") and "places 1 pod" in err


def test_a_truncated_trace_is_one_line_naming_file_and_rank(cli, tmp_path):
    for src in ALL_REDUCE_8.glob("*.et"):
        (tmp_path / src.name).write_bytes(src.read_bytes())
    bad = tmp_path / "all_reduce.3.et"
    bad.write_bytes(bad.read_bytes()[:-3])
    code, _, err = cli("workloads", "show", str(tmp_path), "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "all_reduce.3.et" in err and "rank 3" in err


def test_a_varint_length_past_the_end_is_refused(cli, tmp_path):
    """A length prefix promising more bytes than the file holds (a cut download)."""
    for src in ALL_REDUCE_8.glob("*.et"):
        (tmp_path / src.name).write_bytes(src.read_bytes())
    bad = tmp_path / "all_reduce.0.et"
    bad.write_bytes(bad.read_bytes() + bytes([0x7F]) + struct.pack("<I", 0))
    code, _, err = cli("fabric", "job", "--workload", str(tmp_path), "--json")
    assert code == 2 and "all_reduce.0.et" in err


def test_pods_cannot_remap_an_imported_trace(cli):
    code, _, err = cli("workloads", "show", str(ALL_REDUCE_8), "--pods", "4", "--json")
    assert code == 2 and "--gpus-per-pod" in err
