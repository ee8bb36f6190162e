"""GLR-triggered reconfiguration: the comparator of the threshold policy that watches counts.

The threshold policy of :mod:`.threshold` sees the exact byte matrices. A deployed controller
sees samples: per slot, the flows (or fixed-size chunks) between pods, modelled as
``c_t,uv ~ Poisson(D_t,uv / chunk)`` (seeded). :func:`glr_mask` feeds them, reduced to the
``top`` heaviest pairs of the traffic at the last reconfiguration plus "everything else"
(:func:`trainfabric.ocs.detect.streams.reduce_counts` mode ``topr``, ``K = top + 1`` categories),
to the two-segment
GLR detector of :mod:`trainfabric.ocs.detect` (unknown pre-change law, false-alarm probability at
most
``delta`` per segment). An alarm at slot ``t`` triggers a reconfiguration at ``t`` (the
policy then re-solves for ``D_t``, as the threshold policy does); the detector restarts
itself and the ``top`` pairs are re-chosen from ``D_t``. The detector reacts to a change of the
traffic's *proportions*; a change of volume alone is invisible to it.
"""

from __future__ import annotations

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.detect.streams import top_pairs
from trainfabric.ocs.traffic import TrafficSequence

DEFAULT_COUNTS_PER_SLOT = 1000.0  # chunk = total bytes of slot 0 / this


def sampling(
    seq: TrafficSequence, chunk_bytes: float | None, top: int | None
) -> tuple[np.ndarray, float, int]:
    """``(first, chunk, top)``: slot 0's traffic [n, n], the chunk size (bytes; default slot
    0's total over :data:`DEFAULT_COUNTS_PER_SLOT`) and the watched pair count (default
    ``2 n``); ConfigError naming ``top`` or ``chunk_bytes`` when out of range."""
    n = seq.pods
    top = 2 * n if top is None else int(top)
    if not 1 <= top < n * (n - 1):
        raise ConfigError("top", f"must be in [1, {n * (n - 1) - 1}], got {top}")
    first = seq.block(0, 1)[0]
    chunk = first.sum() / DEFAULT_COUNTS_PER_SLOT if chunk_bytes is None else float(chunk_bytes)
    if not chunk > 0:
        raise ConfigError("chunk_bytes", f"must be > 0, got {chunk}")
    return first, chunk, top


def glr_mask(
    seq: TrafficSequence,
    delta: float = 0.01,
    chunk_bytes: float | None = None,
    top: int | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Reconfiguration slots [T] bool of the GLR-triggered policy (module doc). ``chunk_bytes``
    defaults to slot 0's total over :data:`DEFAULT_COUNTS_PER_SLOT`, ``top`` to ``2 n``."""
    from trainfabric.ocs.detect.detectors import GlrDetector, reduce_counts

    first, chunk, top = sampling(seq, chunk_bytes, top)
    rng = np.random.default_rng(seed)
    detector = GlrDetector(delta=delta)
    pairs = top_pairs(first, top)
    mask = np.zeros(seq.slots, dtype=bool)
    for t0, block in seq.blocks():
        counts = rng.poisson(block / chunk).astype(float)
        for i in range(block.shape[0]):
            if detector.update(reduce_counts(counts[i], "topr", pairs=pairs)):
                mask[t0 + i] = True
                pairs = top_pairs(block[i], top)
    return mask
