"""One exception hierarchy for the whole toolkit.

A :class:`ConfigError` is a *user* error: the CLI prints its one-line message and exits with
code 2. A :class:`WriteError` is the machine refusing a write (a full disk, a read-only or
forbidden directory): one line naming the path, exit code 1. :class:`Terminated` is SIGTERM
turned into an exception (:func:`sigterm_terminates`), so that cleanup runs as for Ctrl-C;
the CLI prints one line and exits 143. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class TrainfabricError(Exception):
    """Base class of every error raised on purpose by trainfabric."""


class ConfigError(TrainfabricError):
    """Bad user input (a config field, a file, a flag); the message names the offending field."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def __reduce__(self):
        return (type(self), (self.field, self.message))


class FormatError(ConfigError):
    """A file in one of the interchange formats is malformed (names the node, edge or line)."""


class InfeasibleError(TrainfabricError):
    """The problem has no solution (e.g. a degree sequence that no wiring realises)."""


class WriteError(TrainfabricError):
    """The environment refused a write to ``path`` (no space left, a read-only file system,
    no permission, a quota, an I/O error); ``reason`` is the system's one-line wording."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.reason))


class Terminated(SystemExit):
    """SIGTERM arrived. A ``SystemExit`` with code 143 (128 + SIGTERM): uncaught, the process
    exits 143 after every ``finally`` and context manager has run (worker pools and Ray are
    stopped, temporary files removed), as a Ctrl-C would have them run."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


@contextmanager
def sigterm_terminates() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread; the previous
    handler is restored afterwards. Outside the main thread (where Python cannot set signal
    handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def cause_of(exc: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in ``exc`` and its cause/context chain, else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
