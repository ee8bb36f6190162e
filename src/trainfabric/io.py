"""Atomic, durable file writes and the one strict JSON encoder.

Writes go to a temporary file in the target's directory, which is flushed to disk (``fsync``)
and then renamed onto the target; the directory is ``fsync``-ed before and after the rename
so the new name survives a crash too. An interrupted run therefore never leaves a
half-written table, manifest or report behind. Written files get mode ``0o666 & ~umask``
like any ``open()``; the umask is read once, at import (flipping it around each write would
race with other threads). A write the machine refuses (no space left, a read-only file
system, no permission, a quota, an I/O error) raises a
:class:`~trainfabric.errors.WriteError` naming the target path (:func:`writing`), which the
CLI prints as one line, exiting 1.

:func:`dumps` is the one JSON encoder of the toolkit (``--json`` output, run manifests,
benchmark results). Its output is strict JSON (RFC 8259): numpy scalars and arrays become
numbers and lists, paths become strings, and a non-finite float (NaN, +inf, -inf), which JSON
cannot represent, becomes ``null`` -- with the reason beside it when it is a dict value:
``{"gap": inf}`` is written ``{"gap": null, "gap_nonfinite": "inf"}``; inside a list it is a
bare ``null``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainfabric import limits
from trainfabric.errors import ConfigError, WriteError

if TYPE_CHECKING:
    import numpy as np

NONFINITE_SUFFIX = "_nonfinite"
# What the machine, not the user's choice of path, refuses: a full disk or quota, a read-only
# file system, missing permission, a failing device, a file-size limit.
ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}
)


def _read_umask() -> int:
    """The process umask: from ``/proc/self/status`` (Linux, no side effect), else by setting
    and restoring it (done once, at import)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _read_umask()


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)``, fsync the temporary file and the directory (its entry is
    durable before it replaces anything), rename it onto ``path`` and fsync the directory
    again (the rename is durable). On any failure the temporary file is removed and ``path``
    is left as it was; an OSError (a full disk, a read-only directory, ...) becomes a
    :class:`~trainfabric.errors.WriteError` naming ``path``. The parent directory is created
    when missing."""
    path = Path(path)
    with writing(path):
        _replace(path, write)
    return path


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Within the block, an OSError becomes a :class:`~trainfabric.errors.WriteError` naming
    ``path`` (as given) with the system's reason (``No space left on device``)."""
    try:
        yield
    except OSError as exc:
        raise WriteError(str(path), os_reason(exc)) from exc


def _replace(path: Path, write: Callable[[Path], None]) -> None:
    """The body of :func:`atomic_write`, OSErrors unchanged."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        _fsync(tmp_path)
        tmp_path.chmod(0o666 & ~UMASK)
        _fsync(path.parent, directory=True)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    _fsync(path.parent, directory=True)


def _fsync(path: Path, directory: bool = False) -> None:
    """Flush ``path`` (a file, or a directory's entries) to stable storage."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str) -> Path:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Atomically write ``data`` to ``path``."""
    return atomic_write(path, lambda p: p.write_bytes(data))


def write_json(path: str | Path, obj: Any) -> Path:
    """Atomically write ``obj`` as strict, indented JSON with sorted keys (see :func:`dumps`)."""
    return write_text(path, dumps(obj, indent=2, sort_keys=True) + "\n")


def write_parquet(path: str | Path, table: Any, metadata: Mapping | None = None) -> Path:
    """Atomically write a pandas DataFrame (no index), or a mapping of column name -> 1-D
    numeric or string numpy array, as Parquet. The mapping is written by pyarrow alone, from the
    arrays' buffers: ``pyarrow.array`` would import pandas (0.3-0.4 s of a CLI's start-up).
    ``metadata`` (mapping only): key -> JSON-able value, stored as strict JSON text in the
    file's schema metadata (the table's header: ``pyarrow.parquet.read_schema(p).metadata``)."""
    if isinstance(table, Mapping):
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(table)
        arrays = [_arrow_column(np.ascontiguousarray(table[name])) for name in names]
        meta = {str(k): dumps(v) for k, v in (metadata or {}).items()}
        columns = pa.Table.from_arrays(arrays, names=names, metadata=meta or None)
        return atomic_write(path, lambda p: pq.write_table(columns, p))
    if metadata:
        raise TypeError("metadata is supported for a mapping of columns only")
    return atomic_write(path, lambda p: table.to_parquet(p, engine="pyarrow", index=False))


def _arrow_column(values: np.ndarray) -> Any:
    """A pyarrow array from a 1-D numpy array: int/float columns view its buffer (no copy),
    strings are packed as UTF-8 with int32 offsets; no nulls."""
    import numpy as np
    import pyarrow as pa

    if values.ndim == 1 and values.dtype.kind == "U":
        data = [str(v).encode() for v in values]
        offsets = np.zeros(len(data) + 1, dtype=np.int32)
        np.cumsum([len(b) for b in data], out=offsets[1:])
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(pa.string(), len(data), buffers)
    if values.ndim != 1 or values.dtype.kind not in "iuf":
        raise TypeError(
            f"expected a 1-D numeric or str array, got {values.dtype} of shape {values.shape}"
        )
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def dumps(obj: Any, indent: int | None = None, sort_keys: bool = False) -> str:
    """``obj`` as strict JSON text (see the module docs for the mapping of numpy values, paths
    and non-finite floats). A dict holding both ``k`` (non-finite) and ``k_nonfinite`` is a
    ValueError; an object JSON cannot hold (a set, an arbitrary class) is a TypeError."""
    return json.dumps(jsonable(obj), indent=indent, sort_keys=sort_keys, allow_nan=False)


def loads(text: str | bytes) -> Any:
    """Parse strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` (which Python's parser
    accepts and JavaScript's and jq's reject) raise a ValueError, as malformed JSON does."""
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"not strict JSON: {name}")


