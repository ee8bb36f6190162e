"""One exception hierarchy for the whole toolkit.

A :class:`ConfigError` is a *user* error: the CLI prints its one-line message and exits with
code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


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
