"""Flow engine vs packet engine per scenario family, raw and calibrated (fit on some cases,
errors reported on others).

Families: ``permutation`` (large flows), ``alltoall_small`` (every pair, small flows),
``incast`` (k-to-1), ``ring_allreduce`` (ring all-reduce, steps released by their
predecessors, persistent connections), ``failures`` (a permutation with 10-20% of the
leaf-spine cables down, known to every mechanism) and ``flaps`` (a permutation during which
the most loaded fabric cable goes down and comes back). Modes: spray, ecmp, adaptive. Fabric:
a single-plane 2-tier leaf-spine of radix 16 (8 hosts and 8 uplinks per leaf) with 100 Gb/s
links and 1 us per hop, htsim's reference setting, where the packet engine is checked against
htsim (``benchmarks/vs_htsim.sh``); packet engine: its default configuration (NDP-like
transport, trimming, 35-packet queues, an initial window of 1.5 bandwidth-delay products
(``packet.config.auto_window``), 4096 B MTU + 64 B headers).

Fit cases: 32 hosts, seed 0 (sizes in ``FIT``); test cases: 64 hosts, seed 1, other sizes
(``TEST``). The calibration's two constants (:mod:`trainfabric.fabric.flow.calibration`:
``startup_s``, ``retx_gain``) minimise the mean squared log ratio flow/packet of the makespan
and of the mean flow completion time over the fit cases of ``FIT_FAMILIES`` and the modes
``FIT_MODES`` (a coordinate search on a grid). Then the trimming model's four fitted
constants (:mod:`trainfabric.fabric.flow.trimming`: ``reorder_gain``,
``adaptive_reorder_gain``, ``loss_gain``, ``second_timeout_fraction``) minimise the same loss
over ``TRIM_FIT``: the failure and flap families on the leaf-spine fit split and on a second
fit fabric (``FIT_MULTIPLANE``: 24 hosts on 4 planes of 200G, 800G NICs, seed 0), and the
permutation there (adaptive routing's plane queues need no fault), on the grids
``TRIM_GRIDS`` (coordinate search, two sweeps, from all four at 0). Every family is then
reported on every split; the test cases are held out of both fits. A second test set runs
on a third fabric (``TEST_MULTIPLANE``: 32 hosts on 4 planes of 200G, 800G NICs, seeds 2,
11, 21, other sizes). Reported per family and split: the relative error ``flow / packet -
1`` of the makespan and of the mean FCT, per mode, for the raw flow engine, the calibrated
one without the trimming model (``untrimmed``, the calibration before it) and the
calibrated one, and the largest absolute error over ``FIT_MODES`` (ecmp apart: each engine
draws its own hash, see ``FIT_MODES``). Top level: ``failures_max_error`` and
``flaps_max_error`` (the calibrated error's worst over both test splits),
``fault_errors_by_fabric`` (per family and split) and ``adaptive_multiplane_max_error``
(adaptive alone, every family, the multiplane test split).
FCT: ``finish - start``, start = the instant the message is posted (its dependencies done
and its step latency elapsed), finish = its last byte delivered. Wall times: each engine's
own ``wall_s`` (numba compile excluded: a warm-up run first).

``--quick`` runs one seed per test split; without it the test splits also run the seeds
``EXTRA_TEST_SEEDS`` (errors: the worst over seeds). The JSON's last line is printed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from _common import emit, parser

MODES = ("spray", "ecmp", "adaptive")
# Fitted and held to the target: the modes whose paths both engines choose alike. Under ecmp
# each engine hashes a connection to a path with its own function (the flow engine's
# routing.Router, the packet engine's per-switch hash), so which connections collide is a
# different draw: its error is reported, not fitted.
FIT_MODES = ("spray", "adaptive")
# The regimes the calibrated fluid model does not describe, with the reason (their error is
# reported).
OUT_OF_MODEL = {
    "spray under failures, fit case": "the packet engine's hash fallback sends a dead "
    "uplink's or cable's share of paths to one next hop, the fluid split spreads it evenly "
    "over the alive ones (100G leaf-spine, 10% of the cables down: packet 13% slower)",
    "flaps: which flows need timeouts": "a matter of packet timing; the model deals out the "
    "expected number (trimming module doc), so a case's mean FCT is off by the draw "
    "(multiplane: up to 12%)",
    "alltoall_small on multiplane": "32 KiB messages on 200G planes: mean FCT up to +25% "
    "(raw +17%); within 3.4% on the 100G leaf-spine",
}
LARGE = ("permutation", "ring_allreduce", "failures")
# Fitted on: the families the two constants model (no failure: the adaptive mode's LP split
# per run would make the grid search slow, and failures are held out entirely).
FIT_FAMILIES = ("permutation", "incast", "ring_allreduce")
FAMILIES = ("permutation", "alltoall_small", "incast", "ring_allreduce", "failures", "flaps")
KiB, MiB = 1024, 1024**2
# (hosts, seed, per-family size in bytes: per flow; all-to-all: per pair; ring: per rank buffer)
FIT = dict(
    hosts=32,
    seed=0,
    sizes={
        "permutation": 2 * MiB,
        "alltoall_small": 32 * KiB,
        "incast": 256 * KiB,
        "ring_allreduce": 4 * MiB,
        "failures": 2 * MiB,
        "flaps": 4 * MiB,
    },
)
TEST = dict(
    hosts=64,
    seed=1,
    sizes={
        "permutation": 8 * MiB,
        "alltoall_small": 64 * KiB,
        "incast": 512 * KiB,
        "ring_allreduce": 8 * MiB,
        "failures": 8 * MiB,
        "flaps": 8 * MiB,
    },
)
# A second held-out set on another fabric: 4-plane multiplane, 800G NICs (200G planes).
TEST_MULTIPLANE = dict(
    hosts=32,
    seed=2,
    sizes={
        "permutation": 16 * MiB,
        "alltoall_small": 32 * KiB,
        "incast": 1 * MiB,
        "ring_allreduce": 16 * MiB,
        "failures": 16 * MiB,
        "flaps": 16 * MiB,
    },
)
# The trimming model's multiplane fit cases: another multiplane fabric (24 hosts: 3 leaves per
# plane), seed 0, other sizes than the multiplane test.
FIT_MULTIPLANE = dict(
    hosts=24,
    seed=0,
    sizes={
        "permutation": 8 * MiB,
        "alltoall_small": 16 * KiB,
        "incast": 512 * KiB,
        "ring_allreduce": 8 * MiB,
        "failures": 8 * MiB,
        "flaps": 8 * MiB,
    },
)
SPLITS = {
    "fit": FIT,
    "fit_multiplane": FIT_MULTIPLANE,
    "test": TEST,
    "test_multiplane": TEST_MULTIPLANE,
}
MULTIPLANE = ("fit_multiplane", "test_multiplane")
TEST_SPLITS = ("test", "test_multiplane")
FAIL_FRACTION = {"fit": 0.1, "fit_multiplane": 0.1, "test": 0.2, "test_multiplane": 0.1}
INCAST_SENDERS = {"fit": 16, "fit_multiplane": 16, "test": 32, "test_multiplane": 24}
RING_RANKS = {"fit": 16, "fit_multiplane": 12, "test": 32, "test_multiplane": 16}
# The trimming model's constants (trainfabric.fabric.flow.trimming) are fitted on these
# families of the fit splits ("fit", "fit_multiplane"), modes FIT_MODES, after the two
# calibration constants; the test splits are held out.
FAULT_FAMILIES = ("failures", "flaps")
FAULT_FIT_SPLITS = ("fit", "fit_multiplane")
# (family, split) of the trimming fit (split seed): the fault families on both fit splits
# and the multiplane permutation (adaptive routing's plane queues: no fault needed)
TRIM_FIT = (
    *((f, s) for f in FAULT_FAMILIES for s in FAULT_FIT_SPLITS),
    ("permutation", "fit_multiplane"),
)
TRIM_GRIDS = {
    "reorder_gain": np.arange(0.0, 4.0 + 1e-9, 0.5),
    "adaptive_reorder_gain": np.arange(0.0, 2.0 + 1e-9, 0.1),
    "loss_gain": np.array([0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0]),
    "second_timeout_fraction": np.arange(0.0, 1.0 + 1e-9, 0.05),
}
# Without --quick the test splits also run these seeds (placements, permutations, failure
# draws, flapped cable); the worst error over all seeds is reported.
EXTRA_TEST_SEEDS = (11, 21)


@dataclass(frozen=True)
class Case:
    family: str
    split: str
    topo: object
    flows: object
    link_up: np.ndarray | None
    events: object | None
    label: str


def _topology(hosts: int, split: str):
    from trainfabric.fabric import topology as T

    if split in MULTIPLANE:
        return T.multiplane(hosts, planes=4, switch_radix=16, nic_rate_bps=800e9)
    return T.leaf_spine(hosts, switch_radix=16, nic_rate_bps=100e9)


def _collective(topo, kind: str, ranks: int, size: float, seed: int):
    from trainfabric.fabric.flow import collectives as C

    hosts = C.place(topo.host_leaf[0], ranks, "random", seed)
    steps = C.collective_steps(kind, ranks, size, "ring", seed)
    return C.collective_flows(steps, hosts, sync="rank", channels=1, seed=seed).flows


def _incast(topo, senders: int, size: float, seed: int):
    from trainfabric.fabric.flows import FlowTable

    order = np.random.default_rng(seed).permutation(topo.n_hosts)
    dst, src = order[0], order[1 : senders + 1]
    return FlowTable.simple(src, np.full(senders, dst), size)


def _flap_events(topo, flows, seed: int, at_s: float, duration_s: float):
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.events import LinkEvents
    from trainfabric.fabric.maxmin import link_load
    from trainfabric.fabric.routing import Router

    router = Router(topo, "ecmp", seed=seed)
    routes = router.route(flows, np.arange(flows.n))
    load = link_load(routes.group, routes.weight, router.groups, topo.n_links, flows.bytes)
    load[topo.link_tier != T.UP1] = -1
    best = int(np.argmax(load))
    return LinkEvents.flap([best, int(topo.reverse[best])], at_s, at_s + duration_s)


def make_case(family: str, split: str, seed: int | None = None) -> Case:
    """One case of ``family`` at the ``split``'s sizes and seed (or ``seed``)."""
    from trainfabric.fabric import topology as T

    spec = SPLITS[split]
    n, size = spec["hosts"], spec["sizes"][family]
    seed = spec["seed"] if seed is None else seed
    topo = _topology(n, split)
    link_up = events = None
    if family in ("permutation", "failures", "flaps"):
        flows = _collective(topo, "permutation", n, size, seed)
    elif family == "alltoall_small":
        flows = _collective(topo, "all_to_all", n, size * n, seed)
    elif family == "incast":
        flows = _incast(topo, INCAST_SENDERS[split], size, seed)
    else:
        flows = _collective(topo, "all_reduce", RING_RANKS[split], size, seed)
    if family == "failures":
        link_up = T.fail_links(topo, FAIL_FRACTION[split], seed=seed)
    if family == "flaps":
        events = _flap_events(topo, flows, seed, at_s=20e-6, duration_s=200e-6)
    fabric = "4-plane 800G" if split in MULTIPLANE else "100G leaf-spine"
    label = f"{n} hosts ({fabric}), seed {seed}, {size / KiB:g} KiB" + (
        f", {FAIL_FRACTION[split]:.0%} cables down" if family == "failures" else ""
    )
    return Case(family, split, topo, flows, link_up, events, label)


