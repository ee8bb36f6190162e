"""Atomic file writes: write to a temporary file in the same directory, then rename.

An interrupted run therefore never leaves a half-written table, manifest or report behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and atomically rename the result onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        tmp_path.chmod(0o666 & ~_umask())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> Path:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Atomically write ``data`` to ``path``."""
    return atomic_write(path, lambda p: p.write_bytes(data))


def write_json(path: str | Path, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def write_parquet(path: str | Path, table: Any) -> Path:
    """Atomically write a pandas DataFrame as Parquet (pyarrow engine, no index)."""
    return atomic_write(path, lambda p: table.to_parquet(p, engine="pyarrow", index=False))


def _jsonable(obj: Any) -> Any:
    """Fallback JSON encoder for numpy scalars/arrays and paths."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
