"""The ``trainfabric`` command: mounts each pillar's ``cli.py`` and the run commands.

Run commands: ``sweep`` (a grid x seeds into a resumable, locked run directory), ``report``
(render any run directory), ``demo`` (every pillar's small scenario, one report) and
``experiments list|run``. Conventions (see :mod:`trainfabric.clikit`): ``--json`` prints
exactly one strict JSON object on stdout; progress goes to stderr; ``--config FILE.toml``
supplies option values by option name; a user error prints one line naming the option or
field and exits 2; a write the machine refuses (a full disk, a read-only directory) prints
one line naming the path and exits 1; Ctrl-C exits 130 and SIGTERM 143, each with one line,
keeping every finished cell for a resume.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import sys
import threading
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer

import trainfabric
from trainfabric.clikit import (
    ConfigOpt,
    JsonOpt,
    MaxMemoryOpt,
    ProgressOpt,
    emit_json,
    err,
    input_file,
    options,
    out,
    progress,
    progress_shown,
)
from trainfabric.diloco import cli as diloco_cli
from trainfabric.errors import (
    ConfigError,
    Terminated,
    TrainfabricError,
    WriteError,
    cause_of,
    sigterm_terminates,
)
from trainfabric.fabric import cli as fabric_cli
from trainfabric.io import ENVIRONMENT_ERRNOS, os_reason, prepare_dir
from trainfabric.ocs import cli as ocs_cli
from trainfabric.workloads import cli as workloads_cli

app = typer.Typer(
    help="Plan, simulate and schedule the networks of large AI-training clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
experiments_app = typer.Typer(
    help="Registered experiments and cross-pillar studies: list them, run one.",
    no_args_is_help=True,
)
app.add_typer(workloads_cli.app, name="workloads")
app.add_typer(ocs_cli.app, name="ocs")
app.add_typer(fabric_cli.app, name="fabric")
app.add_typer(diloco_cli.app, name="diloco")
app.add_typer(experiments_app, name="experiments")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"trainfabric {trainfabric.__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Plan, simulate and schedule the networks of large AI-training clusters."""


# -- sweeps, reports, experiments, demo -------------------------------------------------------
# Internal field names of the run substrate -> what the user typed.
SWEEP_NAMES = {
    "executor": "--executor",
    "workers": "--workers",
    "address": "--address",
    "run_dir": "--out",
}
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Run directory.", show_default="runs/<name>"),
]


