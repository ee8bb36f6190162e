"""``trainfabric diloco live`` and ``trainfabric diloco calibrate`` (registered by
:mod:`trainfabric.diloco.cli`; the experiment's modules are imported only when a command runs,
so ``trainfabric --help`` imports neither torch nor the serving stack)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainfabric.clikit import JsonOpt, emit_json, err, finite, options, out, progress
from trainfabric.io import prepare_dir

NAMES = {
    "policy": "--policy",
    "policies": "--policy",
    "seeds": "--seeds",
    "seed0": "--seed",
    "duration_s": "--duration-s",
    "rate_scale": "--rate-scale",
    "learners": "--learners",
    "shaping_mbit": "--shaping-mbit",
    "server": "--server",
    "min_h": "--min-h",
    "max_h": "--max-h",
    "H": "--H",
    "pilot": "--pilot",
    "fragments": "--fragments",
    "overlap": "--fragments",
    "placement": "--testbed",
    "serve_core": "--testbed",
    "train_core": "--testbed",
}
ROW = ("slo_violation_rate", "syncs", "sync_time_fraction", "final_loss", "tokens")


def live_cmd(
    policy: Annotated[
        list[str] | None,
        typer.Option(help="Policy to run (repeatable; the first is the headline) [wa_forecast]."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(min=0, max=10_000, help="First seed (segment) [22; quick 10]."),
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(min=1, max=1000, help="Paired seeds [10; quick 2].")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="A few minutes: 2 seeds of 45 s (policy, matched random, no-sync).")
    ] = False,
    duration_s: Annotated[
        float | None,
        typer.Option(
            help="Replay seconds per run [120; quick 45].", callback=finite(ge=10, le=86_400)
        ),
    ] = None,
    rate_scale: Annotated[
        float | None,
        typer.Option(help="x the trace's own request rate [0.4].", callback=finite(gt=0, le=100)),
    ] = None,
    learners: Annotated[int, typer.Option(min=2, max=16, help="DiLoCo learners.")] = 2,
    shaping_mbit: Annotated[
        float | None,
        typer.Option(
            help="Learner link rate (Mbit/s, tc tbf) [10; --testbed derives its own].",
            callback=finite(gt=0, le=1e5),
        ),
    ] = None,
    testbed: Annotated[
        bool,
        typer.Option(
            help="The testbed's placement: vLLM and its client on core 0, serving's traffic "
            "across the learners' shaped link (14.5 Mbit/s from INTELLECT-1, 100 ms queue), "
            "learners on core 1; H 125, guards 50..250, 60 s replays [quick: 2 seeds from 45]."
        ),
    ] = False,
    fragments: Annotated[
        int,
        typer.Option(
            min=0,
            max=48,
            help="Streaming DiLoCo with this many fragments, the policy deciding per fragment "
            "and matched random drawn per fragment (0: whole-model DiLoCo).",
        ),
    ] = 0,
    server: Annotated[str, typer.Option(help="Serving engine: vllm or emulator.")] = "vllm",
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Run directory.", show_default="runs/diloco-live")
    ] = None,
    pilot: Annotated[
        Path | None,
        typer.Option(
            help="A pilot's summary.json (or diloco_live benchmark result) on other segments: "
            "its per-seed SLO differences give the power calculation the summary states.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Real DiLoCo learners + a real server + trace replay; matched random, no-sync, sim twin.

    The headline policy vs its matched random on SLO violations is the primary comparison
    (sign-flip test, alone); its losses and every other comparison form one Holm family."""
    from trainfabric.config import validate
    from trainfabric.diloco.live import (
        LiveConfig,
        check_config,
        quick_config,
        run_to_dir,
        testbed_config,
    )
    from trainfabric.errors import ConfigError

    if testbed:
        base = testbed_config(**({"seeds": 2, "seed0": 45} if quick else {}))
        if shaping_mbit is not None:
            with options(**NAMES):
                raise ConfigError("shaping_mbit", "--testbed derives the link's rate itself")
    else:
        base = quick_config() if quick else LiveConfig()
    update = {"policies": policy or base.policies}
    if rate_scale is not None:
        update["rate_scale"] = rate_scale
    if shaping_mbit is not None:
        update["shaping_mbit"] = shaping_mbit
    update |= {"learners": learners, "server": server, "fragments": fragments}
    if seed is not None:
        update["seed0"] = seed
    if seeds is not None:
        update["seeds"] = seeds
    if duration_s is not None:
        update["duration_s"] = duration_s
    if pilot is not None:
        from trainfabric.diloco.live import pilot_effects_from
        from trainfabric.io import loads, read_file

        with options(**NAMES):
            text = read_file(pilot, "--pilot", "JSON file", max_bytes=64 << 20)
            try:
                doc = loads(text)
            except ValueError as exc:
                raise ConfigError("pilot", f"{pilot} is not JSON: {exc}") from None
            update["pilot_effects"] = pilot_effects_from(doc, (policy or base.policies)[0])
            update["pilot_source"] = str(pilot)
    with options(**NAMES):
        cfg = validate(LiveConfig, base.model_dump() | update)
        check_config(cfg)
    out_dir = prepare_dir(out_dir or Path("runs/diloco-live" + ("-quick" if quick else "")))
    with progress(json_out, "diloco live") as bar, options(**NAMES):
        res = run_to_dir(cfg, out_dir, console=None if bar.disable else bar.console)
    if json_out:
        return emit_json(res)
    t = Table("policy", *ROW, title=f"DiLoCo live on {res['server']} ({cfg.seeds} seeds)")
    for name, row in res["policies"].items():
        t.add_row(name, *(f"{row[k]:.4g}" for k in ROW))
    out.print(t)
    out.print(comparison_table(res["comparisons"]))
    for text in res["design"]["warnings"]:
        err.print(f"[bold red]{text}[/]")
    plan = res["power"]
    if plan.get("n_required") is not None or plan.get("pilot_effect") is not None:
        err.print(
            f"power {plan['power']:g} at alpha {plan['alpha']:g}: effect "
            f"{plan['pilot_effect']:.4g}, sd {plan['pilot_sd']}, over {plan['pilot_seeds']} "
            f"seeds ({plan['source']}): needs {plan['n_required']} seeds, ran {cfg.seeds}"
        )
    err.print(
        f"sim_vs_real_effect_ratio: {res['sim_vs_real_effect_ratio']} "
        f"({res['effect_transfer']['ratio_note']}); run directory: {res['run_dir']}"
    )


