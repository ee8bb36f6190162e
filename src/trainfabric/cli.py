"""The ``trainfabric`` command: one sub-command group per pillar, a thin layer over the API.

Conventions: ``--json`` prints exactly one JSON object on stdout; tables and progress go to
stderr/stdout for people; ``--config FILE.toml`` supplies option values (keys are the option
names, ``-`` or ``_``); user errors print one line and exit with code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from typer._click.exceptions import NoArgsIsHelpError

from trainfabric.clikit import ConfigOpt, JsonOpt, err, out
from trainfabric.clikit import emit_json as _emit_json
from trainfabric.diloco import cli as diloco_cli
from trainfabric.errors import TrainfabricError
from trainfabric.fabric import cli as fabric_cli
from trainfabric.ocs import cli as ocs_cli
from trainfabric.workloads import cli as workloads_cli

app = typer.Typer(
    help="Plan, simulate and schedule the networks of large AI-training clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(workloads_cli.app, name="workloads")
app.add_typer(ocs_cli.app, name="ocs")
app.add_typer(fabric_cli.app, name="fabric")
app.add_typer(diloco_cli.app, name="diloco")


# -- sweeps and reports -----------------------------------------------------------------------
@app.command("sweep")
def sweep(
    file: Annotated[Path, typer.Argument(help="Sweep TOML: experiment, seeds, [base], [grid].")],
    executor: Annotated[str, typer.Option(help="local (process pool), ray, or serial.")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: a local Ray).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Local worker processes (default: CPU count).")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Run directory (default runs/<name>).")
    ] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a parameter grid x seeds; re-running the same command resumes finished cells."""
    from trainfabric.runs import load_sweep, run_sweep

    spec = load_sweep(file)
    res = run_sweep(spec, out_dir, executor=executor, workers=workers, address=address)
    info = {
        "run_dir": str(res.run_dir),
        "cells": len(res.computed) + len(res.skipped),
        "computed": len(res.computed),
        "skipped": len(res.skipped),
        "rows": len(res.results),
    }
    if json_out:
        return _emit_json(info)
    err.print(f"{info['computed']} cells computed, {info['skipped']} resumed -> {res.run_dir}")


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Render RUN_DIR/report.html (tables and figures) from any run directory."""
    from trainfabric.runs import render_report

    path = render_report(run_dir)
    if json_out:
        return _emit_json({"report": str(path)})
    err.print(f"report: {path}")


@app.command("demo")
def demo(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the demo writes its run directory.")
    ] = Path("runs/demo"),
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The main job on embedded defaults: every pillar's small scenario, then one report."""
    from trainfabric.demo import run_demo

    result = run_demo(out_dir, console=err if json_out else out)
    if json_out:
        return _emit_json(result)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except TrainfabricError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except NoArgsIsHelpError as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except typer.TyperException as exc:
        sys.stderr.write(f"error: {exc.format_message()}\n")
        raise SystemExit(2) from None
    except typer.Abort:
        sys.stderr.write("aborted\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
