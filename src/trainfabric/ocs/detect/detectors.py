"""Multinomial change detection over per-slot count vectors (docs/ocs.md §1.11).

Model. Slot ``t = 1, 2, ...`` brings a count vector ``c_t`` in ``N^K`` (flows, or bytes in
chunks, per category); given the slot totals ``n_t = sum c_t``, ``c_t ~ Mult(n_t, p)`` with
``p = p0`` before an unknown change time and ``p1`` after. ``N_{a:b}`` is the pooled count of
slots ``a..b``, ``p^_{a:b}`` the pooled frequencies, ``n`` the slots seen since the last restart.

Two detectors, both restarting after every alarm (and on :meth:`reset`, e.g. after a
reconfiguration):

- :class:`CusumDetector` (known ``p0``): the GLR-CUSUM over the unknown post-change ``p1``,
  ``W_n = max_{s in C_n} N_{s+1:n} KL(p^_{s+1:n} || p0)``; alarm when ``W_n >= h(n)``.
- :class:`GlrDetector` (unknown ``p0``): the two-segment GLR, with ``q = p^_{1:n}``,
  ``G_n = max_{s in C_n, s >= 1} [N_{1:s} KL(p^_{1:s}||q) + N_{s+1:n} KL(p^_{s+1:n}||q)]``;
  alarm when ``G_n >= beta(n)``.

Candidate splits and work per update. With ``density=None``, ``C_n = {0, ..., n-1}`` and the
statistics are the exact GLRs (``O(n K)`` work and memory per update). With ``density=b``
(default 2), ``s`` is a candidate iff ``s`` is a multiple of ``2^L`` with
``L = max(0, floor(log2(n - s)) - b)``: about ``2^b`` splits per octave of distance ``n - s``,
``|C_n| <= 2^b (log2 n + 2)``. A split, once dropped, never returns (``L`` only grows with
``n``), so the detector keeps the prefix count vectors of the live candidates only
(``O(K log n)`` memory) and evaluates each split in ``O(K)`` from them, never rescanning the
history: ``O(K log n)`` work per update. The statistic is then *exactly* the maximum over
``C_n`` (the tests compare it with a rescan of the raw history over the same ``C_n``); it is a
lower bound of the full GLR whose change point is located within ``2^-b`` of its distance to
``n``. (Only the CUSUM against a *simple* alternative ``p1`` admits an exact ``O(K)`` update,
Page's ``W = max(0, W + log LR)``; the GLR over an unknown ``p1`` needs the maximum over
splits.)

False alarms. Method of types: for a segment of ``N`` counts drawn from ``p``,
``P(N KL(p^||p) >= x) <= (N+1)^(K-1) e^-x`` (there are ``C(N+K-1, K-1) <= (N+1)^(K-1)`` types,
each of probability ``<= e^(-N KL)``). Conditioning on the slot totals, every bound below holds
whatever the totals are (fixed or Poisson).

- CUSUM: ``h(n) = (K-1) log(N_{1:n}+1) + log|C_n| + 2 log n + log(2/delta)``. A union bound over
  ``s in C_n`` and ``n >= 1`` gives ``P_0(any alarm) <= sum_n delta / (2 n^2) <= 0.83 delta``.
- GLR: the pooled ``p^_{1:n}`` minimises the weighted KL sum, so ``G_n`` is at most the same sum
  at the true ``p``: two independent terms, each dominated by ``(K-1) log(N_i+1) + Exp(1)``,
  whose sum has tail ``<= (N_1+1)^(K-1) (N_2+1)^(K-1) (1+x) e^-x <= (N+1)^(2(K-1)) (1+x) e^-x``.
  With ``base = 2(K-1) log(N_{1:n}+1) + log|C_n| + 2 log n + log(2/delta)`` (``|C_n|`` counting
  the splits ``s >= 1`` only) the threshold is the fixed point ``beta = base + log(1+beta)``
  and the same union bound gives ``<= 0.83 delta``.
  With all splits (``|C_n| = n - 1``) this is at most the bound of docs/ocs.md §1.11,
  ``2(K-1) log(N+1) + 3 log n + log(2/delta) + log(1+beta)``; fewer candidates only lower it.

The bound is a union bound, so the true false-alarm probability is usually far below ``delta``;
the CUSUM's threshold has one ``(K-1) log(N+1)`` term (one estimated segment) and no
``log(1+beta)``. Dimension matters: ``(K-1) log N`` makes pair-level statistics
(``K = n(n-1)``) slow; see :func:`trainfabric.ocs.detect.streams.reduce_counts`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import rel_entr, xlogy

from trainfabric.errors import ConfigError
from trainfabric.ocs.detect.streams import multinomial_stream, reduce_counts

__all__ = [
    "CusumDetector",
    "GlrDetector",
    "Paths",
    "SplitStore",
    "cusum_threshold",
    "glr_threshold",
    "kl_divergence",
    "multinomial_stream",
    "reduce_counts",
    "statistic_paths",
]


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """``KL(p || q) = sum_k p_k log(p_k / q_k)`` in nats (``0 log 0 = 0``; ``inf`` where
    ``p_k > 0 = q_k``); ``p`` and ``q`` are probability vectors."""
    return float(np.sum(rel_entr(np.asarray(p, float), np.asarray(q, float))))


def cusum_threshold(n, total, categories: int, splits, delta: float):
    """``h = (K-1) log(N+1) + log|C_n| + 2 log n + log(2/delta)`` (nats; arrays broadcast).

    ``n`` slots since the restart, ``total`` = ``N_{1:n}`` counts, ``splits`` = ``|C_n|``.
    """
    n, total, splits = (np.asarray(a, float) for a in (n, total, splits))
    return (
        (categories - 1) * np.log1p(total)
        + np.log(splits)
        + 2 * np.log(n)
        + math.log(2 / _delta(delta))
    )


def glr_threshold(n, total, categories: int, splits, delta: float):
    """The fixed point ``beta = base + log(1 + beta)``,
    ``base = 2(K-1) log(N+1) + log|C_n| + 2 log n + log(2/delta)`` (nats; arrays broadcast).

    Two iterations from ``base + 2 log(1 + base)``, which is above the fixed point whenever
    ``base >= 0.6`` (always: ``base >= log 2``); ``f(b) = base + log(1+b)`` is increasing with
    slope ``1/(1+b) < 1``, so the iterates stay above the fixed point (the false-alarm bound needs
    ``beta - log(1+beta) >= base``) and approach it by that factor per step. ``inf`` where there
    is no split (``|C_n| = 0``).
    """
    n, total, splits = (np.asarray(a, float) for a in (n, total, splits))
    with np.errstate(divide="ignore", invalid="ignore"):
        base = (
            2 * (categories - 1) * np.log1p(total)
            + np.log(splits)
            + 2 * np.log(n)
            + math.log(2 / _delta(delta))
        )
        beta = base + 2 * np.log1p(base)
        for _ in range(2):
            beta = base + np.log1p(beta)
    return np.where(splits > 0, beta, np.inf)


def _delta(delta: float) -> float:
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise ConfigError("delta", f"false-alarm probability must be in (0, 1), got {delta!r}")
    return float(delta)


class SplitStore:
    """Prefix count vectors of the live candidate splits ``C_n`` for ``B`` parallel streams.

    ``splits``: the candidate ``s`` (slots since the restart), ascending; ``prefix[b, i]`` is
    ``sum_{t <= splits[i]} c_t`` of stream ``b``, ``entropy[b, i]`` its ``X = sum_k c log c``
    (fixed once stored); ``total[b]`` the running sum. The candidate set depends on ``n`` only
    (not on the data), as the union bound requires.

    With ``X(v) = sum_k v_k log v_k`` and ``x(N) = N log N``, a segment's
    ``N KL(p^ || q) = X(v) - x(N) - v . log q``, so for a split into head ``A`` and tail
    ``T = S - A`` of the pooled ``S`` (``q = S / N`` in the GLR, where the ``log q`` terms sum
    to ``X(S) - x(N)``) each candidate costs one pass ``X(T)`` over its K categories. The
    identity subtracts terms of size ``N log N``, so the absolute rounding error is about
    ``1e-16 N log N`` nats (measured: 2e-8 relative at ``N = 6e7`` counts, 1e-9 and better on
    the small streams of the tests), far below any threshold's scale.
    """

    def __init__(self, streams: int, categories: int, density: int | None):
        if density is not None and not (isinstance(density, int) and 0 <= density <= 16):
            raise ConfigError("density", f"must be None or an integer in [0, 16], got {density!r}")
        self.density = density
        self.n = 0
        self.splits = np.zeros(1, dtype=np.int64)
        self.prefix = np.zeros((streams, 1, categories))
        self.entropy = np.zeros((streams, 1))
        self.total = np.zeros((streams, categories))

    def push(self, counts: np.ndarray) -> None:
        """Append slot ``n + 1`` (``counts [B, K]``): ``n`` becomes a candidate split and the
        splits whose alignment no longer holds are dropped."""
        if self.n > 0:
            self.splits = np.append(self.splits, self.n)
            self.prefix = np.concatenate([self.prefix, self.total[:, None, :]], axis=1)
            self.entropy = np.concatenate([self.entropy, _big_x(self.total)[:, None]], axis=1)
        self.total = self.total + counts
        self.n += 1
        if self.density is not None:
            level = np.maximum(0, _floor_log2(self.n - self.splits) - self.density)
            keep = self.splits % (1 << level) == 0
            if not keep.all():
                self.splits, self.prefix = self.splits[keep], self.prefix[:, keep]
                self.entropy = self.entropy[:, keep]

    def cusum(self, p0: np.ndarray) -> np.ndarray:
        """``[B, |C_n|]``: ``N_{s+1:n} KL(p^_{s+1:n} || p0)`` for every candidate ``s``
        (``inf`` where the segment has counts in a category of ``p0``-probability 0)."""
        tail = self.total[:, None, :] - self.prefix
        support = p0 > 0
        log_p0 = np.log(np.where(support, p0, 1.0))
        value = _big_x(tail) - _xlogx(tail.sum(-1)) - tail @ log_p0
        if not support.all():
            value[(tail[..., ~support] > 0).any(-1)] = np.inf
        return np.maximum(value, 0.0)

    def glr(self) -> np.ndarray:
        """``[B, |C_n \\ {0}|]``: the two-segment log-likelihood ratio for every ``s >= 1``."""
        live = self.splits >= 1
        head, x_head = self.prefix[:, live], self.entropy[:, live]
        n_head = head.sum(-1)
        n_total = self.total.sum(-1)
        tail = self.total[:, None, :] - head
        pooled = _big_x(self.total) - _xlogx(n_total)
        value = x_head - _xlogx(n_head) + _big_x(tail) - _xlogx(n_total[:, None] - n_head)
        return np.maximum(value - pooled[:, None], 0.0)


def _big_x(v: np.ndarray) -> np.ndarray:
    """``X(v) = sum_k v_k log v_k`` over the last axis (``0 log 0 = 0``)."""
    return xlogy(v, v).sum(-1)


def _xlogx(x: np.ndarray) -> np.ndarray:
    """``x log x`` elementwise (``0 log 0 = 0``)."""
    return xlogy(x, x)


def _floor_log2(d: np.ndarray) -> np.ndarray:
    return np.frexp(d.astype(float))[1] - 1


def _counts(counts, categories: int | None) -> np.ndarray:
    """One slot's count vector: finite, non-negative, integer-valued, of the expected length."""
    c = np.asarray(counts, dtype=float)
    if c.ndim != 1 or (categories is not None and c.shape[0] != categories):
        want = f"[{categories}]" if categories is not None else "one dimension"
        raise ConfigError("counts", f"expected a count vector of shape {want}, got {c.shape}")
    if c.size < 2:
        raise ConfigError("counts", "need at least 2 categories")
    if not (np.isfinite(c).all() and (c >= 0).all() and (c == np.floor(c)).all()):
        raise ConfigError("counts", "counts must be finite non-negative integers")
    return c


