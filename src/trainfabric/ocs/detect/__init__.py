"""Change detection over per-slot count vectors (docs/ocs.md §1.11): GLR-CUSUM and GLR detectors.

Modules: :mod:`.detectors` (the detectors, their thresholds and the statistic's paths),
:mod:`.calibrate` (a GLR threshold calibrated on the stream's fitted null, with its bound) and
:mod:`.streams` (count streams, planted changes, the reduced statistics for many pods).
``trainfabric.ocs.detect`` was one module; its names are all exported here.
"""

from __future__ import annotations

from trainfabric.lazy import exports

_EXPORTS = {
    "kl_divergence": "detectors",
    "cusum_threshold": "detectors",
    "glr_threshold": "detectors",
    "SplitStore": "detectors",
    "CusumDetector": "detectors",
    "GlrDetector": "detectors",
    "Paths": "detectors",
    "statistic_paths": "detectors",
    "GlrCalibration": "calibrate",
    "CalibratedGlrDetector": "calibrate",
    "calibrate_glr": "calibrate",
    "tolerance_order": "calibrate",
    "window_false_alarms": "calibrate",
    "MODES": "streams",
    "CHANGES": "streams",
    "offdiag_mask": "streams",
    "reduce_counts": "streams",
    "top_pairs": "streams",
    "slot_batches": "streams",
    "multinomial_stream": "streams",
    "planted_change": "streams",
    "SyntheticChange": "streams",
    "synthetic_change": "streams",
    "pair_matrix": "streams",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
