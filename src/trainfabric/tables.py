"""Terminal tables that fit: every column named in full with its unit, every number at a
sensible precision, and a table too wide for the terminal printed one record per block.

A command describes its columns once (:class:`Col`: key, header, unit, format) and calls
:func:`print_records`. The rows print as a rich table when the table fits the console's
width with no header cut; otherwise each record prints as a block of ``header (unit): value``
lines, headed by its key column. ``--wide`` (``wide=True``) always prints the table.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table


def fmt_number(v: Any, digits: int = 4) -> str:
    """A value for a person: integers with thousands separators, floats to ``digits``
    significant digits (no exponent between 1e-4 and 1e9), booleans and text as they are."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return "-" if v is None else str(v)
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    x = float(v)
    if not math.isfinite(x):
        return str(x)
    if x != 0 and not 1e-4 <= abs(x) < 1e9:
        return f"{x:.{digits - 1}e}"
    return f"{x:,.{max(digits - 1 - math.floor(math.log10(abs(x))), 0) if x else 0}f}"


@dataclass(frozen=True)
class Col:
    """One column: the record ``key``, its ``header`` (default: the key with spaces), its
    ``unit`` (shown in the header), and ``fmt`` (a value -> text function; default
    :func:`fmt_number`)."""

    key: str
    header: str = ""
    unit: str = ""
    fmt: Callable[[Any], str] = fmt_number

    @property
    def label(self) -> str:
        name = self.header or self.key.replace("_", " ")
        return f"{name} ({self.unit})" if self.unit else name


def records_table(rows: Sequence[Mapping[str, Any]], cols: Sequence[Col], title: str = "") -> Table:
    """The rows as a rich table (headers never truncated: ``no_wrap`` headers, overflow
    folded in cells)."""
    t = Table(title=escape(title) if title else None)
    for c in cols:
        t.add_column(escape(c.label), no_wrap=True, overflow="fold")
    for r in rows:
        t.add_row(*(escape(c.fmt(r.get(c.key))) for c in cols))
    return t


def table_width(rows: Sequence[Mapping[str, Any]], cols: Sequence[Col]) -> int:
    """Characters the table needs on one line: per column the longest of its header and
    cells, plus rich's borders and padding (3 per column, 1 more at the edge)."""
    widths = [max([len(c.label), *(len(c.fmt(r.get(c.key))) for r in rows)]) for c in cols]
    return sum(widths) + 3 * len(cols) + 1


def print_records(
    console: Console,
    rows: Sequence[Mapping[str, Any]],
    cols: Sequence[Col],
    title: str = "",
    wide: bool = False,
) -> None:
    """Print ``rows`` as a table when it fits ``console.width`` (or, ``wide``, past it), else
    one block per record: its first column as the block's heading, then ``label  value``
    lines (a long value wraps inside its own column)."""
    need = table_width(rows, cols)
    if need <= console.width:
        console.print(records_table(rows, cols, title))
        return
    if wide:  # the whole table, past the terminal's width (rich caps a print at the console's)
        wider = Console(
            file=console.file,
            width=need,
            color_system=console.color_system,
            force_terminal=console.is_terminal,
        )
        wider.print(records_table(rows, cols, title))
        return
    if title:
        console.print(f"[bold]{escape(title)}[/bold]")
    head, *rest = cols
    for r in rows:
        console.print(f"[bold]{escape(head.label)}: {escape(head.fmt(r.get(head.key)))}[/bold]")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for c in rest:
            grid.add_row(escape(c.label), escape(c.fmt(r.get(c.key))))
        console.print(Padding(grid, (0, 0, 0, 2)))
