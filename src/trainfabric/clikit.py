"""Shared pieces of the ``trainfabric`` command: options, validation, errors, output, progress.

Every pillar's command module (``trainfabric.<pillar>.cli``) builds its Typer group from
these, so all commands share one contract:

- ``--config FILE.toml`` supplies option values; its keys are the option names as the docs
  print them (``rate-gbps`` or ``rate_gbps`` for ``--rate-gbps``, ``out`` for ``--out``);
  an unknown key is a user error naming it.
- Every option is validated before any work: numbers are finite and in range
  (:func:`finite`, Typer's ``min``/``max`` for integers: every integer has an upper bound),
  and an error raised deeper with an internal field name is renamed to the option the user
  typed (:func:`options`).
- ``--json`` prints exactly one strict JSON object on stdout (:func:`emit_json`); progress
  bars go to stderr, only on a terminal and never under ``--json`` unless ``--progress``
  (:func:`progress_shown`).
- ``--max-memory-gb`` caps what the size guards of :mod:`trainfabric.limits` allow.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from trainfabric import io, limits
from trainfabric.config import MAX_SEED, read_toml
from trainfabric.errors import ConfigError, FormatError

out = Console()
err = Console(stderr=True)


def load_config(ctx: typer.Context, _param: typer.CallbackParam, value: str | None) -> str | None:
    """Eager ``--config`` callback: TOML keys (option names) become the options' defaults."""
    if value is None:
        return value
    by_key = _option_keys(ctx)
    flags = {p.name for p in ctx.command.params if getattr(p, "is_flag", False)}
    defaults = {}
    with options(config="--config"):
        data = read_toml(value)
    for key, item in data.items():
        name = by_key.get(key.replace("_", "-"))
        if name is None:
            known = ", ".join(sorted(by_key))
            raise ConfigError("--config", f"unknown option {key!r} in {value}; known: {known}")
        if isinstance(item, bool) and name not in flags:  # Click reads true as 1
            raise ConfigError("--config", f"{key} = {str(item).lower()} in {value}: not a switch")
        defaults[name] = item
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def _option_keys(ctx: typer.Context) -> dict[str, str]:
    """``{"rate-gbps": "rate_gbps", "out": "out_dir", ...}``: config key -> parameter name."""
    keys = {}
    for param in ctx.command.params:
        if param.name == "config":
            continue
        for opt in param.opts:
            if opt.startswith("--"):
                keys[opt[2:]] = param.name
    return keys


def finite(
    gt: float | None = None, ge: float | None = None, le: float | None = None
) -> Callable[[Any], Any]:
    """Typer callback: the float option must be finite and within the bounds given."""

    def check(value: float | None) -> float | None:
        if value is None:
            return value
        if not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a finite number")
        bounds = (("gt", gt, value > (gt or 0)), ("ge", ge, value >= (ge or 0)))
        bounds += (("le", le, value <= (le or 0)),)
        for op, bound, ok in bounds:
            if bound is not None and not ok:
                sign = {"gt": ">", "ge": ">=", "le": "<="}[op]
                raise typer.BadParameter(f"{value:g} is out of range: must be {sign} {bound:g}")
        return value

    return check


@contextmanager
def options(**names: str) -> Iterator[None]:
    """Rename a ConfigError's internal field to the option the user typed.

    ``with options(rate_bps="--rate-gbps"):`` turns ``rate_bps: must be > 0`` raised inside
    the block into ``--rate-gbps: must be > 0`` (also for nested paths ``rate_bps.x``).
    """
    try:
        yield
    except ConfigError as exc:
        head, dot, rest = exc.field.partition(".")
        if head in names and not isinstance(exc, FormatError):  # file paths stay
            raise ConfigError(names[head] + (dot + rest if rest else ""), exc.message) from None
        raise


def _set_memory_limit(value: float | None) -> float | None:
    value = finite(gt=0)(value)
    limits.set_memory_limit(value)
    return value


ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        help="TOML file of option values; keys are the option names (rate-gbps, out, ...).",
        callback=load_config,
        is_eager=True,
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one strict JSON object on stdout, nothing else.")
]
ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="Progress bars on stderr (default: on a terminal, off under --json).",
        show_default=False,
    ),
]
MaxMemoryOpt = Annotated[
    float | None,
    typer.Option(
        "--max-memory-gb",
        help="Refuse inputs whose estimated memory exceeds this (GB) \\[default: free memory].",
        callback=_set_memory_limit,
    ),
]
SeedOpt = Annotated[
    int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed (non-negative integer).")
]
GpusPerPodOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=4096,
        help="GPUs per pod of an imported Chakra trace or SimAI file: rank r on pod r // N "
        "\\[default: Chakra 1, SimAI 8].",
    ),
]


def emit_json(obj: Any) -> None:
    """Write ``obj`` as one line of strict JSON (non-finite numbers become null) to stdout."""
    sys.stdout.write(io.dumps(obj) + "\n")


def progress_shown(json_out: bool, show: bool | None) -> bool:
    """Whether a command shows progress on stderr: as ``show`` says (``--progress`` /
    ``--no-progress``), else when stderr is a terminal and ``--json`` is off. Off a terminal
    (a pipe, a log file, CI) a failing command prints nothing before its one error line."""
    if show is not None:
        return show
    return not json_out and Console(stderr=True).is_terminal


@contextmanager
def progress(json_out: bool, label: str, show: bool | None = None) -> Iterator[Any]:
    """A rich progress display on stderr for the running command (or a disabled one).

    ``show`` is the ``--progress/--no-progress`` flag (None when not given): by default shown
    when stderr is a terminal and ``--json`` is off; ``--progress`` forces it
    (:func:`progress_shown`). The command's
    own row pulses with the elapsed time; engines given the display as ``progress`` add
    their stages and cells below it (:func:`trainfabric.progress.track`) and print stage
    lines above it (``.console``).
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    bar = Progress(
        TextColumn(f"[bold]{label}[/] {{task.description}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not progress_shown(json_out, show),
        transient=True,  # gone when the command ends; stage lines printed above it stay
    )
    with bar:
        task = bar.add_task("running", total=None)
        try:
            yield bar
        finally:
            bar.update(task, total=1, completed=1)


def input_file(path: Path, field: str) -> Path:
    """``path`` must be an existing regular file (a directory, a device or FIFO, or a missing
    path is refused)."""
    path = Path(path)
    if not path.is_file():
        what = (
            "is a directory"
            if path.is_dir()
            else "is not a regular file"
            if path.exists()
            else "not found"
        )
        raise ConfigError(field, f"{path} {what}; expected a file")
    return path
