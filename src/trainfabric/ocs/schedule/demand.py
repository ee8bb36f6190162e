"""Demand matrices for the circuit-scheduling study (E5), seeded, in bytes per iteration.

Families (pods indexed ``0..n-1``, matrices directed with zero diagonal):

* ``gpt`` — GPT-3 175B trained with ``pp = 4`` pipeline stages × ``dp = n / pp`` data-parallel
  replicas (``pp = 1`` when 4 does not divide ``n`` or ``n < 8``); pod ``i·dp + r`` holds
  stage ``i`` of replica ``r``. Data parallel: a bidirectional ring all-reduce of the stage's
  bf16 gradients ``G = 2 · 175e9 / pp`` bytes over the ``dp`` replicas, each direction
  carrying half of the ring's ``2 (dp−1)/dp · G`` to the ring neighbour. Pipeline: per
  iteration ``m = 1536 / dp`` micro-batches of activations ``2048 · 12288 · 2`` bytes forward
  (stage ``i → i+1``) and their gradients backward (``i+1 → i``).
* ``pp`` — one pipeline through all ``n`` pods, 8 micro-batches of the same activations
  forward and backward.
* ``moe`` — expert-parallel dispatch: ``4n`` experts (4 per pod) with lognormal popularity of
  Gini 0.2 (:func:`trainfabric.workloads.moe.expert_popularity`), top-8 routing of 16,384
  tokens per pod, the routed token copies of each pod drawn multinomially over the pods'
  shares (local copies do not cross the fabric); 7168 · 2 bytes per copy (DeepSeek-V3).
* ``random`` — the sparse skewed benchmark of the Solstice and Eclipse evaluations (as we
  recall them: per port 4 large flows carrying 70 % and 12 small flows 30 % of its load):
  a sum of 4 + 12 random derangements with those weights, every entry scaled by an
  independent uniform factor in ``[0.9, 1.1]``; 1 GB per port.

:func:`delay_for` picks δ as a fraction ``rho`` of the ideal makespan ``max_v L_v / (s B)``
(E5 uses 1–50 %).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.traffic import load_npy
from trainfabric.workloads.moe import expert_popularity, shard_share

FAMILIES = ("gpt", "pp", "moe", "random")
ACTIVATION_BYTES = 2048 * 12288 * 2  # one GPT-3 micro-batch (seq 2048, hidden 12288, bf16)


def demand_matrix(family: str, n: int, seed: int = 0) -> np.ndarray:
    """The ``family`` demand on ``n`` pods (bytes); unknown family or ``n < 2``: ConfigError."""
    if family not in FAMILIES:
        raise ConfigError("demand", f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    if n < 2:
        raise ConfigError("pods", "must be >= 2")
    rng = np.random.default_rng(seed)
    return {"gpt": _gpt, "pp": _pp, "moe": _moe, "random": _random}[family](n, rng)


def _gpt(n: int, rng: np.random.Generator) -> np.ndarray:
    pp = 4 if n % 4 == 0 and n >= 8 else 1
    dp = n // pp
    d = np.zeros((n, n))
    grad = 2 * 175e9 / pp
    ring = (dp - 1) / dp * grad  # half of 2 (dp-1)/dp G per direction
    for i in range(pp):
        for r in range(dp):
            u = i * dp + r
            d[u, i * dp + (r + 1) % dp] += ring
            d[u, i * dp + (r - 1) % dp] += ring
            if i + 1 < pp:
                act = (1536 // dp) * ACTIVATION_BYTES
                d[u, u + dp] += act
                d[u + dp, u] += act
    np.fill_diagonal(d, 0.0)
    return d


def _pp(n: int, rng: np.random.Generator) -> np.ndarray:
    d = np.zeros((n, n))
    i = np.arange(n - 1)
    d[i, i + 1] = 8 * ACTIVATION_BYTES
    d[i + 1, i] = 8 * ACTIVATION_BYTES
    return d


def _moe(n: int, rng: np.random.Generator) -> np.ndarray:
    share = shard_share(expert_popularity(4 * n, 0.2, rng), n)
    copies = rng.multinomial(16_384 * 8, share, size=n).astype(float)
    np.fill_diagonal(copies, 0.0)
    return copies * 7168 * 2


def _derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    while True:
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


def _random(n: int, rng: np.random.Generator) -> np.ndarray:
    d = np.zeros((n, n))
    rows = np.arange(n)
    for count, share in ((4, 0.7), (12, 0.3)):
        for _ in range(count):
            d[rows, _derangement(n, rng)] += share / count
    d *= rng.uniform(0.9, 1.1, size=d.shape)
    return d * 1e9


def ideal_makespan_s(demand: np.ndarray, s: int, rate_Bps: float) -> float:
    """``max_v L_v / (s B)``: the makespan with free reconfiguration and perfect balance."""
    d = np.asarray(demand, dtype=float)
    return float(max(d.sum(axis=1).max(), d.sum(axis=0).max())) / (s * rate_Bps)


def delay_for(demand: np.ndarray, s: int, rate_Bps: float, rho: float) -> float:
    """δ = ``rho`` × :func:`ideal_makespan_s` (E5: ``rho`` from 0.01 to 0.5)."""
    return rho * ideal_makespan_s(demand, s, rate_Bps)


def validate_demand(d: np.ndarray, field: str = "demand") -> np.ndarray:
    """A square, ≥ 2 x 2, finite, non-negative float matrix with zero diagonal and some
    demand; anything else (including non-numeric entries) is a ConfigError naming ``field``."""
    d = np.asarray(d)
    if not (np.issubdtype(d.dtype, np.number) or d.dtype == bool):
        raise ConfigError(field, f"must hold numbers, got dtype {d.dtype}")
    d = d.astype(float)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ConfigError(field, f"must be a square matrix, got shape {d.shape}")
    if d.shape[0] < 2:
        raise ConfigError(field, "must have at least 2 pods")
    if not np.isfinite(d).all():
        raise ConfigError(field, "has NaN or infinite entries")
    if (d < 0).any():
        raise ConfigError(field, "has negative entries")
    if np.any(np.diag(d) != 0):
        raise ConfigError(field, "diagonal must be zero (a pod does not send to itself)")
    if not (d > 0).any():
        raise ConfigError(field, "is all zero")
    return d


def read_demand(path: str | Path, field: str = "demand") -> np.ndarray:
    """A demand matrix from ``.npy`` or ``.csv`` (comma-separated, no header), validated; an
    empty file is a ConfigError, not a numpy warning."""
    p = Path(path)
    try:
        if p.suffix == ".npy":
            d = load_npy(p, field)
        elif p.suffix == ".csv":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                d = np.loadtxt(p, delimiter=",", ndmin=2)
            if d.size == 0:
                raise ConfigError(field, f"{p} is empty")
        else:
            raise ConfigError(field, f"{p}: expected a .npy or .csv file or a family name")
    except (OSError, ValueError) as exc:
        raise ConfigError(field, f"cannot read {p}: {exc}") from None
    return validate_demand(d, field)
