"""``trainfabric diloco ...``: workload-aware DiLoCo sync policies and the protocol.

``diloco sim``: one policy on one regime and seed (SLO, syncs, progress, and when the syncs
ran: ``--json`` lists every sync's ``start_s``, ``end_s`` and ``request_rate_per_s``; with
``--fragments P`` the fragment model of :mod:`~.fleet`, the policy deciding per fragment:
``syncs`` counts fragment syncs, ``fragment_syncs`` each fragment's, ``sync_s`` and
``sync_payload_bytes`` are one fragment's, and ``sync_times`` lists each start of fragment
syncs run back to back);
``diloco protocol``: every policy against its matched-random control over paired seeds and
regimes, with statistics, verdicts and their reasons, into a run directory with a report.

Text output leads with the answer in sentences (the protocol's ``findings``), then tables
from :mod:`trainfabric.tables` (full headers with units; one block per record when wider
than the terminal, ``--wide`` for the protocol's extra columns). ``--json`` keys of
``protocol`` beyond the per-regime rows: ``findings``, ``windows_per_seed`` and
``windows_note`` (what a trace regime's windows were chosen from), ``regime_labels`` and
``merged_regimes`` (regimes a trace makes identical run once), ``sync_timing`` (the request
rate during the primary policy's syncs, its matched random's and the mean).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainfabric.clikit import (
    ConfigOpt,
    GpusPerPodOpt,
    JsonOpt,
    MaxMemoryOpt,
    ProgressOpt,
    SeedOpt,
    emit_json,
    err,
    finite,
    input_file,
    options,
    out,
    progress,
)
from trainfabric.diloco import live_cli
from trainfabric.diloco.serve import cli as serve_cli
from trainfabric.diloco.train.command import train_cmd
from trainfabric.errors import ConfigError
from trainfabric.io import prepare_dir
from trainfabric.tables import Col, fmt_number, print_records

app = typer.Typer(help="Workload-aware DiLoCo sync policies.", no_args_is_help=True)
POLICIES = (
    "fixed_h, adaptive_tokens, adaptive_load, pressure_gate, random_deferral, wa_diloco, "
    "wa_forecast, wa_calibrated"
)
REGIMES = "steady, diurnal, bursty, sync_heavy, azure, seed_clean, seed_mixed, seed_bursty"
TraceOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Serving trace CSV (Azure layout TIMESTAMP,ContextTokens,GeneratedTokens or "
        "arrival_s,prompt_tokens,output_tokens) replayed as the regime's arrivals.",
    ),
]
RateScaleOpt = Annotated[
    float,
    typer.Option(
        help="Multiply the trace's own mean request rate by this (with --trace).",
        callback=finite(gt=0, le=1e6),
    ),
]
OverlapOpt = Annotated[
    bool,
    typer.Option(
        "--allow-overlap",
        help="Trace regimes: allow more seeds than the trace's disjoint segments (random, "
        "overlapping offsets; the verdicts say so).",
    ),
]
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Add the statistics (role, p-values, loss, tokens, syncs, no-sync floor) and "
        "print each table on one line per row, however wide.",
    ),
]
# Internal field names of the DiLoCo API -> what the user typed.
NAMES = {
    "policy": "--policy",
    "regime": "--regime",
    "windows": "--windows",
    "horizon_s": "--windows",
    "seeds": "--seeds",
    "trace": "--trace",
    "rate": "--rate-scale",
    "pilot_seeds": "--pilot-seeds",
    "max_seeds": "--max-seeds",
    "workload": "--workload",
    "gpus_per_pod": "--gpus-per-pod",
    "fragments": "--fragments",
    "stagger_steps": "--stagger-steps",
}


@app.command("sim")
def sim_cmd(
    policy: Annotated[str, typer.Option(help=f"Policy: {POLICIES}.")] = "wa_diloco",
    regime: Annotated[
        str, typer.Option(help=f"Regime: {REGIMES} (with --trace: its sync model).")
    ] = "bursty",
    seed: SeedOpt = 0,
    windows: Annotated[
        int | None,
        typer.Option(
            min=10,
            max=100_000_000,
            help="Control windows of 1 s [default: 10,000; trace regimes: the trace's segment "
            "length for seeds 0..SEED].",
        ),
    ] = None,
    trace: TraceOpt = None,
    rate_scale: RateScaleOpt = 1.0,
    allow_overlap: OverlapOpt = False,
    workload: Annotated[
        str | None,
        typer.Option(
            help="Size the sync from a job's data-parallel gradients: a preset or job .toml "
            "(its parameters), a Chakra trace or a SimAI/AICB file (the bytes one replica "
            "reduces per iteration) [default: the regime's sync model].",
        ),
    ] = None,
    gpus_per_pod: GpusPerPodOpt = None,
    fragments: Annotated[
        int,
        typer.Option(
            help="Streaming DiLoCo fragments P: the policy decides per fragment, each sync "
            "moves 1/P of the bytes (1: the whole model).",
        ),
    ] = 1,
    stagger_steps: Annotated[
        int,
        typer.Option(help="H of the fragments' staggered schedule (inner steps)."),
    ] = 256,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate one policy on one regime and seed (a trace regime: the seed's own segment);
    with ``--fragments`` P > 1 on the fragment model (syncs counted per fragment)."""
    import numpy as np

    from trainfabric.config import validate
    from trainfabric.diloco.fleet import (
        Block,
        FleetConfig,
        FragmentModel,
        check_segments,
        segment_windows,
        simulate,
        trace_segments,
    )
    from trainfabric.diloco.policies import make_policy

    with progress(json_out, "diloco sim", show_progress), options(**NAMES):
        frag = validate(FragmentModel, {"fragments": fragments, "stagger_steps": stagger_steps})
        reg = _regime(regime, trace, rate_scale, allow_overlap)
        if workload is not None:
            reg = _sized_by(reg, workload, gpus_per_pod)
        if windows is None and reg.is_trace:
            windows = segment_windows(reg, seed + 1)
            err.print(
                f"windows: {windows:,} of 1 s, the trace's segment length for seeds 0..{seed} "
                f"({reg.trace_duration_s():,.0f} s at {reg.rate:.4g} requests/s, cut in "
                f"{seed + 1}); seed {seed} replays segment {seed}",
                highlight=False,
            )
        windows = 10_000 if windows is None else windows
        fleet = FleetConfig(windows=max(windows, 10))
        check_segments(reg, seed + 1, fleet.horizon_s, "--seed")
        blocks = [Block(make_policy(policy), np.array([seed]))]
        res = simulate(fleet, reg, blocks, fragments=frag)
    row = {k: (v.item() if hasattr(v, "item") else v) for k, v in res.table.iloc[0].items()}
    row |= {k: int(row[k]) for k in ("requests", "unfinished_requests", "late_unfinished")}
    row |= {
        "sync_payload_bytes": reg.sync.params * reg.sync.bytes_per_param / fragments,
        "sync_s": frag.sync_s(reg),
        "fragments": fragments,
        "fragment_syncs": res.fragment_syncs[0].tolist(),
    }
    if reg.is_trace:
        row |= {
            "segment_s": fleet.horizon_s,
            "segments": trace_segments(reg, fleet.horizon_s),
            "seeds_overlap": reg.overlap,
        }
    during, mean = res.sync_rate([0])
    row |= {
        "request_rate_mean_per_s": mean,
        "request_rate_during_syncs_per_s": None if np.isnan(during) else during,
        "sync_times": res.sync_times(0).to_dict("records"),
    }
    if json_out:
        return emit_json(row)
    name = f"{reg.name} with {regime}'s sync model" if trace is not None else regime
    out.print(_sim_sentence(row, name), highlight=False)
    print_records(out, [row], SIM_COLS, f"{policy} on {name}, seed {seed}")
    if row["sync_times"]:
        out.print(_sync_starts(row), highlight=False)


