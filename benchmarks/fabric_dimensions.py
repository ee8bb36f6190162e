"""F1-F5: the four evaluation dimensions of the seed paper, checked against the spec targets.

Runs the evaluation scenarios of ``trainfabric fabric eval --quick`` (64 GPUs, 4 planes of
radix-16 2-tier leaf-spine, 800G NICs; ``--quick``: 2 failure draws instead of 5) and the
two htsim reference experiments of the spec (section 5, measured there with htsim on a
full-bisection 2-tier leaf-spine, NDP, 100 Gb/s, MTU 4000 B):

* 512-host permutation of 2 MB flows: FCT p50 / p99 per mode — here a single-plane
  ``leaf_spine(512, radix 32, 100G)``, one connection per flow, ECMP = per-flow hash;
* 128-host ring all-reduce, 8 rings x 16 ranks, 250 KB chunks (a 4 MB buffer per rank),
  per-rank dependencies — ``leaf_spine(128, radix 16, 100G)``, rings on random hosts (the
  F2 check; htsim's measured ring is chained hop by hop, see below, so the two rings compare
  by their mode ratios only); rings on consecutive hosts (two leaves per ring) are reported
  beside it, not checked.

htsim's numbers (theirs) are read from ``benchmarks/results/packet_speed.json``, measured there
by ``packet_speed.py --htsim`` with a built htsim (its side-by-side table: the 512-host 2 MB
permutation and the 8 x 16-rank ring all-reduce of 250 KB hops, chained hop by hop as htsim's
``gen_allreduce.py`` writes it, on random hosts); the file's commit, time and htsim build are
recorded beside them, and without an htsim measurement there F2 is not checked. The paper's
98% and +7% are the paper's; both are printed beside ours and labelled. Targets: F1 busbw >=
0.97 of line rate with hardware LB (largest size); F2 the ordering spray <= adaptive < ECMP of
htsim, and our ratios to spray within 25% of htsim's; F3 (restated by issue 14) adaptive's
goodput across the bisection >= 0.98 of its max-flow bound at every failed fraction, ECMP's
mean permutation goodput below 1 - f (the first wave's "within 2% of 1 - f" is kept,
labelled); F4 victim within 5% of solo with adaptive (1:1, no failures), the ECMP penalty
shown; F5 the measured impairment after a flap equals the reaction time of the mode's
mechanism (within 2x).

F3 at full size (issue 33, ``F3_full``): the failures scenario of ``fabric eval`` without
``--quick`` (512 GPUs, 4 planes of radix-32 leaf-spine, 800G NICs, 2 draws per fraction),
adaptive only, at 10% and 20% failed cables: ``adaptive_over_maxflow_<f>pct_full`` is the
mean over the draws of the cut permutation's max-min goodput over its max-flow bisection
(target >= 0.98), and ``adaptive_over_maxflow_full_reason`` says what keeps it below.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, emit, parser

PAPER = {"line_rate": 0.98, "latency_increase_at_10pct": 0.07}
MODES = ("spray", "adaptive", "ecmp")


FULL_REASON = (
    "the fluid adaptive mode splits each pair's traffic by the minimum-congestion equaliser, "
    "which balances only the bottlenecked pairs and leaves the others near the "
    "capacity-proportional split, stranding capacity they could use; measured on these draws: "
    "the cut permutation's demand fits the cut exactly (its max throughput / max-flow = 1.000), "
    "and neither the max-min filling with fixed splits, per-pair splits nor header overhead "
    "costs anything. A max-min fair multipath split with a throughput-maximising completion "
    "reaches 0.995 (branch adaptive-max-min-split), but that LP maximises the very figure "
    "measured, so it is not taken as the model of a switch's adaptive routing"
)


def htsim_measured(path: Path = RESULTS / "packet_speed.json") -> dict | None:
    """htsim's F2 figures as ``packet_speed.py --htsim`` measured them (module doc): FCT p50 /
    p99 (us) of the permutation and completion (us) of the ring per mode, with where they come
    from; None when that file holds no htsim run."""
    if not path.is_file():
        return None
    ps = json.loads(path.read_text())
    table = ps.get("table") or {}
    try:
        perm = {m: table["permutation"][m]["htsim"] for m in MODES}
        ring = {m: table["ring_allreduce"][m]["htsim"] for m in MODES}
    except KeyError:
        return None
    prov = ps.get("provenance") or {}
    return {
        "perm_fct_us": {m: (r["fct_p50_us"], r["fct_p99_us"]) for m, r in perm.items()},
        "ring_us": {m: r["completion_us"] for m, r in ring.items()},
        "source": {
            "file": "benchmarks/results/packet_speed.json",
            "commit": prov.get("commit"),
            "utc": prov.get("utc"),
            "htsim_build": ps.get("htsim_build"),
            "ring": "8 x 16-rank chained rings (htsim's gen_allreduce.py), random hosts (seed 13)",
        },
    }


def htsim_permutation() -> dict:
    """FCT p50/p99 (us) of a 512-host 2 MB permutation per mode."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.flow.collectives import collective_steps
    from trainfabric.fabric.flow.engine import simulate
    from trainfabric.fabric.flows import FlowTable
    from trainfabric.fabric.routing import Router

    topo = T.leaf_spine(512, 32, 100e9)
    (step,) = collective_steps("permutation", 512, 2e6, seed=13)
    flows = FlowTable.simple(step.src, step.dst, step.bytes)
    out = {}
    for mode in MODES:
        fct = simulate(topo, flows, Router(topo, mode)).finish_s * 1e6
        out[mode] = tuple(float(q) for q in np.percentile(fct, [50, 99]))
    return out


