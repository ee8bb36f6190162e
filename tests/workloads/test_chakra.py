"""Chakra execution traces in and out (:mod:`trainfabric.workloads.chakra`).

* astra-sim's published microbenchmarks (``tests/data/chakra``): the reader's counts against
  a decoding of the wire format written here from the protobuf encoding rules, and the
  converted DAG against the ring's closed forms and astra-sim's own times on these files;
* presets exported and read back: the same DAG where the writer promises it (module doc of
  :mod:`~trainfabric.workloads.chakra.writer`), the same bytes, compute and critical path
  elsewhere; the writer's nodes byte for byte those that chakra's generated encoder wrote
  for the astra-sim captures (``tests/data/astra``), and those captured traces, read back
  and run by the fabric's task engine, within 1e-6 of astra-sim's iteration;
* a table of malformed traces, each a FormatError naming the field, the file, the rank and
  the node; the length-delimited stream as a property.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import FormatError
from trainfabric.workloads.build import build_dag
from trainfabric.workloads.chakra import (
    load_chakra,
    read_trace,
    trace_counts,
    trace_dag,
    write_trace,
)
from trainfabric.workloads.chakra.schema import (
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    StreamError,
    attribute,
    decode_varint,
    encode_stream,
    encode_varint,
    split_stream,
)
from trainfabric.workloads.dag import COMPUTE, TaskDAG
from trainfabric.workloads.job import Job
from trainfabric.workloads.presets import get_preset

DATA = Path(__file__).resolve().parents[1] / "data"
BENCH = DATA / "chakra"
ASTRA = DATA / "astra"
S = 1 << 20  # the microbenchmarks' comm_size
L, RATE = 5e-6, 400e9
# astra-sim f242411 (analytical, congestion aware) on these files: FullyConnected, 400 Gb/s and
# 5 us per link, the system of benchmarks/vs_astra.py with the ring for all-reduce and
# all-gather and the direct implementation for all-to-all; seconds (its cycles are ns)
ASTRA_S = {
    ("all_reduce", 4): 6.1459e-05,
    ("all_reduce", 8): 1.06709e-04,
    ("all_reduce", 16): 1.89331e-04,
    ("all_gather", 4): 7.7917e-05,
    ("all_gather", 8): 1.81805e-04,
    ("all_gather", 16): 3.89581e-04,
    ("all_to_all", 4): 1.0244e-05,
    ("all_to_all", 8): 7.623e-06,
    ("all_to_all", 16): 6.312e-06,
}


# -- an independent reading of the wire format -----------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for k in range(10):
        value |= (buf[pos + k] & 0x7F) << (7 * k)
        if buf[pos + k] < 0x80:
            return value, pos + k + 1
    raise AssertionError("varint too long")


def _fields(msg: bytes):
    """(field number, value) of a message: ints for varints, bytes for length-delimited."""
    pos = 0
    while pos < len(msg):
        tag, pos = _varint(msg, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(msg, pos)
        elif wire == 2:
            size, pos = _varint(msg, pos)
            value, pos = msg[pos : pos + size], pos + size
        else:
            width = 8 if wire == 1 else 4
            value, pos = msg[pos : pos + width], pos + width
        yield number, value


def _hand_counts(folder: Path) -> dict[str, int]:
    counts = dict.fromkeys(("collectives", "collective_bytes", "compute_nodes"), 0)
    files = sorted(folder.glob("*.et"))
    for f in files:
        data, pos, first = f.read_bytes(), 0, True
        while pos < len(data):
            size, pos = _varint(data, pos)
            body, pos = data[pos : pos + size], pos + size
            if first:  # the GlobalMetadata
                first = False
                continue
            fields = list(_fields(body))
            node_type = next((v for k, v in fields if k == 3), 0)
            attrs = {}
            for k, v in fields:
                if k == 10:
                    attr = dict(_fields(v))
                    attrs[attr[1].decode()] = attr.get(9, 0)  # int64_val (field 9)
            if node_type == 7:
                counts["collectives"] += 1
                counts["collective_bytes"] += attrs["comm_size"]
            counts["compute_nodes"] += node_type == 4
    return {"ranks": len(files), **counts, "p2p_messages": 0, "p2p_bytes": 0}


CASES = [(op, n) for op in ("all_reduce", "all_gather", "all_to_all") for n in (4, 8, 16)]


@pytest.mark.parametrize(("op", "n"), CASES)
def test_microbenchmark_counts_match_the_wire(op, n):
    trace = read_trace(BENCH / op / f"{n}npus_1MB")
    assert trace.name == op
    counts = trace_counts(trace)
    assert counts == _hand_counts(BENCH / op / f"{n}npus_1MB")
    assert counts["ranks"] == counts["collectives"] == n  # one collective, one node per rank
    assert counts["collective_bytes"] == n * S
    assert len(trace.collectives) == 1 and trace.collectives[0].ranks == tuple(range(n))


@pytest.mark.parametrize(("op", "n"), CASES)
def test_microbenchmark_dag_meets_the_closed_form_and_astra_sim(op, n):
    """Ring all-reduce ``2 (n-1) (L + 8 S / (n r))``; ring all-gather of contribution ``S``
    ``(n-1) (L + 8 S / r)``; direct all-to-all ``L + 8 S / (n r)``. astra-sim adds 1 ns per
    message step and counts whole nanoseconds."""
    _, dag, _ = load_chakra(BENCH / op / f"{n}npus_1MB", latency_s=L)
    steps, step_bytes = {
        "all_reduce": (2 * (n - 1), S / n),
        "all_gather": (n - 1, S),
        "all_to_all": (1, S / n),
    }[op]
    closed = steps * (L + 8 * step_bytes / RATE)
    assert dag.critical_path_at(RATE) == pytest.approx(closed, rel=1e-12)
    assert abs(dag.critical_path_at(RATE) - ASTRA_S[op, n]) <= (steps + 1) * 1e-9
    assert dag.comm_bytes() == pytest.approx(
        steps * n * step_bytes * (n - 1 if op == "all_to_all" else 1)
    )


def test_ranks_on_pods_keep_gpu_transfers():
    """8 ranks on 2 pods of 4: each ring step crosses the pods once each way (rank 3 ->
    rank 4 and rank 7 -> rank 0) and keeps the other 6 hops inside the pods."""
    _, dag, _ = load_chakra(BENCH / "all_reduce" / "8npus_1MB", gpus_per_pod=4, latency_s=L)
    assert dag.n_pods == 2 and dag.gpu is not None and dag.gpu.gpus_per_pod == 4
    comm = dag.comm_nodes
    assert comm.size == 2 * 14 and np.allclose(dag.bytes[comm], S / 8)
    for v in comm:
        src, dst, nbytes = dag.gpu.transfers(v, dag.bytes[v])
        assert (src.tolist(), dst.tolist()) == ([3], [0]) and nbytes[0] == pytest.approx(S / 8)
    assert all(ph.intra_pod_bytes == pytest.approx(6 * S / 8) for ph in dag.phases)
    assert dag.critical_path_at(RATE) == pytest.approx(14 * (L + 8 * S / (8 * RATE)), rel=1e-12)


# -- round trips -------------------------------------------------------------------------------
def _rounded(dag: TaskDAG) -> TaskDAG:
    """Compute times in whole microseconds, as a trace stores them."""
    us = np.where(dag.kind == COMPUTE, np.round(dag.duration_s * 1e6) / 1e6, dag.duration_s)
    return replace(dag, duration_s=us)


def _phase_labels(dag: TaskDAG) -> np.ndarray:
    """Phase indices renumbered by first appearance (a trace does not keep their order)."""
    first: dict[int, int] = {}
    return np.array([-1 if p < 0 else first.setdefault(p, len(first)) for p in dag.phase])


def _round_trip(dag: TaskDAG, tmp: Path, algorithm="ring", latency_s=5e-6):
    written = write_trace(dag, tmp, "job", algorithm)
    name, back, counts = load_chakra(tmp, latency_s=latency_s, algorithm=algorithm)
    assert name == "job" and counts["ranks"] == dag.n_pods == len(written.files)
    return written, back, counts


def _dp_only() -> Job:
    """benchmarks/vs_astra.py's DP-8 GPT job: one GPU per pod, distributed optimiser."""
    gpt = {"name": "gpt", "layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048}
    return Job.model_validate(
        {
            "name": "dp_only",
            "model": gpt | {"vocab": 50304},
            "parallelism": {"dp": 8, "micro_batches": 4},
            "placement": {"gpus_per_pod": 1, "pods": 8},
        }
    )


@pytest.mark.parametrize("name", ["dp-ring", "dp-hd", "pipeline", "dp_only"])
def test_export_import_gives_the_same_dag(name, tmp_path):
    job = _dp_only() if name == "dp_only" else get_preset(name)
    dag = _rounded(build_dag(job))
    algorithm = job.parallelism.dp_collective
    written, back, _ = _round_trip(dag, tmp_path, algorithm, job.compute.latency_s)
    assert written.collectives_as_sends == 0
    for field in ("kind", "pod", "dst", "indptr", "indices"):
        assert np.array_equal(getattr(dag, field), getattr(back, field)), field
    assert np.array_equal(_phase_labels(dag), _phase_labels(back))
    assert np.allclose(back.bytes, dag.bytes, rtol=0, atol=1.0)  # comm_size: whole bytes
    assert np.allclose(back.duration_s, dag.duration_s, rtol=1e-12, atol=0)
    assert np.allclose(back.latency_s, dag.latency_s)


@pytest.mark.parametrize(("name", "lockstep"), [("llama3-70b", True), ("moe", False)])
def test_export_import_keeps_bytes_compute_and_timing(name, lockstep, tmp_path):
    """A pipeline boundary of several DP replicas comes back as one phase per send, and a
    skewed MoE all-to-all (unequal bytes to each peer) as its sends: the bytes and compute
    stay; the critical path stays where the replicas run in lockstep, and can only shrink
    where the barriers that joined unequal transfers are gone."""
    dag = _rounded(build_dag(get_preset(name)))
    written, back, counts = _round_trip(dag, tmp_path)
    assert (written.collectives_as_sends > 0) == (not lockstep)
    assert back.comm_bytes() == pytest.approx(dag.comm_bytes(), abs=0.5 * dag.comm_nodes.size)
    for d in (dag, back):
        assert d.kind[d.kind == COMPUTE].size == counts["compute_nodes"]
    assert np.sort(back.duration_s[back.kind == COMPUTE]) == pytest.approx(
        np.sort(dag.duration_s[dag.kind == COMPUTE])
    )
    ours, theirs = back.critical_path_at(100e9), dag.critical_path_at(100e9)
    if lockstep:
        assert ours == pytest.approx(theirs, rel=1e-12)
    else:
        assert ours <= theirs * (1 + 1e-12) and ours > 0.99 * theirs
    sends = [v for v in back.comm_nodes if back.phases[back.phase[v]].op == "send_recv"]
    assert counts["p2p_bytes"] == pytest.approx(back.bytes[sends].sum(), rel=1e-12)


@pytest.mark.parametrize("case", ["dp_only", "pp_dp_sends_first"])
def test_writer_reproduces_the_astra_captures(case, tmp_path):
    """The captures' traces were written by chakra's generated ``et_def_pb2`` and
    ``protolib.encodeMessage`` (benchmarks/vs_astra.py before the writer was product code):
    ours are the same nodes, byte for byte (the GlobalMetadata now states the schema
    version), and reading them back gives the DAG's critical path."""
    import json

    entry = json.loads((ASTRA / "astra.json").read_text())["jobs"][case]
    job = _dp_only().model_dump()
    job["parallelism"] = entry["parallelism"]
    job["placement"]["pods"] = entry["gpus"]
    dag = _rounded(build_dag(Job.model_validate(job)))
    written = write_trace(dag, tmp_path, "job", sends_first=entry["sends_first"])
    assert written.items == entry["items"] and written.et_nodes == entry["et_nodes"]
    for r, f in enumerate(written.files):
        ours = [body for _, body in split_stream(f.read_bytes())]
        theirs = [body for _, body in split_stream((ASTRA / case / f"job.{r}.et").read_bytes())]
        assert ours[1:] == theirs[1:]
        assert GlobalMetadata.FromString(ours[0]).version == "0.0.4"
    assert (tmp_path / "groups.json").read_text() == (ASTRA / case / "groups.json").read_text()
    back = trace_dag(read_trace(ASTRA / case))
    cp = dag.critical_path_at(RATE)
    if entry["sends_first"]:  # its extra waits may only lengthen the iteration
        assert back.critical_path_at(RATE) >= cp * (1 - 1e-12)
    else:
        assert back.critical_path_at(RATE) == pytest.approx(cp, rel=1e-12)


def test_a_small_trace_by_hand(tmp_path):
    """Rank 0 computes 5 us and sends 1,000 B to rank 1, which computes 7 us; then both
    all-reduce 4,096 B: 5 us + (L + 8 000 / r) + 7 us + 2 (L + 8 * 2048 / r)."""
    _write(tmp_path, _base())
    trace = read_trace(tmp_path / "t.0.et")
    assert trace_counts(trace) == {
        "ranks": 2,
        "collectives": 2,
        "collective_bytes": 8192,
        "p2p_messages": 1,
        "p2p_bytes": 1000,
        "compute_nodes": 2,
    }
    dag = trace_dag(trace, latency_s=L)
    expect = 12e-6 + (L + 8000 / RATE) + 2 * (L + 8 * 2048 / RATE)
    assert dag.critical_path_at(RATE) == pytest.approx(expect, rel=1e-12)
    assert read_trace(tmp_path / "t").name == "t"  # astra-sim's folder/NAME form


def test_barrier_rootless_and_uneven_collectives(tmp_path):
    """Rank 0 computes 10 us, rank 1 5 us after a barrier: the barrier ends at 10 us. A
    broadcast names no root: each rank takes its own duration (30 and 20 us), as astra-sim.
    Then a REDUCE_SCATTER_BLOCK of 8,000 B (a reduce-scatter: one step of 4,000 B) and an
    all-to-all of 4,000 and 2,000 B (each rank sends half of its buffer to the other)."""

    def coll(i, kind, deps, size=None, dur=0):
        attr = {"comm_type": ("int64_val", int(kind))}
        if size is not None:
            attr["comm_size"] = ("int64_val", size)
        return {"id": i, "type": COLL, "data_deps": deps, "duration_micros": dur, "attr": attr}

    C = CollectiveCommType
    ranks = {
        r: [
            {"id": 1, "type": COMP, "duration_micros": 10 - 5 * r, "data_deps": [2] if r else []},
            coll(2, C.BARRIER, [] if r else [1]),
            coll(3, C.BROADCAST, [1 if r else 2], 100, dur=30 - 10 * r),
            coll(4, C.REDUCE_SCATTER_BLOCK, [3], 8000),
            coll(5, C.ALL_TO_ALL, [4], 4000 // (1 + r)),
        ]
        for r in (0, 1)
    }
    _write(tmp_path, ranks)
    _, dag, counts = load_chakra(tmp_path, latency_s=L)
    assert counts["collectives"] == 8 and counts["collective_bytes"] == 22200
    expect = 40e-6 + (L + 8 * 4000 / RATE) + (L + 8 * 2000 / RATE)
    assert dag.critical_path_at(RATE) == pytest.approx(expect, rel=1e-12)


def test_export_command_writes_a_trace(cli, tmp_path):
    out = tmp_path / "trace"
    code, _, _ = cli("workloads", "export", "dp-ring", str(out), "--format", "chakra", "--json")
    assert code == 0 and len(list(out.glob("dp-ring.*.et"))) == 16
    assert trace_counts(read_trace(out))["ranks"] == 16
    assert (
        cli("workloads", "export", "dp-ring", str(out), "--format", "chakra", "--traffic")[0] == 2
    )
    # the same trace again overwrites it; another one (or fewer ranks) would mix two traces
    assert cli("workloads", "export", "dp-ring", str(out), "--format", "chakra")[0] == 0
    code, _, err = cli("workloads", "export", "pipeline", str(out), "--format", "chakra")
    assert code == 2 and "FILE: " in err and "not of this 16-rank trace pipeline" in err
    assert sorted(f.name for f in out.glob("*.et")) == sorted(f"dp-ring.{r}.et" for r in range(16))


# -- malformed traces ---------------------------------------------------------------------------
COLL, SEND, RECV, COMP = (
    NodeType.COMM_COLL_NODE,
    NodeType.COMM_SEND_NODE,
    NodeType.COMM_RECV_NODE,
    NodeType.COMP_NODE,
)


def _base() -> dict[int, list[dict]]:
    """Two ranks (``_a_small_trace_by_hand``): per rank, its nodes as keyword dicts."""
    ar = {"comm_type": ("int64_val", 0), "comm_size": ("int64_val", 4096)}
    msg = {"comm_src": ("int32_val", 0), "comm_dst": ("int32_val", 1)}
    msg |= {"comm_tag": ("int32_val", 3), "comm_size": ("int64_val", 1000)}
    return {
        0: [
            {"id": 10, "type": COMP, "duration_micros": 5},
            {"id": 11, "type": SEND, "data_deps": [10], "attr": dict(msg)},
            {"id": 12, "type": COLL, "data_deps": [11], "attr": dict(ar)},
        ],
        1: [
            {"id": 20, "type": RECV, "attr": dict(msg)},
            {"id": 21, "type": COMP, "duration_micros": 7, "data_deps": [20]},
            {"id": 22, "type": COLL, "data_deps": [21], "attr": dict(ar)},
        ],
    }


def _encode(nodes: list[dict], version: str = "0.0.4") -> bytes:
    msgs = [GlobalMetadata(version=version)]
    for spec in nodes:
        spec = dict(spec)
        attrs = spec.pop("attr", {})
        node = Node(**spec)
        node.attr.extend(attribute(k, **{kind: v}) for k, (kind, v) in attrs.items())
        msgs.append(node)
    return encode_stream(msgs)


def _write(folder: Path, ranks: dict, name: str = "t") -> None:
    for r, nodes in ranks.items():
        (folder / f"{name}.{r}.et").write_bytes(_encode(nodes))


def _node(ranks, rank, node_id) -> dict:
    return next(n for n in ranks[rank] if n["id"] == node_id)


def _edit(rank, node_id, **changes):
    def apply(ranks):
        spec = _node(ranks, rank, node_id)
        attrs = changes.pop("attr", None)
        spec.update(changes)
        if attrs is not None:
            spec["attr"] = {k: v for k, v in {**spec.get("attr", {}), **attrs}.items() if v}
        return ranks

    return apply


def _drop(rank, node_id):
    def apply(ranks):
        ranks[rank] = [n for n in ranks[rank] if n["id"] != node_id]
        for n in ranks[rank]:
            n["data_deps"] = [d for d in n.get("data_deps", []) if d != node_id]
        return ranks

    return apply


def _files(folder: Path, mutate) -> Path:
    """Write the base trace changed by ``mutate`` (node specs -> node specs, or a function
    of the folder's files for byte-level damage); returns the path to read."""
    ranks = _base()
    if getattr(mutate, "on_files", False):
        _write(folder, ranks)
        mutate(folder)
    else:
        _write(folder, mutate(ranks))
    return folder


def on_files(fn):
    fn.on_files = True
    return fn


@on_files
def _truncate(folder):
    f = folder / "t.1.et"
    f.write_bytes(f.read_bytes()[:-3])


@on_files
def _text(folder):
    (folder / "t.1.et").write_bytes(b"\xff" * 12)


@on_files
def _garbage_message(folder):
    f = folder / "t.1.et"
    f.write_bytes(b"\x02\x0a\xff" + f.read_bytes())


@on_files
def _garbage_node(folder):
    f = folder / "t.1.et"
    f.write_bytes(f.read_bytes() + b"\x02\x0a\xff")


@on_files
def _no_metadata(folder):
    f = folder / "t.1.et"
    f.write_bytes(
        b"".join(encode_varint(len(b)) + b for _, b in list(split_stream(f.read_bytes()))[1:])
    )


@on_files
def _rank_gap(folder):
    (folder / "t.1.et").rename(folder / "t.2.et")


@on_files
def _two_traces(folder):
    (folder / "u.0.et").write_bytes((folder / "t.0.et").read_bytes())


@on_files
def _two_versions(folder):
    (folder / "t.1.et").write_bytes(_encode(_base()[1], version="9.9"))


@on_files
def _wire_type(folder):
    f = folder / "t.1.et"
    bad = b"\x0a\x03abc"  # field 1 (id, a varint) as a length-delimited value
    f.write_bytes(f.read_bytes() + encode_varint(len(bad)) + bad)


def _duplicate(ranks):
    ranks[1].append(dict(_node(ranks, 1, 21)))
    return ranks


def _deadlock(ranks):
    _node(ranks, 0, 11)["data_deps"] = [12]  # rank 0 sends after the all-reduce,
    _node(ranks, 0, 12)["data_deps"] = [10]  # which waits for rank 1, which waits for it
    return ranks


BAD = {
    "truncated message": (_truncate, "stream", "t.1.et rank 1", "after node 21"),
    "not a length prefix": (_text, "stream", "t.1.et rank 1", "byte 0"),
    "not a protobuf message": (_garbage_message, "GlobalMetadata", "t.1.et rank 1", "byte 0"),
    "a node not a protobuf message": (_garbage_node, "Node", "t.1.et rank 1", "after node 22"),
    "no GlobalMetadata": (_no_metadata, "GlobalMetadata", "t.1.et rank 1", "byte 0"),
    "a rank missing": (_rank_gap, "ranks", "t.1.et", "missing"),
    "two traces in a folder": (_two_traces, "trace", "t.0.et", "u.0.et"),
    "two schema versions": (_two_versions, "GlobalMetadata", "t.0.et", "t.1.et"),
    "wrong wire type": (_wire_type, "Node", "t.1.et rank 1", "node 0"),
    "duplicate node id": (_duplicate, "id", "t.1.et rank 1", "node 21"),
    "dependency on a missing node": (
        _edit(1, 22, data_deps=[99]),
        "data_deps",
        "t.1.et rank 1",
        "node 22",
    ),
    "control dependency on a missing node": (
        _edit(1, 21, ctrl_deps=[98]),
        "ctrl_deps",
        "t.1.et rank 1",
        "node 21",
    ),
    "dependency cycle": (_edit(1, 20, data_deps=[21]), "data_deps", "t.1.et rank 1", "cycle"),
    "deadlock across ranks": (_deadlock, "data_deps", "rank 0", "deadlock"),
    "send without receive": (_drop(1, 20), "comm_dst", "t.0.et rank 0", "node 11"),
    "receive without send": (
        _edit(0, 11, attr={"comm_tag": ("int32_val", 4)}),
        "comm_src",
        "t.1.et rank 1",
        "node 20",
    ),
    "message sizes differ": (
        _edit(1, 20, attr={"comm_size": ("int64_val", 999)}),
        "comm_size",
        "t.1.et rank 1",
        "node 20",
    ),
    "send to itself": (
        _edit(0, 11, attr={"comm_dst": ("int32_val", 0)}),
        "comm_dst",
        "t.0.et rank 0",
        "node 11",
    ),
    "peer out of range": (
        _edit(0, 11, attr={"comm_dst": ("int32_val", 5)}),
        "comm_dst",
        "t.0.et rank 0",
        "node 11",
    ),
    "unknown collective": (
        _edit(1, 22, attr={"comm_type": ("int64_val", 42)}),
        "comm_type",
        "t.1.et rank 1",
        "node 22",
    ),
    "collective without comm_type": (
        _edit(1, 22, attr={"comm_type": None}),
        "comm_type",
        "t.1.et rank 1",
        "node 22",
    ),
    "ranks disagree on the collective": (
        _edit(1, 22, attr={"comm_type": ("int64_val", int(CollectiveCommType.ALL_GATHER))}),
        "comm_type",
        "t.1.et rank 1",
        "node 22",
    ),
    "ranks disagree on its size": (
        _edit(1, 22, attr={"comm_size": ("int64_val", 1024)}),
        "comm_size",
        "t.1.et rank 1",
        "node 22",
    ),
    "collective missing on a rank": (_drop(1, 22), "pg_name", "t.0.et rank 0", "node 12"),
    "negative size": (
        _edit(0, 12, attr={"comm_size": ("int64_val", -5)}),
        "comm_size",
        "t.0.et rank 0",
        "node 12",
    ),
    "absurd size": (
        _edit(0, 12, attr={"comm_size": ("int64_val", 1 << 60)}),
        "comm_size",
        "t.0.et rank 0",
        "node 12",
    ),
    "size not an integer": (
        _edit(0, 12, attr={"comm_size": ("string_val", "4096")}),
        "comm_size",
        "t.0.et rank 0",
        "node 12",
    ),
    "absurd duration": (
        _edit(0, 10, duration_micros=10**13),
        "duration_micros",
        "t.0.et rank 0",
        "node 10",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_trace_names_field_file_rank_and_node(case, tmp_path):
    mutate, field, *named = BAD[case]
    folder = _files(tmp_path, mutate)
    with pytest.raises(FormatError) as exc:
        read_trace(folder)
    assert exc.value.field == field, str(exc.value)
    text = str(exc.value)
    assert "\n" not in text
    for part in named:
        assert part in text, text


def test_one_rank_file_of_a_collective_trace_is_refused(tmp_path):
    """Rank 0's file alone of astra-sim's 8-rank all-reduce: the missing ranks are named,
    not read as a one-rank job that moves nothing."""
    src = DATA / "chakra" / "all_reduce" / "8npus_1MB"
    first = next(f for f in src.glob("*.et") if f.name.endswith(".0.et"))
    shutil.copy(first, tmp_path / first.name)
    with pytest.raises(FormatError, match="other ranks' files are missing") as exc:
        read_trace(tmp_path)
    assert exc.value.field == "ranks"


def test_the_base_of_the_bad_table_is_good(tmp_path):
    assert read_trace(_files(tmp_path, lambda ranks: ranks)).n_ranks == 2


# -- the stream -----------------------------------------------------------------------------------
@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trip(value):
    code = encode_varint(value)
    assert decode_varint(code, 0) == (value, len(code))
    assert len(code) == max(1, -(-value.bit_length() // 7))
    assert all(b >= 0x80 for b in code[:-1]) and code[-1] < 0x80


NODES = st.builds(
    Node,
    id=st.integers(0, 2**64 - 1),
    name=st.text(max_size=20),
    type=st.sampled_from(list(NodeType)),
    data_deps=st.lists(st.integers(0, 2**64 - 1), max_size=5),
    duration_micros=st.integers(0, 2**40),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(NODES, max_size=8), st.data())
def test_stream_round_trip_and_prefixes(nodes, data):
    """Encoded messages split back into the same messages; a prefix of the stream splits
    into a prefix of them, or raises StreamError at the message it cuts."""
    msgs = [GlobalMetadata(version="0.0.4"), *nodes]
    stream = encode_stream(msgs)
    bodies = [body for _, body in split_stream(stream)]
    assert bodies == [m.SerializeToString() for m in msgs]
    assert [Node.FromString(b) for b in bodies[1:]] == nodes
    cut = data.draw(st.integers(0, len(stream)))
    try:
        head = [body for _, body in split_stream(stream[:cut])]
    except StreamError as exc:
        assert exc.offset < cut
    else:
        assert head == bodies[: len(head)]
        assert sum(len(encode_varint(len(b))) + len(b) for b in head) == cut


@pytest.mark.parametrize("case", ["dp_only", "pp_dp_sends_first"])
def test_astra_inputs_run_by_our_engine_agree_with_astra_sim(case):
    """The traces astra-sim ran (``tests/data/astra``), read here and run by the fabric's task
    engine GPU by GPU on the same pair mesh (400 Gb/s, 5 us), end within 1e-6 of astra-sim's
    iteration, as the DAGs they were written from (tests/fabric/test_peers_pinned.py)."""
    import json

    from trainfabric.fabric.iteration import run as I
    from trainfabric.workloads.dag import gpu_transfers

    entry = json.loads((ASTRA / "astra.json").read_text())["jobs"][case]
    name, dag, _ = load_chakra(ASTRA / case, latency_s=L)
    loaded = I.LoadedJob(name, dag, gpu_transfers(dag, 1), None, ())
    hosts = I.JobOnHosts(loaded, np.arange(dag.n_pods), channels=1)
    mesh = I.pair_mesh(dag.n_pods, 1, RATE, L)
    ours = I.run_iteration(hosts, mesh, "ecmp", header_bytes=0).iteration_s
    assert abs(ours / entry["iteration_s_astra"] - 1) <= 1e-6