SHOWN_SYNCS = 10


def _pct(v) -> str:
    return fmt_number(None if v is None else 100 * v)


SIM_COLS = (
    Col("policy"),
    Col("regime"),
    Col("seed"),
    Col("windows", "horizon", "windows of 1 s"),
    Col("slo_violation_rate", "SLO violation rate", "%", _pct),
    Col("ttft_violation_rate", "TTFT violation rate", "%", _pct),
    Col("tpot_violation_rate", "TPOT violation rate", "%", _pct),
    Col("requests", "requests arrived"),
    Col("unfinished_requests", "requests unfinished at the horizon"),
    Col("late_unfinished", "unfinished and past their SLO"),
    Col("request_rate_mean_per_s", "request rate, mean", "requests/s"),
    Col("request_rate_during_syncs_per_s", "request rate during syncs", "requests/s"),
    Col("syncs"),
    Col("sync_s", "sync duration", "s"),
    Col("sync_time_fraction", "time syncing", "%", _pct),
    Col("sync_payload_bytes", "sync payload", "GB", lambda v: fmt_number(v / 1e9)),
    Col("tokens_trained", "tokens trained", "billions", lambda v: fmt_number(v / 1e9)),
    Col("effective_tokens", "effective tokens", "billions", lambda v: fmt_number(v / 1e9)),
    Col("final_loss", "final loss", "nats"),
    Col("segment_s", "trace segment", "s"),
    Col("segments", "disjoint segments in the trace"),
    Col("seeds_overlap", "seeds share requests"),
)