def htsim_rings(placement: str = "random") -> dict:
    """Completion (us) of 8 concurrent 16-rank ring all-reduces on 128 hosts per mode;
    rings on random hosts or on consecutive hosts (``packed``: each ring on two leaves)."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.flow.collectives import collective_flows, collective_steps
    from trainfabric.fabric.flow.engine import simulate
    from trainfabric.fabric.flows import FlowTable
    from trainfabric.fabric.routing import Router

    topo = T.leaf_spine(128, 16, 100e9)
    order = np.random.default_rng(7).permutation(128) if placement == "random" else np.arange(128)
    hosts = order.reshape(8, 16)
    steps = collective_steps("all_reduce", 16, 16 * 250e3)
    rings = [collective_flows(steps, h, job=j, channels=1).flows for j, h in enumerate(hosts)]
    flows = FlowTable.concat(rings)
    return {m: simulate(topo, flows, Router(topo, m)).makespan_s * 1e6 for m in MODES}


def f3_full(fractions=(0.1, 0.2)) -> dict:
    """F3 at full size (module doc): per draw and mean over draws of the cut permutation's
    goodput over the max-flow bisection, with the draw's bisection, LP λ and random
    permutation goodput; the target keys ``adaptive_over_maxflow_<f>pct_full``."""
    from trainfabric.fabric import scenarios as S
    from trainfabric.fabric.scenarios.failures import MAXFLOW_TARGET, run_failures

    t0 = time.perf_counter()
    sc = S.eval_scenarios(quick=False)[2]
    sc = sc.model_copy(update={"modes": ["adaptive"], "fractions": list(fractions)})
    table = run_failures(sc)
    cols = ["failed_fraction", "draw", "goodput_over_maxflow", "maxflow_bisection"]
    cols += ["max_concurrent_flow_lp", "mean_permutation_goodput"]
    means = table.groupby("failed_fraction")["goodput_over_maxflow"].mean()
    keys = {f"adaptive_over_maxflow_{round(f * 100)}pct_full": float(v) for f, v in means.items()}
    return {
        "topology": sc.topology.model_dump(),
        "draws": sc.draws,
        "per_draw": table[cols].to_dict(orient="records"),
        **keys,
        "target": MAXFLOW_TARGET,
        "met": bool(all(v >= MAXFLOW_TARGET for v in keys.values())),
        "wall_s": time.perf_counter() - t0,
    }


def f2(perm: dict, rings: dict, htsim: dict) -> dict:
    """Ordering and ratio-to-spray checks against htsim's measured figures."""
    checks = {}
    for name, ours, theirs in (
        (
            "perm_p50",
            {m: v[0] for m, v in perm.items()},
            {m: v[0] for m, v in htsim["perm_fct_us"].items()},
        ),
        (
            "perm_p99",
            {m: v[1] for m, v in perm.items()},
            {m: v[1] for m, v in htsim["perm_fct_us"].items()},
        ),
        ("ring", rings, htsim["ring_us"]),
    ):
        for m in ("adaptive", "ecmp"):
            r_ours, r_theirs = ours[m] / ours["spray"], theirs[m] / theirs["spray"]
            checks[f"{name}_{m}_over_spray"] = {
                "ours": r_ours,
                "htsim (theirs)": r_theirs,
                "met": abs(r_ours / r_theirs - 1) <= 0.25,
            }
        checks[f"{name}_ordering"] = {
            "ours": sorted(ours, key=ours.get),
            "met": ours["spray"] <= ours["adaptive"] * (1 + 1e-9)
            and ours["adaptive"] < ours["ecmp"],
        }
    return checks


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    from trainfabric.fabric import scenarios as S

    t0 = time.perf_counter()
    scenarios = S.eval_scenarios(quick=True)
    scenarios[2] = scenarios[2].model_copy(update={"draws": 2 if args.quick else 5})
    tables = {sc.kind: S.run_scenario(sc)[S.STEMS[sc.kind]] for sc in scenarios}
    lr, iso, fail, flap = (tables[k] for k in ("line_rate", "isolation", "failures", "flaps"))

    big = lr[lr["size_bytes"] == lr["size_bytes"].max()]
    f1 = big.groupby(["collective", "mode"])["line_rate_fraction"].min().unstack()
    hw = f1[["spray", "adaptive"]].min(axis=1)

    per = fail.groupby(["mode", "failed_fraction"])["mean_permutation_goodput"].mean().unstack(0)
    ideal = 1 - per.index.to_numpy()
    over = fail.groupby(["mode", "failed_fraction"])["goodput_over_maxflow"].mean().unstack(0)
    lat10 = fail[np.isclose(fail["failed_fraction"], 0.1)].groupby("mode")["latency_increase_est"]

    base_iso = iso[(iso["oversubscription"] == 1.0) & (iso["failed_fraction"] == 0.0)]
    iso_ratio = base_iso.set_index("mode")["isolation_ratio"]

    f5 = {}
    for _, row in flap.iterrows():
        react = row["reaction_s"]
        f5[f"{row['mode']}/{row['flap']}"] = {
            "impaired_until_s": row["impaired_until_s"],
            "stall_s": row["stall_s"],
            "reaction_s (configured)": react,
            "met": row["impaired_until_s"] <= 2 * react + 1e-12,
        }

    perm, rings = htsim_permutation(), htsim_rings()
    rings_packed = htsim_rings("packed")
    htsim = htsim_measured()
    result = {
        "F1_line_rate": {
            "ours_min_hw_lb": {k: float(v) for k, v in hw.items()},
            "per_mode": f1.to_dict(),
            "paper (theirs)": PAPER["line_rate"],
            "header_bound": S.HEADER_BOUND,
            "met": bool((hw >= 0.97).all()),
        },
        "F2_htsim": {
            "permutation_fct_us_ours": perm,
            "permutation_fct_us_htsim (theirs)": htsim and htsim["perm_fct_us"],
            "ring_us_ours": rings,
            "ring_us_ours_packed_placement (not checked)": rings_packed,
            "ring_us_htsim (theirs)": htsim and htsim["ring_us"],
            "htsim_source": htsim["source"] if htsim else "no htsim run in packet_speed.json",
            "checks": f2(perm, rings, htsim) if htsim else {},
        },
        "F3_failures": {
            "mean_permutation_goodput": per.to_dict(),
            "maxflow_bisection_mean": fail.groupby("failed_fraction")["maxflow_bisection"]
            .mean()
            .to_dict(),
            "ideal_1_minus_f": dict(zip(per.index.tolist(), ideal.tolist(), strict=True)),
            "max_concurrent_flow_lp_mean": fail.groupby("failed_fraction")["max_concurrent_flow_lp"]
            .mean()
            .to_dict(),
            "latency_increase_at_10pct_est": lat10.mean().to_dict(),
            "paper latency increase at 10% (theirs)": PAPER["latency_increase_at_10pct"],
            "goodput_over_maxflow": over.to_dict(),
            "target": "adaptive goodput >= 0.98 of the max-flow bound at every failed fraction",
            "met_adaptive": bool(np.all(over["adaptive"].to_numpy() >= 0.98)),
            "met_spray": bool(np.all(over["spray"].to_numpy() >= 0.98)),
            "mean_goodput_within_2pct_of_1_minus_f (first-wave check)": {
                mode: bool(np.all(per[mode].to_numpy() >= ideal - 0.02))
                for mode in ("adaptive", "spray")
            },
            "ecmp_below_ideal": bool(np.all(per["ecmp"].to_numpy() < ideal)),
        },
        "F4_isolation": {
            "isolation_ratio": iso.set_index(["mode", "oversubscription", "failed_fraction"])[
                "isolation_ratio"
            ].to_dict(),
            "met": bool(iso_ratio["adaptive"] >= 0.95),
            "ecmp_penalty": float(1 - iso_ratio["ecmp"]),
        },
        "F5_flaps": {"per_mode_flap": f5, "met": all(v["met"] for v in f5.values())},
        "F3_full": f3_full(),
    }
    for key in ("adaptive_over_maxflow_10pct_full", "adaptive_over_maxflow_20pct_full"):
        result[key] = result["F3_full"][key]
    result["adaptive_over_maxflow_full_reason"] = FULL_REASON
    result["met"] = {
        "F1": result["F1_line_rate"]["met"],
        "F2": all(c["met"] for c in result["F2_htsim"]["checks"].values()) if htsim else None,
        "F3": result["F3_failures"]["met_adaptive"] and result["F3_failures"]["ecmp_below_ideal"],
        "F4": result["F4_isolation"]["met"],
        "F5": result["F5_flaps"]["met"],
        "F3_full": result["F3_full"]["met"],
    }
    result["wall_s"] = time.perf_counter() - t0
    emit("fabric_dimensions", _jsonable(result), args.out)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


if __name__ == "__main__":
    main()