@app.command("sweep")
def sweep(
    file: Annotated[
        Path,
        typer.Argument(
            help="Sweep TOML: experiment = NAME, seeds = N or a list, optional \\[base] "
            "(fixed fields) and \\[grid] (field = list of values; cartesian product).",
        ),
    ],
    executor: Annotated[
        str, typer.Option(help="local (process pool), ray, or serial.", show_default=True)
    ] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: a local Ray on 127.0.0.1).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, max=1024, help="Local worker processes (default: CPU count)."),
    ] = None,
    out_dir: OutOpt = None,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a parameter grid x seeds; re-running the same command resumes finished cells."""
    from trainfabric.runs import load_sweep

    with options(config="FILE"):
        spec = load_sweep(input_file(file, "FILE"))
    _emit_sweep(spec, out_dir, executor, workers, address, json_out, show_progress)


def _emit_sweep(
    spec, out_dir, executor, workers, address, json_out, show_progress, records=False
) -> None:
    """Run ``spec`` into its run directory, render its report, print the summary
    (``records``: ``rows`` holds the results table's rows, ``row_count`` their number)."""
    from trainfabric.runs import render_report, run_sweep

    shown = progress_shown(json_out, show_progress)
    with options(**SWEEP_NAMES):
        res = run_sweep(
            spec, out_dir, executor=executor, workers=workers, address=address, progress=shown
        )
        report = render_report(res.run_dir)
    info = {
        "experiment": spec.experiment,
        "run_dir": str(res.run_dir),
        "cells": len(res.computed) + len(res.skipped),
        "computed": len(res.computed),
        "skipped": len(res.skipped),
        "rows": len(res.results),
        "report": str(report),
    }
    if records:
        info["row_count"] = info["rows"]
        info["rows"] = res.results.to_dict("records")
    if json_out:
        return emit_json(info)
    err.print(
        f"{info['computed']} cells computed, {info['skipped']} resumed -> {res.run_dir}; "
        f"report: {info['report']}"
    )


@experiments_app.command("list")
def experiments_list(json_out: JsonOpt = False) -> None:
    """The registered experiments, their config fields and defaults."""
    from rich.table import Table

    from trainfabric.runs import registry

    rows = {
        name: {
            "description": (e := registry.get(name)).description,
            "fields": _defaults(e.config_model),
            "quick": dict(e.quick),
        }
        for name in registry.names()
    }
    if json_out:
        return emit_json({"experiments": rows})
    t = Table("experiment", "description", "fields (defaults)", title="registered experiments")
    for name, row in rows.items():
        fields = ", ".join(
            f"{k}={v}" for k, v in row["fields"].items() if not isinstance(v, dict | list)
        )
        t.add_row(name, row["description"], fields)
    out.print(t)


@experiments_app.command("run")
def experiments_run(
    name: Annotated[str, typer.Argument(help="Experiment name (see `experiments list`).")],
    quick: Annotated[
        bool, typer.Option(help="The experiment's small setting and one seed.")
    ] = False,
    seeds: Annotated[
        int | None, typer.Option(min=1, max=10_000, help="Seeds 0..N-1 (default 3; quick 1).")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="Config field KEY=VALUE (TOML value); repeatable."),
    ] = None,
    executor: Annotated[str, typer.Option(help="local, ray, or serial.")] = "local",
    workers: Annotated[int | None, typer.Option(min=1, max=1024, help="Local workers.")] = None,
    out_dir: OutOpt = None,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run one registered experiment over seeds into a run directory with a report."""
    from trainfabric.config import validate
    from trainfabric.runs import SweepSpec, registry

    with options(experiment="NAME"):
        experiment = registry.get(name)
    base = (dict(experiment.quick) if quick else {}) | _params(param or [])
    count = seeds or (1 if quick else 3)
    label = f"{name}-quick" if quick else name
    spec = validate(SweepSpec, {"experiment": name, "seeds": count, "base": base, "name": label})
    _emit_sweep(spec, out_dir, executor, workers, None, json_out, show_progress, records=True)


def _params(items: list[str]) -> dict[str, Any]:
    """``["gini=0.3", "workload=moe"]`` -> ``{"gini": 0.3, "workload": "moe"}`` (TOML values,
    bare words as strings)."""
    params = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError("--param", f"{item!r} is not KEY=VALUE")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        params[key.strip()] = value
    return params


def _defaults(model) -> dict[str, Any]:
    """Each config field's default as JSON (``"required"`` when it has none)."""
    from pydantic_core import to_jsonable_python

    from trainfabric.io import jsonable

    return {
        k: "required"
        if f.is_required()
        else jsonable(to_jsonable_python(f.get_default(call_default_factory=True)))
        for k, f in model.model_fields.items()
    }


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Render RUN_DIR/report.html (findings, figures, tables) from any run directory."""
    from trainfabric.runs import render_report

    with options(run_dir="RUN_DIR"):
        path = render_report(run_dir)
    if json_out:
        return emit_json({"report": str(path)})
    err.print(f"report: {path}")


@app.command("demo")
def demo(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where the demo writes its run directory.")
    ] = Path("runs/demo"),
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The main job on embedded defaults: every pillar's small scenario, then one report."""
    from trainfabric.demo import run_demo

    run_dir = prepare_dir(out_dir, "--out")
    with progress(json_out, "demo", show_progress) as bar:
        console = bar.console if not bar.disable else (None if json_out else out)
        result = run_demo(run_dir, console=console or _quiet(), progress=bar)
    if json_out:
        return emit_json(result)


def _quiet():
    from rich.console import Console

    return Console(stderr=True, quiet=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point: each invocation in its own context (limits); user errors are one line
    on stderr and exit 2; a write the machine refuses (full disk, read-only directory) is
    one line naming the path and exit 1; Ctrl-C is one line and exit 130, SIGTERM one line
    and exit 143 (128 + 15, the shell's code for a terminated process), both after the same
    cleanup (worker pools and Ray stopped, temporary files removed)."""
    with sigterm_terminates():
        contextvars.copy_context().run(_main, argv)


def run() -> None:
    """The ``trainfabric`` console script: :func:`main`, then the end of the process without
    the interpreter's teardown (freeing every object and module one by one: 0.3-0.4 s after
    an ``ocs plan``, 0.1-0.2 s after importing numba alone). What a normal exit does that matters
    still happens: the exit handlers run (worker pools, Ray, logging) and both streams are
    flushed. The normal exit is kept where the teardown can matter or differ: a thread still
    running, an exit status that is not a number, a stream that fails to flush; and any
    uncaught exception propagates as before. Tests call :func:`main`, which only raises."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    if not isinstance(code, int) or threading.active_count() > 1:
        raise SystemExit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: the interpreter's own exit reports it, as before
        raise SystemExit(code) from None
    os._exit(code)


INTERRUPTED = (
    "interrupted: files already written are kept (a sweep run again resumes its finished cells)"
)
TERMINATED = (
    "terminated (SIGTERM): files already written are kept "
    "(a sweep run again resumes its finished cells)"
)


def _main(argv: list[str] | None) -> None:
    try:
        code = app(args=argv, standalone_mode=False)
    except WriteError as exc:
        _fail(f"error: {exc}", 1)
    except TrainfabricError as exc:
        _fail(f"error: {exc}", 2)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except Terminated:
        _fail(TERMINATED, 143)
    except (typer.Abort, KeyboardInterrupt):
        _fail(INTERRUPTED, 130)
    except typer.TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
            raise SystemExit(exc.exit_code) from None
        _fail(f"error: {exc.format_message()}", 2)
    except MemoryError:
        _fail("error: out of memory; lower the input sizes or set --max-memory-gb", 2)
    except OSError as exc:
        if exc.errno not in ENVIRONMENT_ERRNOS:
            raise
        _fail(f"error: {_where(exc)}{os_reason(exc)}", 1)
    except SystemError as exc:
        # Ctrl-C or SIGTERM landing inside a Python callback of compiled code (numba's cache
        # loader) surfaces as a SystemError whose context is the interrupt.
        if cause_of(exc, Terminated) is not None:
            _fail(TERMINATED, 143)
        if cause_of(exc, KeyboardInterrupt) is None:
            raise
        _fail(INTERRUPTED, 130)
    # Without standalone mode Typer returns, not raises, the code of an Exit: 130 is its
    # translation of KeyboardInterrupt (Ctrl-C), anything else an explicit exit code.
    if code == 130:
        _fail(INTERRUPTED, 130)
    if isinstance(code, int) and code:
        raise SystemExit(code)


def _where(exc: OSError) -> str:
    """``"PATH: "`` for an OSError that names a file (writes outside
    :func:`trainfabric.io.atomic_write`: a checkpoint, a cache), else nothing."""
    return f"{exc.filename}: " if exc.filename is not None else ""


def _fail(line: str, code: int) -> None:
    sys.stderr.write(" ".join(line.split()) + "\n")
    raise SystemExit(code) from None


if __name__ == "__main__":
    run()
