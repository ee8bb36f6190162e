"""SimAI / AICB workload files: the shipped files' counts against an independent re-count,
units as SimAI's source defines them, the DAG against closed forms and the file's bytes,
every malformed file named by file, line and field, and read-back of generated files."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError, FormatError
from trainfabric.limits import memory_limit
from trainfabric.workloads.attribution import asap_times
from trainfabric.workloads.dag import COMM, COMPUTE
from trainfabric.workloads.simai import (
    COMM_TYPES,
    SimaiLayer,
    SimaiPass,
    collective,
    dp_gradient_bytes,
    is_simai_file,
    load_simai,
    read_simai,
    simai_counts,
    simai_dag,
)

DATA = Path(__file__).parent.parent / "data" / "simai"
FILES = sorted(DATA.glob("*.txt"))
COMM_WORDS = ["NONE", *COMM_TYPES]


def recount(path: Path) -> dict[str, int]:
    """An independent count from the raw text (not the reader): tokens 3, 6, 9 (0-based) of
    each layer line are the compute times, 4, 7, 10 the types and 5, 8, 11 the sizes."""
    rows = [line.split() for line in path.read_text().splitlines()[2:] if line.strip()]
    comm = [(r[k], int(r[k + 1])) for r in rows for k in (3, 6, 9) if r[k] != "NONE"]
    return {
        "collectives": len(comm),
        "collective_bytes": sum(b for _, b in comm),
        "compute_nodes": sum(int(r[k]) > 0 for r in rows for k in (2, 5, 8)),
    }


# Read by hand from the headers and checked with
#   awk 'NR>2 {for (k=3;k<=9;k+=3) if ($(k+1)!="NONE") {c++; b+=$(k+2)}} END {print c, b}'
# p2p: 2 (pp-1) ga tp dp sends of pp_comm bytes (simai_counts).
SHIPPED = {
    "gpt7b-64gpu-tp8": dict(ranks=64, collectives=1051, collective_bytes=25_195_798_544,
                            p2p_messages=0, p2p_bytes=0, compute_nodes=3153),
    "gpt13b-128gpu-tp8-pp2": dict(ranks=128, collectives=1323, collective_bytes=40_127_143_952,
                                  p2p_messages=2 * 1 * 16 * 8 * 8,
                                  p2p_bytes=2 * 1 * 16 * 8 * 8 * 2_621_440, compute_nodes=3993),
    "moe-9216gpu-ep16-pp12-tp2": dict(ranks=9216, collectives=3540,
                                      collective_bytes=349_722_230_800,
                                      p2p_messages=2 * 11 * 24 * 2 * 384,
                                      p2p_bytes=2 * 11 * 24 * 2 * 384 * 50_331_648,
                                      compute_nodes=5346),
}  # fmt: skip
BLOCKS = {  # (first micro-batch line, lines per micro-batch), 0-based among the layer lines
    "gpt7b-64gpu-tp8": (3, 131),
    "gpt13b-128gpu-tp8-pp2": (3, 83),
    "moe-9216gpu-ep16-pp12-tp2": (6, 74),
}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_shipped_files_counts(path):
    w = read_simai(path)
    counts = simai_counts(w)
    assert counts == SHIPPED[path.stem]
    assert {k: counts[k] for k in recount(path)} == recount(path)
    assert (w.first_block, w.block_lines) == BLOCKS[path.stem]
    assert is_simai_file(path)


def test_units_as_simai_defines_them():
    """Compute times are Ticks of CLOCK_PERIOD = 1 ns (Common.hh:17-20), sizes bytes; the
    MoE file's attention line (line 10) reads 1750840 ticks forward, 875420 input-gradient."""
    w = read_simai(DATA / "moe-9216gpu-ep16-pp12-tp2.txt")
    assert (w.tp, w.ep, w.pp, w.vpp, w.ga, w.all_gpus) == (2, 16, 12, 8, 24, 9216)
    assert w.dp == 9216 // (2 * 12) == 384
    assert w.pp_comm_bytes == 50_331_648  # written "pp_comm 50331648", without the colon
    att = w.layers[10 - 3]
    assert att.name == "attention_column"
    assert att.fwd == SimaiPass(1750840 / 1e9, "ALLGATHER", 50_331_648)
    assert att.ig == SimaiPass(875420 / 1e9, "REDUCESCATTER", 0)
    assert att.update_s == 100e-9 and att.reserved == -1
    assert att.fwd.compute_s == pytest.approx(1.75084e-3, rel=1e-15)
    # groups: bare = TP in fwd/ig and DP in wg; _EP, _DP_EP (Workload.cc:1320-1491)
    assert collective("fwd", "ALLGATHER") == ("all_gather", "tp")
    assert collective("ig", "ALLTOALL_EP") == ("all_to_all", "ep")
    assert collective("wg", "REDUCESCATTER") == ("reduce_scatter", "dp")
    assert collective("wg", "ALLGATHER_DP_EP") == ("all_gather", "dp_ep")
    assert collective("fwd", "NONE") is None
    # DP gradients of one replica: tp pp (S_dp + ep S_ep) of the reducing wg entries
    assert dp_gradient_bytes(w) == 24 * (5_615_517_696 + 16 * 38_654_705_664)
    assert dp_gradient_bytes(read_simai(DATA / "gpt7b-64gpu-tp8.txt")) == 8 * 3_058_696_192


