"""DiLoCo live on the testbed: the live protocol for DiLoCo and for Streaming DiLoCo where a
sync costs serving, and a held-out twin that predicts each seed.

The placement is :mod:`trainfabric.diloco.live_testbed`'s (vLLM and the load client on core 0,
the two learners on core 1, serving's requests and responses across the learners' shaped
link at 14.5 Mbit/s, the INTELLECT-1-derived rate, with the 100 ms queue fixed as the
testbed's headline before it ran); the protocol is :mod:`trainfabric.diloco.live`'s with
:func:`~trainfabric.diloco.live.testbed_config` (H = 125 inner steps, guards 50..250, 60 s
replays at 0.4 x the trace's rate). Two experiments, each with its own server:

* ``diloco``: whole-model DiLoCo, ``wa_forecast`` vs its matched random;
* ``streaming``: Streaming DiLoCo with P = 4 fragments (overlap 1 step, alpha 0.5),
  ``wa_forecast`` deciding per fragment vs matched random drawn per fragment with each
  fragment's own count (:mod:`trainfabric.diloco.live_fragments`).

Each: a pilot of 2 seeds on other segments (60 s segments 45-46), then the seeds a power of
0.8 needs for the primary comparison by :func:`~trainfabric.diloco.stats.power_plan` on the
pilot's SLO differences, at least 6 and at most 8 (segments 55-62: the eight consecutive
non-empty 60 s segments at this rate; the cap is this machine's time, stated in the output
with whether it sufficed). The **primary** comparison, named before the runs: the policy vs
matched random on the SLO violation rate (sign-flip test alone at 0.05); the losses at equal
tokens, at equal wall-clock and at the end are one Holm family.

The **twin** (``diloco`` only: the simulator's syncs are whole-model), held out by seed: for
every seed, the simulator is calibrated (:func:`~trainfabric.diloco.calibrate.calibrate`) on
the other seeds' runs only and replays that seed's requests under the policy and 20 matched
random draws (:func:`~trainfabric.diloco.live.simulate_seeds`); ``twin_max_seed_error_pp`` is
the largest ``|simulated − live|`` SLO violation rate, in percentage points, over the seeds and
both arms; ``twin_effect_sign_agrees`` compares the signs of the mean policy effect (0 counts
as its own sign); ``twin_ablation``: the same with the link term, chunked prefill or the
failure rate removed (what the twin needs); beside each seed's error, the sampling error
of the live rate if the twin is right (``sqrt(p (1 − p) / requests)``, ``p`` the twin's
rate), the noise no twin of expected rates can remove.
``--quick``: one seed of 20 s per experiment, no pilot (a smoke run). ``--from RUN_DIR``:
analyse the runs a previous invocation left in ``RUN_DIR`` (its ``<variant>/pilot`` and
``<variant>/main`` directories) with this code, running nothing (``runs_from`` names their
commit). ``--pilot-from DIR``: take each variant's pilot from ``DIR/<variant>/pilot``
instead of running it.
"""

from __future__ import annotations

from pathlib import Path

from _common import emit, parser, peak_rss_gb

POLICY = "wa_forecast"
VARIANTS = {"diloco": 0, "streaming": 4}
PILOT_SEED0, PILOT_SEEDS, SEED0, MIN_SEEDS, MAX_SEEDS = 45, 2, 55, 6, 8


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--server", default="vllm", choices=("vllm", "emulator"))
    p.add_argument("--run-dir", type=Path, default=Path("runs/bench-diloco-live-testbed"))
    p.add_argument("--variant", choices=tuple(VARIANTS), action="append")
    p.add_argument("--from", dest="from_dir", type=Path, help="analyse these runs; run nothing")
    p.add_argument("--pilot-from", type=Path, help="reuse the pilots stored here (DIR/<variant>)")
    args = p.parse_args()
    from rich.console import Console

    from trainfabric.io import prepare_dir

    console = Console(stderr=True)
    out = {"quick": args.quick, "server": args.server, "policy": POLICY}
    for name in args.variant or VARIANTS:
        if args.from_dir is not None:
            out[name] = analyse(*stored(args.from_dir / name))
        else:
            out[name] = experiment(name, VARIANTS[name], args, prepare_dir(args.run_dir / name),
                                   console)  # fmt: skip
    twin = out.get("diloco", {}).get("twin") or {}
    out["twin_max_seed_error_pp"] = twin.get("max_seed_error_pp")
    out["twin_effect_sign_agrees"] = twin.get("effect_sign_agrees")
    emit("diloco_live_testbed", out | {"peak_rss_gb": peak_rss_gb()}, args.out)


