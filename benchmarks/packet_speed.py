"""F7: the packet engine's speed, and its agreement with htsim measured in the same run.

Headline: the spec's 512-host 2 MB permutation (single-plane 2-tier leaf-spine of radix 32,
100 Gb/s links, 1 us per hop, MTU 4000 B + 64 B header, switch queues of 140,000 B, NDP with
trimming and an initial window of 50 packets) on our packet engine with per-packet spraying:
``packets_per_s`` (data packets incl. retransmissions / wall), ``events_per_s``, ``wall_s``.
These are **engine only**: the engine call, after numba has compiled every kernel on tiny
instances (:func:`_htsim.warm_up`, not timed), topology and flow tables built before.

With ``--htsim DIR`` (or ``$HTSIM_DIR``; a Broadcom/csg-htsim build: repository root,
``sim/`` or ``sim/datacenter/`` holding ``htsim_ndp``):

* the speed against htsim, like for like (:func:`_htsim.whole_process_pairs`): the same
  permutation run as a whole process on each side (ours: ``benchmarks/_htsim_ours.py``,
  which reads the same ``.cm`` file, builds topology and flows and runs the engine), launch to
  exit, both writing their completions to a file, warm caches, htsim's ``-end`` = its first
  run's last completion + 1%, ``PAIRS`` pairs strictly alternating ours / htsim:
  ``whole_process_ratio_vs_htsim`` (ours / htsim, median of the pair ratios) with
  ``_min``, ``_max``, ``_pairs`` and ``_cache``; ``htsim_wall_s`` is htsim's median whole
  process over the pairs; ``engine_only_ratio_vs_htsim`` (our engine call / htsim's whole
  process, named as such) beside it; htsim's commit and build flags in ``htsim_build``;
* the four side-by-side scenarios of :mod:`_htsim` (permutation, 128-host all-to-all of
  100 kB per pair, 64-to-1 incast of 1 MB each, 8 x 16-rank chained ring all-reduce of 250 KB
  hops) run on htsim (``perm``, ``ecmp_host -paths 1``, ``ecmp_ar``; each to ``-end`` just
  past its last completion, an unfinished flow an error) and on our engine (``spray``,
  ``ecmp``, ``adaptive``) with the same flows: ``fct_p50_ratio_vs_htsim`` /
  ``fct_p99_ratio_vs_htsim`` (ours / htsim's on the permutation with spraying), per scenario
  and mode the ratios of p50, p99 and completion, and the ECMP/spray and adaptive/spray
  ratios and orderings on both sides. Connection semantics: htsim's (a new connection per
  flow and per ring hop, ``per_message``); completion times on htsim's definition (the source
  has the last ACK), see :mod:`_htsim`.

``largest_1ms``: the largest leaf-spine (host counts doubling from 256) on which a permutation
of flows longer than 1 ms is simulated for 1 ms (``until_s = 1e-3``) in under 60 s of wall
(engine call, compiled), spraying, with htsim's matched parameters; a size whose predicted
wall (the previous size's, scaled by hosts) exceeds 75 s is not attempted.

``--quick``: one ECMP hash draw per side instead of three (never smaller sizes, never fewer
than ``PAIRS`` timed pairs); ECMP rows are the mean over the draws
(:func:`_htsim.side_by_side`).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _htsim as H  # noqa: E402
from _common import emit, parser, peak_rss_gb  # noqa: E402

LIMIT_S = 60.0
PAIRS = 5
SWEEP_HOSTS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def headline(row: dict) -> dict:
    """Speed and FCTs of one :func:`_htsim.run_packet` summary."""
    wall = row["wall_s"]
    return {
        "timing": "engine only: the engine call, kernels compiled, topology and flows built before",
        "wall_s": wall,
        "cpu_s": row["cpu_s"],
        "packets_per_s": row["packets"] / wall,
        "events_per_s": row["events"] / wall,
        "n_packets": row["packets"],
        "n_events": row["events"],
        "fct_p50_us": row["fct_p50_us"],
        "fct_p99_us": row["fct_p99_us"],
        "retransmit_fraction": row["retransmit_fraction"],
    }


def one_ms_run(n: int) -> dict:
    """A sprayed permutation on ``n`` hosts, flows of 1.1 ms at line rate, run to 1 ms."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.flows import FlowTable
    from trainfabric.fabric.packet import simulate_packets

    radix = 2 * math.ceil(math.sqrt(n / 2))
    topo = T.leaf_spine(n, radix, H.RATE_BPS, hop_latency_s=H.HOP_S)
    per_pkt = (H.MTU + H.HEADER) * 8 / H.RATE_BPS
    size = math.ceil(1.1e-3 / per_pkt) * H.MTU
    flows = FlowTable.simple(np.arange(n), _derangement(n), float(size))
    cfg = H.packet_config(
        queue_packets=H.our_queue_packets(), max_packets=10**9, max_memory_bytes=100e9
    )
    c0, t0 = time.process_time(), time.perf_counter()
    res = simulate_packets(topo, flows, "spray", config=cfg, seed=0, until_s=1e-3)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "hosts": n,
        "radix": radix,
        "wall_s": wall,
        "cpu_s": cpu,
        "packets": int(res.n_packets),
        "events": int(res.n_events),
        "simulated_s": 1e-3,
        "peak_rss_gb": peak_rss_gb(),
    }


def _derangement(n: int) -> np.ndarray:
    dst = np.random.default_rng(13).permutation(n)
    for i in np.flatnonzero(dst == np.arange(n)):
        j = (i + 1) % n
        dst[i], dst[j] = dst[j], dst[i]
    return dst