@pytest.fixture(scope="module")
def gpt13b():
    return read_simai(DATA / "gpt13b-128gpu-tp8-pp2.txt")


def phase_bytes(dag) -> dict[str, float]:
    """Bytes per phase kind: its comm nodes' plus its intra-pod bytes."""
    out: dict[str, float] = {}
    comm = dag.kind == COMM
    per_phase = np.bincount(dag.phase[comm], weights=dag.bytes[comm], minlength=len(dag.phases))
    for ph, b in zip(dag.phases, per_phase, strict=True):
        out[ph.kind] = out.get(ph.kind, 0.0) + b + ph.intra_pod_bytes
    return out


def test_shipped_gpt13b_dag_carries_the_files_bytes(gpt13b):
    name, dag, counts, grad = load_simai(DATA / "gpt13b-128gpu-tp8-pp2.txt")
    assert name == "gpt13b-128gpu-tp8-pp2" and counts == simai_counts(gpt13b)
    assert grad == dp_gradient_bytes(gpt13b) == 16 * 3_142_615_040
    assert dag.n_pods == 16 and dag.gpu is not None
    got = phase_bytes(dag)
    # the only DP entry with bytes: grad_norm's wg reduce-scatter, 8-rank rings on 128 GPUs
    assert got["dp_reduce_scatter"] == pytest.approx(128 * 7 / 8 * 3_142_615_040, rel=1e-12)
    assert got["pp_fwd"] + got["pp_bwd"] == pytest.approx(counts["p2p_bytes"], rel=1e-12)
    # TP (8 GPUs = one pod) never leaves a pod: all-gathers, reduce-scatters, all-reduces
    tp = sum(
        128 * (2 if op == "all_reduce" else 1) * 7 / 8 * p.comm_bytes
        for layer in gpt13b.layers
        for name_, p in layer.passes()
        if (c := collective(name_, p.comm_type)) and c[1] == "tp"
        for op in [c[0]]
    )
    assert got["intra_pod"] == pytest.approx(tp, rel=1e-12)
    assert set(got) == {"dp_reduce_scatter", "pp_fwd", "pp_bwd", "intra_pod"}


def test_shipped_gpt7b_dag_is_its_dp_ring(tmp_path):
    """GPT-7B: one stage, placeholder compute; at rate R per pod pair the iteration is the
    grad_norm reduce-scatter: 7 ring steps of one 8-GPU pod's 8 x S/8 bytes."""
    w = read_simai(DATA / "gpt7b-64gpu-tp8.txt")
    dag = simai_dag(w, gpus_per_pod=8, latency_s=0.0)
    rate = 3.2e12
    compute = dag.compute_time()
    assert compute == pytest.approx(counts_compute_s(w), rel=1e-12)
    assert dag.critical_path_at(rate) == pytest.approx(
        compute + 7 * 8 * 3_058_696_192 / rate, rel=1e-12
    )


def counts_compute_s(w) -> float:
    """Sum of all compute times (one stage: the chain runs every line once)."""
    return sum(p.compute_s for layer in w.layers for _, p in layer.passes())