def _figures(start_s, finish_s) -> dict:
    fct = finish_s - start_s
    return {"makespan_s": float(np.nanmax(finish_s)), "mean_fct_s": float(np.nanmean(fct))}


def run_packet(case: Case, mode: str) -> dict:
    from trainfabric.fabric.packet import simulate_packets

    res = simulate_packets(
        case.topo, case.flows, mode, events=case.events, link_up=case.link_up, seed=0
    )
    if res.unfinished:
        raise RuntimeError(f"{case.family}/{mode}: {res.unfinished} packet flows unfinished")
    s = res.summary()
    return _figures(res.start_s, res.finish_s) | {
        "wall_s": res.wall_s,
        "retransmit_fraction": s["retransmit_fraction"],
    }


def run_flow(case: Case, mode: str, cal) -> dict:
    from trainfabric.fabric.flow.calibration import simulate_calibrated
    from trainfabric.fabric.routing import Router

    router = Router(case.topo, mode, seed=0)
    res = simulate_calibrated(
        case.topo, case.flows, router, cal, events=case.events, link_up=case.link_up
    )
    return _figures(res.start_s, res.finish_s) | {"wall_s": res.wall_s}


def _loss(flow: dict, packet: dict) -> float:
    return sum(np.log(flow[k] / packet[k]) ** 2 for k in ("makespan_s", "mean_fct_s"))


