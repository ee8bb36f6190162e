"""Run directories: where a sweep's manifest, per-cell tables and results live.

Layout::

    RUNDIR/manifest.json           sweep spec, seeds, cells, config, versions, git, timestamps
    RUNDIR/cells/<cell_id>.parquet  one table per finished cell (written as it finishes)
    RUNDIR/results.parquet          all cells concatenated in grid order (written at the end)
    RUNDIR/report.html              rendered by :func:`trainfabric.runs.render_report`
    RUNDIR/.lock                    the PID of the process writing the directory (see below)

Every file is written atomically (temporary file + rename), so a cell file that exists is
complete: resuming skips exactly the cells whose files exist. The manifest records the latest
invocation at top level and the earlier ones under ``history``.

Safety of outputs (every writer, sweeps and single runs alike):

- :func:`trainfabric.io.prepare_dir` checks, before any compute, that an output directory
  can be created and written to (a user error naming the option, or a one-line
  :class:`~trainfabric.errors.WriteError` when the machine refuses, otherwise);
- :func:`safe_child` turns a user-given run name into a directory inside a chosen root (no
  ``..``, no separators, no control characters);
- :meth:`RunDir.lock` holds an exclusive ``fcntl.flock`` on ``RUNDIR/.lock`` while a process
  writes the directory, so a second writer is refused at once, naming the holder's PID. The
  lock is released by the kernel when its holder exits, even when killed; the file stays
  (removing it would let two writers lock two different files).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import platform
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

import trainfabric
from trainfabric import io
from trainfabric.config import validate
from trainfabric.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from trainfabric.runs.sweep import Cell, SweepSpec

VERSIONED = ("trainfabric", "numpy", "scipy", "pandas", "pyarrow", "pydantic", "matplotlib", "ray")
_INVOCATION_KEYS = ("started", "finished", "executor", "hostname", "computed", "skipped", "git")
LOCK_NAME = ".lock"
NAME_MAX_BYTES = 255


class _GitState(BaseModel):
    commit: str
    dirty: bool


class _ManifestShape(BaseModel):
    """The keys readers of a manifest rely on, with their types (others are allowed), so a
    foreign or damaged ``manifest.json`` is a user error, not a crash in the report."""

    model_config = ConfigDict(extra="allow")

    experiment: str | None = None
    description: str | None = None
    spec: dict[str, Any] = {}
    config: dict[str, Any] = {}
    seeds: list[int] = []
    cells: list[dict[str, Any]] = []
    swept: list[str] = []
    keys: list[str] = []
    versions: dict[str, str] = {}
    git: _GitState | None = None


class RunDir:
    """A run directory at ``path`` (created on first write); ``field`` is the option or key
    that named it (``--out``), used in the user errors about it."""

    def __init__(self, path: str | Path, field: str = "--out"):
        self.path = Path(path)
        self.field = field

    @property
    def lock_path(self) -> Path:
        """``RUNDIR/.lock``: holds the PID of the process writing this directory."""
        return self.path / LOCK_NAME

    @contextmanager
    def lock(self) -> Iterator[RunDir]:
        """Hold an exclusive lock on this run directory for the duration of the block.

        Creates the directory when missing, then takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on
        ``RUNDIR/.lock`` and writes this process's PID into it. When another process holds
        the lock, raises at once ``ConfigError(field, "run directory X is locked by PID N
        (another run is writing it)")``. The lock is released at the end of the block, and
        by the kernel if this process dies. A lock file the machine refuses to create or write
        (a read-only or full file system) is a :class:`~trainfabric.errors.WriteError`
        naming it. The descriptor is close-on-exec, so a spawned (fork + exec) worker never
        keeps the directory locked; a plainly *forked* child would share the lock until it
        exits (the executors only spawn).
        """
        with io.writing(self.lock_path):
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                self.field,
                f"run directory {self.path} is locked by PID {self._holder()} "
                "(another run is writing it)",
            ) from None
        try:
            with io.writing(self.lock_path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode("ascii"))
            yield self
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextmanager
    def single_run(self, name: str | None) -> Iterator[RunDir]:
        """Hold :meth:`lock` for a single (non-sweep) run called ``name`` (its manifest's
        ``experiment``): a directory holding another run (another ``experiment``, or files
        but no manifest) is refused, so its tables never mix into this run's report; the same
        run again overwrites its own tables. ``name=None`` only locks."""
        with self.lock():
            if name is not None:
                self._check_owner(name)
            yield self

    def _check_owner(self, name: str) -> None:
        existing = self.read_manifest()
        if existing is None:
            others = [p.name for p in self.path.iterdir() if p.name != LOCK_NAME]
            if others:
                raise ConfigError(
                    self.field, f"{self.path} holds files but no run manifest; use another --out"
                )
        elif existing.get("experiment") != name:
            raise ConfigError(
                self.field,
                f"{self.path} holds run {existing.get('experiment')!r}, not {name!r}; "
                "use another --out",
            )

    def _holder(self, attempts: int = 20, pause_s: float = 0.01) -> str:
        """The PID written in the lock file; a holder that has just locked may not have
        written it yet, so read a few times (``attempts`` x ``pause_s`` seconds) first."""
        for _ in range(attempts):
            try:
                text = self.lock_path.read_text(encoding="ascii").strip()
            except (OSError, ValueError):
                text = ""
            if text.isdigit():
                return text
            time.sleep(pause_s)
        return "unknown"

    @property
    def manifest_path(self) -> Path:
        """``RUNDIR/manifest.json``."""
        return self.path / "manifest.json"

    @property
    def cells_dir(self) -> Path:
        """``RUNDIR/cells``, one Parquet file per finished cell."""
        return self.path / "cells"

    @property
    def results_path(self) -> Path:
        """``RUNDIR/results.parquet``."""
        return self.path / "results.parquet"

    @property
    def report_path(self) -> Path:
        """``RUNDIR/report.html``."""
        return self.path / "report.html"

    def cell_path(self, cell_id: str) -> Path:
        """``RUNDIR/cells/<cell_id>.parquet``."""
        return self.cells_dir / f"{cell_id}.parquet"

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when there is none; an unreadable one is a ConfigError."""
        try:
            manifest = io.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(self.field, f"cannot read {self.manifest_path}: {exc}") from None
        try:
            _ManifestShape.model_validate(manifest)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "the document"
            raise ConfigError(
                self.field, f"{self.manifest_path}: {where}: {err['msg']} (not a run manifest?)"
            ) from None
        return manifest

    def finished_ids(self) -> set[str]:
        """Ids of the cells whose table is in ``cells/`` (complete, since writes are atomic)."""
        return {p.stem for p in self.cells_dir.glob("*.parquet")}

    def start(self, spec: SweepSpec, cells: list[Cell], executor: str) -> dict[str, Any]:
        """Check that this directory is new or holds the same sweep, write the manifest of a
        starting invocation and return it.

        The same sweep means the same set of cell ids (so ``seeds = 3`` and ``seeds = [0, 1,
        2]`` are the same sweep). A different sweep, or an existing non-empty directory that is
        not a run directory, is a ConfigError.
        """
        existing = self.read_manifest()
        if existing is None and self._has_foreign_files():
            raise ConfigError(
                self.field, f"{self.path} exists and is not a run directory; use another one"
            )
        if existing is not None:
            old = {c.get("id") for c in existing.get("cells", [])}
            if old != {c.cell_id for c in cells}:
                raise ConfigError(
                    self.field,
                    f"{self.path} holds a different sweep "
                    f"(experiment {existing.get('experiment')!r}, {len(old)} cells); "
                    "use another one",
                )
        self._remove_orphans()
        manifest = _manifest(spec, cells, executor)
        if existing is not None:
            previous = {k: existing.get(k) for k in _INVOCATION_KEYS}
            manifest["history"] = [*existing.get("history", []), previous]
        io.write_json(self.manifest_path, manifest)
        return manifest

    def _remove_orphans(self) -> None:
        """Delete the temporary files of a writer that was killed mid-write (``.NAME.*.tmp``,
        see :func:`trainfabric.io.atomic_write`); safe because the caller holds the lock."""
        for folder in (self.path, self.cells_dir):
            if folder.is_dir():
                for orphan in folder.glob(".*.tmp"):
                    orphan.unlink(missing_ok=True)

    def _has_foreign_files(self) -> bool:
        """Whether the directory holds anything besides its own lock file."""
        return self.path.is_dir() and any(p.name != LOCK_NAME for p in self.path.iterdir())

    def write_cell(self, cell_id: str, table: pd.DataFrame) -> Path:
        """Atomically write one finished cell's table."""
        return io.write_parquet(self.cell_path(cell_id), table)

    def read_cells(self, cells: list[Cell]) -> pd.DataFrame:
        """The tables of ``cells`` concatenated in the given order (all must be finished)."""
        missing = [c.cell_id for c in cells if not self.cell_path(c.cell_id).exists()]
        if missing:
            raise ConfigError(self.field, f"{len(missing)} cells unfinished, e.g. {missing[0]}")
        import pandas as pd

        tables = [pd.read_parquet(self.cell_path(c.cell_id)) for c in cells]
        return pd.concat(tables, ignore_index=True)

    def write_results(self, cells: list[Cell]) -> pd.DataFrame:
        """Concatenate the cells' tables (grid order) into ``results.parquet``; return it."""
        results = self.read_cells(cells)
        io.write_parquet(self.results_path, results)
        return results

    def finish(self, manifest: dict[str, Any], computed: int, skipped: int) -> dict[str, Any]:
        """Record the end of the invocation (UTC time, cells computed/skipped) in the manifest."""
        manifest = manifest | {"finished": now(), "computed": computed, "skipped": skipped}
        io.write_json(self.manifest_path, manifest)
        return manifest


def safe_child(root: str | Path, name: str, field: str) -> Path:
    """``root/name`` for a user-given run-directory ``name``, guaranteed to stay inside
    ``root``.

    ``name`` must be one plain path component: non-empty, not ``.`` or ``..``, without ``/``
    or ``\\``, without control characters (code points < 32 and 127), at most 255 bytes in
    UTF-8; otherwise ``ConfigError(field, ...)``. As a last check the resolved result
    (symbolic links followed) must lie inside the resolved ``root``, so an existing link
    ``root/name`` pointing elsewhere is refused too. The directory is not created.
    """
    problem = _name_problem(name)
    if problem:
        raise ConfigError(field, f"{name!r} is not a usable run-directory name: {problem}")
    base = Path(root)
    child = base / name
    if not child.resolve().is_relative_to(base.resolve()):
        raise ConfigError(field, f"{name!r} resolves to {child.resolve()}, outside {base}")
    return child


def _name_problem(name: str) -> str | None:
    """Why ``name`` is not a safe single path component, or None."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if name in (".", ".."):
        return "it names a directory above or at the root"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "it contains a control character"
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
        return f"it is longer than {NAME_MAX_BYTES} bytes"
    return None


def package_versions() -> dict[str, str]:
    """Python's version and those of the installed packages in :data:`VERSIONED`."""
    versions = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_state(directory: Path | None = None) -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of the git checkout holding the trainfabric sources
    (``directory``, default the package's directory), or None when they are not tracked in a
    git repository with a commit (e.g. an installed wheel) or git is unavailable."""
    cwd = directory or Path(trainfabric.__file__).parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        git("ls-files", "--error-unmatch", "--", ".")
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def now() -> str:
    """The current UTC time, to the second (ISO 8601), as manifests record it."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_run_manifest(
    run_dir: str | Path,
    name: str,
    description: str,
    config: dict[str, Any],
    seeds: list[int],
    started: str,
) -> Path:
    """``manifest.json`` of a single (non-sweep) run: what ran, on which seeds, with which
    package versions and git commit, from ``started`` until now."""
    return io.write_json(
        Path(run_dir) / "manifest.json",
        {
            "experiment": name,
            "description": description,
            "spec": {"name": name},
            "config": config,
            "seeds": seeds,
            "versions": package_versions(),
            "git": git_state(),
            "started": started,
            "finished": now(),
        },
    )


def _manifest(spec: SweepSpec, cells: list[Cell], executor: str) -> dict[str, Any]:
    from trainfabric.runs import registry

    experiment = registry.get(spec.experiment)
    swept = list(spec.grid)
    full = validate(experiment.config_model, cells[0].params).model_dump(mode="json")
    model = experiment.config_model
    return {
        "experiment": spec.experiment,
        "description": experiment.description,
        "spec": spec.model_dump(mode="json"),
        "config_model": f"{model.__module__}.{model.__qualname__}",
        "config": {k: v for k, v in full.items() if k not in swept},
        "swept": swept,
        "keys": list(experiment.keys),
        "seeds": spec.seed_list,
        "cells": [{"id": c.cell_id, "params": c.params, "seed": c.seed} for c in cells],
        "versions": package_versions(),
        "git": git_state(),
        "executor": executor,
        "hostname": socket.gethostname(),
        "started": now(),
        "finished": None,
        "computed": None,
        "skipped": None,
    }
