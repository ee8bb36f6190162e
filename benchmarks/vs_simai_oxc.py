"""Side by side with SimAI-OXC, SimAI's optical cross-connect frontend: the same SimAI
workload files through its flow generator and through our OCS planner.

    python benchmarks/vs_simai_oxc.py SIMAI_OXC_DIR    # a SimAI tree with SimAI_oxc built

**What SimAI-OXC is** (``astra-sim-alibabacloud/astra-sim/network_frontend/oxc``, aliyun/SimAI
pull request 217, head ``e9c3c6a7``, extended in pull request 291, head ``55d583ce``; neither
is merged into SimAI's master): a *flow generator*, not a simulator. It reads a SimAI workload
file and a RankTable (rank -> rack, from each rank's first ``net_instance_id``), builds the TP,
DP, EP and DP_EP groups as SimAI's mock NCCL does, and writes every collective as rank-level
flows ``(src, dst, size, step, depends_on)`` (``*_flows.csv``), the operations and a
"previous operation" chain (``*_deps.json``) and counts (``*_summary.txt``). A cross-rack
all-reduce is sent by HTTP to an external Java service, ``optical_hccl_system``
(``POST /api/oxc/allreduce``, algorithms ``ALGO_OXC_RING``, ``_HD``, ``_NB``), which returns
the flows; that service is not public (the design document cites "internal documentation";
no source in SimAI or elsewhere we could find), so every such call fails with "Couldn't
connect to server" and SimAI-OXC falls back to its native ring (``generateViaNative``), as it
does for every other collective. The request names the RankTable, the domain's ranks, the
volume and the algorithm, nothing else: no rates, ports or OXC count; and it prints the volume
with a stream's default 6 significant digits (``OxcHttpClient.cc:210``: 16,777,216 bytes goes
out as ``1.67772e+07``). It models no bandwidth, no time, no compute, no OXC ports or
circuits and no reconfiguration: those would live in the service. Pull request 291 adds a
tick scheduler (``*_schedule_stats.json``): every flow lasts one tick once the flows it
depends on are done, so ``total_ticks`` is the longest chain of flow dependencies.

**Build** (outside this repository, nothing of it copied here): the frontend's five ``.cc``
files and ``astra-sim/system/OxcTypes.h`` of pull request 291, compiled as
``g++ -std=c++17 -O2 -I. astra-sim/network_frontend/oxc/*.cc -lcurl`` in
``astra-sim-alibabacloud`` (libcurl4-openssl-dev from Debian), the binary put where SimAI's
recipe (``build/simai_oxc/build.sh -c``) puts it, :data:`BINARY`. The recipe also builds and
links the AstraSim library, which the frontend never calls (it links without it); pull request
217's tree built by the recipe itself writes byte-identical flow files on these workloads.
The commit is read with git when ``SIMAI_OXC_DIR`` is a checkout, else :data:`SIMAI_OXC_COMMIT`
is recorded as stated. Without a build it says so and exits 0.

**Command.** ``SimAI_oxc -w FILE -g N -g_p_s 8 -ranktable RANKTABLE -o PREFIX``; the
RankTable is written here (:func:`rank_table`: rank ``r`` on rack ``r // 8``, our pod of a
rank), the outputs go to a temporary folder. The workloads are SimAI's own OXC examples, read
from ``SIMAI_OXC_DIR`` (:data:`WORKLOADS`).

**Compared, per workload** (pods = ranks / 8, :data:`PORTS` OCS ports per pod, :data:`OCS`
OCSes, circuits of :data:`RATE_BPS`, fallback :data:`FALLBACK_BPS` per pod pair, each comm
step :data:`LATENCY_S`):

* ``traffic``: its flows summed per collective (layer and pass), per step and per directed pod
  pair, intra-pod flows apart, against our DAG's phases (:func:`our_steps`): equal when every
  step's pod-pair bytes agree (``steps_equal``), plus the inter-pod and intra-pod byte totals.
* ``ticks``: its tick count against the longest dependency chain of its flows as we read them
  (:func:`longest_chain`), which must agree if we read its output as it means it.
* ``wirings``: our plan (``trainfabric.ocs.plan``, defaults), the uniform mesh, and a
  stand-in for the wiring its service would set, which nothing public states: circuits in
  proportion to its flows' pod-pair bytes (``proportional``, our baseline's rule). For each:
  our critical path of the whole iteration (compute as the file states it), ours with compute
  free (``ours_comm_only_s``), and its flows timed on that wiring by the same link model
  (``theirs_serial_s``, :func:`serial_time`): collectives one after another, as its main
  loop chains them; the groups of one collective at once (its ``deps.json`` chains every
  group's operation to the previous one too, which neither SimAI's simulators nor ours do),
  a step as long as its slowest pod pair
  ``L + 8·bytes / (B·x + B0)``, intra-pod flows free. SimAI-OXC gives no time of its own:
  ``theirs_serial_s`` is our model applied to its flows, named so.
* walls: its whole process (one run) and our ``plan`` call (twice in this process, the first
  with the loading of its compiled kernels); they do different work (it writes flows, we
  optimise a wiring), so no speed ratio is claimed.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import emit, parser

from trainfabric.ocs import OcsModel, hard_critical_path, plan, uniform_mesh
from trainfabric.ocs.wiring.baselines import proportional_fill
from trainfabric.ocs.wiring.rounding import round_to_degrees
from trainfabric.workloads.dag import COMM, TaskDAG
from trainfabric.workloads.simai import read_simai, simai_dag

SIMAI_OXC_COMMIT = "55d583ce"  # aliyun/SimAI refs/pull/291/head (OXC frontend of PR 217 + 291)
BINARY = "astra-sim-alibabacloud/build/simai_oxc/build/simai_oxc/SimAI_oxc"
BUILD = "g++ -std=c++17 -O2 -I. astra-sim/network_frontend/oxc/*.cc -lcurl"
WORKLOADS = {
    "micro_allreduce_dp": "example/microAllReduce_dp.txt",
    "oxc_32g": "example/workload_oxc_32g.txt",
    "oxc_crossrack_32g": "example/workload_oxc_crossrack_32g.txt",
}
GPUS_PER_POD, PORTS, OCS = 8, 8, 4
RATE_BPS, FALLBACK_BPS, LATENCY_S = 400e9, 20e9, 5e-6
FLOW_COLUMNS = ("op_id", "flow_id", "layer", "phase", "group", "src", "dst", "size", "step")
FLOW_COLUMNS += ("depends_on",)
FALLBACK_LINE = "Empty response from OXC API"
# Steps of one collective: a list over steps of {(src pod, dst pod): bytes}
Steps = dict[tuple[str, str], list[dict[tuple[int, int], float]]]


def rank_table(gpus: int, gpus_per_pod: int) -> dict:
    """A RankTable (SimAI-OXC's ``OxcTypes.h`` layout) placing rank ``r`` on rack
    ``rack_{r // gpus_per_pod}``, the only field SimAI-OXC reads for placement."""
    if gpus < 1 or gpus_per_pod < 1 or gpus % gpus_per_pod:
        raise ValueError(f"gpus: {gpus} is not a positive multiple of {gpus_per_pod}")
    ranks = [
        {
            "rank_id": r,
            "device_id": r,
            "local_id": r % gpus_per_pod,
            "level_list": [
                {
                    "net_layer": 0,
                    "net_instance_id": f"rack_{r // gpus_per_pod}",
                    "net_type": "TOPO_FILE_DESC",
                    "net_attr": "",
                    "rank_addr_list": [{"addr_type": "EID", "addr": f"{r:032x}", "ports": ["0/0"]}],
                }
            ],
        }
        for r in range(gpus)
    ]
    return {"version": "2.0", "status": "completed", "rank_count": gpus, "rank_list": ranks}


def read_flows(text: str) -> list[dict]:
    """SimAI-OXC's ``*_flows.csv`` as rows: ints for ids, ranks, size and step, ``depends_on``
    as a list of flow ids (written ``"[1,2]"``)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("flows.csv: no flows")
    missing = [c for c in FLOW_COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(f"flows.csv: no column {missing}")
    out = []
    for r in rows:
        deps = r["depends_on"].strip().strip("[]")
        out.append(
            {
                "op_id": int(r["op_id"]),
                "flow_id": int(r["flow_id"]),
                "layer": r["layer"],
                "phase": r["phase"],
                "group": r["group"],
                "src": int(r["src"]),
                "dst": int(r["dst"]),
                "size": int(r["size"]),
                "step": int(r["step"]),
                "depends_on": [int(d) for d in deps.split(",") if d.strip()],
            }
        )
    return out


def flow_steps(flows: list[dict], gpus_per_pod: int) -> tuple[Steps, float]:
    """Inter-pod bytes per collective ``(layer, pass)``, step and directed pod pair (pod of rank
    ``r``: ``r // gpus_per_pod``), collectives with no inter-pod flow left out; and the bytes
    of the intra-pod flows."""
    per: dict[tuple[str, str], dict[int, dict]] = defaultdict(lambda: defaultdict(dict))
    intra = 0.0
    for f in flows:
        u, v = f["src"] // gpus_per_pod, f["dst"] // gpus_per_pod
        if u == v:
            intra += f["size"]
            continue
        step = per[f["layer"], f["phase"]][f["step"]]
        step[u, v] = step.get((u, v), 0.0) + f["size"]
    return {k: [s[i] for i in sorted(s)] for k, s in per.items()}, intra


def our_steps(dag: TaskDAG) -> tuple[Steps, float]:
    """The same view of our DAG: its comm phases grouped by collective (a phase group is
    ``"<layer> <pass> ..."``), in step order, and the bytes kept inside pods."""
    if dag.pairs is not None:
        raise ValueError("dag: phase nodes with pair sets are not compared")
    per: dict[tuple[str, str], list[dict]] = defaultdict(list)
    comm = np.flatnonzero(dag.kind == COMM)
    by_phase: dict[int, dict] = defaultdict(dict)
    for i in comm:
        pair = (int(dag.pod[i]), int(dag.dst[i]))
        step = by_phase[int(dag.phase[i])]
        step[pair] = step.get(pair, 0.0) + float(dag.bytes[i])
    for k in sorted(by_phase):
        layer, pass_name = dag.phases[k].group_name.split()[:2]
        per[layer, pass_name].append(by_phase[k])
    return dict(per), float(sum(p.intra_pod_bytes for p in dag.phases))


def serial_time(steps: Steps, model: OcsModel, x: np.ndarray, latency_s: float) -> float:
    """Seconds of ``steps`` on wiring ``x``: ``Σ_collectives Σ_steps (L + max_pairs 8·b /
    (B·x_uv + B0))`` -- collectives in series, a step's pod pairs at once."""
    rate = model.pair_rate_bps(x)
    total = 0.0
    for coll in steps.values():
        for step in coll:
            src, dst = np.array(list(step)).T
            b = np.fromiter(step.values(), float)
            total += latency_s + float(np.max(8.0 * b / rate[model.pair_index(src, dst)]))
    return total


def longest_chain(flows: list[dict]) -> int:
    """Flows on the longest ``depends_on`` chain (a flow waits for every flow it names); the
    tick count of SimAI-OXC's scheduler, where each flow lasts one tick."""
    depth: dict[int, int] = {}
    for f in sorted(flows, key=lambda f: f["flow_id"]):
        deps = f["depends_on"]
        if any(d >= f["flow_id"] for d in deps):
            raise ValueError(f"flows.csv: flow {f['flow_id']} depends on a later flow")
        depth[f["flow_id"]] = 1 + max((depth[d] for d in deps), default=0)
    return max(depth.values())


def steps_compare(theirs: Steps, ours: Steps) -> dict:
    """``steps_equal``: same collectives, same number of steps, every step's pod-pair bytes
    equal; ``max_abs_step_bytes_diff`` over the steps both have."""
    diff, equal = 0.0, theirs.keys() == ours.keys()
    for key in theirs.keys() & ours.keys():
        a, b = theirs[key], ours[key]
        equal &= len(a) == len(b)
        for sa, sb in zip(a, b, strict=False):
            equal &= sa.keys() == sb.keys()
            diff = max(diff, *(abs(sa.get(p, 0.0) - sb.get(p, 0.0)) for p in sa.keys() | sb))
    return {
        "collectives": sorted(" ".join(k) for k in theirs),
        "steps_theirs": sum(len(s) for s in theirs.values()),
        "steps_ours": sum(len(s) for s in ours.values()),
        "steps_equal": bool(equal and diff == 0.0),
        "max_abs_step_bytes_diff": diff,
    }


def _total(steps: Steps) -> float:
    return float(sum(sum(s.values()) for coll in steps.values() for s in coll))


def _pair_demand(steps: Steps, model: OcsModel) -> np.ndarray:
    demand = np.zeros(model.n_pairs)
    for coll in steps.values():
        for step in coll:
            for (u, v), b in step.items():
                demand[model.pair_index(u, v)] += b
    return demand


def run_peer(binary: Path, workload: Path, gpus: int, folder: Path) -> dict:
    """SimAI_oxc on ``workload`` (RankTable of :func:`rank_table`): its flows, tick count,
    failed OXC calls (each fell back to the native ring), operations and whole-process wall."""
    table = folder / "ranktable.json"
    table.write_text(json.dumps(rank_table(gpus, GPUS_PER_POD)))
    prefix = folder / workload.stem
    args = ["-w", str(workload), "-g", str(gpus), "-g_p_s", str(GPUS_PER_POD)]
    args += ["-ranktable", str(table), "-o", str(prefix)]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=600, check=False
    )
    wall = time.perf_counter() - t0
    flows_csv = Path(f"{prefix}_flows.csv")
    if proc.returncode != 0 or not flows_csv.is_file():
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(f"SimAI_oxc exit {proc.returncode}:\n{tail}")
    log = proc.stdout + proc.stderr
    stats = Path(f"{prefix}_schedule_stats.json")
    ops = re.search(r"Total Operations: (\d+)", log)
    return {
        "flows": read_flows(flows_csv.read_text()),
        "ticks": json.loads(stats.read_text())["total_ticks"] if stats.is_file() else None,
        "oxc_calls_failed": log.count(FALLBACK_LINE),
        "failure_line": next((s.strip() for s in log.splitlines() if FALLBACK_LINE in s), None),
        "operations": int(ops.group(1)) if ops else None,
        "wall_s": wall,
        "command": " ".join(["SimAI_oxc", *args])
        .replace(str(folder), "<tmp>")
        .replace(str(workload.parent.parent), "<SIMAI_OXC_DIR>"),
    }


def wirings(dag: TaskDAG, model: OcsModel, theirs: Steps) -> tuple[dict, dict]:
    """The three wirings (module doc) and our plan's figures; ``plan`` runs twice, the first
    call's wall (``wall_s_first``) including this process's first use of its compiled
    kernels, the second (``wall_s``) not."""
    walls = []
    for _ in range(2):
        t0 = time.perf_counter()
        p = plan(dag, model)
        walls.append(time.perf_counter() - t0)
    demand, mesh = _pair_demand(theirs, model), uniform_mesh(model)
    scaled = demand / demand.max() if demand.any() else demand
    prop = round_to_degrees(model, proportional_fill(model, scaled)) if demand.any() else mesh
    xs = {"plan": p.x, "uniform_mesh": mesh, "proportional": prop}
    planned = {
        "critical_path_s": p.hard_critical_path_s,
        "lower_bound_s": p.lower_bound_s,
        "certified_gap": p.certified_gap,
        "uniform_mesh_critical_path_s": p.uniform_mesh_critical_path_s,
        "split_feasible": p.success,
        "wall_s_first": walls[0],
        "wall_s": walls[1],
    }
    return xs, planned


def compare(simai: Path, key: str, folder: Path) -> dict:
    """One workload through both (module doc)."""
    path = simai / WORKLOADS[key]
    w = read_simai(path)
    peer = run_peer(simai / BINARY, path, w.all_gpus, folder)
    dag = simai_dag(w, GPUS_PER_POD, LATENCY_S)
    theirs, their_intra = flow_steps(peer["flows"], GPUS_PER_POD)
    ours, our_intra = our_steps(dag)
    model = OcsModel.uniform(
        w.all_gpus // GPUS_PER_POD, PORTS, OCS, rate_bps=RATE_BPS, fallback_bps=FALLBACK_BPS
    )
    comm_only = replace(dag, duration_s=np.zeros(dag.n_nodes))
    xs, planned = wirings(dag, model, theirs)
    rows = {}
    for name, x in xs.items():
        mine = hard_critical_path(comm_only, model, x)
        other = serial_time(theirs, model, x, LATENCY_S)
        rows[name] = {
            "circuits": {f"{u}-{v}": int(c) for u, v, c in zip(*model.pairs, x, strict=True)},
            "ours_iteration_s": hard_critical_path(dag, model, x),
            "ours_comm_only_s": mine,
            "theirs_serial_s": other,
            "comm_only_rel_diff": mine / other - 1.0,
        }
    return {
        "file": WORKLOADS[key],
        "gpus": w.all_gpus,
        "pods": model.n,
        "tp": w.tp,
        "dp": w.dp,
        "command": peer["command"],
        "flows": len(peer["flows"]),
        "operations": peer["operations"],
        "oxc_calls_failed": peer["oxc_calls_failed"],
        "oxc_failure_line": peer["failure_line"],
        "traffic": {
            **steps_compare(theirs, ours),
            "inter_pod_bytes_theirs": _total(theirs),
            "inter_pod_bytes_ours": _total(ours),
            "intra_pod_bytes_theirs": their_intra,
            "intra_pod_bytes_ours": our_intra,
        },
        "ticks": {"theirs": peer["ticks"], "longest_flow_chain": longest_chain(peer["flows"])},
        "plan": planned,
        "wirings": rows,
        "wall_s_simai_oxc_process": peer["wall_s"],
        "wall_s_ours_plan": planned["wall_s"],
    }


def simai_build(simai: Path) -> dict:
    """The commit (git, else as stated) and the build recipe."""
    git = subprocess.run(
        ["git", "-C", str(simai), "rev-parse", "--short=8", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "commit": git.stdout.strip() if git.returncode == 0 else SIMAI_OXC_COMMIT,
        "commit_from": "git" if git.returncode == 0 else "stated (no .git in the build)",
        "build": f"{BUILD} (in astra-sim-alibabacloud)",
        "binary": BINARY,
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("simai", type=Path, nargs="?", help="SimAI tree with SimAI_oxc built (doc)")
    args = p.parse_args()
    if args.simai is None or not (args.simai / BINARY).is_file():
        print(f"no SimAI_oxc build ({BINARY}) under {args.simai}: nothing run", file=sys.stderr)
        return
    simai = args.simai.resolve()
    with tempfile.TemporaryDirectory(prefix="simai-oxc-") as tmp:
        files = {key: compare(simai, key, Path(tmp)) for key in WORKLOADS}
    emit(
        "vs_simai_oxc",
        {
            "simai_oxc": simai_build(simai),
            "units": "s, bytes, bit/s",
            "gpus_per_pod": GPUS_PER_POD,
            "ports_per_pod": PORTS,
            "ocs": OCS,
            "rate_bps": RATE_BPS,
            "fallback_bps": FALLBACK_BPS,
            "latency_s": LATENCY_S,
            "workloads": files,
            "steps_equal_all": all(f["traffic"]["steps_equal"] for f in files.values()),
            "comm_only_rel_diff_max": max(
                abs(r["comm_only_rel_diff"]) for f in files.values() for r in f["wirings"].values()
            ),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
