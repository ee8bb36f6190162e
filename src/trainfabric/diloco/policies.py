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
def matched_schedule(
    budget: int,
    windows: int,
    gap_min: int,
    gap_max: int,
    rng: np.random.Generator,
    draws: int | None = None,
) -> np.ndarray:
    """A uniformly random sync schedule with exactly ``budget`` syncs in ``windows`` windows
    (``draws`` of them, ``[draws, windows]``, when given: the counting table is built once).

    Gaps (windows from the start, or from the previous sync, to a sync) lie in
    ``[gap_min, gap_max]`` and the tail after the last sync is at most ``gap_max``, as the
    guarded policies' ``min_h``/``max_h`` allow. Uniform over all such schedules: the number
    of completions ``N_j(r)`` (``j`` syncs left in ``r`` windows) obeys
    ``N_0(r) = [r <= gap_max]``, ``N_j(r) = Σ_{g=gap_min}^{gap_max} N_{j−1}(r − g)``, computed
    row by row with prefix sums, each row scaled by its maximum (only ratios within a row are
    used) and set to 0 outside its exact support ``j·gap_min <= r <= (j+1)·gap_max``; each
    gap is then drawn with probability ``∝ N_{j−1}(r − g)``. ``InfeasibleError`` when no
    schedule exists.
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
    r = np.arange(windows + 1)
    rows = [(r <= gap_max).astype(float)]
    for j in range(1, budget + 1):
        prefix = np.r_[0.0, np.cumsum(rows[-1])]  # prefix[x] = sum of the row below x
        hi = np.clip(r - gap_min + 1, 0, windows + 1)
        lo = np.clip(r - gap_max, 0, windows + 1)
        support = (r >= j * gap_min) & (r <= (j + 1) * gap_max)
        row = np.where(support, prefix[hi] - prefix[lo], 0.0)
        rows.append(np.maximum(row, 0.0) / max(row.max(), 1e-300))
    out = np.zeros((draws or 1, windows), bool)
    for d in range(draws or 1):
        left, pos = windows, 0
        for j in range(budget, 0, -1):
            gaps = np.arange(gap_min, min(gap_max, left) + 1)
            w = rows[j - 1][left - gaps]
            g = int(rng.choice(gaps, p=w / w.sum()))
            pos += g
            out[d, pos - 1] = True
            left -= g
    return out if draws is not None else out[0]
