"""Side by side with astra-sim (analytical network backend, congestion aware): one GPT job's
iteration, DP only and PP x DP, on links both simulators express.

    python benchmarks/vs_astra.py ASTRA_DIR     # an astra-sim checkout built as below

astra-sim is built outside this repository (never copied here): clone astra-sim/astra-sim with
its submodules (chakra, astra-network-analytical, fmt, spdlog, yaml-cpp), then
``bash build/astra_analytical/build.sh -t congestion_aware`` (needs ``protoc``: Debian's
``protobuf-compiler``, ``libprotobuf-dev``). Measured at astra-sim f242411 with the submodule
commits it pins (spdlog, its logging library, at a later snapshot); the output records the
commits. This script writes astra-sim's inputs with our Chakra writer
(:func:`trainfabric.workloads.chakra.write_trace`, on the project's own schema; its node
messages are byte for byte those that chakra's generated ``et_def_pb2`` and ``protolib``
wrote for the captures in ``tests/data/astra``), runs its
``AstraSim_Analytical_Congestion_Aware`` binary and reads its stdout. Without a build it says
so and exits 0.

**The configuration both express.** Every GPU is a server of its own (``gpus_per_pod = 1``,
TP 1), and every directed GPU pair has its own link of ``RATE_BPS`` and ``latency_s`` (the
job's, 5 us): astra-sim's ``FullyConnected`` topology, our :func:`pair_mesh` with no packet
headers. The collective is a ring over the DP group, in one chunk (``preferred-dataset-splits
= 1``, one active chunk), with no local reduction time and an endpoint delay of 1 ns (the
least its event queue accepts: it refuses an event at the current time); a PP activation is a
send / receive pair. One chunk of a ring step of ``S / n`` bytes takes
``latency_s + 8 (S / n) / rate`` in both (astra-sim in whole nanoseconds).

**The same DAG.** Both sides run the DAG that :func:`build_dag` writes for the job, converted
node for node (:mod:`trainfabric.workloads.chakra.writer`): a compute node becomes a
``COMP_NODE`` on its GPU, the steps of one collective (one ``Phase.group``) one
``COMM_COLL_NODE`` on each of its ranks (with the group's process group), a PP comm node a
``COMM_SEND_NODE`` on its source and a ``COMM_RECV_NODE`` on its destination, tagged alike.
A dependency becomes an ET data dependency where both ends run on the same GPU; the rest (a
phase barrier that joins the DP replicas of one PP send, the previous ring step on the other
ranks) are carried by the messages themselves in astra-sim, and are counted in
``cross_gpu_edges_dropped``. Chakra stores compute times in whole microseconds, so both
sides get the DAG's compute times rounded to the microsecond.

**One difference of model.** astra-sim runs at most one send or collective at a time per GPU
(``HardwareResource``: receives excepted) and issues ready nodes in ID order, so a stage whose
last backward readies both its DP reduce-scatter and its last gradient send runs the
collective first and holds the send back until the all-gather ends; our engine runs both at
once (they use different links here, and share a NIC where they meet). The traces are
therefore also run ``sends_first`` (each collective waits for its GPU's PP sends, which
happen before the DP sync in these jobs anyway; the writer's option).

Reported per job: both iteration times, their relative difference, the DAG's critical path at
the link rate (which our pair mesh reproduces exactly, tests/fabric/test_iteration.py), and
each simulator's wall time; ``collectives_alone`` runs each collective kind by itself on 8
GPUs against the ring's closed form ``2 (n - 1) (L + 8 S / (n r))`` (all-reduce) and
``(n - 1) (L + 8 S / (n r))`` (reduce-scatter, all-gather).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import emit, parser

from trainfabric.fabric.iteration import run as I
from trainfabric.workloads.build import build_dag
from trainfabric.workloads.chakra.writer import WrittenTrace, write_trace
from trainfabric.workloads.dag import COMPUTE, TaskDAG, gpu_transfers
from trainfabric.workloads.job import Job
from trainfabric.workloads.ranks import RankProgram

RATE_BPS = 400e9
BINARY = "build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Aware"
CHAKRA = "extern/graph_frontend/chakra"
NETWORK = "extern/network_backend/analytical"
GPT = {"name": "gpt-1.3b", "layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048}
GPT |= {"vocab": 50304}
JOBS = {
    "dp_only": {"dp": 8, "micro_batches": 4},
    "pp_dp": {"pp": 4, "dp": 2, "micro_batches": 8, "schedule": "1f1b"},
}
SYSTEM = {
    "scheduling-policy": "FIFO",
    "endpoint-delay": 1,
    "local-reduction-delay": 0,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 1,
    "all-reduce-implementation": ["ring"],
    "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"],
    "all-to-all-implementation": ["ring"],
    "collective-optimization": "baseline",
    "roofline-enabled": 0,
}
_LAST_STDOUT: dict = {}  # the last astra-sim run's finish lines and command (for pin)
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def job(name: str) -> Job:
    """The GPT job of ``JOBS[name]``: one GPU per server, distributed optimiser (an fp32
    reduce-scatter and a bf16 all-gather of each stage's weights per DP group)."""
    par = JOBS[name]
    pods = par.get("pp", 1) * par["dp"]
    return Job.model_validate(
        {
            "name": name,
            "model": GPT,
            "parallelism": par,
            "placement": {"gpus_per_pod": 1, "pods": pods},
        }
    )


def rounded_dag(j: Job) -> TaskDAG:
    """The job's DAG (with GPU transfers) and its compute times rounded to whole microseconds."""
    dag = build_dag(j, 0, gpu_flows=True)
    us = np.where(dag.kind == COMPUTE, np.round(dag.duration_s * 1e6) / 1e6, dag.duration_s)
    return replace(dag, duration_s=us)


# -- runs -----------------------------------------------------------------------------------------
def network_yml(n_gpus: int, latency_s: float) -> str:
    """astra-sim's network configuration: ``FullyConnected``, ``RATE_BPS`` per link (its GB/s
    are 2^30 bytes, NetworkFunction.cpp), ``latency_s`` in ns."""
    gbps = RATE_BPS / 8 / 2**30
    return (
        f"topology: [ FullyConnected ]\nnpus_count: [ {n_gpus} ]\n"
        f"bandwidth: [ {gbps!r} ]\nlatency: [ {latency_s * 1e9!r} ]\n"
    )


def run_astra(
    astra: Path,
    folder: Path,
    n_gpus: int,
    latency_s: float,
    *,
    workload: Path | None = None,
    system: dict = SYSTEM,
) -> tuple[float, float]:
    """astra-sim on the traces ``workload`` (default ``folder/job``), its configs written into
    ``folder`` (with ``folder/groups.json`` where there is one): (iteration s = the last
    GPU's finish, wall s)."""
    net = folder / "network.yml"
    net.write_text(network_yml(n_gpus, latency_s))
    (folder / "system.json").write_text(json.dumps(system))
    (folder / "memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    groups = folder / "groups.json"
    cmd = [
        str(astra / BINARY),
        f"--workload-configuration={workload or folder / 'job'}",
        f"--system-configuration={folder / 'system.json'}",
        f"--remote-memory-configuration={folder / 'memory.json'}",
        f"--network-configuration={net}",
        *([f"--comm-group-configuration={groups}"] if groups.is_file() else []),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, check=False, cwd=folder
    )  # its log/ folder goes there
    wall = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    _LAST_STDOUT["text"] = "".join(m.group(0) + "\n" for m in FINISHED.finditer(text))
    _LAST_STDOUT["command"] = " ".join(
        [Path(BINARY).name, *(c.replace(str(folder) + "/", "") for c in cmd[1:])]
    )
    finished = {int(g): int(c) for g, c in FINISHED.findall(text)}
    if proc.returncode != 0 or len(finished) != n_gpus:
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(
            f"astra-sim exit {proc.returncode}, {len(finished)} of {n_gpus} GPUs finished:\n{tail}"
        )
    return max(finished.values()) * 1e-9, wall


def run_ours(j: Job, dag: TaskDAG) -> tuple[float, float]:
    """Our task engine on the pair mesh (no headers): (iteration s, wall s)."""
    return run_dag(j.name, dag, float(j.compute.latency_s), j)


def run_dag(
    name: str, dag: TaskDAG, latency_s: float, job: Job | None = None
) -> tuple[float, float]:
    """Our task engine on ``dag``, one GPU per pod, each pod a server of the pair mesh (no
    headers): (iteration s, wall s)."""
    t0 = time.perf_counter()
    loaded = I.LoadedJob(name, dag, gpu_transfers(dag, 1), job, ())
    mesh = I.pair_mesh(dag.n_pods, 1, RATE_BPS, latency_s)
    jh = I.JobOnHosts(loaded, np.arange(dag.n_pods), channels=1)
    run = I.run_iteration(jh, mesh, "ecmp", header_bytes=0)
    return run.iteration_s, time.perf_counter() - t0


def trace_counts(written: WrittenTrace) -> dict:
    """What :func:`write_trace` reports, under this benchmark's result keys."""
    return {
        "et_nodes": written.et_nodes,
        "deps_kept": written.deps_kept,
        "cross_gpu_edges_dropped": written.cross_rank_edges_dropped,
        "process_groups": written.process_groups,
    }


def compare_job(astra: Path, name: str, tmp: Path) -> dict:
    j = job(name)
    dag = rounded_dag(j)
    folder = tmp / name
    counts = trace_counts(write_trace(dag, folder, "job"))
    theirs, their_wall = run_astra(astra, folder, j.placement.pods, float(j.compute.latency_s))
    ordered = tmp / f"{name}_sends_first"
    write_trace(dag, ordered, "job", sends_first=True)
    theirs_ordered, _ = run_astra(astra, ordered, j.placement.pods, float(j.compute.latency_s))
    ours, our_wall = run_ours(j, dag)
    return {
        "gpus": j.placement.pods,
        "parallelism": JOBS[name],
        "dag_nodes": dag.n_nodes,
        **counts,
        "iteration_s_astra": theirs,
        "iteration_s_ours": ours,
        "rel_diff": (ours - theirs) / theirs,
        "iteration_s_astra_sends_first": theirs_ordered,
        "rel_diff_sends_first": (ours - theirs_ordered) / theirs_ordered,
        "dag_critical_path_s": dag.critical_path_at(RATE_BPS),
        "compute_only_s": dag.compute_time(),
        "wall_s_astra": their_wall,
        "wall_s_ours": our_wall,
    }


def collectives_alone(astra: Path, tmp: Path, n: int = 8, size: int = 256 << 20) -> dict:
    """Each ring collective alone on ``n`` GPUs against its closed form (module doc)."""
    lat = 5e-6
    rows = {}
    for op, steps in (
        ("all_reduce", 2 * (n - 1)),
        ("reduce_scatter", n - 1),
        ("all_gather", n - 1),
    ):
        prog = RankProgram(n, latency_s=lat)
        prog.collective(op, range(n), size, name=op)  # size: the ring moves size / n a step
        folder = tmp / op
        write_trace(prog.build(), folder, "job")
        theirs, _ = run_astra(astra, folder, n, lat)
        closed = steps * (lat + 8 * (size / n) / RATE_BPS)
        rows[op] = {"astra_s": theirs, "closed_form_s": closed, "rel_diff": theirs / closed - 1}
    return {"gpus": n, "bytes": size, **rows}


def astra_commits(astra: Path, more: dict[str, str] | None = None, short: bool = True) -> dict:
    """The commits of astra-sim, its chakra and its analytical backend (and ``more``: name ->
    submodule path), ``short`` or in full."""
    subs = {"astra-sim": ".", "chakra": CHAKRA, "analytical": NETWORK, **(more or {})}
    flag = ["--short"] if short else []
    return {
        name: subprocess.run(
            ["git", "-C", str(astra / sub), "rev-parse", *flag, "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        for name, sub in subs.items()
    }


PINNED = (("dp_only", False), ("pp_dp", True))  # (job, sends_first): agreeing to < 1e-6


def pin(astra: Path, out_dir: Path, commits: dict) -> dict:
    """Capture astra-sim on the pinned jobs into ``out_dir`` (``tests/data/astra/``): per job its
    inputs (one ``.et`` per GPU, ``groups.json``, ``network.yml``, ``system.json``,
    ``memory.json``), the lines of its stdout that :data:`FINISHED` reads (``astra.out``) and,
    in ``astra.json``, the commits, the build and the command line; checked against our task
    engine by ``tests/fabric/test_peers_pinned.py``."""
    import shutil

    out_dir = Path(out_dir).resolve()
    meta = {"commits": commits, "binary": BINARY, "build_type": "Release (-O3)", "jobs": {}}
    for name, sends_first in PINNED:
        j = job(name)
        dag = rounded_dag(j)
        case = f"{name}_sends_first" if sends_first else name
        folder = out_dir / case
        if folder.exists():
            shutil.rmtree(folder)
        written = write_trace(dag, folder, "job", sends_first=sends_first)
        theirs, _ = run_astra(astra, folder, j.placement.pods, float(j.compute.latency_s))
        (folder / "astra.out").write_text(_LAST_STDOUT["text"])
        for extra in ("log",):  # astra-sim's own log folder is not kept
            shutil.rmtree(folder / extra, ignore_errors=True)
        meta["jobs"][case] = {
            "job": name,
            "parallelism": JOBS[name],
            "sends_first": sends_first,
            "gpus": j.placement.pods,
            "items": written.items,
            **trace_counts(written),
            "iteration_s_astra": theirs,
            "command": _LAST_STDOUT["command"],
        }
    (out_dir / "astra.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("astra", type=Path, nargs="?", help="astra-sim checkout, built (module doc)")
    p.add_argument(
        "--pin", type=Path, default=None, help="capture the pinned jobs here (tests/data/astra)"
    )
    args = p.parse_args()
    if args.astra is None or not (args.astra / BINARY).is_file():
        print(
            f"no astra-sim build ({BINARY}) under {args.astra}: nothing compared", file=sys.stderr
        )
        return
    commits = astra_commits(args.astra)
    if args.pin is not None:
        subs = {
            "memory": "extern/remote_memory_backend/analytical",
            "fmt": "extern/helper/fmt",
            "spdlog": "extern/helper/spdlog",
            "yaml-cpp": f"{NETWORK}/extern/yaml-cpp",
        }
        pin(args.astra, args.pin, astra_commits(args.astra, subs, short=False))
        print(f"astra-sim outputs pinned under {args.pin}", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        alone = collectives_alone(args.astra, Path(tmp))
        jobs = {name: compare_job(args.astra, name, Path(tmp)) for name in JOBS}
    emit(
        "vs_astra",
        {
            "commits": commits,
            "rate_bps": RATE_BPS,
            "model": GPT,
            "collectives_alone": alone,
            "jobs": jobs,
            "max_abs_rel_diff": max(abs(r["rel_diff"]) for r in jobs.values()),
            "max_abs_rel_diff_sends_first": max(
                abs(r["rel_diff_sends_first"]) for r in jobs.values()
            ),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
