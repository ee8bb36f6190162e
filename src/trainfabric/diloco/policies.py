"""Sync policies: observe one window's telemetry, decide per run "sync now" or "defer".

Every policy sees an :class:`Observation` (arrays over the runs it controls, all from past
and current windows) and returns a boolean array. Decisions of runs whose sync is still in
flight are ignored. The seed's formulas (``specs/diloco.md`` §2), ``cap(x) = min(1, max(0, x))``:

* ``fixed_h`` — sync when ``h >= H`` [256] (``h``: inner steps since the last sync);
* ``adaptive_tokens`` — at ``max_h`` [1024] or when tokens since sync ``>= min_tokens``
  [the tokens of 256 default steps; the seed's 1e6 was in its own, smaller, units];
* ``adaptive_load`` — forced at ``max_h``, never below ``min_h`` [128], else defer while
  ``0.5 net + 0.5 inf + 0.25 ckpt > 0.6``;
* ``pressure_gate`` — forced/min as above, defer while ``max(net, inf, ckpt) > 0.6``;
* ``random_deferral`` — forced/min as above, else defer with probability ``p`` [0.5];
* ``matched_random`` — syncs exactly in the windows of a schedule drawn by
  :func:`matched_schedule` (the reference policy's sync count over the same horizon);
* ``wa_diloco`` — forced/min as above, else sync when ``progress − pressure > threshold`` [0]
  with ``progress = 0.5 cap(loss_delta / 0.05) + 0.5 cap(tokens / tokens_norm)`` and
  ``pressure = w_net net + w_inf inf + w_ckpt ckpt + w_serve cap(serve / serve_scale)
  ± w_stale cap(staleness / 1800 s)``; ``serve`` is the current serving load;
* ``wa_forecast`` — ``wa_diloco`` with ``serve`` = a one-step EWMA forecast of the next
  window's serving load (``alpha`` [0.3]);
* ``wa_calibrated`` — ``wa_diloco`` with ``serve`` = the *next* window's actual serving
  load (``serving_sync_cost``): it sees the future, so it is **not deployable**, an upper
  bound; its weights come from held-out seeds (:mod:`trainfabric.diloco.protocol`).

The seed adds staleness to the *pressure*, so staler learners defer more; our default
subtracts it (staler learners sync sooner); ``seed_compat`` keeps the seed's sign.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from trainfabric.errors import ConfigError

FIELDS = (
    "h",  # inner steps since the last sync
    "tokens",  # tokens since the last sync (all islands)
    "loss_delta",  # loss improvement a sync now would realise
    "staleness_s",  # seconds since the last sync ended
    "network",
    "inference",
    "checkpoint",
    "serve_now",  # serving load of the last window, normalised
    "serve_forecast",  # EWMA forecast of the next window's serving load
    "serve_next",  # the next window's actual serving load (offline only)
)


class Observation:
    """Telemetry of the current window for ``n`` runs (pressures in [0, 1]), one row of
    ``data`` per field of :data:`FIELDS` (``obs.h``, ``obs.inference``, ...)."""

    __slots__ = ("window", "data")

    def __init__(self, window: int, data: np.ndarray):
        self.window = window
        self.data = data

    @classmethod
    def of(cls, window: int, **fields) -> Observation:
        return cls(window, np.stack([np.asarray(fields[f], float) for f in FIELDS]))

    def slice(self, lo: int, hi: int) -> Observation:
        return Observation(self.window, self.data[:, lo:hi])


for _i, _name in enumerate(FIELDS):  # obs.h is data[0], obs.tokens data[1], ...
    setattr(Observation, _name, property(lambda self, i=_i: self.data[i]))


def cap(x) -> np.ndarray:
    return np.minimum(np.maximum(x, 0.0), 1.0)


@dataclass
class Policy:
    """Base: the seed's guards (forced at ``max_h``, deferred below ``min_h``)."""

    name: str = "policy"
    min_h: float = 128.0
    max_h: float = 1024.0
    deployable: bool = True

    def reset(self, n: int, seeds: np.ndarray, learners: int = 1) -> None:
        """Called once before a simulation of ``n`` runs with these seeds; ``learners`` vote
        independently where a policy is random (the artifact's ``min_ready`` = all)."""

    def decide(self, obs: Observation) -> np.ndarray:
        want = self.want(obs)
        return (obs.h >= self.max_h) | ((obs.h >= self.min_h) & want)

    def want(self, obs: Observation) -> np.ndarray:
        raise NotImplementedError


