"""``trainfabric ocs fairness``: several jobs on one wiring, one wiring per power p
(docs/ocs.md §1.12).

For every ``p`` in ``--p`` the planner minimises the weighted power mean ``Φ_p`` of the jobs'
smoothed critical paths (``p = inf``: the slowest job), rounds it on the hard ``Φ_p`` and
reports every job's iteration time, the mean, the max and Jain's index, beside the α-fair
check (``α = p + 1``) and the best near-uniform and demand-proportional wirings
(:func:`trainfabric.ocs.fairness.study`). The α-fair check is dense SLSQP, cubic in the pod
pairs: by default it runs up to :data:`ALPHA_CHECK_PAIRS` pairs (``--alpha-check`` forces
it); the JSON's ``alpha_check`` says whether it ran.
"""

from __future__ import annotations

from typing import Annotated

import typer

from trainfabric.clikit import (
    ConfigOpt,
    JsonOpt,
    MaxMemoryOpt,
    ProgressOpt,
    SeedOpt,
    emit_json,
    options,
    out,
    progress,
)
from trainfabric.errors import ConfigError
from trainfabric.ocs.cli.options import NAMES, B1Opt, B2Opt, FallbackOpt, OcsOpt, PortsOpt, RateOpt
from trainfabric.tables import Col, print_records

WideOpt = Annotated[
    bool, typer.Option("--wide", help="Always a table, even wider than the terminal.")
]

# The direct alpha-fair check is dense SLSQP over the pod pairs: about 15 s for 276 pairs
# (24 pods, five p), over two minutes for 496 (32 pods); by default it runs up to this many.
ALPHA_CHECK_PAIRS = 300

FAIR_NAMES = {
    **NAMES,
    "jobs": "--jobs",
    "workload": "--jobs",
    "weights": "--weights",
    "job_pods": "--job-pods",
    "p": "--p",
}


def _split(text: str, field: str, kind):
    """Comma-separated values of ``kind`` (ConfigError naming ``field`` on a bad entry)."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise ConfigError(field, f"empty entry in {text!r}")
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise ConfigError(field, f"not a list of {kind.__name__} values: {text!r}") from None


def ocs_fairness(
    jobs: Annotated[
        str,
        typer.Option(
            "--jobs",
            help="Comma-separated jobs sharing the wiring: presets (moe, pipeline, dp-ring, "
            "dp-hd, hybrid, ...) or job .toml / task-DAG .json files.",
        ),
    ] = "moe,pipeline",
    weights: Annotated[
        str | None, typer.Option("--weights", help="Comma-separated job weights > 0 [all 1].")
    ] = None,
    pods: Annotated[
        int, typer.Option("--pods", min=2, max=4096, help="Pods of the shared OCS fabric.")
    ] = 8,
    job_pods: Annotated[
        str | None,
        typer.Option(
            "--job-pods",
            help="Comma-separated pods per job (each placed on a seeded random subset of "
            "--pods) \\[default: every job on all pods].",
        ),
    ] = None,
    ports: PortsOpt = 4,
    ocs: OcsOpt = 2,
    p: Annotated[
        str,
        typer.Option("--p", help="Comma-separated powers p in [1, 1e8] of the mean, or inf."),
    ] = "1,2,4,8,inf",
    normalise: Annotated[
        bool,
        typer.Option(
            "--normalise/--seconds",
            help="Fairness on slowdowns (iteration time over the job's time on the uniform "
            "mesh) or on raw iteration times.",
        ),
    ] = False,
    alpha_check: Annotated[
        bool | None,
        typer.Option(
            "--alpha-check/--no-alpha-check",
            help="Solve the alpha-fair problem (alpha = p + 1) directly and compare optima "
            f"(SLSQP, cubic in the pod pairs; default: on up to {ALPHA_CHECK_PAIRS} pairs).",
            show_default=False,
        ),
    ] = None,
    b1: B1Opt = 1.0,
    b2: B2Opt = 50.0,
    seed: SeedOpt = 0,
    rate_gbps: RateOpt = 100.0,
    fallback_gbps: FallbackOpt = 5.0,
    wide: WideOpt = False,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One wiring per power p for several jobs: per-job iteration times, mean, max, Jain."""
    from trainfabric.ocs.fairness import check_p, place_jobs, study
    from trainfabric.ocs.model import OcsModel

    with progress(json_out, "ocs fairness", show_progress), options(**FAIR_NAMES):
        specs = _split(jobs, "jobs", str)
        ws = None if weights is None else _split(weights, "weights", float)
        ks = None if job_pods is None else _split(job_pods, "job_pods", int)
        ps = [check_p(v) for v in _split(p, "p", float)]
        model = OcsModel.uniform(
            pods, ports, ocs, rate_bps=rate_gbps * 1e9, fallback_bps=fallback_gbps * 1e9
        )
        placed = place_jobs(specs, pods, ks, ws, seed)
        check = model.n_pairs <= ALPHA_CHECK_PAIRS if alpha_check is None else alpha_check
        result = study(placed, model, ps, b1, b2, normalise, seed, check)
        result["alpha_check"] = check
    if json_out:
        return emit_json(result)
    out.print(
        f"[bold]{len(placed)} jobs on {pods} pods, {ports} OCS ports per pod, {ocs} OCSes[/bold]"
    )
    if check:
        out.print(_alpha_sentence(result["plans"]))
    cols = [
        Col("wiring"),
        *(Col(f"job:{j['name']}", f"{j['name']} iteration", "s") for j in result["jobs"]),
        Col("mean", "weighted mean", result["value_unit"]),
        Col("max", "slowest job", result["value_unit"]),
        Col("jain", "Jain's index"),
    ]
    print_records(out, _fairness_rows(result), cols, wide=wide)


# The baselines of ``study`` in the words every OCS command uses.
BASELINE_LABELS = {
    "near_uniform": "best near-uniform wiring",
    "demand_proportional": "demand-proportional wiring",
}


def _fairness_rows(result: dict) -> list[dict]:
    """One record per plan (``p = ...``) and per baseline, the jobs' times as ``job:NAME``."""
    names = [j["name"] for j in result["jobs"]]
    labelled = [(f"p = {float(row['p']):g}", row) for row in result["plans"]]
    labelled += [(BASELINE_LABELS.get(k, k), row) for k, row in result["baselines"].items()]
    return [
        {
            "wiring": label,
            **dict(zip((f"job:{n}" for n in names), row["job_iteration_s"], strict=True)),
            **{k: row[k] for k in ("mean", "max", "jain")},
        }
        for label, row in labelled
    ]


def _alpha_sentence(plans: list[dict]) -> str:
    """Whether every checked plan agrees with the direct alpha-fair optimum (alpha = p + 1)."""
    checked = [r for r in plans if r.get("alpha_fair") is not None]
    if not checked:
        return "alpha-fair check: no plan has a finite p to check."
    differ = [f"p = {float(r['p']):g}" for r in checked if not r["alpha_fair"]["agree"]]
    worst = max(r["alpha_fair"]["rel_wiring"] for r in checked)
    verdict = f"{', '.join(differ)} DIFFER" if differ else f"all {len(checked)} checked plans agree"
    return (
        f"alpha-fair check (alpha = p + 1, solved directly): {verdict}; largest relative "
        f"wiring difference {worst:.1e}."
    )