class _Detector:
    """Shared state of the two detectors (one stream)."""

    def __init__(self, delta: float, density: int | None, categories: int | None):
        self.delta = _delta(delta)
        self.density = density
        self.categories = categories
        SplitStore(1, 2, density)  # validates density before any data
        self.last_alarm: dict | None = None
        self.reset()

    def reset(self) -> None:
        """Restart: forget every slot (after an alarm or a reconfiguration)."""
        self._store = None
        self.statistic = 0.0
        self.threshold = math.inf
        self.split = None

    @property
    def n_obs(self) -> int:
        """Slots seen since the last restart."""
        return 0 if self._store is None else self._store.n

    def update(self, counts) -> bool:
        """Add one slot's counts; True (and a restart) when the statistic reaches the threshold.

        ``last_alarm`` then holds ``{"n_obs", "statistic", "threshold", "split"}`` of the alarm
        (``split`` = the maximising candidate ``s``: the change is estimated after slot ``s``).
        """
        c = _counts(counts, self.categories)
        if self._store is None:
            self.categories = c.shape[0]
            self._store = SplitStore(1, self.categories, self.density)
        self._store.push(c[None, :])
        values, splits = self._values()
        total = self._store.total.sum()
        self.threshold = float(self._threshold(self._store.n, total, splits.size))
        i = int(np.argmax(values)) if values.size else None
        self.statistic = float(values[i]) if i is not None else 0.0
        self.split = int(splits[i]) if i is not None else None
        if self.statistic >= self.threshold:
            self.last_alarm = {
                "n_obs": self.n_obs,
                "statistic": self.statistic,
                "threshold": self.threshold,
                "split": self.split,
            }
            self.reset()
            return True
        return False


