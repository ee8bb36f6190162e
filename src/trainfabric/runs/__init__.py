"""The run substrate every pillar stands on: typed configs in, tidy tables out.

An experiment is a function of a typed config and a seed returning a table
(:func:`register`, :func:`get`). A sweep (:class:`SweepSpec`, :func:`load_sweep`) expands to
cells, grid point x seed (:func:`expand`), that :func:`run_sweep` runs serially, on a local
process pool or on Ray into a resumable, locked run directory (:class:`RunDir`);
:func:`render_report` turns any run directory into ``report.html``.

This package imports no pillar and no experiment: the registered experiments are found
through the ``trainfabric.experiments`` entry-point group (see :mod:`.registry`). Names are
imported on first use (PEP 562), so a command that only locks a run directory does not pay
for pandas and matplotlib.
"""

from __future__ import annotations

from trainfabric.lazy import exports

# Submodule of each public name.
_EXPORTS = {
    "Experiment": "registry",
    "get": "registry",
    "names": "registry",
    "register": "registry",
    "FIGURES": "report",
    "render_report": "report",
    "RunDir": "store",
    "Cell": "sweep",
    "SweepResult": "sweep",
    "SweepSpec": "sweep",
    "default_run_dir": "sweep",
    "expand": "sweep",
    "load_sweep": "sweep",
    "run_cell": "sweep",
    "run_sweep": "sweep",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
