"""The task engine: a DAG of compute, timer and communication tasks run on a fabric.

:mod:`.graph` (:class:`TaskGraph`, the input), :mod:`.engine` (:class:`TaskSim`,
:func:`run_tasks`: routing, snapshots, results) and :mod:`.loop` (the compiled event loop:
progressive filling re-solved only where a departure or arrival changes the max-min rates).
``trainfabric.fabric.tasks`` was one module (now :mod:`.engine`); its names are exported here.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "DEFAULT_BIN_S": "engine",
    "MEMO_BYTES": "engine",
    "TaskResult": "engine",
    "tier_plane_classes": "engine",
    "Snapshot": "engine",
    "TaskSim": "engine",
    "run_tasks": "engine",
    "KIND_NAMES": "graph",
    "TaskGraph": "graph",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