def _sync_starts(row: dict) -> str:
    """The first :data:`SHOWN_SYNCS` sync start times in one line."""
    starts = ", ".join(f"{t['start_s']:,g}" for t in row["sync_times"][:SHOWN_SYNCS])
    more = f" (the first {SHOWN_SYNCS} of {row['syncs']:,})" if row["syncs"] > SHOWN_SYNCS else ""
    return f"sync start times (s): {starts}{more}; --json lists each start, end and request rate"


def _sim_sentence(row: dict, regime: str) -> str:
    """The run in one sentence: SLO violations, syncs, and when the syncs ran."""
    said = (
        f"{row['policy']} on {regime}: {_pct(row['slo_violation_rate'])}% of "
        f"{row['requests']:,} requests missed their SLO over {row['windows']:,} s; "
        f"{row['syncs']:,} syncs, {_pct(row['sync_time_fraction'])}% of the time"
    )
    during, mean = row["request_rate_during_syncs_per_s"], row["request_rate_mean_per_s"]
    if during is None or not mean:
        return said + "."
    rel = during / mean - 1
    return (
        f"{said}, run when the request rate was {abs(rel):.0%} "
        f"{'below' if rel < 0 else 'above'} its mean ({fmt_number(during)} vs "
        f"{fmt_number(mean)} requests/s)."
    )


