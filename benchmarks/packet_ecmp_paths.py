"""Issue 33: the packet engine against htsim under ECMP, on htsim's own paths.

The 512-host 2 MB permutation of :mod:`_htsim` (leaf-spine of radix 32, 100 Gb/s, NDP with
trimming, htsim ``ecmp_host -paths 1`` against our ``ecmp``), ``draws`` hash draws (htsim
``-seed 13, 14, ..``). Per draw:

* **htsim**: the plain build, to ``-end`` just past its last completion
  (:func:`_htsim.calibrated_run`);
* **ours on htsim's paths**: the same run on the path-logging build of :mod:`_htsim_paths`
  (its completions must equal the plain build's, bit for bit), the spine each flow's data
  crossed and the one its first control packet crossed, and our packet engine with entropies
  that hash onto those spines (:func:`_htsim_paths.entropy_for_paths`);
* **ours on our own hash**: our engine with its own draw (seed ``k``), as
  :func:`_htsim.side_by_side` runs it.

The same draws are repeated on ``mixed``: the permutation's pairs with flow sizes drawn
log-uniformly in ``MIXED_BYTES`` (an ECMP tail of mixed sizes), and on ``ring_allreduce``: the
side-by-side table's chained rings (each with its own headlines under its name).

Reported: FCT p50 / p99, completion (last finish) and retransmitted / new data packets on
each side, the largest number of flows sharing a leaf uplink or spine downlink in each draw
(``max_collision``; null on the chained rings, whose flows do not all run at once), per-flow
FCT ratios ours / htsim on the same paths (median, p5, p95, max, pooled over draws; on the
chained rings a hop's neighbours in time depend on the timing of every hop before it, so its
per-flow ratios spread where the summary statistics need not). Headlines (ratios of the
means over draws, ours / htsim):
``matched_p50_ratio``, ``matched_p99_ratio`` (with its per-draw ``_min`` / ``_max``),
``matched_completion_ratio``, ``matched_retransmit_ratio``, and beside them
``own_hash_p99_ratio`` and ``own_hash_retransmit_ratio``, the comparison of two independent
draws that the side-by-side table makes.

``--htsim DIR``: a csg-htsim checkout with its build (``sim/datacenter/htsim_ndp``); the
logging build is made from its sources in a temporary folder. Without one this says so and
exits 0. ``--quick``: 6 draws instead of 10, a census of 100 instead of 300.

``max_collision_census``: whether the two hashes collide alike, over many draws (the paired
draws above are too few to say): the share of draws per largest number of flows on one link,
htsim's (its paths logged in the first ``CENSUS_END_US`` of a run, seeds ``13 ..``), ours
(seeds ``0 ..``) and independent uniform uplink choices (4,000 draws), with the share of 6 or
more on each side.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _htsim as H  # noqa: E402
import _htsim_paths as HP  # noqa: E402
from _common import emit, parser, peak_rss_gb  # noqa: E402

STATS = ("fct_p50_us", "fct_p99_us", "completion_us", "retransmit_fraction")
MIXED_BYTES = (100_000, 4_000_000)
MIXED = H.mixed_permutation(512, *MIXED_BYTES, seed=13)
CENSUS_END_US = 20  # every flow's first packet has crossed its spine by then (checked)


def own_collision(sc: H.Scenario, topo, k: int) -> int:
    """The most flows on one link under our own hash, draw ``k`` (the entropies of
    :func:`_htsim.flow_table` that :func:`_htsim.run_packet` uses with seed ``k``)."""
    leaf, U = topo.host_leaf[0], topo.tables["leaf_up"].shape[2]
    own = H.flow_table(sc, k, ack_delay=False).entropy
    return HP.max_collision(
        leaf, sc.src, sc.dst, HP.ecmp_spines(leaf, sc.n, U, sc.src, sc.dst, own)[0]
    )


def draw(exe: Path, exe_log: Path, sc: H.Scenario, k: int) -> dict:
    """One hash draw: htsim, ours on htsim's paths, ours on our own hash (module doc)."""
    seed = 13 + k
    topo = H.topology(sc)
    plain = H.calibrated_run(exe, sc, "ecmp", seed=seed)
    hrow = H.summary(
        sc, plain.start_s, plain.finish_s, plain.wall_s, plain.rtx_packets, plain.new_packets
    )
    data, ctrl = HP.parse_paths(HP.logged_run(exe_log, sc, seed, plain), sc.n_flows)
    mrow, mfct = HP.packet_on_paths(sc, data, ctrl, seed=k)
    orow, _ = H.run_packet(sc, "ecmp", seed=k)
    per_flow = mfct / (plain.finish_s - plain.start_s)
    chained = bool(np.any(sc.pred >= 0))  # flows not all at once: a static count means nothing
    return {
        "htsim_seed": seed,
        "own_seed": k,
        "htsim": {s: hrow[s] for s in STATS},
        "ours_on_htsim_paths": {s: mrow[s] for s in STATS},
        "ours_own_hash": {s: orow[s] for s in STATS},
        "max_collision_htsim": (
            None if chained else HP.max_collision(topo.host_leaf[0], sc.src, sc.dst, data)
        ),
        "max_collision_own_hash": None if chained else own_collision(sc, topo, k),
        "per_flow_ratio": per_flow,
    }


