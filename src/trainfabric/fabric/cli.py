"""``trainfabric fabric ...``: multiplane Ethernet fabric simulation."""

from __future__ import annotations

import typer

app = typer.Typer(help="Multiplane Ethernet fabric simulation.", no_args_is_help=True)
