"""Run directories: where a sweep's manifest, per-cell tables and results live.

Layout::

    RUNDIR/manifest.json           sweep spec, seeds, cells, config, versions, git, timestamps
    RUNDIR/cells/<cell_id>.parquet  one table per finished cell (written as it finishes)
    RUNDIR/results.parquet          all cells concatenated in grid order (written at the end)
    RUNDIR/report.html              rendered by :func:`trainfabric.runs.render_report`

Every file is written atomically (temporary file + rename), so a cell file that exists is
complete: resuming skips exactly the cells whose files exist. The manifest records the latest
invocation at top level and the earlier ones under ``history``.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

import trainfabric
from trainfabric import io
from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.runs import registry

if TYPE_CHECKING:
    from trainfabric.runs.sweep import Cell, SweepSpec

VERSIONED = ("trainfabric", "numpy", "scipy", "pandas", "pyarrow", "pydantic", "matplotlib", "ray")
_INVOCATION_KEYS = ("started", "finished", "executor", "hostname", "computed", "skipped", "git")


class RunDir:
    """A run directory at ``path`` (created on first write)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

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
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError("run_dir", f"cannot read {self.manifest_path}: {exc}") from None
        if not isinstance(manifest, dict):
            raise ConfigError("run_dir", f"{self.manifest_path} is not a JSON object")
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
        if existing is None and self.path.is_dir() and any(self.path.iterdir()):
            raise ConfigError(
                "run_dir", f"{self.path} exists and is not a run directory; use another --out"
            )
        if existing is not None:
            old = {c.get("id") for c in existing.get("cells", [])}
            if old != {c.cell_id for c in cells}:
                raise ConfigError(
                    "run_dir",
                    f"{self.path} holds a different sweep "
                    f"(experiment {existing.get('experiment')!r}, {len(old)} cells); "
                    "use another --out",
                )
        manifest = _manifest(spec, cells, executor)
        if existing is not None:
            previous = {k: existing.get(k) for k in _INVOCATION_KEYS}
            manifest["history"] = [*existing.get("history", []), previous]
        io.write_json(self.manifest_path, manifest)
        return manifest

    def write_cell(self, cell_id: str, table: pd.DataFrame) -> Path:
        """Atomically write one finished cell's table."""
        return io.write_parquet(self.cell_path(cell_id), table)

    def read_cells(self, cells: list[Cell]) -> pd.DataFrame:
        """The tables of ``cells`` concatenated in the given order (all must be finished)."""
        missing = [c.cell_id for c in cells if not self.cell_path(c.cell_id).exists()]
        if missing:
            raise ConfigError("run_dir", f"{len(missing)} cells unfinished, e.g. {missing[0]}")
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
