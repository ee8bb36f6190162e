"""E6 peer run: our planner's rounded one-hop wiring against ATRO's ABSM, side by side.

Problem and instances as in :mod:`trainfabric.experiments.ocs_onehop_studies` (one-hop MLU,
``r`` ports per pod, circuits of ``c = 5000``): the Meta Facebook_pod_a test matrices (4 pods,
``r = 16``) and seeded synthetic matrices (gravity and sparse, 16/32/64/128 pods, ``r = 2n``,
ATRO's sizes; ATRO's own synthetic generator is not public).

**Peer** (``--peer DIR --peer-python PY``; MIT-licensed ``Yingming-Mao/ATRO``, INFOCOM 2025,
arXiv 2507.13717, kept outside this repository and never copied into it). The benchmark copies
DIR to a temporary folder (without ``.git`` and ``Result``) and, in that copy:

1. runs ATRO's own command line unchanged, ``To-benchmarks/ABSM.py --topo_name Facebook_pod_a
   --TE_solver ABSM --max_ports 16 --base_capacity 5000 --mode test``, and reads back its
   per-TM times (``Result/.../time.txt``, ``time.time()`` around ``absm()``) and MLUs
   (``result.txt`` × ``Data/.../11.opt1``: the script writes MLU / opt1);
2. runs ATRO's ``ATRO.absm`` method on every matrix of this benchmark (Meta and synthetic)
   through :data:`PEER_DRIVER`, a few lines of ours that the peer's Python executes: it makes
   the ``ATRO`` object without its multi-hop routing environment (``absm`` reads only
   ``props.base_capacity`` and the topology's shape) and times each call with ``time.time()``
   exactly as the script does. Step 1 checks that step 2 gives the script's MLUs.

Timing is side by side in one invocation: the matrices are cut into blocks; per block the peer
subprocess and our in-process planner run one after the other, in alternating order. Ours is
``planner.plan`` end to end (``time.perf_counter``, after one untimed warm-up plan): on these
one-phase DAGs it takes its exact one-hop fast path (exact min-max wiring, baselines, split
onto the OCS; the run fails if it does not); separately, our exact routine ``one_hop_optimum``
(the exact-vs-exact figure beside ABSM's) and the planner forced onto its general path
(``exact_one_hop=False``: solve, round, baselines, split, certified bound; ``general_*``).
Per-TM time ratios are taken on the same matrix, then the median. The planner keeps the
traffic-free near-uniform candidates of its baseline per pod shape
(:func:`trainfabric.ocs.wiring.baselines.mesh_candidates`), so in a stream of matrices on one
cluster, ATRO's setting, only the first plan of a shape rounds them: the warm-up plan is of the
Meta shape, and each synthetic pod count's first matrix pays them in its timed plan. Without
``--peer`` only ours against our exact routine is reported, and the JSON says the peer was not
run.

Headline keys: ``mlu_ratio_median`` / ``mlu_ratio_p95`` (our planner's MLU ÷ the MLU of
ABSM's wiring, both evaluated by :func:`trainfabric.ocs.wiring.onehop.mlu`; targets ≤ 1.02 / ≤ 1.05;
``mlu_ratio_vs_absm_reported_*`` divides by the value ``absm()`` returns instead, which is the
upper end of its binary search, up to 1e-7 above its wiring's MLU),
``time_ratio_ours_over_absm_median`` (per-TM planner time ÷ ABSM time, median; target ≤ 10),
``exact_time_ratio_over_absm_median`` (our exact routine ÷ ABSM, the exact-vs-exact figure),
``general_time_ratio_over_absm_median`` and ``general_over_exact_*`` (the general path),
``ours_over_exact_*``, ``ours_stage_median_s`` (where the planner's time goes), counts, the
peer's commit, package versions and ``script_check``; then the same per source and per pod
count.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import emit, parser

from trainfabric.experiments.ocs_onehop_studies import (
    OneHopConfig,
    meta_instances,
    synthetic_instances,
    warm_up,
)
from trainfabric.ocs.wiring.onehop import OneHopInstance, mlu, one_hop_optimum, to_dag, to_model
from trainfabric.ocs.wiring.planner import plan

FB = "Facebook_pod_a"
FB_PORTS, FB_CAPACITY = 16, 5000.0
SCRIPT_ARGS = ["--topo_name", FB, "--TE_solver", "ABSM", "--max_ports", str(FB_PORTS)]
SCRIPT_ARGS += ["--base_capacity", str(int(FB_CAPACITY)), "--mode", "test"]
TARGETS = {"mlu_ratio_median": 1.02, "mlu_ratio_p95": 1.05, "time_ratio_ours_over_absm": 10.0}

PEER_DRIVER = r"""
import importlib.metadata as md, json, sys, time, types
import numpy as np
peer, src, dst = sys.argv[1:4]
sys.path.insert(0, peer)
from ToTE_benchmarks.ToTE_src.Programming_algorithm import ATRO
rows = []
for tm in json.load(open(src)):
    n = tm["n"]
    algorithm = ATRO.__new__(ATRO)
    algorithm.props = types.SimpleNamespace(base_capacity=tm["c"])
    shape = types.SimpleNamespace(capacity_matrix=np.zeros((n, n)))
    algorithm.routing = types.SimpleNamespace(topology=shape)
    demands = np.asarray(tm["D"], dtype=np.float64).reshape(-1)
    start = time.time()
    u, x = algorithm.absm(tm["r"], demands)
    rows.append({"mlu": float(u), "time_s": time.time() - start, "x": np.asarray(x).tolist()})
