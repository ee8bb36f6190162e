"""``trainfabric diloco ...``: workload-aware DiLoCo sync policies and the protocol.

``diloco sim``: one policy on one regime and seed (SLO, syncs, progress); ``diloco protocol``:
every policy against its matched-random control over paired seeds and regimes, with
statistics and verdicts, into a run directory with a report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainfabric.clikit import ConfigOpt, JsonOpt, emit_json, err, out
from trainfabric.errors import ConfigError

app = typer.Typer(help="Workload-aware DiLoCo sync policies.", no_args_is_help=True)
SUMMARY = ("slo_violation_rate", "syncs", "vs_matched_random", "p_value", "effect_size")


@app.command("sim")
def sim_cmd(
    policy: Annotated[
        str, typer.Option(help="Policy name (fixed_h, wa_forecast, ...).")
    ] = "wa_diloco",
    regime: Annotated[str, typer.Option(help="Regime (steady, diurnal, bursty, ...).")] = "bursty",
    seed: Annotated[int, typer.Option(help="Seed of the requests and the policy.")] = 0,
    windows: Annotated[int, typer.Option(help="Control windows of 1 s.")] = 10_000,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate one policy on one regime and seed."""
    import numpy as np

    from trainfabric.diloco.fleet import Block, FleetConfig, get_regime, simulate
    from trainfabric.diloco.policies import make_policy

    if windows < 10:
        raise ConfigError("windows", "must be >= 10")
    res = simulate(
        FleetConfig(windows=windows),
        get_regime(regime),
        [Block(make_policy(policy), np.array([seed]))],
    )
    row = {k: (v.item() if hasattr(v, "item") else v) for k, v in res.table.iloc[0].items()}
    if json_out:
        return emit_json(row)
    t = Table("quantity", "value", title=f"{policy} on {regime}, seed {seed}")
    for k, v in row.items():
        t.add_row(k, f"{v:.6g}" if isinstance(v, float) else str(v))
    out.print(t)


@app.command("protocol")
def protocol_cmd(
    quick: Annotated[bool, typer.Option(help="10 seeds, 2,000 windows, 5 envelope draws.")] = False,
    seeds: Annotated[
        int | None, typer.Option(help="Evaluation seeds (default 50, by power).")
    ] = None,
    windows: Annotated[int | None, typer.Option(help="Control windows per run.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Run directory to write.")] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Every policy vs matched random over paired seeds and regimes; verdicts and a report."""
    from trainfabric.diloco.protocol import ProtocolConfig, quick_config, run_to_dir

    cfg = quick_config() if quick else ProtocolConfig()
    update = {}
    if seeds is not None:
        update["seeds"] = seeds
    if windows is not None:
        update["fleet"] = cfg.fleet.model_copy(update={"windows": windows})
    if update:
        from trainfabric.config import validate

        cfg = validate(ProtocolConfig, cfg.model_dump() | update)
    out_dir = out_dir or Path("runs/diloco-protocol" + ("-quick" if quick else ""))
    res = run_to_dir(cfg, out_dir, console=err)
    if json_out:
        return emit_json(res)
    t = Table("regime", "policy", *SUMMARY, title="DiLoCo protocol: policy vs matched random")
    for regime, rows in res["regimes"].items():
        for policy, row in rows.items():
            t.add_row(regime, policy, *(_fmt(row[k]) for k in SUMMARY))
    out.print(t)
    err.print(f"run directory: {res['run_dir']}; report: {res['report']}")


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