@pytest.mark.slow
def test_shipped_moe_dag_builds_and_carries_the_files_bytes():
    """The 9,216-GPU file at 8 GPUs per pod: ~4.6 M nodes, ~10 s, ~2 GB."""
    w = read_simai(DATA / "moe-9216gpu-ep16-pp12-tp2.txt")
    dag = simai_dag(w)
    assert dag.n_pods == 1152
    got = phase_bytes(dag)
    assert got["pp_fwd"] + got["pp_bwd"] == pytest.approx(simai_counts(w)["p2p_bytes"])
    want = expected_bytes(w)
    kinds = ("dp_reduce_scatter", "dp_all_gather", "moe_all_to_all", "dp_expert_all_gather")
    for kind in (*kinds, "dp_expert_reduce_scatter"):
        assert got[kind] == pytest.approx(want[kind], rel=1e-9), kind


# -- small files ---------------------------------------------------------------------------

HEAD = (
    "grad_norm",
    -1,
    7000,
    "ALLGATHER",
    4096,
    11000,
    "NONE",
    0,
    13000,
    "REDUCESCATTER",
    1_000_000,
    100,
)
BLOCK = [
    ("attn", -1, 1000, "ALLREDUCE", 4096, 2000, "NONE", 0, 3000, "NONE", 0, 100),
    ("mlp", -1, 1500, "ALLGATHER", 8192, 2500, "REDUCESCATTER", 8192, 3500, "NONE", 0, 100),
]
TAIL = [("optimizer1", -1, 500, "ALLREDUCE", 4, 0, "NONE", 0, 0, "NONE", 0, 100)]
MOE = [
    ("moe_grad_norm1", -1, 1, "NONE", 0, 1, "NONE", 0, 1, "ALLGATHER_DP_EP", 30_000, 100),
    ("moe_grad_norm2", -1, 1, "NONE", 0, 1, "NONE", 0, 1, "REDUCESCATTER_DP_EP", 60_000, 100),
]
EXPERT = [("mlp_moe", -1, 900, "ALLTOALL_EP", 40_000, 800, "ALLTOALL_EP", 40_000, 1, "NONE", 0,
           100)]  # fmt: skip


def header(tp=2, ep=1, pp=2, vpp=2, ga=3, all_gpus=8, pp_comm=1000, sep=": ") -> str:
    return (
        f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} "
        f"vpp: {vpp} ga: {ga} all_gpus: {all_gpus} checkpoints: 0 checkpoint_initiates: 0 "
        f"pp_comm{sep}{pp_comm}"
    )


def text(head: str, rows) -> str:
    body = "\n".join("\t".join(map(str, r)) for r in rows)
    return f"{head}\n{len(rows)}\n{body}\n"


def job(pre=(HEAD,), block=BLOCK, tail=TAIL, ga=3, **kw) -> str:
    return text(header(ga=ga, **kw), [*pre, *list(block) * ga, *tail])


def write(tmp_path, content: str, name="job.txt") -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("pp", "ga", "gpus_per_pod"), [(1, 3, 2), (2, 3, 2), (3, 4, 1), (2, 1, 4)])
def test_compute_only_time_is_the_pipeline_closed_form(tmp_path, kind, pp, ga, gpus_per_pod):
    """With free communication: H_f + (G + P - 1)(F + B) + T_t + H_b (module doc), ns:
    H_f = 7000, F = 1000 + 1500, B = 2000 + 3000 + 2500 + 3500, T_t = 500, H_b = 11000 + 13000.
    ``gpus_per_pod = 1`` puts the TP collectives on the inter-pod network (no change)."""
    w = read_simai(
        write(tmp_path, job(ga=ga, pp=pp, all_gpus=2 * pp * 2, pp_comm=1000 if pp > 1 else 0))
    )
    dag = simai_dag(w, gpus_per_pod=gpus_per_pod, latency_s=0.0, schedule_kind=kind)
    want = (7000 + (ga + pp - 1) * (2500 + 11000) + 500 + 24000) * 1e-9
    if ga == 1:  # one micro-batch: the whole file, preamble and tail included
        want = pp * ((7000 + 2500 + 500) + (11000 + 24000)) * 1e-9  # P (F' + B')
    assert dag.compute_time() == pytest.approx(want, rel=1e-12)
    assert set(dag.pod[dag.kind == COMPUTE].tolist()) == set(range(dag.n_pods))  # all compute


