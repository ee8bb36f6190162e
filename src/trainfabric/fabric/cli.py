"""``trainfabric fabric ...``: multiplane Ethernet fabric simulation.

``fabric eval``: the four evaluation scenarios (line rate, isolation, failures, flaps) for
every load-balancing mode, into one run directory with a report; ``fabric run FILE.toml``:
one scenario of the user's own (see :mod:`trainfabric.fabric.scenarios` for the fields);
``fabric job``: one training job's iteration on the fabric
(:mod:`trainfabric.fabric.iteration.run`); ``fabric collective``: nccl-tests' table on the
fabric (:mod:`trainfabric.fabric.nccl`); ``fabric cluster show FILE``: what a cluster file
is made of (:mod:`trainfabric.fabric.cluster`). ``--cluster FILE`` gives ``job``, ``run``
and ``collective`` a cluster file's fabric.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainfabric.clikit import (
    ConfigOpt,
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
from trainfabric.errors import ConfigError
from trainfabric.io import prepare_dir
from trainfabric.tables import Col, fmt_number, print_records, table_width

app = typer.Typer(help="Multiplane Ethernet fabric simulation.", no_args_is_help=True)
cluster_app = typer.Typer(
    help="Cluster files (configs/clusters/*.toml, astra-sim network .yml).", no_args_is_help=True
)
app.add_typer(cluster_app, name="cluster")

OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Run directory to write.", show_default="runs/fabric-<name>"),
]
ENGINES = ("flow", "packet")
CalibratedOpt = Annotated[
    bool,
    typer.Option(
        "--calibrated",
        help="Flow engine: add the packet-fitted per-message start-up "
        "(trainfabric.fabric.flow.calibration; off by default).",
    ),
]


ClusterOpt = Annotated[
    Path | None,
    typer.Option(
        "--cluster",
        help="Cluster file: TOML (configs/clusters/*.toml; fields in "
        "trainfabric.fabric.cluster) or astra-sim's analytical network .yml.",
        show_default=False,
    ),
]


def _cluster(path: Path | None):
    """The cluster of ``--cluster`` (None when not given); its errors name its keys."""
    if path is None:
        return None
    from trainfabric.fabric.cluster import load_cluster

    with options(cluster="--cluster"):
        return load_cluster(input_file(path, "--cluster"))


def _check_calibrated(engine: str, calibrated: bool) -> None:
    if calibrated and engine != "flow":
        raise ConfigError("--calibrated", "calibrates the flow engine; not with --engine packet")


def _engine(value: str | None) -> str | None:
    """``--engine``: flow or packet (None: not given)."""
    if value is not None and value not in ENGINES:
        raise ConfigError("--engine", f"must be one of {', '.join(ENGINES)}, got {value!r}")
    return value


def _console(bar):
    """Stage lines above the progress bar, or nothing when the bar is off (--json)."""
    return None if bar.disable else bar.console


WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide", help="Print every table as a table, however wide, and every figure of it."
    ),
]
PER_FLAP = re.compile(r"_(nic|fabric)_[0-9.e+-]+ms$")  # per side and duration: under --wide


def _print_findings(findings: list[str]) -> None:
    for sentence in findings:
        out.print(sentence, markup=False)
    if findings:
        out.print()


def _print_modes(title: str, modes: dict[str, dict], wide: bool) -> None:
    """Per-mode figures as one row per quantity (label and unit) and one column per mode;
    the rows per flap side and duration only with ``wide``."""
    from trainfabric.fabric.scenarios.findings import metric_label

    keys = list(dict.fromkeys(k for row in modes.values() for k in row))
    shown = [k for k in keys if wide or not PER_FLAP.search(k)]
    rows = []
    for key in shown:
        label, unit, scale = metric_label(key)
        row = {"quantity": f"{label} ({unit})" if unit else label}
        for mode, figures in modes.items():
            v = figures.get(key)
            row[mode] = None if v is None else fmt_number(v * scale)
        rows.append(row)
    cols = [Col("quantity"), *(Col(m, header=m) for m in modes)]
    print_records(out, rows, cols, title, wide)
    if len(shown) < len(keys):
        err.print(
            f"{len(keys) - len(shown)} more figures per flap side and duration: --wide or --json",
            markup=False,
        )


@app.command("eval")
def eval_cmd(
    quick: Annotated[bool, typer.Option(help="Small fabric and fewer points (< 3 min).")] = False,
    engine: Annotated[
        str, typer.Option(help="flow (fluid max-min) or packet (packet-level, smaller sizes).")
    ] = "flow",
    calibrated: CalibratedOpt = False,
    out_dir: OutOpt = None,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    wide: WideOpt = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Line rate, isolation, failures and flaps per load-balancing mode, with a report.

    --engine packet: the packet-level engine, at the sizes it handles
    (32 GPUs quick, 64 full; scenarios.packet_eval_scenarios), adding the
    measured p99_latency_us and jitter_us per mode.
    """
    from trainfabric.fabric.scenarios import eval_name, run_eval
    from trainfabric.runs.store import RunDir

    engine = _engine(engine)
    _check_calibrated(engine, calibrated)
    name = eval_name(quick, engine)
    out_dir = prepare_dir(out_dir or Path(f"runs/{name}"))
    with RunDir(out_dir).single_run(name), progress(json_out, "fabric eval", show_progress) as bar:
        res = run_eval(
            out_dir,
            quick=quick,
            seed=seed,
            console=_console(bar),
            progress=bar,
            engine=engine,
            calibrated=calibrated,
        )
    if json_out:
        return emit_json(res)
    title = f"fabric eval ({'quick' if quick else 'full'}, {engine} engine)"
    _print_findings(res.get("findings", []))
    _print_modes(title, res["modes"], wide)
    err.print(f"run directory: {res['run_dir']}; report: {res['report']}")


