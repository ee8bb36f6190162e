"""The flow engine: event-driven fluid simulation with max-min fair rates.

:mod:`.engine` (:func:`simulate`, the Python loop and its reference) runs :mod:`.loop` (the
compiled loop for static routes); :mod:`.collectives` turns collectives into dependent flows
and NCCL-tests metrics; :mod:`.calibration` adds the packet engine's per-message start-up,
and :mod:`.trimming` what its trimming transport does on failed and flapping links and in
adaptive routing's plane queues.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "SimResult": "engine",
    "static_goodput": "engine",
    "simulate": "engine",
    "KINDS": "collectives",
    "ALGORITHMS": "collectives",
    "PLACEMENTS": "collectives",
    "SYNCS": "collectives",
    "CONNECTIONS": "collectives",
    "MAX_BARRIER_EDGES": "collectives",
    "bus_factor": "collectives",
    "algbw_Bps": "collectives",
    "busbw_Bps": "collectives",
    "line_rate_fraction": "collectives",
    "ideal_time_s": "collectives",
    "place": "collectives",
    "collective_steps": "collectives",
    "uniform_all_to_all": "collectives",
    "grouped_all_to_all": "collectives",
    "shortcut_applies": "collectives",
    "flow_count": "collectives",
    "collective_memory_bytes": "collectives",
    "check_collective_size": "collectives",
    "CollectiveFlows": "collectives",
    "collective_flows": "collectives",
    "identical_steps": "collectives",
    "CollectiveRun": "collectives",
    "run_collective": "collectives",
    "MAX_RETX": "calibration",
    "Calibration": "calibration",
    "RAW": "calibration",
    "FITTED": "calibration",
    "first_window_retx": "calibration",
    "calibrated_flows": "calibration",
    "fluid_valid": "calibration",
    "CalibratedResult": "calibration",
    "simulate_calibrated": "calibration",
    "fit": "calibration",
    "fit_fields": "calibration",
    "TrimmingModel": "trimming",
    "simulate_trimmed": "trimming",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