class CusumDetector(_Detector):
    """GLR-CUSUM against a known pre-change ``p0`` (see the module docs for the statistic and
    its threshold). ``p0`` (kept across restarts: after a real change, build a new detector
    with the new ``p0``): non-negative weights over the K categories (normalised here);
    ``delta``: the bound on P(any false alarm) under ``p0``; ``density``: candidate-split
    density (``None`` = every split, exact and ``O(n K)`` per update)."""

    def __init__(self, p0, delta: float = 0.01, density: int | None = 2):
        p = np.asarray(p0, dtype=float)
        if p.ndim != 1 or p.size < 2 or not (np.isfinite(p).all() and (p >= 0).all()):
            raise ConfigError("p0", "must be a vector of >= 2 finite non-negative weights")
        if p.sum() <= 0:
            raise ConfigError("p0", "weights must not all be zero")
        self.p0 = p / p.sum()
        super().__init__(delta, density, p.size)

    def _values(self):
        return self._store.cusum(self.p0)[0], self._store.splits

    def _threshold(self, n, total, splits):
        return cusum_threshold(n, total, self.categories, splits, self.delta)


class GlrDetector(_Detector):
    """Two-segment GLR with unknown pre- and post-change distributions (see the module docs).
    ``categories`` is fixed by the first update unless given."""

    def __init__(self, delta: float = 0.01, density: int | None = 2, categories: int | None = None):
        super().__init__(delta, density, categories)

    def _values(self):
        return self._store.glr()[0], self._store.splits[self._store.splits >= 1]

    def _threshold(self, n, total, splits):
        return glr_threshold(n, total, self.categories, splits, self.delta)