@app.command("run")
def run_cmd(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario TOML; see the fields above and configs/fabric-*.toml.")
    ],
    engine: Annotated[
        str | None,
        typer.Option(help="flow or packet; overrides the file's engine field.", show_default=False),
    ] = None,
    calibrated: CalibratedOpt = False,
    cluster: ClusterOpt = None,
    out_dir: OutOpt = None,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    wide: WideOpt = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run one scenario file; tables, figures and report.html go to the run directory.
    With --cluster FILE, the cluster's fabric replaces the file's topology table.

    \b
    A scenario file has kind = "line_rate" | "isolation" | "failures" | "flaps" |
    "iteration" and, for
    every kind: name (plain name, names runs/fabric-<name>), seed, modes (subset of ecmp,
    flowlet, pinning, spray, adaptive), engine = "flow" | "packet", \\[packet] (the packet
    engine's knobs: mtu_bytes, queue_packets, switch_mode, transport, ...) and \\[topology]
    (gpus, planes, switch_radix, nic_rate_gbps, oversubscription, agg_oversubscription,
    rail, gpus_per_server, hop_latency_s).
    Per kind:
      line_rate   \\[\\[collectives]] (kind, algorithm, ranks, placement, channels,
                  connections = "persistent"|"per_message", ...), sizes_bytes
      isolation   \\[victim], \\[aggressor] collectives, victim_fraction,
                  oversubscription = \\[...], failed_fractions = \\[...]
      failures    fractions = \\[...], draws, channels, \\[collective], lp, offered_load
      flaps       \\[collective], iterations, compute_s, \\[\\[flaps]] (link = "host"|"fabric",
                  at_s or iteration, duration_s)
      iteration   \\[workload] (name, pods, gpus_per_pod, layers, placement, channels,
                  overlap = \\["none", "bucketed"], bucket_mb), \\[tenants] (iterations, draws,
                  \\[\\[tenants.jobs]] like \\[workload]), \\[faults] (failed_fractions,
                  failure_draws, flap_durations_s, flap_sides, flap_draws), bin_s, top_links
    Units: bytes, seconds, Gb/s. Examples: configs/fabric-line-rate.toml,
    fabric-isolation.toml, fabric-failures.toml, fabric-flaps.toml, fabric-iteration.toml.
    """
    from trainfabric.fabric.scenarios import load_scenario, run_to_dir
    from trainfabric.runs.store import RunDir, safe_child

    engine = _engine(engine)
    with options(config="SCENARIO"):
        sc = load_scenario(input_file(scenario, "SCENARIO"))
    cl = _cluster(cluster)
    notes = []
    if cl is not None:
        from trainfabric.fabric.cluster import run_notes, topology_config

        sc = sc.model_copy(update={"topology": topology_config(cl)})
        notes = run_notes(cl, sc.kind)
    if engine is not None:
        sc = sc.model_copy(update={"engine": engine})
    _check_calibrated(sc.engine, calibrated)
    if calibrated:
        sc = sc.model_copy(update={"calibration": True})
    if out_dir is None:
        field = "name" if sc.name else "SCENARIO"
        out_dir = safe_child(Path("runs"), f"fabric-{sc.name or scenario.stem}", field)
    out_dir = prepare_dir(out_dir)
    with (
        RunDir(out_dir).single_run(f"fabric-{sc.kind}"),
        progress(json_out, "fabric run", show_progress) as bar,
    ):
        res = run_to_dir(sc, out_dir, console=_console(bar))
    if cl is not None:
        res = {**res, "cluster": cl.name, "notes": notes}
    if json_out:
        return emit_json(res)
    _print_findings(res.get("findings", []))
    _print_modes(f"scenario {res['scenario']} ({sc.kind})", res["modes"], wide)
    err.print(f"run directory: {res['run_dir']}; report: {res['report']}")
    for note in notes:
        err.print(note, markup=False)


JOB_NAMES = {
    "workload": "--workload",
    "pods": "--pods",
    "mode": "--mode",
    "placement": "--placement",
    "channels": "--channels",
    "overlap": "--overlap",
    "failures": "--failures",
    "gpus_per_pod": "--gpus-per-pod",
    "layers": "--layers",
    "topology": "--pods",
    "rail": "--rail",
    "planes": "--planes",
    "switch_radix": "--radix",
    "nic_rate_gbps": "--nic-gbps",
    "oversubscription": "--oversubscription",
}
JobOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Also write a run directory: tables (Parquet), summary.json with the findings, "
        "report.html.",
        show_default=False,
    ),
]


@app.command("job")
def job_cmd(
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            help="Preset (llama3-70b, gpt3-175b, deepseek-v3, mixtral-8x7b, moe, pipeline, "
            "dp-ring, dp-hd, hybrid), a job .toml, a task-DAG .json file, a Chakra trace (a "
            "folder of NAME.RANK.et files or one of them) or a SimAI/AICB workload .txt.",
        ),
    ] = "llama3-70b",
    pods: Annotated[
        int | None,
        typer.Option(
            min=2, max=65_536, help="Servers (re-maps a preset).", show_default="the job's own"
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            help="Load balancing: ecmp, flowlet, pinning, spray, adaptive, or a comma list "
            "(ecmp,adaptive) run side by side on the same fabric, placement and seed."
        ),
    ] = "ecmp",
    failures: Annotated[
        float | None,
        typer.Option(
            help="Fraction of leaf-spine cables failed (seeded draws): slowdown vs healthy.",
            callback=finite(ge=0),
        ),
    ] = None,
    draws: Annotated[int, typer.Option(min=1, max=1000, help="Failure draws.")] = 20,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=256,
            help="Local processes running the failure draws side by side (each holds a copy "
            "of the job).",
        ),
    ] = 1,
    placement: Annotated[
        str, typer.Option(help="Server placement: packed, scattered, random (seeded).")
    ] = "random",
    channels: Annotated[int, typer.Option(min=1, max=64, help="Connections per GPU pair.")] = 4,
    overlap: Annotated[
        str, typer.Option(help="DP gradient overlap with the backward pass: none or bucketed.")
    ] = "none",
    gpus_per_pod: Annotated[
        int,
        typer.Option(
            min=1,
            max=4096,
            help="GPUs per pod (server) of a task-DAG .json or an imported trace: rank r on "
            "server r // N.",
        ),
    ] = 8,
    layers: Annotated[
        int | None, typer.Option(min=1, max=10_000, help="Cut the model to this many layers.")
    ] = None,
    rail: Annotated[bool, typer.Option(help="Rail-optimised host placement.")] = False,
    planes: Annotated[
        int | None,
        typer.Option(min=1, max=64, help="Planes of the fabric.", show_default="4"),
    ] = None,
    nic_gbps: Annotated[
        float | None,
        typer.Option(
            "--nic-gbps",
            help="NIC rate of a GPU, all planes together (Gb/s).",
            callback=finite(gt=0, le=1e6),
            show_default="800",
        ),
    ] = None,
    radix: Annotated[
        int | None,
        typer.Option(min=4, max=65_536, help="Ports per switch per plane.", show_default="256"),
    ] = None,
    oversubscription: Annotated[
        float | None,
        typer.Option(
            help="Leaf host ports : uplinks (1: non-blocking).",
            callback=finite(ge=1, le=1000),
            show_default="1",
        ),
    ] = None,
    cluster: ClusterOpt = None,
    out_dir: JobOutOpt = None,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    wide: WideOpt = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One training iteration of a job on a multiplane fabric (4 planes, 256 x 200 Gb/s
    ports per switch per plane, 800 Gb/s NICs, no oversubscription; --planes, --radix,
    --nic-gbps, --oversubscription change it) or on --cluster's (one pod per scale-up
    domain): findings first, then iteration time and exposed communication per phase kind,
    with --failures the slowdown of failed cables; with several --mode, the modes side by
    side and their differences against the first. wall_s is the whole run (every mode and
    draw)."""
    from trainfabric.fabric.iteration.scenario import run_job, write_job_dir
    from trainfabric.runs.store import RunDir, now

    cl = _cluster(cluster)
    knobs = {"planes": planes, "switch_radix": radix, "nic_rate_gbps": nic_gbps}
    knobs["oversubscription"] = oversubscription
    started = now()
    if out_dir is not None:
        out_dir = prepare_dir(out_dir)
    with (
        options(**JOB_NAMES),
        RunDir(out_dir).single_run("fabric-job") if out_dir else nullcontext(),
        progress(json_out, "fabric job", show_progress) as bar,
    ):
        job = run_job(
            workload,
            pods=pods,
            mode=mode,
            failures=failures,
            draws=draws,
            workers=workers,
            placement=placement,
            channels=channels,
            overlap=overlap,
            gpus_per_pod=gpus_per_pod,
            layers=layers,
            rail=rail,
            seed=seed,
            cluster=cl,
            fabric={k: v for k, v in knobs.items() if v is not None},
            progress=None if bar.disable else bar,
            notify=_notifier(bar),
        )
        res = job.result if out_dir is None else write_job_dir(out_dir, job, started)
    if json_out:
        return emit_json(res)
    _print_job(res, wide)
    for note in res["notes"]:
        err.print(note, markup=False)
    if out_dir is not None:
        err.print(f"run directory: {res['run_dir']}; report: {res['report']}", markup=False)


def _notifier(bar):
    """Lines for a person on stderr (above the progress bar when it shows)."""
    console = err if bar.disable else bar.console
    return lambda line: console.print(line, markup=False)


def _print_job(res: dict, wide: bool) -> None:
    _print_findings(res["findings"])
    if "modes" in res:
        _print_mode_comparison(res, wide)
    else:
        _print_phase_kinds(res, wide)
    out.print(_fabric_line(res), markup=False)


PHASE_COLS = (
    Col("kind", "phase kind"),
    Col("exposed_s", "exposed", "s"),
    Col("busy_s", "comm busy", "s"),
    Col("collectives"),
    Col("bytes", "data", "GB", lambda v: fmt_number(v / 1e9)),
)


def _print_phase_kinds(res: dict, wide: bool) -> None:
    title = f"{res['workload']}, {res['mode']}: exposed communication per phase kind"
    print_records(out, res["phase_kinds"], PHASE_COLS, title, wide)


def _print_mode_comparison(res: dict, wide: bool) -> None:
    """One row per quantity (:data:`~trainfabric.fabric.iteration.findings.QUANTITIES`), one
    column per mode, then per later mode its difference against the first (relative, or in
    percentage points for a quantity in %)."""
    from trainfabric.fabric.iteration.findings import QUANTITIES

    modes, first = res["modes"], res["baseline_mode"]
    later = [m for m in modes if m != first]
    rows = []
    for q in QUANTITIES:
        values = {m: q.shown(r) for m, r in modes.items()}
        if all(not v for v in values.values()):  # absent, or 0 in every mode
            continue
        row = {"quantity": f"{q.label} ({q.unit})" if q.unit else q.label}
        row |= {m: None if v is None else fmt_number(v) for m, v in values.items()}
        for m in later:
            diff = res["differences"][m]
            row[f"{m} vs"] = _difference(diff.get(q.key), diff.get(f"{q.key}_pp"))
        rows.append(row)
    per_mode = [Col("quantity"), *(Col(m, header=m) for m in modes)]
    diffs = [Col(f"{m} vs", header=f"{m} vs {first}") for m in later]
    title = f"{res['workload']} on {res['servers']} servers: modes side by side"
    if wide or table_width(rows, per_mode + diffs) <= out.width:
        return print_records(out, rows, per_mode + diffs, title, wide)
    print_records(out, rows, per_mode, title)  # too wide as one: values, then differences
    print_records(out, rows, [per_mode[0], *diffs], f"differences against {first}")


def _difference(relative: float | None, points: float | None) -> str:
    if points is not None:
        return f"{points:+.1f} pp"
    return "-" if relative is None else f"{100 * relative:+.1f}%"


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _fabric_line(res: dict) -> str:
    f = res["fabric"]
    where = f"cluster {f['cluster']}: " if "cluster" in f else ""
    return (
        f"fabric: {where}{_count(f['planes'], 'plane', 'planes')} of {f['switch_radix']}-port "
        f"switches, {f['nic_rate_gbps']:g} Gb/s NICs, {f['oversubscription']:g}:1 leaves; the "
        f"job's {res['gpus']:,} GPUs on {_count(res['leaves'], 'leaf switch', 'leaf switches')}"
        f"; the run took {res['wall_s']:.1f} s"
    )


# -- nccl-tests tables and cluster files ----------------------------------------------------------
COLLECTIVE_NAMES = {
    "op": "--op",
    "sizes": "--sizes",
    "ranks": "--gpus",
    "mode": "--mode",
    "channels": "--channels",
}


@app.command("collective")
def collective_cmd(
    op: Annotated[
        str,
        typer.Option(help="all_reduce, all_gather, reduce_scatter, all_to_all or broadcast."),
    ] = "all_reduce",
    sizes: Annotated[
        str,
        typer.Option(
            help="A:B doubles from A to B bytes (nccl-tests' -b A -e B -f 2), or one size; "
            "K, M, G = 2^10, 2^20, 2^30."
        ),
    ] = "8:8G",
    gpus: Annotated[
        int | None,
        typer.Option(
            min=2,
            max=1_048_576,
            help="Ranks, on GPUs 0..N-1.",
            show_default="the cluster's GPUs, or 64",
        ),
    ] = None,
    cluster: ClusterOpt = None,
    mode: Annotated[
        str, typer.Option(help="Load balancing: ecmp, pinning, spray or adaptive.")
    ] = "adaptive",
    channels: Annotated[int, typer.Option(min=1, max=64, help="Connections per GPU pair.")] = 4,
    step_latency_us: Annotated[
        float,
        typer.Option(
            "--step-latency-us",
            help="Software latency per algorithm step (us).",
            callback=finite(ge=0, le=1e6),
        ),
    ] = 0.0,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """nccl-tests' out-of-place table (size, count, type, redop, root, time, algbw,
    busbw) of one collective on the simulated fabric: the cluster's, or else fabric
    job's fabric sized to the GPUs, without a scale-up domain.

    \b
    Float elements; sizes and counts as nccl-tests prints them (all_gather,
    reduce_scatter and all_to_all: count per rank); GB/s = 1e9 bytes/s; busbw =
    algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, all_to_all), 1
    (broadcast). Model (trainfabric.fabric.nccl): one ring over the GPUs in rank order
    (broadcast: a pipelined chain from rank 0; all_to_all: every pair at once); GPUs of
    one scale-up domain use its bandwidth, the others the NICs and the fabric (flow
    engine); one step is simulated and every size scaled from it.
    """
    from trainfabric.fabric.cluster import default_cluster
    from trainfabric.fabric.nccl import format_table, nccl_table, parse_sizes

    cl = _cluster(cluster)
    with options(**COLLECTIVE_NAMES, gpus="--gpus"):
        if cl is None:
            cl = default_cluster(gpus or 64)
        res = nccl_table(
            cl,
            op,
            parse_sizes(sizes),
            gpus=gpus,
            mode=mode,
            channels=channels,
            step_latency_s=step_latency_us * 1e-6,
            seed=seed,
        )
    if json_out:
        return emit_json(res)
    typer.echo(format_table(res))


@cluster_app.command("show")
def cluster_show(
    file: Annotated[
        Path, typer.Argument(help="Cluster TOML (configs/clusters/) or astra-sim network .yml.")
    ],
    json_out: JsonOpt = False,
) -> None:
    """What a cluster file is made of: switches per tier (from the builders' arithmetic,
    without building), ports per leaf, scale-up domain, closed-form bisection."""
    from trainfabric.fabric.cluster import cluster_summary

    s = cluster_summary(_cluster(file))
    if json_out:
        return emit_json(s)
    t = Table("tier", "switches", "per plane", title=s["name"], caption=s["description"])
    for tier, n in s["switches_per_tier"].items():
        t.add_row(tier, f"{n:,}", f"{n // s['planes']:,}")
    out.print(t)
    up = s["scale_up"]
    domain = f"{up['gpus']} GPUs at {up['bandwidth_gbps']:g} Gb/s" if up else "none"
    out.print(
        f"{s['gpus']:,} GPUs, {s['tiers']} tiers, {s['planes']} plane(s) of "
        f"{s['port_rate_gbps']:g} Gb/s ports, radix {s['switch_radix']}; "
        f"{s['host_ports_per_leaf']} host ports : {s['uplinks_per_leaf']} uplinks per leaf; "
        f"scale-up {domain}; {s['switch_line']}; bisection {s['bisection_gbps']:,.0f} Gb/s "
        f"({s['bisection_fraction']:.3f} of full)",
        markup=False,
    )
