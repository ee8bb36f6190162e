"""The run substrate every pillar stands on: typed configs in, tidy tables out.

An experiment is a function of a typed config and a seed returning a table
(:func:`register`, :func:`get`). A sweep (:class:`SweepSpec`, :func:`load_sweep`) expands to
cells, grid point x seed (:func:`expand`), that :func:`run_sweep` runs serially, on a local
process pool or on Ray into a resumable, locked run directory (:class:`RunDir`);
:func:`render_report` turns any run directory into ``report.html``.

This package imports no pillar and no experiment: the registered experiments are found
through the ``trainfabric.experiments`` entry-point group (see :mod:`.registry`).
"""

from trainfabric.runs import registry
from trainfabric.runs.registry import Experiment, get, names, register
from trainfabric.runs.report import FIGURES, render_report
from trainfabric.runs.store import RunDir
from trainfabric.runs.sweep import (
    Cell,
    SweepResult,
    SweepSpec,
    default_run_dir,
    expand,
    load_sweep,
    run_cell,
    run_sweep,
)

__all__ = [
    "FIGURES",
    "Cell",
    "Experiment",
    "RunDir",
    "SweepResult",
    "SweepSpec",
    "default_run_dir",
    "expand",
    "get",
    "load_sweep",
    "names",
    "register",
    "registry",
    "render_report",
    "run_cell",
    "run_sweep",
]
