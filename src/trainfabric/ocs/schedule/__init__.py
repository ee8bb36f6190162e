"""Circuit scheduling with reconfiguration delay (docs/ocs.md §1.9 B, the Spectra problem, E5).

Modules: :mod:`.model` (schedules, slots and their check), :mod:`.decompositions` (BvN,
Solstice, Eclipse: matrices into weighted matchings), :mod:`.schedulers` (the schedulers over
``s`` parallel OCSes), :mod:`.bounds` (lower bounds, the exact optimum of tiny instances),
:mod:`.demand` (the seeded demand families) and :mod:`.study` (the E5 sweep).
``trainfabric.ocs.schedule`` was one module (now :mod:`.model`); its names are all exported here.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "CHECK_RTOL": "model",
    "InvalidScheduleError": "model",
    "Slot": "model",
    "Schedule": "model",
    "sequential": "model",
    "served_bytes": "model",
    "check_schedule": "model",
    "lower_bound": "bounds",
    "lower_bound_parts": "bounds",
    "exact_makespan": "bounds",
    "bvn": "decompositions",
    "solstice": "decompositions",
    "eclipse": "decompositions",
    "demand_matrix": "demand",
    "read_demand": "demand",
    "Instance": "schedulers",
    "Result": "schedulers",
    "run_schedulers": "schedulers",
    "SCHEDULERS": "schedulers",
    "study_rows": "study",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
