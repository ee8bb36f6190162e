"""Side by side with SimAI's analytical mode: the SimAI / AICB workload files of
``tests/data/simai``, SimAI's per-part times against our pod-level DAG of the same file.

    python benchmarks/vs_simai.py SIMAI_DIR     # a SimAI checkout, analytical mode built

SimAI is built outside this repository: aliyun/SimAI at ``f5efb5a9`` (SimAI 1.6, the last
commit with the mock NCCL in-tree; later ones need the SimCCL submodule), ``./scripts/build.sh
-c analytical``, with one line changed: ``MockNcclLog.h``'s ``#define LOG_PATH`` from
``/etc/astra-sim/`` to a writable folder (the line as built is recorded, read from the
source). The commit is read with git when ``SIMAI_DIR`` is a checkout, else the one above is
recorded as stated. The binary runs from ``SIMAI_DIR`` (its NIC / NVLink ratio tables are
relative paths, ``calbusbw.h:22-24``) and writes ``results/<PREFIX>EndToEnd.csv`` there
(``-r PREFIX``; removed after reading). Without a build it says so and exits 0.

**Command and units.** ``SimAI_analytical -w FILE -g N -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5``.
``-nic`` (per NIC) and ``-nv`` (NVLink per GPU) are bus bandwidths in **GiB/s** (2^30 bytes
per second): a collective of ``S`` bytes takes ``S · GBps / busbw · 1e9 · f`` ns with
``GBps = 1 / (1024 · 1024 · 1024)`` (``Common.hh:19``, ``Layer.cc:1024-1031``), ``f = 2(n-1)/n``
for an all-reduce and ``(n-1)/n`` otherwise. (SimAI's result names print ``8 · nic`` as
"388.0G", as if it were GB/s; 48.5 GiB/s is 52.08 GB/s, 416.6 Gbit/s.) With 8 NICs and 8 GPUs
per server, a DP group of TP 8 gets one NIC per rank (``Layer.cc:997-1001``: busbw 48.5 GiB/s),
one of TP 2 four NICs per server for its four ranks there; DP and DP_EP use no ratio table
(``Layer.cc:934-935``). Ours therefore gives every pod pair ``8 × 48.5 GiB/s`` (one NIC per GPU).

**SimAI's parts** (the summary atop its EndToEnd.csv, microseconds, ``Layer.cc:725-761``):
every collective's time is exposed (overlap ratios 0 for DP, TP, EP), summed per kind over
the file's lines; ``total = compute + exposed comm + bubble + PP``; ``bubble = (P-1) / (G·V)
× Σ`` over the non-embedding lines of their forward / input-gradient compute and
communication and weight-gradient compute (``Layer.cc:594-596``, ``737``), ``V`` being AICB's
layers per stage; ``PP = 2·V·G·pp_comm · 2^-30 s · (1-r)/r`` with ``pp_overlap_ratio r = 1``
by default: 0 (``Layer.cc:734-735``; it uses no bandwidth). TP runs on NVLink (360 GiB/s, times
a measured ratio table); collectives under 1 MiB get fixed times (``Layer.cc:967-975``).

**Ours** (:func:`read_simai`, :func:`simai_dag` at 8 GPUs per pod, 1F1B and GPipe; GPipe only
where ``pp > 1``, being the same DAG otherwise), critical paths with every comm node lasting
``L + 8 B / rate`` (``L`` = 0 and 5 us, the latency ``simai_dag`` gives every comm node):
``total`` all timed; ``dp`` (``dp_ep``): only the DP (expert-DP) collectives timed, compute
and the rest free -- the FIFO chain of a stage's gradient collectives, the sum SimAI reports
(it never overlaps them; ours hides them behind backward compute where there is some);
``ep``, ``pp``: exposed, the critical path less the one with that kind free; ``compute``: one
pod's compute (the largest); ``bubble``: the compute-only critical path less ``compute``. TP
traffic stays inside the pod (the scale-up domain, untimed).

Compared: DP and DP_EP (same rings, bytes and per-GPU rate): ``dp_rel_diff``,
``dp_ep_rel_diff`` = ours / SimAI - 1; ``dp_rel_diff_max`` is the largest absolute of both over
the files at latency 0. Not compared (``note`` per file): TP, EP (SimAI's all-to-all formula
with ratio tables, ours one step at link rate), PP (hidden by SimAI), the bubble (formula).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import ROOT, emit, parser

from trainfabric.workloads.dag import COMM, COMPUTE, TaskDAG
from trainfabric.workloads.simai import read_simai, simai_dag

SIMAI_COMMIT = "f5efb5a9"
BINARY = "astra-sim-alibabacloud/build/simai_analytical/build/simai_analytical/SimAI_analytical"
LOG_HEADER = "astra-sim-alibabacloud/astra-sim/system/MockNcclLog.h"
DATA = ROOT / "tests" / "data" / "simai"
FILES = {
    "gpt7b": "gpt7b-64gpu-tp8.txt",
    "gpt13b": "gpt13b-128gpu-tp8-pp2.txt",
    "moe": "moe-9216gpu-ep16-pp12-tp2.txt",
}
GPUS_PER_SERVER, NICS_PER_SERVER, NVLINK_GIBPS, NIC_GIBPS = 8, 8, 360.0, 48.5
RATE_BPS = GPUS_PER_SERVER * NIC_GIBPS * 2**30 * 8  # one pod pair: one NIC per GPU
LATENCIES = (0.0, 5e-6)
PARTS = {  # SimAI's summary header -> our key
    "Expose DP comm": "dp",
    "Expose DP_EP comm": "dp_ep",
    "Expose TP comm": "tp",
    "Expose_EP_comm": "ep",
    "Expose_PP_comm": "pp",
    "bubble time": "bubble",
    "total comp": "compute",
    "total exposed comm": "exposed_comm",
    "Total time": "total",
}
NOTES = {
    "gpt7b": "TP (NVLink, SimAI's 'Expose TP comm') is not timed by ours (inside the pod); "
    "compute is 1 ns placeholders, so ours is its DP reduce-scatter chain",
    "gpt13b": "as gpt7b, plus the PP sends: ours times them at the NIC rate on the critical "
    "path, SimAI hides them (pp_overlap_ratio 1); its bubble is (P-1)/(G·V) of its TP time",
    "moe": "EP all-to-all: SimAI's formula with measured ratio tables vs ours at link rate; its "
    "bubble divides by V = 8 layers per stage, ours is 1F1B/GPipe's; ours overlaps the DP "
    "collectives with backward compute, SimAI sums them; PP hidden by SimAI",
}


def parse_summary(text: str) -> dict[str, float]:
    """SimAI's summary (the first two lines of its EndToEnd.csv) as ``{PARTS value: us}``."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError("SimAI summary: expected a header line and a values line")
    keys = [k.strip() for k in lines[0].split(",")]
    values = [v.strip() for v in lines[1].split(",")]
    row = dict(zip(keys, values, strict=True))
    missing = sorted(set(PARTS) - set(row))
    if missing:
        raise ValueError(f"SimAI summary: no column {missing}")
    return {PARTS[k]: float(row[k].split()[0]) for k in PARTS}  # "51393 (36.56%)"