@dataclass
class FixedH(Policy):
    H: float = 256.0

    def decide(self, obs: Observation) -> np.ndarray:
        return obs.h >= self.H


@dataclass
class AdaptiveTokens(Policy):
    min_tokens: float = 256 * 4.0e6  # the seed's 1e6 in its units; here H = 256 steps' tokens

    def decide(self, obs: Observation) -> np.ndarray:
        return (obs.h >= self.max_h) | (obs.tokens >= self.min_tokens)


@dataclass
class AdaptiveLoad(Policy):
    threshold: float = 0.6

    def want(self, obs: Observation) -> np.ndarray:
        load = 0.5 * obs.network + 0.5 * obs.inference + 0.25 * obs.checkpoint
        return load <= self.threshold


@dataclass
class PressureGate(Policy):
    threshold: float = 0.6

    def want(self, obs: Observation) -> np.ndarray:
        return np.maximum(np.maximum(obs.network, obs.inference), obs.checkpoint) <= self.threshold


@dataclass
class RandomDeferral(Policy):
    p: float = 0.5
    rngs: list = field(default_factory=list, repr=False)
    learners: int = 1

    def reset(self, n: int, seeds: np.ndarray, learners: int = 1) -> None:
        self.rngs = [np.random.default_rng([int(s), 1013]) for s in seeds]
        self.learners = learners

    def want(self, obs: Observation) -> np.ndarray:
        """Every learner must draw "sync" (``>= p``) for the run to sync."""
        return np.array([(rng.uniform(size=self.learners) >= self.p).all() for rng in self.rngs])


@dataclass
class Schedule(Policy):
    """Syncs exactly in the given windows (one boolean row ``[W]`` per run)."""

    sync_at: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool), repr=False)
    deployable: bool = False

    def decide(self, obs: Observation) -> np.ndarray:
        return self.sync_at[:, obs.window]


@dataclass
class WADiLoCo(Policy):
    """The score controller; ``signal`` picks the serving input (module doc)."""

    threshold: float = 0.0
    w_net: float = 0.5
    w_inf: float = 0.75
    w_ckpt: float = 0.25
    w_serve: float = 0.0
    w_stale: float = 0.25
    serve_scale: float = 1.0
    loss_scale: float = 0.05
    tokens_norm: float = 256 * 4.0e6
    stale_sign: float = -1.0  # seed_compat: +1 (staleness raises pressure)
    signal: str = "now"  # now | forecast | next

    def __post_init__(self):
        if self.signal not in ("now", "forecast", "next"):
            raise ConfigError("signal", f"must be now, forecast or next, got {self.signal!r}")
        self.deployable = self.signal != "next"

    def score(self, obs: Observation) -> np.ndarray:
        serve = {"now": obs.serve_now, "forecast": obs.serve_forecast, "next": obs.serve_next}
        progress = 0.5 * cap(obs.loss_delta / self.loss_scale) + 0.5 * cap(
            obs.tokens / self.tokens_norm
        )
        pressure = (
            self.w_net * obs.network
            + self.w_inf * obs.inference
            + self.w_ckpt * obs.checkpoint
            + self.w_serve * cap(serve[self.signal] / self.serve_scale)
            + self.stale_sign * self.w_stale * cap(obs.staleness_s / 1800.0)
        )
        return progress - pressure

    def want(self, obs: Observation) -> np.ndarray:
        return self.score(obs) > self.threshold