names = ("numpy", "scipy", "networkx", "ortools", "gurobipy")
versions = {k: md.version(k) for k in names}
json.dump({"rows": rows, "versions": versions, "python": sys.version.split()[0]}, open(dst, "w"))
"""


# -- instances ------------------------------------------------------------------------------


def fb_test_instances(peer: Path, quick: bool) -> list[OneHopInstance]:
    """The peer's Facebook_pod_a test matrices (``11.hist``, one flattened 4x4 matrix per
    line, row = source): all of them, or with ``quick`` the 200 evenly spaced ones that
    ``tests/data/meta-pod-traffic`` ships (same names, ``fb_pod_a_r16-<line>``)."""
    lines = (peer / "Data" / FB / "test" / "11.hist").read_text().split("\n")
    lines = [ln for ln in lines if ln.strip()]
    pick = np.unique(np.round(np.linspace(0, len(lines) - 1, 200)).astype(int))
    out = []
    for i in pick if quick else range(len(lines)):
        d = np.array(lines[i].split(), dtype=float)
        n = int(round(np.sqrt(d.size)))
        out.append(
            OneHopInstance(d.reshape(n, n), np.full(n, FB_PORTS), FB_CAPACITY, f"fb_pod_a_r16-{i}")
        )
    return out


def instances(args) -> list[tuple[str, OneHopInstance]]:
    """``(source, instance)`` for every matrix of this run (module doc)."""
    tms = 2 if args.quick else 10
    config = OneHopConfig(meta=200, tms=tms)
    if args.peer is not None:
        meta = [("meta", inst) for inst in fb_test_instances(args.peer, args.quick)]
    else:
        meta = [("meta", inst) for inst in meta_instances(config, 0)]
    return meta + synthetic_instances(config, 0)


# -- the two sides --------------------------------------------------------------------------


def run_ours(inst: OneHopInstance) -> dict:
    """Our planner (end to end: its exact one-hop fast path), the same planner forced onto
    its general path (``exact_one_hop=False``: solve, round, bound) and our exact routine on
    one matrix, timed in process."""
    dag, model = to_dag(inst), to_model(inst)
    t0 = time.perf_counter()
    ours = plan(dag, model, seed=0)
    t1 = time.perf_counter()
    exact = one_hop_optimum(inst)
    t2 = time.perf_counter()
    general = plan(dag, model, seed=0, exact_one_hop=False)
    t3 = time.perf_counter()
    model.check_wiring(ours.x)
    model.check_wiring(general.x)
    if ours.method != "exact-one-hop":
        raise RuntimeError(f"{inst.name}: the planner did not take its one-hop fast path")
    stages = {f"ours_{k}_s": v for k, v in ours.timings_s.items()}
    return {
        "ours_mlu": mlu(inst, ours.x),
        "ours_s": t1 - t0,
        **stages,
        "exact_mlu": exact.mlu,
        "exact_s": t2 - t1,
        "general_mlu": mlu(inst, general.x),
        "general_s": t3 - t2,
    }


def run_peer(peer_copy: Path, python: str, block: list[OneHopInstance], work: Path) -> dict:
    """ATRO's ``absm`` on ``block`` in the peer's Python (:data:`PEER_DRIVER`)."""
    src, dst = work / "in.json", work / "out.json"
    payload = [
        {"n": i.n, "r": int(i.ports[0]), "c": i.capacity, "D": i.traffic.tolist()} for i in block
    ]
    src.write_text(json.dumps(payload))
    cmd = [python, "-c", PEER_DRIVER, str(peer_copy), str(src), str(dst)]
    subprocess.run(cmd, cwd=peer_copy, check=True, stdin=subprocess.DEVNULL, capture_output=True)
    out = json.loads(dst.read_text())
    for inst, row in zip(block, out["rows"], strict=True):
        x = np.asarray(row.pop("x"), dtype=float)
        if (x.sum(axis=1) > inst.ports).any():
            raise RuntimeError(f"{inst.name}: ABSM's wiring exceeds the ports")
        iu, iv = np.triu_indices(inst.n, 1)
        row["absm_wiring_mlu"] = mlu(inst, x[iu, iv])
    return out


def run_script(peer_copy: Path, python: str) -> dict:
    """ATRO's ABSM command line, unchanged, on its Facebook_pod_a test split (module doc)."""
    cmd = [python, "To-benchmarks/ABSM.py", *SCRIPT_ARGS]
    subprocess.run(cmd, cwd=peer_copy, check=True, stdin=subprocess.DEVNULL, capture_output=True)
    res = peer_copy / "Result" / FB / "ABSM"
    times = np.loadtxt(res / "time.txt")
    ratio = np.loadtxt(res / "result.txt")
    opt1 = np.loadtxt(peer_copy / "Data" / FB / "test" / "11.opt1")[: ratio.size]
    return {"mlu": ratio * opt1, "time_s": times, "command": " ".join(["python", *cmd[1:]])}


