"""Progress reporting for long runs, without tying an engine to a terminal.

An engine that loops over stages or cells takes an optional ``progress`` (a
:class:`rich.progress.Progress`, created by the CLI on stderr) and iterates with
:func:`track`; with ``progress=None`` (the API, tests, ``--json``) it is a plain loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

T = TypeVar("T")


def track(items: Iterable[T], description: str, progress: Any = None) -> Iterator[T]:
    """Yield ``items``, advancing a bar called ``description`` on ``progress`` if given."""
    if progress is None:
        yield from items
        return
    total = len(items) if isinstance(items, Sized) else None
    task = progress.add_task(description, total=total)
    for item in items:
        yield item
        progress.advance(task)
    progress.update(task, description=f"{description} done")