def comparison_table(comparisons: dict) -> Table:
    """Every comparison the design judged: the mean difference, the p-value its verdict
    used (the primary's own, a secondary's Holm-adjusted), the verdict and, beside every
    loss comparison, the tokens each side trained at the point compared."""
    t = Table(
        "comparison",
        "role",
        "mean (policy − control)",
        "p (adjusted)",
        "verdict",
        "tokens: policy / control (ratio)",
        title="vs matched random (sign-flip test; secondaries Holm-adjusted together)",
    )
    for comp in comparisons.values():
        for key in ("slo", "loss_equal_tokens", "loss_equal_wall", "final_loss"):
            row = comp.get(key)
            if not row or "verdict" not in row:
                continue
            tokens = ""
            if key != "slo":
                ratio = row.get("tokens_ratio")
                tokens = f"{row['tokens_policy']:,.0f} / {row['tokens_control']:,.0f} " + (
                    f"({ratio:.3f})" if ratio is not None else ""
                )
            p = "" if row["p"] is None else f"{row['p_adjusted']:.3g} (raw {row['p']:.3g})"
            t.add_row(row["comparison"], row["role"], f"{row['mean']:+.4g}", p, row["verdict"],
                      tokens)  # fmt: skip
    return t


def calibrate_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Live run directories (one per run).")],
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the calibration JSON here.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit the simulator's progress and interference parameters from live runs."""
    from trainfabric.diloco.calibrate import calibrate
    from trainfabric.io import write_json

    with options(run_dirs="RUN_DIRS"):
        doc = calibrate(run_dirs)
    if out_file is not None:
        write_json(out_file, doc)
    if json_out:
        return emit_json(doc)
    t = Table("parameter", "value", title="calibrated simulator parameters")
    for section in ("serving", "progress"):
        for k, v in doc["fleet"][section].items():
            t.add_row(f"{section}.{k}", f"{v:.6g}")
    for k, v in doc["loss_curve"].items():
        t.add_row(f"loss_curve.{k}", f"{v:.6g}")
    t.add_row("sync samples", str(len(doc["sync_duration_samples_s"])))
    out.print(t)
