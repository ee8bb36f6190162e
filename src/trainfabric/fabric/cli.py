"""``trainfabric fabric ...``: multiplane Ethernet fabric simulation.

``fabric eval``: the four evaluation scenarios (line rate, isolation, failures, flaps) for
every load-balancing mode, into one run directory with a report; ``fabric run FILE.toml``:
one scenario of the user's own (see :mod:`trainfabric.fabric.scenarios` for the fields).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainfabric.clikit import ConfigOpt, JsonOpt, emit_json, err, out

app = typer.Typer(help="Multiplane Ethernet fabric simulation.", no_args_is_help=True)

OutOpt = Annotated[Path | None, typer.Option("--out", help="Run directory to write.")]


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
    out_dir: OutOpt = None,
    seed: Annotated[int, typer.Option(help="Seed of placements, hashes and failures.")] = 0,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Line rate, isolation, failures and flaps per load-balancing mode, with a report."""
    from trainfabric.fabric.scenarios import run_eval

    out_dir = out_dir or Path("runs/fabric-eval-quick" if quick else "runs/fabric-eval")
    res = run_eval(out_dir, quick=quick, seed=seed, console=err)
    if json_out:
        return emit_json(res)
    out.print(_mode_table(f"fabric eval ({'quick' if quick else 'full'})", res["modes"]))
    err.print(f"run directory: {res['run_dir']}; report: {res['report']}")


@app.command("run")
def run_cmd(
    scenario: Annotated[Path, typer.Argument(help="Scenario TOML (kind = line_rate | ...).")],
    out_dir: OutOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run one scenario file; tables, figures and report.html go to the run directory."""
    from trainfabric.fabric.scenarios import load_scenario, run_to_dir

    sc = load_scenario(scenario)
    out_dir = out_dir or Path("runs") / f"fabric-{sc.name or scenario.stem}"
    res = run_to_dir(sc, out_dir, console=err)
    if json_out:
        return emit_json(res)
    out.print(_mode_table(f"scenario {res['scenario']} ({sc.kind})", res["modes"]))
    err.print(f"run directory: {res['run_dir']}; report: {res['report']}")