def side_by_side(pairs, args, work: Path) -> tuple[list[dict], dict | None]:
    """Rows of both sides per matrix, in ``args.blocks`` blocks of alternating order."""
    warm_up()
    peer = None
    if args.peer is not None:
        copy = work / "ATRO"
        shutil.copytree(args.peer, copy, ignore=shutil.ignore_patterns(".git", "Result"))
        peer = {"copy": copy, "versions": None}
    rows = []
    for b, block in enumerate(np.array_split(np.arange(len(pairs)), args.blocks)):
        chunk = [pairs[i] for i in block]
        steps = ["ours", "peer"] if b % 2 else ["peer", "ours"]
        ours, theirs = [], None
        for step in steps:
            if step == "ours":
                ours = [run_ours(inst) for _, inst in chunk]
            elif peer is not None:
                out = run_peer(peer["copy"], args.peer_python, [i for _, i in chunk], work)
                theirs, peer["versions"] = out["rows"], {**out["versions"], "python": out["python"]}
        for k, (src, inst) in enumerate(chunk):
            row = {"source": src, "tm": inst.name, "pods": inst.n, **ours[k]}
            if theirs is not None:
                t = theirs[k]
                row |= {"absm_mlu": t["mlu"], "absm_time_s": t["time_s"]}
                row["absm_wiring_mlu"] = t["absm_wiring_mlu"]
            rows.append(row)
        print(f"block {b + 1}/{args.blocks}: {len(chunk)} matrices", file=sys.stderr)
    return rows, peer


# -- summary --------------------------------------------------------------------------------


def figures(rows: list[dict], with_peer: bool) -> dict:
    """Ratios (median, p95, max) and medians of the per-TM times and time ratios."""
    g = {
        k: np.array([r[k] for r in rows], dtype=float) for k in rows[0] if k not in ("source", "tm")
    }

    def spread(name: str, v: np.ndarray) -> dict:
        return {
            f"{name}_median": float(np.median(v)),
            f"{name}_p95": float(np.quantile(v, 0.95)),
            f"{name}_max": float(v.max()),
        }

    out = {
        "count": len(rows),
        "pods": sorted({int(p) for p in g["pods"]}),
        **spread("ours_over_exact", g["ours_mlu"] / g["exact_mlu"]),
        "ours_time_median_s": float(np.median(g["ours_s"])),
        "ours_stage_median_s": {
            k[5:-2]: float(np.median(v))
            for k, v in g.items()
            if k.startswith("ours_") and k.endswith("_s") and k != "ours_s"
        },
        "exact_time_median_s": float(np.median(g["exact_s"])),
        **spread("general_over_exact", g["general_mlu"] / g["exact_mlu"]),
        "general_time_median_s": float(np.median(g["general_s"])),
    }
    if with_peer:
        out |= {
            **spread("mlu_ratio", g["ours_mlu"] / g["absm_wiring_mlu"]),
            **spread("mlu_ratio_vs_absm_reported", g["ours_mlu"] / g["absm_mlu"]),
            "absm_over_exact_max_dev": float(np.max(np.abs(g["absm_mlu"] / g["exact_mlu"] - 1))),
            "absm_wiring_over_exact_max_dev": float(
                np.max(np.abs(g["absm_wiring_mlu"] / g["exact_mlu"] - 1))
            ),
            "absm_time_median_s": float(np.median(g["absm_time_s"])),
            "time_ratio_ours_over_absm_median": float(np.median(g["ours_s"] / g["absm_time_s"])),
            "exact_time_ratio_over_absm_median": float(np.median(g["exact_s"] / g["absm_time_s"])),
            "general_time_ratio_over_absm_median": float(
                np.median(g["general_s"] / g["absm_time_s"])
            ),
        }
    return out


