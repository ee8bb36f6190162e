"""Typed configs: pydantic models loaded from TOML; validation errors become ConfigErrors.

Every config model derives from :class:`Config`: extra fields are rejected (a typo in a TOML
key is reported by name instead of being silently ignored), numbers must be finite (no NaN,
no infinity) and types are strict (``"1e8"`` is not a number, ``true`` is not an integer);
a field that needs a conversion (a path from a string, a tuple from a list) says so with
``Field(strict=False)``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from trainfabric.errors import ConfigError
from trainfabric.io import read_file

C = TypeVar("C", bound=BaseModel)
MAX_TOML_BYTES = 10_000_000
MAX_SEED = 2**63 - 1  # seeds are hashed and drawn as 64-bit integers


class Config(BaseModel):
    """Base of all trainfabric configs: strict about keys, types and finiteness; immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def field_path(loc: tuple[Any, ...]) -> str:
    """Dotted field path of a pydantic error location, e.g. ``model.layers``."""
    return ".".join(str(p) for p in loc) or "<root>"


def validate(model: type[C], data: Any, prefix: str = "") -> C:
    """Validate ``data`` into ``model``; the first error becomes a ConfigError naming its field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = field_path(tuple(err["loc"]))
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{prefix}{path}" if prefix else path, message) from None


def read_toml(path: str | Path, field: str = "config") -> dict[str, Any]:
    """Parse a TOML file (a regular file of at most :data:`MAX_TOML_BYTES`, UTF-8); anything
    else, or a syntax error, is a ConfigError naming ``field`` and the file."""
    data = read_file(path, field, "TOML file", max_bytes=MAX_TOML_BYTES)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(field, f"{path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(field, f"{path}: invalid TOML ({exc})") from None


def load_toml(path: str | Path, model: type[C]) -> C:
    """Read ``path`` and validate it into ``model``."""
    return validate(model, read_toml(path))