def _errors(flow: dict, packet: dict) -> dict:
    return {k: flow[k] / packet[k] - 1 for k in ("makespan_s", "mean_fct_s")}


def warm_up() -> None:
    """Compile both engines on a tiny run (numba), so that walls exclude compilation."""
    from trainfabric.fabric.flow.calibration import RAW

    case = make_case("incast", "fit")
    small = replace(case, flows=_incast(case.topo, 2, 8 * KiB, 0))
    for mode in MODES:
        run_packet(small, mode)
        run_flow(small, mode, RAW)


def _rows(case: Case, packet: dict, cal) -> dict:
    """Per mode: the packet figures and the errors of the raw flow engine, of the
    calibrated one without the trimming model (``untrimmed``) and of the calibrated one."""
    from trainfabric.fabric.flow.calibration import RAW

    untrimmed = replace(cal, trimming=None)
    rows = {}
    for mode in MODES:
        p = packet[mode]
        raw, calib = run_flow(case, mode, RAW), run_flow(case, mode, cal)
        rows[mode] = {
            "packet_makespan_us": p["makespan_s"] * 1e6,
            "packet_mean_fct_us": p["mean_fct_s"] * 1e6,
            "packet_retransmit_fraction": p["retransmit_fraction"],
            "raw_error": _errors(raw, p),
            "untrimmed_error": _errors(run_flow(case, mode, untrimmed), p),
            "calibrated_error": _errors(calib, p),
            "packet_wall_s": p["wall_s"],
            "flow_wall_s": calib["wall_s"],
        }
    return rows