def census(exe_log: Path, sc: H.Scenario, topo, n: int, uniform_n: int = 4000) -> dict:
    """The largest number of flows on one link (:func:`_htsim_paths.max_collision`) over
    ``n`` hash draws of each side: htsim's (seeds ``13 ..``, its paths logged in the first
    ``CENSUS_END_US`` of a run), ours (seeds ``0 ..``), and ``uniform_n`` draws of independent
    uniform uplinks: the share of draws per count."""
    leaf, U = topo.host_leaf[0], topo.tables["leaf_up"].shape[2]
    across = leaf[sc.src] != leaf[sc.dst]
    theirs = []
    with tempfile.TemporaryDirectory(prefix="htsim_census_") as tmp:
        cm = H.write_cm(sc, Path(tmp) / f"{sc.name}.cm")
        for k in range(n):
            cmd = H.htsim_command(exe_log, cm, sc, "ecmp", CENSUS_END_US, Path(tmp) / "l", 13 + k)
            out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
            data, _ = HP.parse_paths(out, sc.n_flows)
            if not np.array_equal(data >= 0, across):
                raise RuntimeError(f"htsim seed {13 + k}: not every flow crossed a spine by -end")
            theirs.append(HP.max_collision(leaf, sc.src, sc.dst, data))
    ours = [own_collision(sc, topo, k) for k in range(n)]
    rng = np.random.default_rng(0)
    uniform = [
        HP.max_collision(leaf, sc.src, sc.dst, np.where(across, rng.integers(0, U, sc.n_flows), -1))
        for _ in range(uniform_n)
    ]

    def shares(counts):
        values, freq = np.unique(counts, return_counts=True)
        return {str(int(v)): float(f / len(counts)) for v, f in zip(values, freq, strict=True)}

    def at_least(counts, c):
        return float(np.mean(np.asarray(counts) >= c))

    return {
        "draws": n,
        "uniform_draws": uniform_n,
        "htsim": shares(theirs),
        "own_hash": shares(ours),
        "uniform": shares(uniform),
        "share_6_or_more": {
            "htsim": at_least(theirs, 6),
            "own_hash": at_least(ours, 6),
            "uniform": at_least(uniform, 6),
        },
    }