def make_policy(name: str, **params) -> Policy:
    """A policy by name with the seed's defaults (``params`` override them)."""
    factories = {
        "fixed_h": lambda: FixedH(name=name),
        "adaptive_tokens": lambda: AdaptiveTokens(name=name),
        "adaptive_load": lambda: AdaptiveLoad(name=name),
        "pressure_gate": lambda: PressureGate(name=name),
        "random_deferral": lambda: RandomDeferral(name=name),
        "wa_diloco": lambda: WADiLoCo(name=name),
        "wa_forecast": lambda: WADiLoCo(name=name, signal="forecast", w_serve=1.0),
        "wa_calibrated": lambda: WADiLoCo(name=name, signal="next", w_serve=1.0),
    }
    if name not in factories:
        raise ConfigError("policy", f"unknown policy {name!r}; known: {', '.join(factories)}")
    policy = factories[name]()
    for key, value in params.items():
        if not hasattr(policy, key):
            raise ConfigError(f"policy.{key}", f"not a parameter of {name}")
        setattr(policy, key, value)
    if isinstance(policy, WADiLoCo):
        policy.__post_init__()
    return policy


POLICY_NAMES = (
    "fixed_h",
    "adaptive_tokens",
    "adaptive_load",
    "pressure_gate",
    "random_deferral",
    "wa_diloco",
    "wa_forecast",
    "wa_calibrated",
)


# -- matched random deferral ---------------------------------------------------------------------
@dataclass(frozen=True)
class GapTable:
    """The scaled completion counts of :func:`matched_schedule`: ``rows[j, r]`` for ``j``
    syncs left in ``r`` windows, ``0 <= j <= budget`` (a row does not depend on the budget,
    so one table serves every budget up to its own)."""

    windows: int
    gap_min: int
    gap_max: int
    rows: np.ndarray  # [budget + 1, windows + 1]

    @classmethod
    def build(cls, budget: int, windows: int, gap_min: int, gap_max: int) -> GapTable:
        r = np.arange(windows + 1)
        rows = np.empty((budget + 1, windows + 1))
        rows[0] = (r <= gap_max).astype(float)
        hi = np.clip(r - gap_min + 1, 0, windows + 1)
        lo = np.clip(r - gap_max, 0, windows + 1)
        for j in range(1, budget + 1):
            prefix = np.r_[0.0, np.cumsum(rows[j - 1])]  # prefix[x] = sum of the row below x
            support = (r >= j * gap_min) & (r <= (j + 1) * gap_max)
            row = np.where(support, prefix[hi] - prefix[lo], 0.0)
            rows[j] = np.maximum(row, 0.0) / max(row.max(), 1e-300)
        return cls(windows, gap_min, gap_max, rows)

    def serves(self, budget: int, windows: int, gap_min: int, gap_max: int) -> bool:
        """Is this the table of these windows and gaps, with a row for ``budget`` syncs?"""
        return (self.windows, self.gap_min, self.gap_max) == (windows, gap_min, gap_max) and (
            budget < self.rows.shape[0]
        )


def matched_schedule(
    budget: int,
    windows: int,
    gap_min: int,
    gap_max: int,
    rng: np.random.Generator,
    draws: int | None = None,
    table: GapTable | None = None,
) -> np.ndarray:
    """A uniformly random sync schedule with exactly ``budget`` syncs in ``windows`` windows
    (``draws`` of them, ``[draws, windows]``, when given: the counting table is built once;
    ``table``, a :class:`GapTable` for these windows and gaps and at least this budget, is
    used instead of building one).

    Gaps (windows from the start, or from the previous sync, to a sync) lie in
    ``[gap_min, gap_max]`` and the tail after the last sync is at most ``gap_max``, as the
    guarded policies' ``min_h``/``max_h`` allow. Uniform over all such schedules: the number
    of completions ``N_j(r)`` (``j`` syncs left in ``r`` windows) obeys
    ``N_0(r) = [r <= gap_max]``, ``N_j(r) = Σ_{g=gap_min}^{gap_max} N_{j−1}(r − g)``, computed
    row by row with prefix sums, each row scaled by its maximum (only ratios within a row are
    used) and set to 0 outside its exact support ``j·gap_min <= r <= (j+1)·gap_max``; each
    gap is then drawn with probability ``∝ N_{j−1}(r − g)``, exactly as
    ``rng.choice(gaps, p=w / w.sum())`` draws it (one uniform per gap, compiled:
    :func:`_draw_gaps`). ``InfeasibleError`` when no schedule exists.
    """
    from trainfabric.errors import InfeasibleError

    if not 1 <= gap_min <= gap_max:
        raise ConfigError("gap_min", "need 1 <= gap_min <= gap_max")
    if budget < 0:
        raise ConfigError("budget", "must be >= 0")
    if not budget * gap_min <= windows <= (budget + 1) * gap_max:
        raise InfeasibleError(
            f"no schedule of {budget} syncs in {windows} windows with gaps {gap_min}..{gap_max}"
        )
    if table is None or not table.serves(budget, windows, gap_min, gap_max):
        table = GapTable.build(budget, windows, gap_min, gap_max)
    out = np.zeros((draws or 1, windows), bool)
    u = rng.random(out.shape[0] * budget)  # what rng.choice would draw, in the same order
    _draw_gaps(table.rows, budget, windows, gap_min, gap_max, u, out)
    return out if draws is not None else out[0]