def experiment(name: str, fragments: int, args, run_dir: Path, console) -> dict:
    """One variant: the pilot, the power calculation, the main run; then :func:`analyse`."""
    from trainfabric.diloco.live import run_to_dir, testbed_config
    from trainfabric.io import prepare_dir

    base = {"server": args.server, "fragments": fragments, "policies": [POLICY],
            "no_sync": False}  # fmt: skip
    pilot = None
    if args.quick:
        cfg = testbed_config(**base, seeds=1, seed0=SEED0, duration_s=20.0, warmup_s=5.0)
    else:
        if args.pilot_from is not None:
            pilot = stored(args.pilot_from / name)[2]
        else:
            pilot_cfg = testbed_config(**base, seeds=PILOT_SEEDS, seed0=PILOT_SEED0)
            pilot = run_to_dir(pilot_cfg, prepare_dir(run_dir / "pilot"), console=console)
        n = power(pilot)["seeds_used"]
        effects = pilot["comparisons"][POLICY]["slo_effect_per_seed"]
        source = f"{name} pilot, segments {PILOT_SEED0}-{PILOT_SEED0 + PILOT_SEEDS - 1}"
        cfg = testbed_config(**base, seeds=n, seed0=SEED0, pilot_effects=effects,
                             pilot_source=source)  # fmt: skip
    res = run_to_dir(cfg, prepare_dir(run_dir / "main"), console=console)
    return analyse(cfg, res, pilot)


def power(pilot: dict) -> dict:
    """The seeds the primary comparison needs by the pilot's SLO differences, within
    ``[MIN_SEEDS, MAX_SEEDS]`` (module doc)."""
    from trainfabric.diloco import stats

    effects = pilot["comparisons"][POLICY]["slo_effect_per_seed"]
    plan = stats.power_plan(effects, 0.05, 0.8, max_seeds=MAX_SEEDS, source="pilot")
    n = min(MAX_SEEDS, max(MIN_SEEDS, int(plan["n_chosen"] or MAX_SEEDS)))
    plan |= {"pilot_first_seed": PILOT_SEED0, "seeds_used": n,
             "pilot_runs_from": pilot.get("runs_commit")}  # fmt: skip
    plan["sufficient"] = None if plan["n_required"] is None else n >= plan["n_required"]
    return plan


def stored(run_dir: Path) -> tuple:
    """``(cfg, summary, pilot summary or None)`` of a variant's stored runs."""
    from trainfabric.diloco.live import LiveConfig
    from trainfabric.io import loads

    main = loads((run_dir / "main" / "manifest.json").read_text())
    config = {k: v for k, v in main["config"].items() if k != "shaping"}
    res = loads((run_dir / "main" / "summary.json").read_text())
    pilot_dir = run_dir / "pilot"
    pilot = None
    if (pilot_dir / "summary.json").is_file():
        made = loads((pilot_dir / "manifest.json").read_text()).get("git")
        pilot = loads((pilot_dir / "summary.json").read_text()) | {"runs_commit": made}
    return LiveConfig(**config), res | {"runs_commit": main.get("git")}, pilot


