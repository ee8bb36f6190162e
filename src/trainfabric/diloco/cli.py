"""``trainfabric diloco ...``: workload-aware DiLoCo sync policies and the protocol."""

from __future__ import annotations

import typer

app = typer.Typer(help="Workload-aware DiLoCo sync policies.", no_args_is_help=True)