@numba.njit(cache=True)
def _draw_gaps(rows, budget, windows, gap_min, gap_max, u, out):
    """Each draw's gaps, last sync first: ``w_g = rows[j − 1, left − g]`` for the gaps ``g``
    that fit, ``p = w / Σw`` (numpy's pairwise sum), ``cdf = cumsum(p) / cdf[-1]`` and the
    gap of ``searchsorted(cdf, u, 'right')`` — ``Generator.choice`` with ``p``, step by step."""
    w = np.empty(gap_max - gap_min + 1)
    cdf = np.empty_like(w)
    for d in range(out.shape[0]):
        left, pos = windows, 0
        for j in range(budget, 0, -1):
            n = min(gap_max, left) - gap_min + 1
            for i in range(n):
                w[i] = rows[j - 1, left - gap_min - i]
            total = pairwise_sum(w, 0, n)
            if not total > 0:
                raise ValueError("no gap fits: the schedule table is inconsistent")
            acc = 0.0
            for i in range(n):
                acc += w[i] / total
                cdf[i] = acc
            x, last = u[d * budget + budget - j], cdf[n - 1]
            idx, hi = 0, n  # the first cdf[i] / last above x (the cdf only rises)
            while idx < hi:
                mid = (idx + hi) // 2
                if cdf[mid] / last <= x:
                    idx = mid + 1
                else:
                    hi = mid
            pos += gap_min + idx
            out[d, pos - 1] = True
            left -= gap_min + idx


@numba.njit(cache=True)
def pairwise_sum(a, lo, n):
    """``a[lo : lo + n].sum()`` exactly as numpy adds a contiguous float64 array: below 8
    elements one by one from 0; blocks of at most 128 by 8 interleaved accumulators; longer
    ones as the sum of two halves (the first rounded down to a multiple of 8), each summed
    the same way (evaluated with an explicit stack: a cached recursive kernel crashes)."""
    if n <= 128:
        return _block_sum(a, lo, n)
    # frames to do, (lo, n, halves summed?); depth <= 64 halvings, 2 frames more per level
    f_lo, f_n, f_sum = np.empty(192, np.int64), np.empty(192, np.int64), np.empty(192, np.bool_)
    values = np.empty(64)
    top, depth = 1, 0
    f_lo[0], f_n[0], f_sum[0] = lo, n, False
    while top:
        top -= 1
        at, size = f_lo[top], f_n[top]
        if f_sum[top]:
            depth -= 1
            values[depth - 1] += values[depth]
        elif size <= 128:
            values[depth] = _block_sum(a, at, size)
            depth += 1
        else:
            half = size // 2
            half -= half % 8
            f_sum[top] = True
            f_lo[top + 1], f_n[top + 1], f_sum[top + 1] = at + half, size - half, False
            f_lo[top + 2], f_n[top + 2], f_sum[top + 2] = at, half, False
            top += 3
    return values[0]


@numba.njit(cache=True)
def _block_sum(a, lo, n):
    """numpy's sum of ``a[lo : lo + n]`` for ``n <= 128`` (:func:`pairwise_sum`)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        b = lo + i
        r0, r1, r2, r3 = r0 + a[b], r1 + a[b + 1], r2 + a[b + 2], r3 + a[b + 3]
        r4, r5, r6, r7 = r4 + a[b + 4], r5 + a[b + 5], r6 + a[b + 6], r7 + a[b + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res