def run_simai(simai: Path, path: Path, gpus: int) -> tuple[dict, str, float]:
    """SimAI_analytical on ``path``: (its parts in us, the command line, wall s)."""
    prefix = f"trainfabric-{path.stem}-"
    args = ["-w", str(path), "-g", str(gpus), "-g_p_s", str(GPUS_PER_SERVER)]
    args += ["-n_p_s", str(NICS_PER_SERVER), "-nv", f"{NVLINK_GIBPS:g}", "-nic", f"{NIC_GIBPS:g}"]
    (simai / "results").mkdir(exist_ok=True)
    out = simai / "results" / f"{prefix}EndToEnd.csv"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(simai / BINARY), *args, "-r", prefix],
        cwd=simai,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"SimAI exit {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    parts = parse_summary(out.read_text())
    out.unlink()
    command = " ".join(["SimAI_analytical", *args]).replace(str(path), path.name)
    return parts, command, wall


def _durations(dag: TaskDAG, timed: np.ndarray, latency_s: float, compute: bool) -> np.ndarray:
    """Node durations: comm nodes in ``timed`` at ``latency_s + 8 B / RATE_BPS``, other comm
    nodes free, compute as given (or free)."""
    t = np.where(dag.kind == COMPUTE, dag.duration_s, 0.0) if compute else np.zeros(dag.n_nodes)
    m = timed & (dag.kind == COMM)
    t[m] = latency_s + 8.0 * dag.bytes[m] / RATE_BPS
    return t