def analyse(cfg, res: dict, pilot: dict | None) -> dict:
    """A variant's result: the design's verdicts, the arms, and (fragments) the counts per
    fragment or (DiLoCo) the held-out twin, from the runs in ``res["run_dir"]``."""
    from trainfabric.diloco import stats
    from trainfabric.diloco.live_twin import heldout_twin, twin_ablation

    comp = res["comparisons"][POLICY]
    doc = {
        "fragments": cfg.fragments,
        "seeds": cfg.seeds,
        "first_seed": cfg.seed0,
        "duration_s": cfg.duration_s,
        "power": power(pilot) if pilot is not None else res["power"],
        "design": res["design"],
        "primary": comp["slo"],
        "secondary": {k: comp.get(k) for k in stats.LOSS_METRICS},
        "seeds_with_equal_sync_count": comp.get("seeds_with_equal_sync_count"),
        "tokens_trained": comp.get("tokens_trained"),
        "policies": {
            k: {
                m: v[m]
                for m in (
                    "slo_violation_rate",
                    "syncs",
                    "sync_time_fraction",
                    "mean_sync_s",
                    "final_loss",
                    "tokens",
                )
            }
            for k, v in res["policies"].items()
        },  # fmt: skip
        "latency_inside_vs_outside_syncs": split(cfg, Path(res["run_dir"])),
        "shaping": res["shaping"],
        "wall_s": res["wall_s"],
        "run_dir": res["run_dir"],
        "runs_from": res.get("runs_commit"),
    }
    if cfg.fragments:
        doc["fragment_counts"] = fragment_check(cfg, Path(res["run_dir"]))
    else:
        doc["twin"] = twin = heldout_twin(cfg, Path(res["run_dir"]))
        lo, hi = comp["slo"]["ci"]
        twin |= {"live_effect_ci": [lo, hi], "live_sign_determined": not lo <= 0.0 <= hi,
                 "sim_effect_in_live_ci": lo <= twin["sim_effect"] <= hi}  # fmt: skip
        doc["twin_ablation"] = twin_ablation(cfg, Path(res["run_dir"]))
    return doc


def split(cfg, run_dir: Path) -> dict:
    """Serving inside vs outside syncs over the policy's runs, from their tables."""
    from types import SimpleNamespace

    import pandas as pd

    from trainfabric.diloco.live import pooled_split

    runs = [
        SimpleNamespace(
            requests=pd.read_parquet(run_dir / f"seed{seed}-{POLICY}" / "requests.parquet"),
            syncs=pd.read_parquet(run_dir / f"seed{seed}-{POLICY}" / "syncs.parquet"),
            duration_s=cfg.duration_s,
        )
        for seed in range(cfg.seed0, cfg.seed0 + cfg.seeds)
    ]
    return pooled_split(runs)


def fragment_check(cfg, run_dir: Path) -> dict:
    """Per seed, each fragment's sync count under the policy and under its matched random,
    and each arm's inner steps within the replay. A fragment syncs at most once per due
    period (``[o_p + jH, o_p + (j+1)H)``), so a matched run that reached fewer of a
    fragment's due steps than the policy run synced it cannot match that count:
    ``shortfalls`` lists every fragment short, with the due periods the matched run
    reached."""
    import numpy as np
    import pandas as pd

    from trainfabric.diloco.live_fragments import fragment_counts

    arms = (POLICY, f"matched_random[{POLICY}]")
    out, ratio, short = {}, [], []
    for seed in range(cfg.seed0, cfg.seed0 + cfg.seeds):
        counts, steps = {}, {}
        for arm in arms:
            sy = pd.read_parquet(run_dir / f"seed{seed}-{arm}" / "syncs.parquet")
            counts[arm] = fragment_counts(sy, cfg.fragments, cfg.duration_s)
            st = pd.read_parquet(run_dir / f"seed{seed}-{arm}" / "steps.parquet")
            inside = st["step"][(st["wall_s"] >= 0) & (st["wall_s"] <= cfg.duration_s)]
            steps[arm] = int(inside.max()) if len(inside) else 0
        ratio.append(steps[arms[1]] / max(steps[arms[0]], 1))
        for p, (a, b) in enumerate(zip(counts[arms[0]], counts[arms[1]], strict=True)):
            if a != b:
                o = p * cfg.H // cfg.fragments
                first = 1 if o == 0 else 0  # fragment 0 is first due at H
                reached = max(0, (steps[arms[1]] - o) // cfg.H - first + 1)
                short.append({"seed": seed, "fragment": p, "policy": a, "matched": b,
                              "periods_reached_by_matched": reached})  # fmt: skip
        out[str(seed)] = counts | {"equal": len(set(map(tuple, counts.values()))) == 1,
                                   "steps_within_replay": steps}  # fmt: skip
    return {"per_seed": out, "seeds_equal": sum(v["equal"] for v in out.values()),
            "matched_over_policy_steps_mean": float(np.mean(ratio)), "shortfalls": short,
            "shortfalls_past_the_periods_reached": sum(
                x["periods_reached_by_matched"] < x["policy"] for x in short)}  # fmt: skip


if __name__ == "__main__":
    main()
