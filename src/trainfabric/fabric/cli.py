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


def _mode_table(title: str, modes: dict[str, dict]) -> Table:
    keys = list(dict.fromkeys(k for row in modes.values() for k in row))
    t = Table("mode", *keys, title=title)
    for mode, row in modes.items():
        t.add_row(mode, *(_fmt(row.get(k)) for k in keys))
    return t


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


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
    out.print(_mode_table(title, res["modes"]))
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
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run one scenario file; tables, figures and report.html go to the run directory.
    With --cluster FILE, the cluster's fabric replaces the file's topology table.

    \b
    A scenario file has kind = "line_rate" | "isolation" | "failures" | "flaps" |
    "iteration" and, for
    every kind: name (plain name, names runs/fabric-<name>), seed, modes (subset of ecmp,
    flowlet, pinning, spray, adaptive), engine = "flow" | "packet", [packet] (the packet
    engine's knobs: mtu_bytes, queue_packets, switch_mode, transport, ...) and [topology]
    (gpus, planes, switch_radix, nic_rate_gbps, oversubscription, agg_oversubscription,
    rail, gpus_per_server, hop_latency_s).
    Per kind:
      line_rate   [[collectives]] (kind, algorithm, ranks, placement, channels,
                  connections = "persistent"|"per_message", ...), sizes_bytes
      isolation   [victim], [aggressor] collectives, victim_fraction,
                  oversubscription = [...], failed_fractions = [...]
      failures    fractions = [...], draws, channels, [collective], lp, offered_load
      flaps       [collective], iterations, compute_s, [[flaps]] (link = "host"|"fabric",
                  at_s or iteration, duration_s)
      iteration   [workload] (name, pods, gpus_per_pod, layers, placement, channels,
                  overlap = ["none", "bucketed"], bucket_mb), [tenants] (iterations, draws,
                  [[tenants.jobs]] like [workload]), [faults] (failed_fractions,
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
    out.print(_mode_table(f"scenario {res['scenario']} ({sc.kind})", res["modes"]))
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
}


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
        typer.Option(min=2, max=65_536, help="Servers (re-maps a preset) [default: its own]."),
    ] = None,
    mode: Annotated[
        str, typer.Option(help="Load balancing: ecmp, flowlet, pinning, spray, adaptive.")
    ] = "ecmp",
    failures: Annotated[
        float | None,
        typer.Option(
            help="Fraction of leaf-spine cables failed (seeded draws): slowdown vs healthy.",
            callback=finite(ge=0),
        ),
    ] = None,
    draws: Annotated[int, typer.Option(min=1, max=1000, help="Failure draws.")] = 20,
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
    cluster: ClusterOpt = None,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One training iteration of a job on a multiplane fabric (4 planes, 256 x 200 Gb/s
    ports per switch per plane, 800 Gb/s NICs, no oversubscription) or on --cluster's
    (one pod per scale-up domain): iteration time, exposed communication per phase kind,
    and with --failures the slowdown of failed cables."""
    from trainfabric.fabric.iteration.scenario import job_command

    cl = _cluster(cluster)
    with options(**JOB_NAMES), progress(json_out, "fabric job", show_progress):
        res = job_command(
            workload,
            pods=pods,
            mode=mode,
            failures=failures,
            draws=draws,
            placement=placement,
            channels=channels,
            overlap=overlap,
            gpus_per_pod=gpus_per_pod,
            layers=layers,
            rail=rail,
            seed=seed,
            cluster=cl,
        )
    if json_out:
        return emit_json(res)
    out.print(_phase_table(res))
    for note in res["notes"]:
        err.print(note)


def _phase_table(res: dict) -> Table:
    t = Table("phase kind", "exposed_s", "comm_busy_s", "bytes", title=_job_title(res))
    for row in res["phase_kinds"]:
        t.add_row(row["kind"], _fmt(row["exposed_s"]), _fmt(row["busy_s"]), _fmt(row["bytes"]))
    return t


def _job_title(res: dict) -> str:
    title = (
        f"{res['workload']} on {res['servers']} servers ({res['mode']}): "
        f"iteration {res['iteration_s']:.4g} s, exposed comm {res['exposed_comm_s']:.4g} s"
    )
    if res.get("failures"):
        f = res["failures"]
        title += f"; {f['fraction']:.0%} failed: slowdown median {_fmt(f['slowdown_median'])}"
        title += f", worst {_fmt(f['slowdown_worst'])}"
    return title


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