def expected_bytes(w) -> dict[str, float]:
    """Bytes each phase kind must carry: every rank sends 2(n-1)/n S (all-reduce) or
    (n-1)/n S (the others) per entry, n the group's ranks."""
    sizes = {"tp": w.tp, "dp": w.dp, "ep": w.ep, "dp_ep": w.dp // w.ep}
    prefix = {"tp": "tp", "dp": "dp", "ep": "moe", "dp_ep": "dp_expert"}
    out: dict[str, float] = {}
    for layer in w.layers:
        for pass_name, p in layer.passes():
            found = collective(pass_name, p.comm_type)
            if found is None:
                continue
            op, group = found
            n = sizes[group]
            sent = w.all_gpus * (2 if op == "all_reduce" else 1) * (n - 1) / n * p.comm_bytes
            kind = f"{prefix[group]}_{op}"
            out[kind] = out.get(kind, 0.0) + sent
    return out


@pytest.mark.parametrize("gpus_per_pod", [1, 2, 4, 8, 16])
def test_dag_carries_every_byte_the_file_states(tmp_path, gpus_per_pod):
    """tp 2, ep 2, pp 2, dp 4 on 16 GPUs: the DAG's bytes (inter-pod + intra-pod, every
    phase) equal the file's collectives and PP sends, however the pods cut the groups."""
    content = job(pre=(HEAD, *MOE), block=[*BLOCK, *EXPERT], ep=2, all_gpus=16)
    w = read_simai(write(tmp_path, content))
    dag = simai_dag(w, gpus_per_pod=gpus_per_pod)
    got, want = phase_bytes(dag), expected_bytes(w)
    total = sum(want.values()) + simai_counts(w)["p2p_bytes"]
    assert sum(got.values()) == pytest.approx(total, rel=1e-12)
    if gpus_per_pod == 2:  # a pod is one TP group: TP stays inside, the rest crosses
        for kind in ("dp_reduce_scatter", "dp_expert_all_gather", "moe_all_to_all"):
            assert got[kind] == pytest.approx(want[kind], rel=1e-12), kind
        assert got["intra_pod"] == pytest.approx(
            sum(v for k, v in want.items() if k.startswith("tp_")), rel=1e-12
        )
    shares = np.add.reduceat(dag.gpu.share, dag.gpu.indptr[:-1]) if dag.gpu.n_patterns else []
    np.testing.assert_allclose(shares, 1.0)


def test_dp_gradients_follow_the_last_backward(tmp_path):
    """The preamble's wg reduce-scatter, not waited for (Workload.cc:842-843), is issued
    after its line's weight-gradient compute, the last compute of the iteration: at any
    rate, every compute has finished when its first comm node starts."""
    w = read_simai(write(tmp_path, job(pp=1, all_gpus=4, pp_comm=0)))
    dag = simai_dag(w, gpus_per_pod=2)
    start, finish = asap_times(dag, dag.durations(1e11))
    comm = dag.kind == COMM
    assert {dag.phases[k].kind for k in dag.phase[comm]} == {"dp_reduce_scatter"}
    assert start[comm].min() == pytest.approx(finish[dag.kind == COMPUTE].max(), rel=1e-12)
    assert finish.max() > start[comm].min()


def test_size_guard_refuses_before_building(tmp_path):
    w = read_simai(DATA / "moe-9216gpu-ep16-pp12-tp2.txt")
    with memory_limit(0.5), pytest.raises(ConfigError) as exc:
        simai_dag(w)
    assert exc.value.field == "gpus_per_pod" and "moe-9216gpu-ep16-pp12-tp2" in str(exc.value)
    for bad in (0, 5, 1 << 16):  # 9216 = 2^10 x 9: 5 does not divide it
        with pytest.raises(ConfigError, match="gpus_per_pod"):
            simai_dag(w, gpus_per_pod=bad)
    with pytest.raises(ConfigError, match="schedule"):
        simai_dag(w, schedule_kind="interleaved")


# -- bad files -----------------------------------------------------------------------------

GOOD = job()
GOOD_LINES = GOOD.split("\n")


def edit(line: int, new: str) -> str:
    """GOOD with 1-based ``line`` replaced."""
    lines = list(GOOD_LINES)
    lines[line - 1] = new
    return "\n".join(lines)


def edit_token(line: int, k: int, new: str) -> str:
    tokens = GOOD_LINES[line - 1].split("\t")
    tokens[k] = new
    return edit(line, "\t".join(tokens))


N = len(GOOD_LINES) - 3  # layer lines
BAD = [
    ("", 1, "header missing"),
    (GOOD.replace("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_DLRM"), 1, "policy 'HYBRID_DLRM'"),
    (edit(1, header().replace("ga: 3 ", "")), 1, "ga missing"),
    (edit(1, header(ga=0)), 1, "ga '0' must be >= 1"),
    (edit(1, header(tp="x")), 1, "model_parallel_NPU_group 'x' is not an integer"),
    (edit(1, header() + " sp: 1"), 1, "header field 'sp:'"),
    (edit(1, header() + " ga: 3"), 1, "ga given twice"),
    (edit(1, header() + " extra"), 1, "header field 'extra'"),
    (edit(1, header().replace("ga:", "ga")), 1, "header field 'ga' needs its colon"),
    (edit(1, header().replace(" 1000", "")), 1, "pp_comm has no value"),
    (edit(1, header(all_gpus=10)), 1, "all_gpus 10 is not a multiple"),
    (edit(1, header(ep=2, all_gpus=12)), 1, "ep 2 does not divide"),
    (edit(1, header(pp_comm=0)), 1, "pp_comm 0 with pp 2"),
    (edit(1, header(pp=1, all_gpus=4)), 1, "pp_comm 1000 with pp 1"),
    (edit(1, header(pp_comm="1000.5")), 1, "pp_comm '1000.5' is not an integer"),
    (edit(1, header().replace("checkpoints: 0", "checkpoints: 2 3 4")), 1, "checkpoints 2"),
    (GOOD_LINES[0] + "\n", 2, "layer count missing"),
    (edit(2, "9a"), 2, "layer count '9a' is not an integer"),
    (edit(2, "0"), 2, "layer count '0' must be >= 1"),
    (edit(2, "9 10"), 2, "layer count must be one integer"),
    (edit(2, str(N + 1)), N + 3, "layer count: line 2 announces"),
    (edit(2, str(N - 1)), N + 2, "layer count: line 2 announces"),
    ("\n".join(GOOD_LINES[:-3]), N + 1, "the file ends after"),
    (edit(5, "\t".join(GOOD_LINES[4].split("\t")[:11])), 5, "wg_update_time missing"),
    (edit(5, "\t".join(GOOD_LINES[4].split("\t")[:4])), 5, "fwd_comm_bytes missing"),
    (edit(5, GOOD_LINES[4] + "\t7"), 5, "wg_update_time is followed by 1 more"),
    (edit(5, ""), 5, "name missing"),
    (edit_token(5, 1, "x"), 5, "reserved 'x'"),
    (edit_token(5, 2, "abc"), 5, "fwd_compute_time 'abc' is not an integer"),
    (edit_token(5, 2, "1.5"), 5, "fwd_compute_time '1.5' is not an integer"),
    (edit_token(5, 2, "-3"), 5, "fwd_compute_time '-3' is negative"),
    (edit_token(5, 4, "-5"), 5, "fwd_comm_bytes '-5' is negative"),
    (edit_token(5, 10, "1" * 20), 5, "wg_comm_bytes '11111111111111111111' is over the bound"),
    (edit_token(5, 3, "ALLREDUCEX"), 5, "fwd_comm_type 'ALLREDUCEX' is not a SimAI"),
    (edit_token(5, 6, "ALLREDUCEALLTOALL"), 5, "all-reduce of no group"),
    (edit_token(5, 9, "allreduce"), 5, "wg_comm_type 'allreduce'"),
    (edit_token(5, 11, "1e2"), 5, "wg_update_time '1e2' is not an integer"),
    (edit_token(6, 0, "other"), 1, "ga 3: the 8 layer lines hold no 3 consecutive blocks"),
]


@pytest.mark.parametrize(("content", "line", "message"), BAD, ids=[b[2] for b in BAD])
def test_bad_file_names_file_line_and_field(tmp_path, content, line, message):
    path = write(tmp_path, content, "gpt7b.txt")
    with pytest.raises(FormatError) as exc:
        read_simai(path)
    assert exc.value.field == f"gpt7b.txt line {line}"
    assert message in exc.value.message
    assert "\n" not in str(exc.value)


def test_good_variants_and_unreadable_files(tmp_path):
    # pp_comm without its colon (the 9,216-GPU example) or as a whole Python float (AICB)
    for head in (header(sep=" "), header(pp_comm="1000.0")):
        assert (
            read_simai(write(tmp_path, text(head, [HEAD, *BLOCK * 3, *TAIL]))).pp_comm_bytes == 1000
        )
    crlf = read_simai(write(tmp_path, GOOD.replace("\n", "\r\n") + "\n\n"))
    assert crlf == read_simai(write(tmp_path, GOOD))
    for path, what in (
        (tmp_path / "missing.txt", "file not found"),
        (tmp_path, "is a directory"),
        (tmp_path / "latin1.txt", "not a UTF-8 text file"),
    ):
        if path.name == "latin1.txt":
            path.write_bytes(GOOD.replace("attn", "attn\xe9").encode("latin-1"))
        with pytest.raises(ConfigError, match=what) as exc:
            read_simai(path)
        assert exc.value.field == "workload" and not isinstance(exc.value, FormatError)
    assert not is_simai_file(tmp_path / "missing.txt")
    assert not is_simai_file(write(tmp_path, "HYBRID_TRANSFORMER_FWD_IN_BCKWDX 1", "x.txt"))


# -- generated files read back -------------------------------------------------------------

ticks = st.integers(0, 10**12)
row_values = st.tuples(
    st.integers(-5, 5),
    *(st.tuples(ticks, st.sampled_from(COMM_WORDS), st.integers(0, 10**15)) for _ in range(3)),
    ticks,
)


@st.composite
def simai_files(draw):
    tp, pp, ep = draw(st.sampled_from([1, 2, 4])), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    dp = ep * draw(st.integers(1, 3))
    ga = draw(st.integers(1, 4))
    block_names = draw(
        st.lists(st.sampled_from(["attention_column", "mlp_row", "moe"]), min_size=1, max_size=4)
    )
    n_pre, n_tail = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    names = (
        [f"pre{i}" for i in range(n_pre)] + block_names * ga + [f"tail{i}" for i in range(n_tail)]
    )
    rows = [(name, *draw(row_values)) for name in names]
    pp_comm = draw(st.integers(1, 10**9)) if pp > 1 else 0
    return dict(
        tp=tp,
        ep=ep,
        pp=pp,
        vpp=draw(st.integers(1, 99)),
        ga=ga,
        all_gpus=tp * pp * dp,
        pp_comm=pp_comm,
        rows=rows,
        blocks=(n_pre, len(block_names)) if ga > 1 else (0, len(names)),
    )


def as_text(f) -> str:
    head = header(**{k: f[k] for k in ("tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")})
    lines = [
        "\t".join(map(str, (name, res, *fwd, *ig, *wg, upd)))
        for name, res, fwd, ig, wg, upd in f["rows"]
    ]
    return f"{head}\n{len(lines)}\n" + "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None)
@given(simai_files())
def test_generated_files_read_back_equal(tmp_path_factory, f):
    path = write(tmp_path_factory.mktemp("gen"), as_text(f))
    w = read_simai(path)
    assert (w.tp, w.ep, w.pp, w.vpp, w.ga, w.all_gpus, w.pp_comm_bytes) == tuple(
        f[k] for k in ("tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
    )
    assert (w.first_block, w.block_lines) == f["blocks"]
    want = tuple(
        SimaiLayer(name, res, *(SimaiPass(t / 1e9, c, b) for t, c, b in (fwd, ig, wg)), upd / 1e9)
        for name, res, fwd, ig, wg, upd in f["rows"]
    )
    assert w.layers == want
    counts = simai_counts(w)
    assert {k: counts[k] for k in recount(path)} == recount(path)
    assert counts["p2p_messages"] == 2 * (f["pp"] - 1) * f["ga"] * f["all_gpus"] // f["pp"]


@pytest.mark.parametrize("text", ["", "garbage line\n", "HYBRID_TRANSFORMER\n"])
def test_a_txt_workload_that_is_not_simai_says_so(tmp_path, text):
    """A ``.txt`` workload without SimAI's first word: named as not a SimAI file, not as
    invalid JSON (the interchange formats)."""
    from trainfabric.workloads import load_workload

    path = tmp_path / "job.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match="not a SimAI workload file") as exc:
        load_workload(str(path))
    assert exc.value.field == "workload"