def jsonable(obj: Any) -> Any:
    """``obj`` with every value mapped to what strict JSON can hold (the mapping of
    :func:`dumps`, without the encoding)."""
    obj = _plain(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return _jsonable_dict(obj)
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def _jsonable_dict(obj: Mapping[Any, Any]) -> dict[Any, Any]:
    """A dict with non-finite float values replaced by ``None`` plus a ``<key>_nonfinite``
    sibling holding ``"nan"``, ``"inf"`` or ``"-inf"``."""
    out: dict[Any, Any] = {}
    reasons: dict[str, str] = {}
    for key, value in obj.items():
        key = _plain(key)
        value = _plain(value)
        if isinstance(value, float) and not math.isfinite(value):
            reasons[f"{key}{NONFINITE_SUFFIX}"] = _reason(value)
        out[key] = jsonable(value)
    clash = sorted(set(reasons) & {str(k) for k in out})
    if clash:
        raise ValueError(f"cannot encode non-finite value: key {clash[0]!r} already exists")
    return out | reasons


def _plain(obj: Any) -> Any:
    """numpy scalars -> Python scalars, numpy arrays (anything with ``tolist``) -> lists,
    paths -> strings; everything else unchanged."""
    if isinstance(obj, str | int | float | bool | type(None)):
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj


def _reason(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def read_file(
    path: str | Path,
    field: str,
    kind: str = "file",
    max_bytes: int | None = None,
    parse_factor: float | None = None,
) -> bytes:
    """The bytes of the regular file at ``path``, read with a bound.

    Refused with a one-line ``ConfigError(field, ...)``: a missing or unreadable path, a
    directory, anything that is not a regular file (a FIFO, ``/dev/zero``: their size says
    nothing about what a read returns), a file over ``max_bytes``, one whose parse needs
    more memory than allowed (``parse_factor`` x its size, :func:`trainfabric.limits.
    check_memory`), and one that grows while read (at most size + 1 bytes are read).
    ``kind`` names what was expected (``"TOML file"``).
    """
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(field, f"file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(field, f"cannot read {path}: {os_reason(exc)}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(field, f"{path} is a directory; expected a {kind}")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(field, f"{path} is not a regular file; expected a {kind}")
    if max_bytes is not None and info.st_size > max_bytes:
        raise ConfigError(field, f"{path}: larger than {max_bytes:,} bytes")
    if parse_factor is not None:
        limits.check_memory(field, parse_factor * info.st_size, f"parsing {path}")
    try:
        with open(path, "rb") as handle:
            data = handle.read(info.st_size + 1)
    except OSError as exc:
        raise ConfigError(field, f"cannot read {path}: {os_reason(exc)}") from None
    if len(data) > info.st_size:
        raise ConfigError(field, f"{path} changed size while being read")
    return data


def prepare_dir(path: str | Path, field: str = "--out") -> Path:
    """Check, before any compute, that ``path`` can be used as an output directory, and
    create it (with its parents); return it.

    Refused with a one-line ``ConfigError(field, ...)`` when the path is the problem: an
    existing path that is not a directory, a directory that cannot be created because a
    parent is a file or does not exist. Refused with a :class:`~trainfabric.errors.WriteError`
    naming ``path`` when the machine is (:data:`ENVIRONMENT_ERRNOS`: a read-only file system,
    no permission, a full disk): the directory cannot be created, or a probe file cannot be
    created in it (which also covers read-only mounts where permission bits say yes).
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(field, f"{out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refusal(out, field, "cannot create directory", exc) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=out)
    except OSError as exc:
        raise _refusal(out, field, "cannot write in", exc) from None
    os.close(fd)
    os.unlink(probe)
    return out


def _refusal(out: Path, field: str, what: str, exc: OSError) -> ConfigError | WriteError:
    """A WriteError for what the machine refuses, else a ConfigError naming ``field``."""
    if exc.errno in ENVIRONMENT_ERRNOS:
        return WriteError(str(out), os_reason(exc))
    return ConfigError(field, f"{what} {out}: {os_reason(exc)}")


def os_reason(exc: OSError) -> str:
    """An OSError's reason on one line: the system's text for its errno (``No space left on
    device``), else its own text (pyarrow words its errors at length)."""
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    return reason.replace("\n", " ")