def _worst(per_seed: list[dict]) -> dict:
    """Largest absolute errors over seeds, makespan and mean FCT: raw and calibrated over
    ``FIT_MODES``, and ecmp's."""

    def top(modes, which):
        return max(
            abs(e) for rows in per_seed for m in modes for e in rows[m][f"{which}_error"].values()
        )

    return {
        "raw_max_abs_error": top(FIT_MODES, "raw"),
        "untrimmed_max_abs_error": top(FIT_MODES, "untrimmed"),
        "calibrated_max_abs_error": top(FIT_MODES, "calibrated"),
        "adaptive_calibrated_max_abs_error": top(("adaptive",), "calibrated"),
        "ecmp_calibrated_max_abs_error": top(("ecmp",), "calibrated"),
    }


def _fit_calibration(cases, packet) -> tuple:
    """The two calibration constants on the fit cases of ``FIT_FAMILIES`` (split "fit"),
    then the trimming model's on ``TRIM_FIT`` (module doc); returns the calibration and the
    two fit losses."""
    from trainfabric.fabric.flow.calibration import fit, fit_fields
    from trainfabric.fabric.flow.trimming import TrimmingModel

    def error_on(keys):
        def error(cal) -> float:
            losses = [
                _loss(run_flow(cases[k], m, cal), packet[k][m]) for k in keys for m in FIT_MODES
            ]
            return float(np.mean(losses))

        return error

    fit_cases = [k for k in cases if k[1] == "fit" and k[0] in FIT_FAMILIES]
    startup_grid = np.arange(0.0, 6e-6 + 1e-12, 0.25e-6)
    gain_grid = np.arange(0.0, 2.0 + 1e-9, 0.25)
    cal, fit_loss = fit(error_on(fit_cases), startup_grid, gain_grid)
    trim_cases = [(f, s, SPLITS[s]["seed"]) for f, s in TRIM_FIT]
    trim_error = error_on(trim_cases)
    model, trim_loss = fit_fields(
        lambda t: trim_error(replace(cal, trimming=t)), TrimmingModel(), TRIM_GRIDS
    )
    return replace(cal, trimming=model), fit_loss, trim_loss


def _split_report(family, split, seeds, cases, packet, cal) -> dict:
    from trainfabric.fabric.flow.calibration import MAX_RETX, first_window_retx

    per_seed = {d: _rows(cases[(family, split, d)], packet[(family, split, d)], cal) for d in seeds}
    main_seed = SPLITS[split]["seed"]
    case = cases[(family, split, main_seed)]
    retx = float(first_window_retx(case.flows, cal).max(initial=0.0))
    errors = ("raw_error", "untrimmed_error", "calibrated_error")
    return {
        "case": case.label,
        "seeds": list(seeds),
        "modes": per_seed[main_seed],
        "other_seeds": {
            str(d): {m: {k: r[k] for k in errors} for m, r in rows.items()}
            for d, rows in per_seed.items()
            if d != main_seed
        },
        **_worst(list(per_seed.values())),
        "predicted_retx_max": retx,
        "fluid_valid": retx <= MAX_RETX,
    }


