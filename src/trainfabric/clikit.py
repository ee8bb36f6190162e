"""Shared pieces of the ``trainfabric`` command: ``--config``/``--json`` options and output.

Every pillar's command module (``trainfabric.<pillar>.cli``) builds its Typer group from
these, so all commands share one ``--config`` behaviour (TOML keys become option defaults,
unknown keys are user errors) and one ``--json`` contract (exactly one object on stdout).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from trainfabric.config import read_toml
from trainfabric.errors import ConfigError

out = Console()
err = Console(stderr=True)


def load_config(ctx: typer.Context, _param: typer.CallbackParam, value: str | None) -> str | None:
    """Eager ``--config`` callback: TOML keys become the command's option defaults."""
    if value is None:
        return value
    data = {k.replace("-", "_"): v for k, v in read_toml(value).items()}
    known = {p.name for p in ctx.command.params if p.name != "config"}
    for key in data:
        if key not in known:
            raise ConfigError(f"config.{key}", f"unknown option; known: {', '.join(sorted(known))}")
    ctx.default_map = {**(ctx.default_map or {}), **data}
    return value


ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config", help="TOML file of option values.", callback=load_config, is_eager=True
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]


def emit_json(obj: Any) -> None:
    sys.stdout.write(
        json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)) + "\n"
    )