def largest_1ms() -> dict:
    runs, best = [], None
    for n in SWEEP_HOSTS:
        if runs and runs[-1]["wall_s"] * n / runs[-1]["hosts"] > 1.25 * LIMIT_S:
            break
        r = one_ms_run(n)
        runs.append(r)
        print(f"1 ms on {n} hosts: {r['wall_s']:.1f} s", file=sys.stderr, flush=True)
        if r["wall_s"] <= LIMIT_S:
            best = r
        else:
            break
    return {
        "largest_1ms_hosts": best["hosts"] if best else None,
        "largest_1ms_wall_s": best["wall_s"] if best else None,
        "sweep_1ms": runs,
    }


def with_htsim(exe: Path, ecmp_seeds: int) -> dict:
    """The side-by-side table (htsim + packet engine), the FCT ratios and the speed against
    htsim, whole process against whole process (module doc)."""

    def log(name, mode, row):
        h, o = row.get("htsim", {}), row.get("packet", {})
        print(
            f"{name:15s} {mode:8s} htsim p50/p99 {h.get('fct_p50_us')}/{h.get('fct_p99_us')} "
            f"wall {h.get('wall_s')}; ours {o.get('fct_p50_us')}/{o.get('fct_p99_us')} "
            f"wall {o.get('wall_s')}",
            file=sys.stderr,
            flush=True,
        )

    scenarios = H.default_scenarios()
    table = H.side_by_side(scenarios, exe, ("packet",), log, ecmp_seeds)
    perm = table["permutation"]["spray"]
    cmp_ = H.compare(table, "packet")
    wp = H.whole_process_pairs(
        exe,
        scenarios["permutation"],
        "spray",
        "packet",
        PAIRS,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    return {
        **digest(cmp_),
        "connection_semantics": H.CONNECTIONS,
        "matched": H.matched(),
        "htsim_build": H.htsim_build(exe),
        "whole_process_ratio_vs_htsim": wp["ratio_median"],
        "whole_process_ratio_vs_htsim_min": wp["ratio_min"],
        "whole_process_ratio_vs_htsim_max": wp["ratio_max"],
        "whole_process_ratio_vs_htsim_pairs": wp["pairs"],
        "whole_process_ratio_vs_htsim_cache": wp["cache"],
        "whole_process_wall_s": wp["ours_wall_s_median"],
        "htsim_wall_s": wp["htsim_wall_s_median"],
        "engine_only_ratio_vs_htsim": wp["engine_only_ratio_median"],
        "whole_process_vs_htsim": wp,
        "fct_p50_ratio_vs_htsim": perm["packet"]["fct_p50_us"] / perm["htsim"]["fct_p50_us"],
        "fct_p99_ratio_vs_htsim": perm["packet"]["fct_p99_us"] / perm["htsim"]["fct_p99_us"],
        "scenarios": cmp_,
        "table": table,
        "htsim_commands": {
            f"{n}/{m}": rows[m]["htsim"]["command"] for n, rows in table.items() for m in rows
        },
    }


def digest(cmp_: dict) -> dict:
    """Compact views of :func:`_htsim.compare`: ours/htsim per scenario and mode (p50, p99,
    completion), how many are within 10%, the mode ratios within 25%, the orderings."""
    short = {"fct_p50_us": "p50", "fct_p99_us": "p99", "completion_us": "completion"}
    ratios = {
        f"{name}/{m}": {short[k]: v for k, v in r.items()}
        for name, c in cmp_.items()
        for m, r in c["ratio_vs_htsim"].items()
    }
    vals = [v for r in ratios.values() for v in r.values() if v is not None]
    checks = [
        x["within_25pct"]
        for c in cmp_.values()
        for per in c["mode_ratios"].values()
        for x in per.values()
        if x["within_25pct"] is not None
    ]
    return {
        "ratios_vs_htsim": ratios,
        "ratios_within_10pct": f"{sum(abs(v - 1) <= 0.1 for v in vals)} of {len(vals)}",
        "mode_ratios_within_25pct": f"{sum(checks)} of {len(checks)}",
        "orderings": {name: c["ordering"] for name, c in cmp_.items()},
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    H.add_htsim_argument(p, "htsim build")
    p.add_argument("--no-sweep", action="store_true", help="skip the 1 ms largest-fabric sweep")
    args = p.parse_args()
    H.warm_up(("packet",))
    result = {
        "scenario": "512-host 2 MB permutation, spray, leaf_spine(512, 32, 100G), MTU 4000+64, "
        "queue 140000 B (q = 35 MTU payloads), NDP trim, cwnd 50",
    }
    exe = None if args.htsim is None else H.find_binary(args.htsim)
    if args.htsim is not None and exe is None:
        print(f"no htsim_ndp build under {args.htsim}", file=sys.stderr)
        result["htsim"] = f"no htsim_ndp under {args.htsim}"
    if exe is not None:  # the headline is the side-by-side table's permutation/spray run
        side = with_htsim(exe, 1 if args.quick else 3)
        result.update(headline(side["table"]["permutation"]["spray"]["packet"]))
        result.update(side)
    else:
        result.update(headline(H.run_packet(H.default_scenarios()["permutation"], "spray")[0]))
    if not args.no_sweep:
        result.update(largest_1ms())
    result["peak_rss_gb"] = peak_rss_gb()
    emit("packet_speed", result, args.out)


if __name__ == "__main__":
    main()