def our_parts(dag: TaskDAG, latency_s: float) -> dict[str, float]:
    """Our parts (module doc), us."""
    kinds = np.array([p.kind for p in dag.phases] + [""])
    node_kind = kinds[np.where(dag.kind == COMM, dag.phase, -1)]
    dp_ep = np.char.startswith(node_kind, "dp_expert_")
    dp = np.char.startswith(node_kind, "dp_") & ~dp_ep
    ep = np.char.startswith(node_kind, "moe_")
    pp = np.char.startswith(node_kind, "pp_")
    every, none = np.ones(dag.n_nodes, bool), np.zeros(dag.n_nodes, bool)

    def cp(timed, compute=True):
        return dag.critical_path(_durations(dag, timed, latency_s, compute))

    total = cp(every)
    is_comp = dag.kind == COMPUTE
    compute = np.bincount(dag.pod[is_comp], dag.duration_s[is_comp], dag.n_pods).max()
    parts = {
        "dp": cp(dp, compute=False),
        "dp_ep": cp(dp_ep, compute=False),
        "ep": total - cp(~ep),
        "pp": total - cp(~pp),
        "bubble": cp(none) - compute,
        "compute": compute,
        "total": total,
    }
    return {k: v * 1e6 for k, v in parts.items()}


def _rel(ours: float, theirs: float) -> float | None:
    return ours / theirs - 1 if theirs else None


def compare_file(simai: Path, key: str) -> tuple[dict, list[dict]]:
    path = DATA / FILES[key]
    w = read_simai(path)
    theirs, command, their_wall = run_simai(simai, path, w.all_gpus)
    rows = []
    t0 = time.perf_counter()
    for kind in ("1f1b", "gpipe") if w.pp > 1 else ("1f1b",):
        dag = simai_dag(w, GPUS_PER_SERVER, 0.0, kind)
        for lat in LATENCIES:
            ours = our_parts(dag, lat)
            rows.append(
                {
                    "file": key,
                    "schedule": kind,
                    "latency_us": lat * 1e6,
                    "ours_us": ours,
                    "dp_rel_diff": _rel(ours["dp"], theirs["dp"]),
                    "dp_ep_rel_diff": _rel(ours["dp_ep"], theirs["dp_ep"]),
                    "total_rel_diff": _rel(ours["total"], theirs["total"]),
                }
            )
        del dag
    info = {
        "file": FILES[key],
        "gpus": w.all_gpus,
        "tp": w.tp,
        "ep": w.ep,
        "pp": w.pp,
        "vpp": w.vpp,
        "ga": w.ga,
        "dp": w.dp,
        "command": command,
        "simai_us": theirs,
        "wall_s_simai": their_wall,
        "wall_s_ours": time.perf_counter() - t0,
        "note": NOTES[key],
    }
    return info, rows


def simai_build(simai: Path) -> dict:
    """The commit (git, else as stated) and the log-path line as built (the build folder
    written ``<SIMAI_DIR>``)."""
    git = subprocess.run(
        ["git", "-C", str(simai), "rev-parse", "--short=8", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    header = simai / LOG_HEADER
    lines = header.read_text().splitlines() if header.is_file() else []
    log_line = next((s.strip() for s in lines if s.strip().startswith("#define LOG_PATH")), None)
    if log_line is not None:  # the build's own folder is a machine path: named, not spelled
        log_line = log_line.replace(str(simai.resolve()), "<SIMAI_DIR>")
    return {
        "commit": git.stdout.strip() if git.returncode == 0 else SIMAI_COMMIT,
        "commit_from": "git" if git.returncode == 0 else "stated (no .git in the build)",
        "patch": f'MockNcclLog.h: #define LOG_PATH "/etc/astra-sim/" -> {log_line}',
        "binary": BINARY,
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("simai", type=Path, nargs="?", help="SimAI checkout, built (module doc)")
    args = p.parse_args()
    if args.simai is None or not (args.simai / BINARY).is_file():
        print(f"no SimAI build ({BINARY}) under {args.simai}: nothing compared", file=sys.stderr)
        return
    simai = args.simai.resolve()
    files, rows = {}, []
    for key in FILES:
        files[key], file_rows = compare_file(simai, key)
        rows += file_rows
    at_zero = [r for r in rows if r["latency_us"] == 0]
    diffs = [
        abs(r[k]) for r in at_zero for k in ("dp_rel_diff", "dp_ep_rel_diff") if r[k] is not None
    ]
    emit(
        "vs_simai",
        {
            "simai": simai_build(simai),
            "units": "us; -nic / -nv in GiB/s (2^30 B/s, Common.hh:19 GBps)",
            "nic_gibps": NIC_GIBPS,
            "nvlink_gibps": NVLINK_GIBPS,
            "pod_pair_rate_bps": RATE_BPS,
            "gpus_per_pod": GPUS_PER_SERVER,
            "files": files,
            "dp_rel_diff_max": max(diffs),
            "rows": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
