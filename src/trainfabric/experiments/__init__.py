"""Experiments: typed configs in, tidy tables out; sweeps, run directories and reports.

An experiment is a function of a typed config and a seed returning a table
(:func:`register`, :func:`get`). A sweep (:class:`SweepSpec`, :func:`load_sweep`) expands to
cells, grid point x seed (:func:`expand`), that :func:`run_sweep` runs serially, on a local
process pool or on Ray into a resumable run directory (:class:`RunDir`);
:func:`render_report` turns any run directory into ``report.html``.
"""

from trainfabric.experiments.registry import Experiment, get, names, register
from trainfabric.experiments.report import FIGURES, render_report
from trainfabric.experiments.store import RunDir
from trainfabric.experiments.sweep import (
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
    "render_report",
    "run_cell",
    "run_sweep",
]
