"""The top layer: registered experiments and cross-pillar studies.

Importing :mod:`trainfabric.experiments.library` registers every built-in experiment (and the
figures of their tables) into :mod:`trainfabric.runs`; the runs layer finds it through the
``trainfabric.experiments`` entry-point group, so no pillar and no runs module imports this
package. Run one with ``trainfabric experiments run NAME`` or sweep it with ``trainfabric sweep``.
"""