def digest(rows: list[dict]) -> dict:
    """The headlines of the module doc over the draws."""

    def mean(side, stat):
        return float(np.mean([r[side][stat] for r in rows]))

    def ratio(side, stat):
        return mean(side, stat) / mean("htsim", stat)

    p99 = [r["ours_on_htsim_paths"]["fct_p99_us"] / r["htsim"]["fct_p99_us"] for r in rows]
    pooled = np.concatenate([r.pop("per_flow_ratio") for r in rows])
    out = {
        "draws": len(rows),
        "matched_p50_ratio": ratio("ours_on_htsim_paths", "fct_p50_us"),
        "matched_p99_ratio": ratio("ours_on_htsim_paths", "fct_p99_us"),
        "matched_p99_ratio_min": float(min(p99)),
        "matched_p99_ratio_max": float(max(p99)),
        "matched_completion_ratio": ratio("ours_on_htsim_paths", "completion_us"),
        "matched_retransmit_ratio": ratio("ours_on_htsim_paths", "retransmit_fraction"),
        "per_flow_ratio_median": float(np.median(pooled)),
        "per_flow_ratio_p5": float(np.percentile(pooled, 5)),
        "per_flow_ratio_p95": float(np.percentile(pooled, 95)),
        "per_flow_ratio_max": float(pooled.max()),
        "own_hash_p50_ratio": ratio("ours_own_hash", "fct_p50_us"),
        "own_hash_p99_ratio": ratio("ours_own_hash", "fct_p99_us"),
        "own_hash_completion_ratio": ratio("ours_own_hash", "completion_us"),
        "own_hash_retransmit_ratio": ratio("ours_own_hash", "retransmit_fraction"),
        "max_collision_htsim": [r["max_collision_htsim"] for r in rows],
        "max_collision_own_hash": [r["max_collision_own_hash"] for r in rows],
    }
    out["matched_within_10pct"] = all(
        abs(out[k] - 1) <= 0.1 for k in ("matched_p50_ratio", "matched_p99_ratio")
    )
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    H.add_htsim_argument(p, "csg-htsim checkout with its build")
    p.add_argument("--draws", type=int, default=None, help="hash draws (default 10, --quick 6)")
    args = p.parse_args()
    exe = None if args.htsim is None else H.find_binary(args.htsim)
    if exe is None:
        print(f"no htsim_ndp build under {args.htsim}: nothing compared", file=sys.stderr)
        return
    n = args.draws or (6 if args.quick else 10)
    n_census = 100 if args.quick else 300
    table = H.default_scenarios()
    scenarios = {
        "permutation": table["permutation"],
        "mixed": MIXED,
        "ring_allreduce": table["ring_allreduce"],
    }
    H.warm_up(("packet",))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="htsim_log_") as work:
        exe_log = HP.build_path_logger(exe.resolve().parent.parent.parent, Path(work))
        for name, sc in scenarios.items():
            rows[name] = []
            for k in range(n):
                r = draw(exe, exe_log, sc, k)
                rows[name].append(r)
                print(
                    f"{name} draw {k}: p99 htsim {r['htsim']['fct_p99_us']:.0f} us, ours on its "
                    f"paths {r['ours_on_htsim_paths']['fct_p99_us']:.0f}, ours own hash "
                    f"{r['ours_own_hash']['fct_p99_us']:.0f}; max collision "
                    f"{r['max_collision_htsim']} / {r['max_collision_own_hash']}",
                    file=sys.stderr,
                    flush=True,
                )
        print(f"max-collision census over {n_census} draws per side", file=sys.stderr, flush=True)
        perm = scenarios["permutation"]
        collisions = census(exe_log, perm, H.topology(perm), n_census)
    lo, hi = MIXED_BYTES
    result = {
        "max_collision_census": collisions,
        "scenario": "512-host 2 MB permutation, ECMP (htsim ecmp_host -paths 1), "
        "leaf_spine(512, 32, 100G), MTU 4000+64, queue 140000 B, NDP trim, cwnd 50",
        **digest(rows["permutation"]),
        "per_draw": rows["permutation"],
        "mixed": {
            "scenario": f"the same pairs, sizes log-uniform from {lo:,} to {hi:,} bytes",
            **digest(rows["mixed"]),
            "per_draw": rows["mixed"],
        },
        "ring_allreduce": {
            "scenario": "8 x 16-rank chained rings of 250 KB hops on 128 hosts (the table's)",
            **digest(rows["ring_allreduce"]),
            "per_draw": rows["ring_allreduce"],
        },
        "matched": H.matched(),
        "htsim_build": H.htsim_build(exe),
        "path_log_patch": HP.PATCH,
        "peak_rss_gb": peak_rss_gb(),
    }
    emit("packet_ecmp_paths", result, args.out)


if __name__ == "__main__":
    main()