@app.command("protocol")
def protocol_cmd(
    quick: Annotated[bool, typer.Option(help="10 seeds, 2,000 windows, 5 envelope draws.")] = False,
    seeds: Annotated[
        int | None,
        typer.Option(min=3, max=10_000, help="Evaluation seeds [default: 50, by power; quick 10]."),
    ] = None,
    windows: Annotated[
        int | None,
        typer.Option(
            min=10,
            max=100_000_000,
            help="Control windows per run [default: 10,000; quick 2,000; trace regimes: the "
            "segment length, trace duration / seeds].",
        ),
    ] = None,
    pilot_seeds: Annotated[
        int,
        typer.Option(
            min=0,
            max=1000,
            help="Run a pilot of this many held-out seeds per regime first and evaluate on the "
            "seeds its power calculation asks for (at most --max-seeds) [0: no pilot].",
        ),
    ] = 0,
    max_seeds: Annotated[
        int, typer.Option(min=3, max=10_000, help="The most seeds a pilot may choose.")
    ] = 50,
    trace: TraceOpt = None,
    rate_scale: RateScaleOpt = 1.0,
    allow_overlap: OverlapOpt = False,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Run directory to write.", show_default="runs/diloco-protocol[-quick]"
        ),
    ] = None,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Every policy vs matched random over paired seeds and regimes; verdicts and a report.

    Per regime the primary comparison (wa_forecast vs its matched random on SLO violations,
    sign-flip test) is tested alone; every other comparison is one Holm family."""
    import warnings

    from trainfabric.diloco.protocol import (
        ProtocolConfig,
        check_protocol,
        quick_config,
        run_to_dir,
        windows_note,
    )
    from trainfabric.diloco.stats import DesignWarning
    from trainfabric.runs.store import RunDir

    cfg = quick_config() if quick else ProtocolConfig()
    update = {}
    if seeds is not None:
        update["seeds"] = seeds
    if pilot_seeds or max_seeds != 50:
        update |= {"pilot_seeds": pilot_seeds, "max_seeds": max_seeds}
    if windows is not None:
        update["fleet"] = cfg.fleet.model_dump() | {"windows": windows}
        update["segment_horizon"] = False
    if allow_overlap:
        update["allow_overlap"] = True
    _check_rate_scale(trace, rate_scale)
    if trace is not None:
        update |= {"trace": str(input_file(trace, "--trace")), "rate_scale": rate_scale}
    if update:
        from trainfabric.config import validate

        with options(**NAMES):
            cfg = validate(ProtocolConfig, cfg.model_dump() | update)
    with options(**NAMES):
        if not (cfg.pilot_seeds and cfg.seeds_from_pilot):
            cfg.design().require(cfg.seeds)  # a primary that cannot be found: exit 2
        check_protocol(cfg)
    if (note := windows_note(cfg)) is not None:
        err.print(note, highlight=False)
    out_dir = prepare_dir(out_dir or Path("runs/diloco-protocol" + ("-quick" if quick else "")))
    with (
        RunDir(out_dir).single_run("diloco-protocol"),
        progress(json_out, "diloco protocol", show_progress) as bar,
        options(**NAMES),
        warnings.catch_warnings(),  # printed below, once, with the power calculation
    ):
        warnings.simplefilter("ignore", DesignWarning)
        res = run_to_dir(cfg, out_dir, console=None if bar.disable else bar.console, progress=bar)
    for regime, plan in res["power"].items():
        err.print(f"{regime}: {_power_line(plan)}")
        for text in res["warnings"][regime]:
            err.print(f"[bold red]{regime}: {text}[/]")
    if json_out:
        return emit_json(res)
    _print_protocol(res, wide)
    err.print(f"run directory: {res['run_dir']}; report: {res['report']}")


def _print_protocol(res: dict, wide: bool) -> None:
    """The findings first, then one table per regime, then what the regimes and seeds are."""
    for sentence in res["findings"]:
        out.print(sentence, highlight=False)
    cols = PROTOCOL_COLS + (PROTOCOL_WIDE_COLS if wide else ())
    for regime, rows in res["regimes"].items():
        title = (
            f"{res['regime_labels'][regime]} ({res['seeds_by_regime'][regime]} seeds): "
            "each policy vs its matched random (pp: percentage points"
            + ("; SLO p: the primary's own, the others' after Holm)" if wide else ")")
        )
        records = [{"policy": policy} | row for policy, row in rows.items()]
        out.print()
        print_records(out, records, cols, title, wide)
    for line in dict.fromkeys(_protocol_notes(res)):  # one line per distinct note
        out.print(line, highlight=False)


def _protocol_notes(res: dict):
    """Regimes merged on a trace, and the trace segments the seeds replay."""
    for regime, rows in res["regimes"].items():
        merged = res["merged_regimes"][regime]
        if len(merged) > 1:
            yield (
                f"{', '.join(merged)} differ only by arrivals, which the trace replaces: they "
                f"ran once, as {res['regime_labels'][regime]}"
            )
        row = next(iter(rows.values()))
        if row.get("segments") is not None:
            yield (
                f"each seed replays its own {row['segment_s']:,.0f} s segment of the trace "
                f"({row['segments']} disjoint segments"
                + (", seeds overlap)" if row["seeds_overlap"] else ")")
            )


PROTOCOL_COLS = (
    Col("policy"),
    Col("vs_matched_random", "verdict"),
    Col("slo_violation_rate", "SLO violations", "%", _pct),
    Col("matched_random_slo", "matched random", "%", _pct),
    Col("effect_size", "difference", "pp"),
    Col("verdict_reason", "why"),
)
PROTOCOL_WIDE_COLS = (
    Col("role"),
    Col("p_value", "SLO p"),
    Col("loss_diff", "loss difference", "nats"),
    Col("p_loss_adjusted", "loss p (Holm)"),
    Col("tokens_ratio", "tokens vs random", "ratio"),
    Col("syncs", "syncs per seed"),
    Col("no_sync_slo", "no-sync floor", "%", _pct),
)


def _regime(name: str, trace: Path | None, rate_scale: float, allow_overlap: bool = False):
    """The named regime, or with ``--trace`` that regime's sync model replaying the trace;
    ``allow_overlap``: a trace regime's seeds draw random, overlapping offsets."""
    from trainfabric.diloco.fleet import get_regime, trace_regime

    _check_rate_scale(trace, rate_scale)
    reg = get_regime(name)
    if trace is not None:
        reg = trace_regime(input_file(trace, "--trace"), rate_scale, reg)
    return reg.model_copy(update={"overlap": True}) if allow_overlap else reg