def _trimming_constants(model) -> dict:
    from trainfabric.fabric.flow.trimming import TrimmingModel

    return {name: getattr(model, name) for name in TrimmingModel.__dataclass_fields__}


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    from trainfabric.fabric.flow.calibration import FITTED

    t0 = time.perf_counter()
    warm_up()
    extra = () if args.quick else EXTRA_TEST_SEEDS
    seeds = {s: (SPLITS[s]["seed"], *(extra if s in TEST_SPLITS else ())) for s in SPLITS}
    cases = {(f, s, d): make_case(f, s, d) for s in SPLITS for d in seeds[s] for f in FAMILIES}
    packet = {k: {m: run_packet(c, m) for m in MODES} for k, c in cases.items()}
    cal, fit_loss, trim_loss = _fit_calibration(cases, packet)
    families = {
        f: {s: _split_report(f, s, seeds[s], cases, packet, cal) for s in SPLITS} for f in FAMILIES
    }

    def worst(family, which="calibrated_max_abs_error", splits=TEST_SPLITS) -> float:
        return max(families[family][s][which] for s in splits)

    by_fabric = {
        f: {
            s: {
                k: families[f][s][k]
                for k in (
                    "raw_max_abs_error",
                    "untrimmed_max_abs_error",
                    "calibrated_max_abs_error",
                )
            }
            for s in SPLITS
        }
        for f in FAULT_FAMILIES
    }
    test = {f: families[f]["test"]["calibrated_max_abs_error"] for f in FAMILIES}
    adaptive_mp = {
        f: families[f]["test_multiplane"]["adaptive_calibrated_max_abs_error"] for f in FAMILIES
    }
    result = {
        "quick": args.quick,
        "failures_max_error": worst("failures"),
        "flaps_max_error": worst("flaps"),
        "fault_errors_by_fabric": by_fabric,
        "adaptive_multiplane_max_error": max(adaptive_mp.values()),
        "adaptive_multiplane_calibrated_max_abs_error": adaptive_mp,
        "fitted": {
            "startup_s": cal.startup_s,
            "retx_gain": cal.retx_gain,
            "fit_loss": fit_loss,
            "trimming": _trimming_constants(cal.trimming),
            "trimming_fit_loss": trim_loss,
        },
        "committed_constants": {
            "startup_s": FITTED.startup_s,
            "retx_gain": FITTED.retx_gain,
            "trimming": _trimming_constants(FITTED.trimming),
        },
        "fit_cases": {"hosts": FIT["hosts"], "seed": FIT["seed"], "sizes_bytes": FIT["sizes"]},
        "fit_multiplane_cases": {
            "hosts": FIT_MULTIPLANE["hosts"],
            "seed": FIT_MULTIPLANE["seed"],
            "fabric": "multiplane, 4 planes, 800G NICs, radix 16",
            "sizes_bytes": FIT_MULTIPLANE["sizes"],
        },
        "trimming_fit_cases": [list(k) for k in TRIM_FIT],
        "test_cases": {
            "hosts": TEST["hosts"],
            "seeds": list(seeds["test"]),
            "sizes_bytes": TEST["sizes"],
        },
        "test_multiplane_cases": {
            "hosts": TEST_MULTIPLANE["hosts"],
            "seeds": list(seeds["test_multiplane"]),
            "fabric": "multiplane, 4 planes, 800G NICs, radix 16",
            "sizes_bytes": TEST_MULTIPLANE["sizes"],
        },
        "error_definition": "flow / packet - 1 of makespan and of mean FCT; max |.| over "
        "the fitted modes (spray, adaptive) and the seeds; ecmp separately (a different "
        "hash draw); failures_max_error, flaps_max_error: the calibrated error's max over "
        "the test splits (leaf-spine and multiplane)",
        "fit_modes": list(FIT_MODES),
        "fit_families": list(FIT_FAMILIES),
        "out_of_model": OUT_OF_MODEL,
        "families": families,
        "test_calibrated_max_abs_error": test,
        "test_raw_max_abs_error": {f: families[f]["test"]["raw_max_abs_error"] for f in FAMILIES},
        "test_multiplane_calibrated_max_abs_error": {
            f: families[f]["test_multiplane"]["calibrated_max_abs_error"] for f in FAMILIES
        },
        "test_multiplane_raw_max_abs_error": {
            f: families[f]["test_multiplane"]["raw_max_abs_error"] for f in FAMILIES
        },
        "within_10pct": {
            split: [f for f in FAMILIES if families[f][split]["calibrated_max_abs_error"] <= 0.1]
            for split in SPLITS
        },
        "large_flow_families": list(LARGE),
        "large_flow_target_10pct_met": all(test[f] <= 0.10 for f in LARGE),
        "wall_s": time.perf_counter() - t0,
    }
    emit("flow_vs_packet", result, args.out)


if __name__ == "__main__":
    main()
