"""Sweeps: a grid of experiment parameters times a list of seeds, run into a run directory.

A sweep file (TOML) names an experiment, its seeds, the fixed config fields (``[base]``) and
the swept ones (``[grid]``, the cartesian product in file order)::

    experiment = "moe_skew"
    seeds = 3                 # seeds 0, 1, 2; or an explicit list: seeds = [7, 11]
    [base]
    experts = 64
    [grid]
    gini = [0.1, 0.2, 0.38]
    ep = [4, 8]

:func:`expand` turns it into :class:`Cell` s (grid point x seed, grid order, seeds innermost),
validating every cell's config against the experiment's config model before anything runs.
A sweep of more than :data:`MAX_CELLS` cells, or whose cells and manifest would not fit in
memory (:data:`CELL_BYTES` per cell, against :func:`trainfabric.limits.check_memory`), is
refused before anything is expanded, naming ``seeds`` or ``grid``.
:func:`run_sweep` runs the cells that are not finished yet (resume), writing each finished cell
to the run directory at once, and finally the concatenated ``results.parquet``; it holds the
run directory's lock (:meth:`RunDir.lock`) throughout, so a second sweep into the same
directory is refused before it computes anything.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError, field_validator
from pydantic_core import PydanticCustomError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from trainfabric.config import MAX_SEED, Config, field_path, read_toml, validate
from trainfabric.errors import ConfigError
from trainfabric.io import prepare_dir
from trainfabric.limits import check_memory
from trainfabric.runs import executors, registry
from trainfabric.runs.store import RunDir

DEFAULT_RUNS_ROOT = Path("runs")
MAX_CELLS = 1_000_000
CELL_BYTES = 4096  # measured: ~1.8 KB per 2-parameter cell (Cell, params, manifest entry)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SweepSpec(Config):
    """A sweep: ``experiment`` over the ``grid`` (cartesian product) x ``seeds``.

    ``seeds`` is a count ``n`` (seeds ``0 .. n-1``; the sweep's cells are capped, see
    :func:`check_size`) or an explicit list of distinct seeds in ``0 .. 2^63 - 1``. ``base``
    holds fixed config fields, ``grid`` maps a config field to the values it takes (a grid
    value overrides a ``base`` value of the same field). ``name`` names the default run
    directory ``runs/<name>``.
    """

    experiment: str
    seeds: list[int] | int = 1
    base: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    name: str | None = None

    @field_validator("seeds", mode="before")
    @classmethod
    def _check_seeds(cls, seeds: Any) -> Any:
        if isinstance(seeds, int) and not isinstance(seeds, bool):
            if seeds < 1:
                raise PydanticCustomError("seeds", "a seed count must be >= 1")
            return seeds
        if isinstance(seeds, list) and seeds:
            if not all(_is_seed(s) for s in seeds):
                raise PydanticCustomError(
                    "seeds", f"seeds must be non-negative integers, at most {MAX_SEED:,}"
                )
            if len(set(seeds)) != len(seeds):
                raise PydanticCustomError("seeds", "seeds must be distinct")
            return seeds
        raise PydanticCustomError(
            "seeds", "must be a seed count (an integer >= 1) or a non-empty list of seeds"
        )

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str | None) -> str | None:
        if name is not None and not _NAME.match(name):
            raise PydanticCustomError(
                "name", "must be a plain directory name (letters, digits, '.', '_', '-')"
            )
        return name

    @property
    def seed_list(self) -> list[int]:
        """The seeds, in run order."""
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def seed_count(self) -> int:
        """How many seeds (without building the list)."""
        return self.seeds if isinstance(self.seeds, int) else len(self.seeds)

    @property
    def point_count(self) -> int:
        """How many grid points (the product of the grid lists' lengths; 1 without a grid)."""
        return math.prod(len(values) for values in self.grid.values())


def _is_seed(value: Any) -> bool:
    """Whether ``value`` is an integer seed in ``0 ..`` :data:`~trainfabric.config.MAX_SEED`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED


@dataclass(frozen=True)
class Cell:
    """One unit of work: ``experiment`` at config ``params`` with ``seed``.

    ``params`` holds the fields the sweep sets (``base`` updated by the grid point), as
    normalised by the config model; ``swept`` names the grid fields (in grid order), which
    become columns of the cell's table. ``cell_id`` is 16 hex digits of the SHA-256 of the
    canonical JSON of experiment, *complete* config (defaults included) and seed.
    """

    experiment: str
    params: dict[str, Any]
    seed: int
    cell_id: str
    swept: tuple[str, ...]

    def run(self) -> pd.DataFrame:
        """Compute this cell's table (see :func:`run_cell`)."""
        return run_cell(self.experiment, self.params, self.seed, self.swept)


@dataclass(frozen=True)
class SweepResult:
    """Outcome of :func:`run_sweep`: the run directory, the concatenated results table, and the
    ids of the cells computed by this call and of those skipped as already finished (both in
    grid order)."""

    run_dir: Path
    results: pd.DataFrame
    computed: list[str]
    skipped: list[str]


def load_sweep(path: str | Path) -> SweepSpec:
    """Read a sweep TOML file; ``name`` defaults to the file's stem (``sweep-demo.toml`` ->
    ``sweep-demo``). A missing file, bad TOML or a bad field is a ConfigError."""
    data = read_toml(path)
    return validate(SweepSpec, {"name": Path(path).stem, **data})


def default_run_dir(spec: SweepSpec, root: str | Path = DEFAULT_RUNS_ROOT) -> Path:
    """``root/<spec.name>``, or ``root/<experiment>`` for an unnamed spec."""
    return Path(root) / (spec.name or spec.experiment)


def cell_hash(experiment: str, config: Config, seed: int) -> str:
    """Stable id of a cell: first 16 hex digits of SHA-256 over canonical JSON."""
    canonical = json.dumps(
        {"experiment": experiment, "config": config.model_dump(mode="json"), "seed": seed},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def expand(spec: SweepSpec) -> list[Cell]:
    """All cells of ``spec`` in grid order (first grid field outermost), seeds innermost.

    Every grid point is validated against the experiment's config model first; a bad value
    is a ConfigError naming where it came from (``grid.gini[2]``, ``base.experts``), and so is
    a field the model does not have. Two grid points with the same config are an error too.
    """
    experiment = registry.get(spec.experiment)
    _check_grid(spec)
    check_size(spec)
    keys = list(spec.grid)
    cells: list[Cell] = []
    seen: dict[str, str] = {}
    for indices in itertools.product(*(range(len(spec.grid[k])) for k in keys)):
        point = dict(zip(keys, indices, strict=True))
        config, params = _validate_point(experiment, spec, point)
        first_id = cell_hash(spec.experiment, config, spec.seed_list[0])
        label = ", ".join(f"{k}[{i}]" for k, i in point.items())
        if first_id in seen:
            raise ConfigError("grid", f"points ({seen[first_id]}) and ({label}) are one config")
        seen[first_id] = label
        cells.extend(
            Cell(
                experiment=spec.experiment,
                params=params,
                seed=seed,
                cell_id=cell_hash(spec.experiment, config, seed),
                swept=tuple(keys),
            )
            for seed in spec.seed_list
        )
    return cells


def run_cell(
    experiment_name: str,
    params: dict[str, Any],
    seed: int,
    swept: tuple[str, ...] | list[str] | None = None,
) -> pd.DataFrame:
    """Run one cell and return its table, with leading columns for the ``swept`` parameters
    (default: all of ``params``), ``seed`` and ``cell_id``.

    A top-level function of plain arguments, so it runs in a freshly spawned worker: the
    registry is re-imported there and the config re-validated from ``params``.
    """
    experiment = registry.get(experiment_name)
    config = validate(experiment.config_model, params, prefix="params.")
    table = experiment.function(config, seed)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(
            f"experiment {experiment_name!r} returned {type(table).__name__}, not a DataFrame"
        )
    dumped = config.model_dump(mode="json")
    columns = {k: dumped[k] for k in (params if swept is None else swept)}
    columns |= {"seed": seed, "cell_id": cell_hash(experiment_name, config, seed)}
    clash = sorted(set(columns) & set(table.columns))
    if clash:
        raise ValueError(
            f"experiment {experiment_name!r} returned columns {clash}, which clash with "
            "parameter/seed/cell_id columns"
        )
    table = table.reset_index(drop=True)
    for position, (column, value) in enumerate(columns.items()):
        table.insert(position, column, value)
    return table


def run_sweep(
    spec: SweepSpec,
    run_dir: str | Path | None = None,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: bool = True,
    out_field: str = "--out",
) -> SweepResult:
    """Run ``spec`` into ``run_dir`` (default :func:`default_run_dir`) and return the results.

    ``executor``: ``"local"`` (process pool of ``workers`` processes, default one per CPU),
    ``"ray"`` (Ray at ``address``, or a local Ray instance when ``address`` is None) or
    ``"serial"`` (in this process). Cells already in the run directory are skipped (resume);
    each computed cell is written as soon as it finishes, so an interrupted sweep keeps its
    finished cells. ``progress`` shows a progress bar on stderr.

    Before any cell runs: the options and every cell are validated, the run directory is
    checked creatable and writable (:func:`trainfabric.io.prepare_dir`) and locked
    (:meth:`RunDir.lock`, held until the end). A run directory that cannot be written, is
    locked by another process or holds a different sweep is a ConfigError naming
    ``out_field`` (the option that chose the directory). Ctrl-C (KeyboardInterrupt) stops
    the workers and propagates, keeping every finished cell for a resume.
    """
    executors.check_options(executor, workers, address)
    cells = expand(spec)
    store = RunDir(run_dir if run_dir is not None else default_run_dir(spec), field=out_field)
    prepare_dir(store.path, out_field)
    with store.lock():
        return _run_locked(spec, cells, store, executor, workers, address, progress)


def _run_locked(
    spec: SweepSpec,
    cells: list[Cell],
    store: RunDir,
    executor: str,
    workers: int | None,
    address: str | None,
    progress: bool,
) -> SweepResult:
    """The body of :func:`run_sweep`, run while holding the run directory's lock."""
    manifest = store.start(spec, cells, executor)
    finished = store.finished_ids()
    skipped = [c.cell_id for c in cells if c.cell_id in finished]
    todo = [c for c in cells if c.cell_id not in finished]
    computed: set[str] = set()
    with _progress_bar(spec.experiment, len(cells), len(skipped), progress) as advance:

        def on_done(cell: Cell, table: pd.DataFrame) -> None:
            store.write_cell(cell.cell_id, table)
            computed.add(cell.cell_id)
            advance()

        executors.execute(executor, todo, on_done, workers=workers, address=address)
    results = store.write_results(cells)
    store.finish(manifest, computed=len(computed), skipped=len(skipped))
    return SweepResult(
        run_dir=store.path,
        results=results,
        computed=[c.cell_id for c in cells if c.cell_id in computed],
        skipped=skipped,
    )


def check_size(spec: SweepSpec) -> None:
    """Refuse, before expanding, a sweep of more than :data:`MAX_CELLS` cells (grid points x
    seeds) or whose cells would not fit in memory (:data:`CELL_BYTES` each). The error names
    ``seeds`` when the seed count is the larger factor, else ``grid``."""
    seeds, points = spec.seed_count, spec.point_count
    cells = seeds * points
    field = "seeds" if seeds >= points else "grid"
    what = f"{points:,} grid points x {seeds:,} seeds = {cells:,} cells"
    if cells > MAX_CELLS:
        raise ConfigError(field, f"too large: {what}, over the limit of {MAX_CELLS:,} cells")
    check_memory(field, float(cells * CELL_BYTES), f"a sweep of {what}")


def _check_grid(spec: SweepSpec) -> None:
    for key, values in spec.grid.items():
        if not values:
            raise ConfigError(f"grid.{key}", "needs at least one value")


def _validate_point(
    experiment: registry.Experiment, spec: SweepSpec, point: dict[str, int]
) -> tuple[Config, dict[str, Any]]:
    """Validate ``base`` updated by the grid point (field -> index into its grid list)."""
    raw = spec.base | {k: spec.grid[k][i] for k, i in point.items()}
    try:
        config = experiment.config_model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        message = _message(err, experiment)
        where = _source(loc, spec, point, unknown=err["type"] == "extra_forbidden")
        raise ConfigError(where, message if loc else f"{message} (at {raw})") from None
    dumped = config.model_dump(mode="json")
    return config, {k: dumped[k] for k in raw}


def _source(loc: tuple[Any, ...], spec: SweepSpec, point: dict[str, int], unknown: bool) -> str:
    """Name the sweep-file entry behind a validation error at ``loc`` of the config: the
    grid value (``grid.gini[2]``), or the key itself when it is ``unknown`` to the model."""
    if not loc:
        return "grid" if point else "base"
    key, rest = str(loc[0]), field_path(loc[1:]) if len(loc) > 1 else ""
    if key in point and not unknown:
        name = f"grid.{key}[{point[key]}]"
    elif key in spec.grid:
        name = f"grid.{key}"
    else:
        name = f"base.{key}"
    return f"{name}.{rest}" if rest else name


def _message(err: Any, experiment: registry.Experiment) -> str:
    fields = ", ".join(experiment.config_model.model_fields)
    if err["type"] == "extra_forbidden":
        return f"not a field of experiment {experiment.name!r} (fields: {fields})"
    if err["type"] == "missing":
        return "required; set it in [base] or [grid]"
    return str(err["msg"]).removeprefix("Value error, ")


@contextmanager
def _progress_bar(label: str, total: int, done: int, enabled: bool) -> Iterator[Any]:
    """A rich progress bar on stderr; yields ``advance()``, to call once per finished cell."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    ) as bar:
        task = bar.add_task(label, total=total, completed=done)
        yield lambda: bar.advance(task)
