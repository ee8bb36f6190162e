"""``trainfabric ocs schedule``: one demand matrix over ``s`` parallel OCSes with a
reconfiguration delay (docs/ocs.md §1.9 B, the Spectra problem).

Runs every scheduler of :mod:`trainfabric.ocs.schedule.schedulers` (BvN+LPT, Solstice+LPT,
Eclipse+LPT, the Spectra-like reconstruction and ours), verifies each schedule with
:func:`trainfabric.ocs.schedule.model.check_schedule` (coverage, per-port exclusivity, δ before
every configuration) and reports its makespan beside the lower bound of
:mod:`trainfabric.ocs.schedule.bounds`.
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
    finite,
    options,
    out,
    progress,
)
from trainfabric.ocs.cli.options import RateOpt

SCHEDULE_NAMES = {
    "demand": "--demand",
    "pods": "--pods",
    "n": "--pods",
    "ocs": "--ocs",
    "s": "--ocs",
    "delay_s": "--delay-us",
    "rate_bps": "--rate-gbps",
    "seed": "--seed",
}


def ocs_schedule(
    demand: Annotated[
        str,
        typer.Option(
            "--demand",
            help="Demand family (gpt, pp, moe, random) or a square .npy/.csv matrix of bytes "
            "(zero diagonal).",
        ),
    ] = "moe",
    pods: Annotated[
        int | None,
        typer.Option(
            "--pods",
            min=2,
            max=512,
            help="Pods of a family [32] (at most 512: BvN alone peels up to n² matchings); "
            "for a file, its size.",
        ),
    ] = None,
    ocs: Annotated[int, typer.Option("--ocs", min=1, max=4096, help="Parallel OCSes (s).")] = 4,
    delay_us: Annotated[
        float,
        typer.Option(
            "--delay-us",
            help="Reconfiguration delay δ before every configuration, microseconds (> 0).",
            callback=finite(gt=0, le=1e12),
        ),
    ] = 20.0,
    rate_gbps: RateOpt = 100.0,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Schedule one demand matrix on s OCSes with delay δ: makespan of every scheduler vs the
    lower bound."""
    from trainfabric.limits import check_memory
    from trainfabric.ocs.schedule.bounds import lower_bound_parts
    from trainfabric.ocs.schedule.demand import FAMILIES, demand_matrix, read_demand
    from trainfabric.ocs.schedule.model import check_schedule
    from trainfabric.ocs.schedule.schedulers import Instance, run_schedulers

    rate = rate_gbps * 1e9 / 8
    delay_s = delay_us * 1e-6
    with progress(json_out, "ocs schedule", show_progress), options(**SCHEDULE_NAMES):
        if demand in FAMILIES:
            n = 32 if pods is None else pods
            # BvN of a dense matrix holds up to n² matchings of n ports (int64).
            check_memory("pods", 8.0 * n**3 + 64.0 * n**2, f"scheduling {n} pods")
            d = demand_matrix(demand, n, seed)
        else:
            d = read_demand(demand, "demand")
            if pods is not None and pods != d.shape[0]:
                raise_pods_mismatch(pods, d.shape[0])
            if d.shape[0] > 512:
                raise_too_large(d.shape[0])
            check_memory("demand", 8.0 * d.shape[0] ** 3, f"scheduling {d.shape[0]} pods")
        results = run_schedulers(Instance(d, ocs, delay_s, rate))
        parts = lower_bound_parts(d, ocs, delay_s, rate)
    lb = max(parts.values())
    rows = []
    for name, res in results.items():
        makespan = check_schedule(d, res.schedule)
        rows.append(
            {
                "scheduler": name,
                "makespan_s": makespan,
                "over_lb": makespan / lb,
                "configurations": res.configurations,
                "wall_s": res.wall_s,
            }
        )
    ours = results["ours"]
    summary = {
        "demand": demand,
        "pods": int(d.shape[0]),
        "ocs": ocs,
        "delay_s": delay_s,
        "rate_Bps": rate,
        "makespan_s": ours.makespan_s,
        "lower_bound_s": lb,
        "lower_bound_parts_s": parts,
        "ours_candidate": ours.detail,
        "schedulers": rows,
    }
    if json_out:
        return emit_json(summary)
    t = Table(
        "scheduler",
        "makespan (s)",
        "/ lower bound",
        "configurations",
        "wall (s)",
        title=f"{Path(demand).name}: {d.shape[0]} pods, s={ocs}, δ={delay_us:g} µs, LB={lb:.6g} s",
    )
    for r in rows:
        t.add_row(
            r["scheduler"],
            f"{r['makespan_s']:.6g}",
            f"{r['over_lb']:.3f}",
            str(r["configurations"]),
            f"{r['wall_s']:.3f}",
        )
    out.print(t)


def raise_too_large(n: int) -> None:
    """Matrix files are held to the same 512-pod limit as ``--pods``."""
    from trainfabric.errors import ConfigError

    raise ConfigError("demand", f"has {n} pods; at most 512 are supported")


def raise_pods_mismatch(pods: int, n: int) -> None:
    """``--pods`` given with a matrix file of another size is a user error."""
    from trainfabric.errors import ConfigError

    raise ConfigError("pods", f"is {pods} but the demand file has {n} pods")