def _check_rate_scale(trace: Path | None, rate_scale: float) -> None:
    """Refuse a ``--rate-scale`` other than 1 without ``--trace``: it scales a trace."""
    if trace is None and rate_scale != 1.0:
        raise ConfigError("--rate-scale", "scales a trace's request rate: give --trace too")


def _sized_by(reg, workload: str, gpus_per_pod: int | None):
    """``reg`` with its sync carrying ``workload``'s gradients: an imported trace's
    data-parallel bytes per replica, or a job's parameters at the sync's bytes per
    parameter."""
    from trainfabric.workloads.workload import load_workload

    w = load_workload(workload, seed=0, gpus_per_pod=gpus_per_pod)
    if w.dp_gradient_bytes is not None:
        if w.dp_gradient_bytes <= 0:
            raise ConfigError(
                "workload",
                f"{workload}: no all-reduce or reduce-scatter spans pods (no data-parallel "
                "gradients to sync)",
            )
        params = w.dp_gradient_bytes / reg.sync.bytes_per_param
    elif w.job is not None:
        params = float(w.job.model.params())
    else:
        raise ConfigError("workload", f"{workload}: a task-DAG file states no gradients")
    return reg.model_copy(update={"sync": reg.sync.model_copy(update={"params": params})})


def _power_line(plan: dict) -> str:
    """The power calculation of one regime in one line."""
    need = plan["n_required"]
    said = f"needs {need} seeds" if need is not None else f"no finite seed count ({plan['note']})"
    ok = "" if plan["sufficient"] is None else (" (enough)" if plan["sufficient"] else " (TOO FEW)")
    sd = plan["pilot_sd"]
    return (
        f"power {plan['power']:g} at alpha {plan['alpha']:g} ({plan['test']} test): effect "
        f"{plan['pilot_effect']:.4g}, sd {'n/a' if sd is None else f'{sd:.4g}'} over "
        f"{plan['pilot_seeds']} seeds ({plan['source'].split(':')[0]}) {said}; ran "
        f"{plan['seeds_used']}{ok}"
    )


# The commands of the live experiment, training and serving modules (each imports its heavy
# parts, torch included, only when it runs).
app.command("live")(live_cli.live_cmd)
app.command("calibrate")(live_cli.calibrate_cmd)
app.command("train")(train_cmd)
app.command("serve")(serve_cli.serve_cmd)
app.command("sidecar")(serve_cli.sidecar_cmd)
app.command("replay")(serve_cli.replay_cmd)
