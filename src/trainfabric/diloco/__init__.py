"""Workload-aware DiLoCo: when is an outer sync worth its cost in a fleet shared with serving?

Layout, bottom to top (an import-linter contract in ``pyproject.toml`` keeps it so):
:mod:`.policies` (sync policies, matched random deferral, the WA-DiLoCo score controller) ->
:mod:`.telemetry` -> :mod:`.learners`, :mod:`.serving`, :mod:`.requests` (progress and sync
cost, the serving engine model, traces) -> :mod:`.fleet` (the simulator), :mod:`.stats` ->
:mod:`.protocol` (the calibration protocol with its statistics), :mod:`.calibrate`,
:mod:`.live_analysis`, :mod:`.serve` (a real vLLM server, its emulator, the sidecar, replay),
:mod:`.train` (real torch DiLoCo) -> :mod:`.live` (real training beside a real server) ->
:mod:`.cli`.

What a user imports is exported here (imported on first use; torch only with ``train``)::

    from trainfabric.diloco import FleetConfig, get_regime, make_policy, simulate
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "FleetConfig": "fleet",
    "FleetResult": "fleet",
    "get_regime": "fleet",
    "simulate": "fleet",
    "POLICY_NAMES": "policies",
    "Schedule": "policies",
    "make_policy": "policies",
    "matched_schedule": "policies",
    "ProtocolConfig": "protocol",
    "run_protocol": "protocol",
    "LiveConfig": "live",
    "run_experiment": "live",
    "ServingModel": "serving",
    "ProgressModel": "learners",
    "SyncModel": "learners",
    "Requests": "requests",
    "read_trace": "requests",
    "azure_trace": "requests",
    "sign_flip_test": "stats",
    "wilcoxon": "stats",
    "holm": "stats",
    "Design": "stats",
    "seeds_for_power": "stats",
    "power_plan": "stats",
    "TrainConfig": "train.config",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