class Paths:
    """Statistic paths of ``B`` streams run in lockstep without restarts (benchmarks, tests).

    Before its first alarm a detector never restarts and its statistic does not depend on
    ``delta``, so one run gives the first alarm for every ``delta``. ``statistic[b, t]`` and
    ``total[b, t]`` are the values after slot ``n = t + 1``; ``splits[t] = |C_n|``.
    """

    def __init__(self, kind: str, categories: int, statistic, total, splits):
        self.kind, self.categories = kind, categories
        self.statistic, self.total, self.splits = statistic, total, splits

    def threshold(self, delta: float) -> np.ndarray:
        """``[B, T]`` thresholds of the detector at ``delta``."""
        n = np.arange(1, self.splits.size + 1)
        rule = cusum_threshold if self.kind == "cusum" else glr_threshold
        return rule(n, self.total, self.categories, self.splits, delta)

    def first_alarm(self, delta: float) -> np.ndarray:
        """``[B]`` slot ``n`` of each stream's first alarm (``nan``: none within the run)."""
        hit = self.statistic >= self.threshold(delta)
        return np.where(hit.any(1), hit.argmax(1) + 1.0, np.nan)


def statistic_paths(
    kind: str, batches, slots: int, p0=None, density: int | None = 2, stop=None
) -> Paths:
    """Run the ``kind`` (``"cusum"`` against ``p0``, or ``"glr"``) statistic on ``slots`` slots
    of ``[B, K]`` counts drawn from the iterator ``batches``; ``stop(paths)`` (checked every 64
    slots) may end the run early. Work per slot: ``O(B K |C_n|)``."""
    first = np.asarray(next(batches), dtype=float)
    streams, k = first.shape
    store = SplitStore(streams, k, density)
    p = None if p0 is None else np.asarray(p0, float) / np.sum(p0)
    stat, total, splits = (np.zeros((streams, slots)), np.zeros((streams, slots)), [])
    c = first
    for t in range(slots):
        if t:
            c = next(batches)
        store.push(c)
        values = store.cusum(p) if kind == "cusum" else store.glr()
        stat[:, t] = values.max(1) if values.shape[1] else 0.0
        total[:, t] = store.total.sum(1)
        splits.append(values.shape[1])
        if stop is not None and t % 64 == 63:
            paths = Paths(kind, k, stat[:, : t + 1], total[:, : t + 1], np.array(splits))
            if stop(paths):
                return paths
    return Paths(kind, k, stat, total, np.array(splits))
