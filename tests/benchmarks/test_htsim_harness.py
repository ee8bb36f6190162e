"""The htsim side-by-side harness (benchmarks/_htsim.py): generators, .cm writing and
reading, parsing of real htsim_ndp output, our side's flow table.

The fixtures below are real stdout of Broadcom/csg-htsim's ``htsim_ndp`` (built outside the
repository), captured with the harness's own .cm files on an 8-host leaf-spine
(``-tiers 2 -nodes 8 -linkspeed 100000 -q 35 -cwnd 50 -mtu 4000``), setup lines removed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _htsim as H  # noqa: E402

# ring_chains(8, 1, 3, 8000, seed=1) written by write_cm (golden text)
RING_CM = """Nodes 8
Connections 15
Triggers 12
5->0 id 1 start 0 size 8000 send_done_trigger 1
0->1 id 2 trigger 1 size 8000 send_done_trigger 2
1->5 id 3 trigger 2 size 8000 send_done_trigger 3
5->0 id 4 trigger 3 size 8000 send_done_trigger 4
0->1 id 5 trigger 4 size 8000
0->1 id 6 start 0 size 8000 send_done_trigger 6
1->5 id 7 trigger 6 size 8000 send_done_trigger 7
5->0 id 8 trigger 7 size 8000 send_done_trigger 8
0->1 id 9 trigger 8 size 8000 send_done_trigger 9
1->5 id 10 trigger 9 size 8000
1->5 id 11 start 0 size 8000 send_done_trigger 11
5->0 id 12 trigger 11 size 8000 send_done_trigger 12
0->1 id 13 trigger 12 size 8000 send_done_trigger 13
1->5 id 14 trigger 13 size 8000 send_done_trigger 14
5->0 id 15 trigger 14 size 8000
trigger id 1 oneshot
trigger id 2 oneshot
trigger id 3 oneshot
trigger id 4 oneshot
trigger id 6 oneshot
trigger id 7 oneshot
trigger id 8 oneshot
trigger id 9 oneshot
trigger id 11 oneshot
trigger id 12 oneshot
trigger id 13 oneshot
trigger id 14 oneshot
"""

# htsim_ndp -strat perm on RING_CM
RING_OUT = """Nodes: 8 Connections: 15 Triggers: 12 Failures: 0
Starting simulation
startflow ndp_5_0 CWND 200000 rts 0 at 0
startflow ndp_0_1 CWND 200000 rts 0 at 0
startflow ndp_1_5 CWND 200000 rts 0 at 0
Flow ndp_0_1 flow_id 6 finished at 5.3056 total bytes 8000
Trigger 6 fired, 1 targets
startflow ndp_1_5 CWND 200000 rts 0 at 5.3056
Flow ndp_1_5 flow_id 11 finished at 9.64608 total bytes 8000
Trigger 11 fired, 1 targets
startflow ndp_5_0 CWND 200000 rts 0 at 9.64608
Flow ndp_5_0 flow_id 1 finished at 10.6112 total bytes 8000
Trigger 1 fired, 1 targets
startflow ndp_0_1 CWND 200000 rts 0 at 10.6112
Flow ndp_1_5 flow_id 7 finished at 14.9568 total bytes 8000
Trigger 7 fired, 1 targets
startflow ndp_5_0 CWND 200000 rts 0 at 14.9568
Flow ndp_0_1 flow_id 2 finished at 15.5968 total bytes 8000
Trigger 2 fired, 1 targets
startflow ndp_1_5 CWND 200000 rts 0 at 15.5968
Flow ndp_5_0 flow_id 12 finished at 19.2922 total bytes 8000
Trigger 12 fired, 1 targets
startflow ndp_0_1 CWND 200000 rts 0 at 19.2922
Flow ndp_0_1 flow_id 13 finished at 24.2778 total bytes 8000
Trigger 13 fired, 1 targets
startflow ndp_1_5 CWND 200000 rts 0 at 24.2778
Flow ndp_5_0 flow_id 8 finished at 24.6029 total bytes 8000
Trigger 8 fired, 1 targets
startflow ndp_0_1 CWND 200000 rts 0 at 24.6029
Flow ndp_1_5 flow_id 3 finished at 25.2429 total bytes 8000
Trigger 3 fired, 1 targets
startflow ndp_5_0 CWND 200000 rts 0 at 25.2429
Flow ndp_0_1 flow_id 9 finished at 29.5885 total bytes 8000
Trigger 9 fired, 1 targets
startflow ndp_1_5 CWND 200000 rts 0 at 29.5885
Flow ndp_1_5 flow_id 14 finished at 33.9238 total bytes 8000
Trigger 14 fired, 1 targets
startflow ndp_5_0 CWND 200000 rts 0 at 33.9238
Flow ndp_5_0 flow_id 4 finished at 34.8941 total bytes 8000
Trigger 4 fired, 1 targets
startflow ndp_0_1 CWND 200000 rts 0 at 34.8941
Flow ndp_1_5 flow_id 10 finished at 39.2397 total bytes 8000
Flow ndp_0_1 flow_id 5 finished at 39.8797 total bytes 8000
Flow ndp_5_0 flow_id 15 finished at 43.5699 total bytes 8000
.Done
New: 30 Rtx: 0 Bounced: 0
"""

# htsim_ndp -strat ecmp_host -paths 1 on write_cm(permutation(8, 8000, seed=1))
PERM_OUT = """Starting simulation
Flow ndp_1_0 flow_id 2 finished at 5.3056 total bytes 8000
Flow ndp_0_7 flow_id 1 finished at 9.64608 total bytes 8000
Flow ndp_2_1 flow_id 3 finished at 9.6512 total bytes 8000
Flow ndp_5_6 flow_id 6 finished at 9.6512 total bytes 8000
Flow ndp_3_4 flow_id 4 finished at 9.9712 total bytes 8000
Flow ndp_4_2 flow_id 5 finished at 9.9712 total bytes 8000
Flow ndp_7_5 flow_id 8 finished at 10.2963 total bytes 8000
Flow ndp_6_3 flow_id 7 finished at 10.2963 total bytes 8000
.Done
New: 16 Rtx: 0 Bounced: 0
"""

# one 4000 B flow 0->2 (across leaves), alone on 8 hosts, -strat perm
SOLO_OUT = "Flow ndp_0_2 flow_id 1 finished at 9.32096 total bytes 4000\nNew: 1 Rtx: 0 Bounced: 0\n"


def test_radix_for_matches_htsim_sizes():
    assert H.radix_for(512) == 32 and H.radix_for(128) == 16 and H.radix_for(8) == 4
    for bad in (100, 2048 + 2, 9):
        with pytest.raises(ValueError):
            H.radix_for(bad)


def test_permutation_is_a_derangement():
    for n, seed in ((8, 1), (128, 2), (512, 13)):
        sc = H.permutation(n, 1000, seed)
        assert np.array_equal(np.sort(sc.dst), np.arange(n))
        assert np.array_equal(sc.src, np.arange(n)) and not np.any(sc.src == sc.dst)


def test_all_to_all_covers_every_pair_once():
    sc = H.all_to_all(8, 100)
    pairs = set(zip(sc.src.tolist(), sc.dst.tolist(), strict=True))
    assert len(pairs) == sc.n_flows == 8 * 7
    assert pairs == {(i, j) for i in range(8) for j in range(8) if i != j}


def test_incast_senders_distinct_and_not_the_receiver():
    sc = H.incast(128, 64, 1000)
    assert np.unique(sc.src).size == 64 and not np.any(sc.src == 0) and np.all(sc.dst == 0)


def test_ring_chains_structure():
    rings, ranks = 2, 4
    sc = H.ring_chains(8, rings, ranks, 1000, seed=3)
    hops = 2 * ranks - 1
    assert sc.n_flows == rings * ranks * hops
    chains = sc.n_flows // hops
    for c in range(chains):
        f = np.arange(c * hops, (c + 1) * hops)
        assert sc.pred[f[0]] == -1 and sc.start_s[f[0]] == 0
        assert np.array_equal(sc.pred[f[1:]], f[:-1])
        assert np.array_equal(sc.dst[f[:-1]], sc.src[f[1:]])  # the chunk travels hop by hop
        assert np.all(np.isnan(sc.start_s[f[1:]]))
    # every ring uses ranks distinct hosts, rings disjoint
    ring_hosts = [set(sc.src[r * ranks * hops : (r + 1) * ranks * hops]) for r in range(rings)]
    assert all(len(h) == ranks for h in ring_hosts) and not (ring_hosts[0] & ring_hosts[1])


def test_write_cm_golden_and_roundtrip(tmp_path):
    sc = H.ring_chains(8, 1, 3, 8000, seed=1)
    path = H.write_cm(sc, tmp_path / "ring.cm")
    assert path.read_text() == RING_CM
    back = H.read_cm(path)
    for name in ("src", "dst", "size", "pred"):
        assert np.array_equal(getattr(back, name), getattr(sc, name))
    assert np.array_equal(np.isnan(back.start_s), np.isnan(sc.start_s))


def test_read_cm_of_htsim_generator_format(tmp_path):
    # the format of htsim's gen_allreduce.py: header, flows with triggers, trigger lines
    text = (
        "Nodes 4\nConnections 3\nTriggers 2\n"
        "2->3 id 1 start 0 size 250000 send_done_trigger 1\n"
        "3->1 id 2 trigger 1 size 250000 send_done_trigger 2\n"
        "1->2 id 3 trigger 2 size 250000\n"
        "trigger id 1 oneshot\ntrigger id 2 oneshot\n"
    )
    (tmp_path / "ar.cm").write_text(text)
    with pytest.raises(ValueError):  # 4 hosts is not a 2-tier htsim size
        H.read_cm(tmp_path / "ar.cm")
    (tmp_path / "ar.cm").write_text(text.replace("Nodes 4", "Nodes 8"))
    sc = H.read_cm(tmp_path / "ar.cm")
    assert sc.pred.tolist() == [-1, 0, 1] and sc.size.tolist() == [250000] * 3


def test_parse_ring_output_starts_are_trigger_times():
    sc = H.ring_chains(8, 1, 3, 8000, seed=1)
    start, finish, new, rtx = H.parse_output(RING_OUT, sc)
    assert (new, rtx) == (30, 0) and np.all(np.isfinite(finish))
    # every "Trigger K fired" is followed by the start of the flow it triggers, at the
    # time and between the hosts the harness derived from the dependency chain
    lines = RING_OUT.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"Trigger (\d+) fired", line)
        if not m:
            continue
        succ = int(np.flatnonzero(sc.pred == int(m.group(1)) - 1)[0])
        s = re.match(r"startflow ndp_(\d+)_(\d+) .* at (\S+)", lines[i + 1])
        assert (int(s.group(1)), int(s.group(2))) == (sc.src[succ], sc.dst[succ])
        assert start[succ] == pytest.approx(float(s.group(3)) * 1e-6, abs=1e-12)
    assert finish.max() == pytest.approx(43.5699e-6)
    res = H.summary(sc, start, finish, 1.0, rtx, new)
    assert res["completion_us"] == pytest.approx(43.5699)
    assert res["unfinished"] == 0


def test_parse_perm_output_and_summary():
    sc = H.permutation(8, 8000, seed=1)
    start, finish, new, rtx = H.parse_output(PERM_OUT, sc)
    assert np.all(start == 0) and (new, rtx) == (16, 0)
    assert finish[1] == pytest.approx(5.3056e-6) and finish[6] == pytest.approx(10.2963e-6)
    res = H.summary(sc, start, finish, 2.0, rtx, new)
    assert res["fct_p50_us"] == pytest.approx(np.percentile(finish * 1e6, 50))
    assert res["goodput_gbps"] == pytest.approx(8 * 8000 * 8 / 10.2963e-6 / 1e9)


def test_unfinished_flows_are_nan():
    sc = H.permutation(8, 8000, seed=1)
    _, finish, _, _ = H.parse_output("\n".join(PERM_OUT.splitlines()[:3]), sc)
    assert np.isfinite(finish).sum() == 2
    assert H.summary(sc, np.zeros(8), finish, 1.0, 0, 16)["unfinished"] == 6


def test_solo_packet_closed_form_matches_htsim():
    # data: 4 store-and-forward hops of (1 us + 4064 B at 100 Gb/s); ACK back: ack_return_s
    sc = H.Scenario("solo", 8, np.array([0]), np.array([2]), np.array([4000]), np.zeros(1),
                    np.array([-1]))  # fmt: skip
    _, finish, _, _ = H.parse_output(SOLO_OUT, sc)
    data = 4 * (H.HOP_S + (H.MTU + H.HEADER) * 8 / H.RATE_BPS)
    assert finish[0] == pytest.approx(data + H.ack_return_s(sc)[0], abs=1e-11)
    assert H.ack_return_s(sc)[0] == pytest.approx(4.02048e-6)


def test_flow_table_matches_htsim_semantics():
    sc = H.ring_chains(8, 1, 3, 250_000, seed=1)
    ft = H.flow_table(sc)
    assert np.all(ft.bytes == 252_000)  # 63 whole MTU packets
    trig = sc.pred >= 0
    assert np.array_equal(np.diff(ft.deps_ptr), trig.astype(int))
    assert np.array_equal(ft.deps, sc.pred[trig])
    assert np.allclose(ft.delay_s[trig], H.ack_return_s(sc)[sc.pred[trig]])
    assert np.all(ft.delay_s[~trig] == 0)
    assert np.unique(ft.entropy).size == sc.n_flows  # a new connection per flow
    assert np.all(H.flow_table(sc, ack_delay=False).delay_s == 0)
    assert H.our_queue_packets() * H.MTU == 140_000  # htsim -q 35


def test_htsim_command_uses_matched_parameters(tmp_path):
    sc = H.permutation(512, 2_000_000)
    cmd = H.htsim_command(Path("htsim_ndp"), tmp_path / "p.cm", sc, "ecmp", 2000, tmp_path / "l")
    text = " ".join(cmd)
    for part in ("-tiers 2", "-nodes 512", "-linkspeed 100000", "-strat ecmp_host -paths 1",
                 "-q 35", "-cwnd 50", "-mtu 4000", "-end 2000", "-seed 13"):  # fmt: skip
        assert part in text


def test_ordering_and_mode_ratios():
    rows = {
        "spray": {"completion_us": 100.0},
        "adaptive": {"completion_us": 102.0},
        "ecmp": {"completion_us": 200.0},
    }
    assert H.ordering(rows, "completion_us") == "spray ~ adaptive < ecmp"
    assert H.mode_ratios(rows, "completion_us") == {"ecmp": 2.0, "adaptive": 1.02}


def test_find_binary(tmp_path):
    assert H.find_binary(tmp_path) is None
    exe = tmp_path / "sim" / "datacenter" / "htsim_ndp"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert H.find_binary(tmp_path) == exe
    assert H.find_binary(tmp_path / "sim") == exe


def test_vs_htsim_without_a_build_says_so_and_exits_0(tmp_path):
    import subprocess

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_htsim.sh"
    for args in ([str(tmp_path)], []):
        out = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout == ""
        assert "nothing compared" in out.stderr
    assert H.main([str(tmp_path)]) == 0


def test_mean_rows_over_seeds():
    rows = [
        {
            "fct_p50_us": 1.0,
            "fct_p99_us": 4.0,
            "completion_us": 5.0,
            "unfinished": 0,
            "command": "a",
        },
        {
            "fct_p50_us": 3.0,
            "fct_p99_us": 8.0,
            "completion_us": 7.0,
            "unfinished": 2,
            "command": "b",
        },
    ]
    m = H.mean_rows(rows)
    assert (m["fct_p50_us"], m["fct_p99_us"], m["completion_us"], m["unfinished"]) == (2, 6, 6, 1)
    assert m["command"] == "a" and len(m["per_seed"]) == 2
    assert H.mean_rows(rows[:1]) is rows[0]