def script_check(rows: list[dict], script: dict) -> dict:
    """ATRO's unchanged command line against the driver on the shared Meta matrices."""
    meta = [r for r in rows if r["source"] == "meta"]
    idx = np.array([int(r["tm"].rsplit("-", 1)[1]) for r in meta])
    driver = np.array([r["absm_mlu"] for r in meta])
    return {
        "command": script["command"],
        "matrices": int(script["mlu"].size),
        "time_median_s": float(np.median(script["time_s"])),
        "time_mean_s": float(np.mean(script["time_s"])),
        "driver_vs_script_mlu_max_rel_dev": float(np.max(np.abs(driver / script["mlu"][idx] - 1))),
    }


def peer_commit(peer: Path) -> str | None:
    res = subprocess.run(
        ["git", "-C", str(peer), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return res.stdout.strip() or None if res.returncode == 0 else None


def report(rows: list[dict], peer: dict | None, check: dict | None, args) -> dict:
    """The benchmark's JSON object: headline keys, the peer's provenance, per source and per
    pod count."""
    with_peer = peer is not None
    summary = figures(rows, with_peer)
    by_source = {
        s: figures([r for r in rows if r["source"] == s], with_peer)
        for s in dict.fromkeys(r["source"] for r in rows)
    }
    by_pods = {
        str(n): figures([r for r in rows if r["pods"] == n], with_peer)
        for n in sorted({r["pods"] for r in rows})
    }
    result = {
        "quick": args.quick,
        "counts": {s: v["count"] for s, v in by_source.items()},
        "matrices": len(rows),
        **{k: v for k, v in summary.items() if k not in ("count", "pods")},
        "targets": TARGETS,
    }
    if not with_peer:
        result |= {
            "peer": {"run": False, "why": "no --peer given: ours against our exact routine only"},
            "mlu_ratio_median": None,
            "mlu_ratio_p95": None,
            "time_ratio_ours_over_absm_median": None,
            "exact_time_ratio_over_absm_median": None,
            "general_time_ratio_over_absm_median": None,
        }
    else:
        result["peer"] = {
            "run": True,
            "repository": "Yingming-Mao/ATRO (MIT)",
            "commit": peer_commit(args.peer),
            "path": str(args.peer),
            "versions": peer["versions"],
            "how": "ATRO.absm() per matrix via PEER_DRIVER in the peer's Python (subprocess, "
            "time.time() around absm() as To-benchmarks/ABSM.py does); blocks alternate "
            "with our in-process planner",
            "script_check": check,
        }
        result["met"] = {
            "mlu_ratio_median": result["mlu_ratio_median"] <= TARGETS["mlu_ratio_median"],
            "mlu_ratio_p95": result["mlu_ratio_p95"] <= TARGETS["mlu_ratio_p95"],
            "time_ratio_ours_over_absm": result["time_ratio_ours_over_absm_median"]
            <= TARGETS["time_ratio_ours_over_absm"],
        }
    return result | {"by_source": by_source, "by_pods": by_pods}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--peer", type=Path, default=None, help="a checkout of Yingming-Mao/ATRO")
    p.add_argument("--peer-python", default=None, help="Python of the peer's virtualenv")
    p.add_argument("--blocks", type=int, default=8, help="alternating blocks (default 8)")
    args = p.parse_args()
    if args.peer is not None and args.peer_python is None:
        p.error("--peer needs --peer-python")
    pairs = instances(args)
    with tempfile.TemporaryDirectory(prefix="ocs_onehop_") as tmp:
        rows, peer = side_by_side(pairs, args, Path(tmp))
        check = None
        if peer is not None:
            check = script_check(rows, run_script(peer["copy"], args.peer_python))
    emit("ocs_onehop", report(rows, peer, check, args), args.out)


if __name__ == "__main__":
    main()
