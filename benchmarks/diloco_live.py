"""DiLoCo live: real learners + a real vLLM server + Azure-trace replay on this machine's cores.

Per seed (``--quick``: 2 seeds of 45 s, trace segments 10 and 11 at 0.4 x the trace's rate;
full: 10 seeds of 120 s from segment 22; see :mod:`trainfabric.diloco.live`), the headline policy
``wa_forecast``, its matched-random control (same sync count, uniform schedule under the
guards) and the no-sync load match, each a real run: two DiLoCo learner processes (0.83 M
parameters, inner AdamW, gloo all-reduce of the pseudo-gradients over 10 Mbit/s tbf-shaped
veth links between network namespaces, outer Nesterov) sharing the cores with the vLLM server
(tiny Llama) that the replay drives open-loop while the sidecar scrapes ``/metrics`` for the
controller. Then the simulator is calibrated on these runs and replays the same seeds,
requests and policies (the simulated twin): ``sim_vs_real_effect_ratio`` = the simulated
``SLO(wa_forecast) − SLO(matched random)`` over the live one (null when the live effect is
exactly 0; ``effect_transfer.real_effect_significant`` says whether it is distinguishable
from 0 at all). With 2 seeds no test can go below p = 0.5 (``min_attainable_p``): --quick
measures, it does not decide (the output's ``design.warnings`` says so).

Statistics (:class:`trainfabric.diloco.stats.Design`): the primary comparison, named before
the runs, is ``wa_forecast`` vs its matched random on SLO violations (sign-flip test, alone at
0.05); the losses at equal tokens, at equal wall-clock and at the end form one Holm family,
each with the tokens both arms trained beside it. ``power`` states the seeds a power of 0.8
needs, from ``--pilot FILE`` (a previous result on other segments, e.g. the ``--quick`` one)
or, without it, post hoc from this run. ``--reanalyse FILE`` judges a stored result by these
rules from the data it holds (no run; printed, nothing written).
"""

from __future__ import annotations

from pathlib import Path

from _common import emit, parser, peak_rss_gb

KEYS = ("slo_violation_rate", "syncs", "sync_time_fraction", "final_loss", "tokens", "requests")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--server", default="vllm", choices=("vllm", "emulator"))
    p.add_argument("--run-dir", type=Path, default=Path("runs/bench-diloco-live"))
    p.add_argument("--pilot", type=Path, help="a previous result on other segments (power)")
    p.add_argument("--reanalyse", type=Path, help="judge this stored result; run nothing")
    args = p.parse_args()
    from rich.console import Console

    from trainfabric.diloco.live import (
        LiveConfig,
        pilot_effects_from,
        quick_config,
        reanalyse,
        run_to_dir,
    )
    from trainfabric.io import dumps, loads, prepare_dir

    pilot = loads(args.pilot.read_text()) if args.pilot else None
    if args.reanalyse:
        print(dumps(reanalyse(loads(args.reanalyse.read_text()), pilot), indent=1))
        return
    cfg = quick_config(server=args.server) if args.quick else LiveConfig(server=args.server)
    if pilot is not None:
        effects = pilot_effects_from(pilot, cfg.policies[0])
        cfg = cfg.model_copy(update={"pilot_effects": effects, "pilot_source": str(args.pilot)})
    res = run_to_dir(cfg, prepare_dir(args.run_dir), console=Console(stderr=True))
    lead = res["policies"][res["policy"]]
    emit(
        "diloco_live",
        {
            "quick": args.quick,
            "server": res["server"],
            "policy": res["policy"],
            "seeds": cfg.seeds,
            "first_seed": cfg.seed0,
            "duration_s": cfg.duration_s,
            "slo_violation_rate": res["slo_violation_rate"],
            "final_loss": res["final_loss"],
            "syncs": res["syncs"],
            "tokens": res["tokens"],
            "sim_vs_real_effect_ratio": res["sim_vs_real_effect_ratio"],
            "effect_transfer": res["effect_transfer"],
            "policies": {name: {k: row[k] for k in KEYS} for name, row in res["policies"].items()},
            "latency_inside_vs_outside_syncs": lead["latency_inside_vs_outside_syncs"],
            "design": res["design"],
            "power": res["power"],
            "comparison": res["comparisons"].get(res["policy"]),
            "min_attainable_p": res["min_attainable_p"],
            "sync_time_regression": res["sync_time_regression"],
            "simulated_twin": res["simulated_twin"],
            "calibration": res["calibration"],
            "shaping": res["shaping"],
            "wall_s": res["wall_s"],
            "peak_rss_gb": peak_rss_gb(),
            "run_dir": res["run_dir"],
        },
        args.out,
    )


if __name__ == "__main__":
    main()
