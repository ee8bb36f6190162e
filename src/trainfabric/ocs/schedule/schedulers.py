"""Circuit schedulers for one demand matrix over ``s`` parallel OCSes with delay δ.

Every scheduler is *decompose → assign → (split) → (polish)*; the decompositions live in
:mod:`trainfabric.ocs.schedule.decompositions` (integer quanta), the assignment and the duration LP
here. Conventions of :mod:`trainfabric.ocs.schedule.model` (δ before every configuration).

* ``bvn+lpt`` — textbook BvN of the stuffed matrix, each ``(matching, weight)`` one
  configuration, longest-processing-time-first onto the least-loaded switch (load counts δ).
* ``solstice+lpt`` — Solstice's decomposition, then LPT.
* ``eclipse+lpt`` — Eclipse's greedy run as for one switch until the demand is served, then
  LPT of its configurations onto the ``s`` switches.
* ``spectra-like`` — our reconstruction of Spectra (Liang, Qiao, Keslassy, Lin, arXiv
  2603.07373; only the abstract and introduction are public): (1) decompose into a small set
  of weighted permutations — we use Eclipse's δ-aware greedy, the published way to trade the
  number of permutations against their durations (textbook BvN of the stuffed matrix
  returns up to ~n² permutations here, 15,993 on the 128-pod MoE matrix, and a max-weight
  greedy BvN we tried returned 2-4x as many as Eclipse at 16 pods: not a "small set"),
  (2) load-aware LPT
  assignment, (3) equalise by splitting the longest switch's largest permutation between it
  and the least-loaded switch (:func:`split_equalise`).
* ``ours`` — wiring-driven: candidate column pools (a König colouring with the fewest possible
  configurations, the same cut at class quantiles, Solstice's and Eclipse's decompositions),
  each assigned by LPT + splitting, by McNaughton's wrap-around and by a bisection on the
  makespan with best-fit packing that splits only what does not fit (:func:`pack_split`);
  the ``POLISH_TOP`` candidates of smallest makespan, and the Spectra-like schedule, get
  their durations re-solved exactly by :func:`polish` (an LP with the matchings and their
  switches fixed); the best is kept. Polishing never lengthens a schedule, so ours is never
  worse than the Spectra-like scheduler.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.schedule import decompositions as dec
from trainfabric.ocs.schedule.model import Schedule, sequential

Config = tuple[np.ndarray, float]  # (perm, duration_s)
Assignment = list[list[Config]]  # per switch
# Spectra-like splitting stops after this many splits per switch (work budget, not seconds).
SPLITS_PER_SWITCH = 8
# Bisection steps of pack_split's capacity search (work budget, not seconds).
PACK_STEPS = 30
# Polishing drops pieces the LP leaves below this fraction of the makespan, then re-solves,
# at most POLISH_ROUNDS times.
DROP_RTOL = 1e-7
POLISH_ROUNDS = 4
# Ours polishes the Spectra-like schedule and the POLISH_TOP candidates of smallest makespan
# before polishing (each polish is an LP with one row per non-zero demand entry).
POLISH_TOP = 3
# Ours also tries the colouring cut at these quantiles of each class (the excess re-coloured).
RESIDUAL_QUANTILES = (0.5, 0.9)
OUR_POOLS = ("colouring", "solstice", "eclipse") + tuple(
    f"colouring@{q:g}" for q in RESIDUAL_QUANTILES
)
# Largest ratio of one delay's bytes at the rate (δ·B) to the largest demand entry. The duration
# LP's right-hand sides span this ratio (HiGHS takes 1e20 as infinite), and beyond 1e15 every
# transfer is below the float64 resolution of a makespan of whole delays: the schedulers could
# not be told apart.
MAX_DELAY_RATIO = 1e15


@dataclass(frozen=True)
class Instance:
    """One scheduling problem: demand (bytes, ``n x n``), ``s`` switches, δ (s), rate (bytes/s)."""

    demand: np.ndarray
    s: int
    delay_s: float
    rate_Bps: float

    @property
    def n(self) -> int:
        return self.demand.shape[0]


@dataclass
class Pools:
    """Decompositions of one demand matrix, durations in seconds, with the wall time each took
    (only Eclipse's depends on δ; none depends on ``s``)."""

    configs: dict[str, list[Config]]
    wall_s: dict[str, float]


@dataclass(frozen=True)
class Result:
    """A scheduler's schedule with its makespan, configuration count and wall time (s).
    ``success``: the makespan is finite (every scheduler returns a complete schedule);
    ``message``: the makespan and configurations."""

    name: str
    schedule: Schedule
    makespan_s: float
    configurations: int
    wall_s: float
    detail: str = ""

    @property
    def success(self) -> bool:
        return bool(np.isfinite(self.makespan_s))

    @property
    def message(self) -> str:
        return f"makespan {self.makespan_s:.6g} s with {self.configurations} configurations"


def decompose_fixed(demand: np.ndarray, rate_Bps: float) -> Pools:
    """The δ-independent decompositions (BvN, Solstice, colouring), timed, in seconds."""
    a, q = dec.quantise(demand)
    unit = q / rate_Bps
    makers = {"bvn": dec.bvn, "solstice": dec.solstice, "colouring": dec.min_colouring}
    for q in RESIDUAL_QUANTILES:
        makers[f"colouring@{q:g}"] = lambda a, q=q: dec.colouring_residual(a, q)
    configs, wall = {}, {}
    for name, make in makers.items():
        t0 = time.perf_counter()
        configs[name] = [(p, w * unit) for p, w in make(a)]
        wall[name] = time.perf_counter() - t0
    return Pools(configs, wall)


def with_eclipse(pools: Pools, demand: np.ndarray, delay_s: float, rate_Bps: float) -> Pools:
    """``pools`` plus Eclipse's decomposition for this δ (the only δ-dependent one)."""
    a, q = dec.quantise(demand)
    unit = q / rate_Bps
    t0 = time.perf_counter()
    eclipse = [(p, w * unit) for p, w in dec.eclipse(a, delay_s / unit)]
    wall = time.perf_counter() - t0
    return Pools({**pools.configs, "eclipse": eclipse}, {**pools.wall_s, "eclipse": wall})


def decompose_all(demand: np.ndarray, delay_s: float, rate_Bps: float) -> Pools:
    """Every decomposition the schedulers use, timed (durations in seconds)."""
    return with_eclipse(decompose_fixed(demand, rate_Bps), demand, delay_s, rate_Bps)


def lpt(configs: list[Config], s: int, delay_s: float) -> Assignment:
    """Longest processing time first: each configuration (largest ``δ + φ`` first) to the
    switch with the smallest load ``Σ (δ + φ)``."""
    loads = np.zeros(s)
    out: Assignment = [[] for _ in range(s)]
    for perm, dur in sorted(configs, key=lambda c: -c[1]):
        k = int(np.argmin(loads))
        out[k].append((perm, dur))
        loads[k] += delay_s + dur
    return out


def split_equalise(assign: Assignment, delay_s: float) -> Assignment:
    """Spectra's third step as we reconstruct it: while the longest switch (load ``L``) and
    the least-loaded one (``l``) differ by more than δ, move ``x = (L − l − δ)/2`` of the
    longest switch's largest configuration to the least-loaded one (a split: both switches
    then hold the matching; the new piece pays δ), or the whole configuration when it is
    shorter than ``x`` (no new δ). Both loads end at ``(L + l + δ)/2`` after a split, so the
    maximum never grows. At most ``SPLITS_PER_SWITCH · s`` moves."""
    out = [list(sw) for sw in assign]
    loads = np.array([sum(delay_s + d for _, d in sw) for sw in out])
    for _ in range(SPLITS_PER_SWITCH * len(out)):
        hi, lo = int(np.argmax(loads)), int(np.argmin(loads))
        x = (loads[hi] - loads[lo] - delay_s) / 2
        if x <= 0 or not out[hi]:
            break
        j = max(range(len(out[hi])), key=lambda i: out[hi][i][1])
        perm, dur = out[hi][j]
        if dur <= x:
            if loads[lo] + delay_s + dur >= loads[hi]:
                break
            out[hi].pop(j)
            out[lo].append((perm, dur))
            loads[hi] -= delay_s + dur
            loads[lo] += delay_s + dur
        else:
            out[hi][j] = (perm, dur - x)
            out[lo].append((perm, x))
            loads[hi] -= x
            loads[lo] += delay_s + x
    return out


def wrap_around(configs: list[Config], s: int, delay_s: float) -> Assignment:
    """McNaughton's wrap-around rule with a δ per piece: fill switch after switch up to
    ``T0 = (Σ (δ + φ) + (s − 1) δ) / s`` in order of decreasing ``φ``, splitting the
    configuration that crosses ``T0`` (the remainder starts the next switch and pays its own
    δ). A matching may run on several switches at once (they are different ports), so a
    configuration longer than ``T0`` simply spans several switches. The last switch takes
    whatever is left."""
    total = sum(delay_s + d for _, d in configs)
    cap = (total + (s - 1) * delay_s) / s
    out: Assignment = [[] for _ in range(s)]
    k, load = 0, 0.0
    for perm, dur in sorted(configs, key=lambda c: -c[1]):
        left = dur
        while left > 0:
            room = cap - load - delay_s
            if k == s - 1 or room >= left:
                out[k].append((perm, left))
                load += delay_s + left
                left = 0.0
            elif room > 0:
                out[k].append((perm, room))
                left -= room
                k, load = k + 1, 0.0
            else:
                k, load = k + 1, 0.0
    return out


def pack_split(configs: list[Config], s: int, delay_s: float) -> Assignment:
    """Smallest cap ``T`` (bisection, ``PACK_STEPS`` halvings between ``Σ(δ+φ)/s`` and
    ``Σ(δ+φ)``) for which :func:`_pack` fits every configuration, and that packing."""
    total = sum(delay_s + d for _, d in configs)
    lo, hi = total / s, total * (1 + 1e-9)  # everything on one switch fits
    best = _pack(configs, s, delay_s, hi)
    for _ in range(PACK_STEPS):
        mid = 0.5 * (lo + hi)
        packed = _pack(configs, s, delay_s, mid)
        if packed is None:
            lo = mid
        else:
            hi, best = mid, packed
    return best


def _pack(configs: list[Config], s: int, delay_s: float, cap: float) -> Assignment | None:
    """Best-fit decreasing of whole configurations (``δ + φ``) into ``s`` switches of capacity
    ``cap``; a configuration that fits nowhere whole is split over the switches with the
    most room (each piece pays its own δ). ``None`` when something is left over."""
    room = np.full(s, cap)
    out: Assignment = [[] for _ in range(s)]
    for perm, dur in sorted(configs, key=lambda c: -c[1]):
        fits = np.flatnonzero(room >= delay_s + dur)
        if fits.size:
            k = int(fits[np.argmin(room[fits])])
            out[k].append((perm, dur))
            room[k] -= delay_s + dur
            continue
        left = dur
        for k in np.argsort(-room):
            if left <= 0 or room[k] <= delay_s:
                break
            piece = min(left, room[k] - delay_s)
            out[k].append((perm, piece))
            room[k] -= delay_s + piece
            left -= piece
        if left > 0:
            return None
    return out


def polish(inst: Instance, assign: Assignment) -> Assignment:
    """Re-solve all durations with the matchings and their switches fixed (HiGHS LP):

    ``min T`` s.t. ``Σ_{p on k} (δ + φ_p) ≤ T`` for every switch ``k`` and
    ``Σ_{p ∋ (u,v)} φ_p B ≥ D_uv`` for every non-zero entry, ``φ ≥ 0``. The input's durations
    are feasible, so the optimum is never worse (a matching held twice by one switch is merged
    first: one δ less, same coverage). Pieces the LP leaves at (about) zero are
    dropped — each saves its δ — and the LP is solved again (at most ``POLISH_ROUNDS`` LPs;
    the durations of the last solve stay feasible for the kept pieces since dropped ones
    carried nothing).
    Durations are finally scaled by the largest coverage deficit ratio (≤ 1 + 1e-8 or so) so
    the schedule covers ``D`` exactly despite the LP tolerance."""
    pieces = list(
        {(k, perm.tobytes()): (k, perm) for k, sw in enumerate(assign) for perm, _ in sw}.values()
    )
    for _ in range(POLISH_ROUNDS):
        phi, t = _duration_lp(inst, pieces)
        keep = phi > DROP_RTOL * t
        if keep.all() or not keep.any():
            break
        pieces = [p for p, ok in zip(pieces, keep, strict=True) if ok]
        phi = phi[keep]
    phi = phi * _deficit_ratio(inst, pieces, phi)
    out: Assignment = [[] for _ in range(inst.s)]
    for (k, perm), f in zip(pieces, phi, strict=True):
        out[k].append((perm, float(f)))
    return out


def _coverage_matrix(inst: Instance, pieces: list[tuple[int, np.ndarray]]):
    """Sparse ``(non-zero entries) x (pieces)`` 0/1 matrix: piece ``p`` carries entry ``e``."""
    from scipy.sparse import csr_matrix

    d = inst.demand
    idx = -np.ones(d.shape, dtype=np.int64)
    nz = np.nonzero(d > 0)
    idx[nz] = np.arange(nz[0].size)
    rows, cols = [], []
    u_all = np.arange(inst.n)
    for p, (_, perm) in enumerate(pieces):
        on = perm >= 0
        e = idx[u_all[on], perm[on]]
        e = e[e >= 0]
        rows.append(e)
        cols.append(np.full(e.size, p))
    r, c = np.concatenate(rows), np.concatenate(cols)
    return csr_matrix((np.ones(r.size), (r, c)), shape=(nz[0].size, len(pieces))), d[nz]


def _duration_lp(inst: Instance, pieces) -> tuple[np.ndarray, float]:
    """Solve the polishing LP; returns durations (s) and the makespan (s)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, vstack

    cover, need = _coverage_matrix(inst, pieces)
    tau = float(need.max()) / inst.rate_Bps  # time unit: the largest entry at rate B
    n_p = len(pieces)
    switch = np.array([k for k, _ in pieces])
    per_switch = csr_matrix((np.ones(n_p), (switch, np.arange(n_p))), shape=(inst.s, n_p))
    counts = np.bincount(switch, minlength=inst.s)
    a_ub = vstack(
        [
            hstack([per_switch, csr_matrix(-np.ones((inst.s, 1)))]),
            hstack([-cover, csr_matrix((cover.shape[0], 1))]),
        ]
    ).tocsr()
    b_ub = np.concatenate([-counts * inst.delay_s / tau, -need / float(need.max())])
    c = np.zeros(n_p + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"duration LP failed: {res.message}")
    return np.maximum(res.x[:-1], 0.0) * tau, float(res.x[-1]) * tau


def _deficit_ratio(inst: Instance, pieces, phi: np.ndarray) -> float:
    cover, need = _coverage_matrix(inst, pieces)
    served = cover @ phi * inst.rate_Bps
    return max(1.0, float(np.max(need / np.maximum(served, 1e-300))))


def _schedule(inst: Instance, assign: Assignment) -> Schedule:
    return sequential(inst.n, inst.delay_s, inst.rate_Bps, assign)


def run_schedulers(inst: Instance, pools: Pools | None = None) -> dict[str, Result]:
    """Every scheduler on ``inst``; ``pools`` (from :func:`decompose_all`) may be shared
    across instances with the same demand and δ. Each wall time counts the decompositions the
    scheduler uses plus its own assignment and LP work."""
    check_scale(inst)
    if pools is None:
        pools = decompose_all(inst.demand, inst.delay_s, inst.rate_Bps)
    out: dict[str, Result] = {}
    for name, pool in (
        ("bvn+lpt", "bvn"),
        ("solstice+lpt", "solstice"),
        ("eclipse+lpt", "eclipse"),
    ):
        t0 = time.perf_counter()
        sched = _schedule(inst, lpt(pools.configs[pool], inst.s, inst.delay_s))
        out[name] = _result(name, sched, pools.wall_s[pool] + time.perf_counter() - t0)
    t0 = time.perf_counter()
    spectra = split_equalise(lpt(pools.configs["eclipse"], inst.s, inst.delay_s), inst.delay_s)
    wall = pools.wall_s["eclipse"] + time.perf_counter() - t0
    out["spectra-like"] = _result("spectra-like", _schedule(inst, spectra), wall)
    out["ours"] = _ours(inst, pools, spectra)
    return out


def check_scale(inst: Instance) -> None:
    """Refuse a demand whose largest entry is below 1/:data:`MAX_DELAY_RATIO` of the bytes one
    delay costs at the rate (ConfigError naming ``demand``)."""
    delay_bytes = inst.delay_s * inst.rate_Bps
    top = float(inst.demand.max())
    if not top * MAX_DELAY_RATIO >= delay_bytes:
        raise ConfigError(
            "demand",
            f"largest entry {top:.3g} bytes is below {1 / MAX_DELAY_RATIO:.0e} of the "
            f"{delay_bytes:.3g} bytes one reconfiguration delay lasts at the rate: the transfers "
            "would vanish beside the delays (is the demand in bytes?)",
        )


def _ours(inst: Instance, pools: Pools, spectra: Assignment) -> Result:
    t0 = time.perf_counter()
    candidates = {}
    for pool in OUR_POOLS:
        configs = pools.configs[pool]
        candidates[f"{pool}/split"] = split_equalise(
            lpt(configs, inst.s, inst.delay_s), inst.delay_s
        )
        candidates[f"{pool}/wrap"] = wrap_around(configs, inst.s, inst.delay_s)
        candidates[f"{pool}/pack"] = pack_split(configs, inst.s, inst.delay_s)
    ranked = sorted(candidates, key=lambda c: _makespan(candidates[c], inst.delay_s))
    chosen = {"spectra-like/polish": spectra} | {c: candidates[c] for c in ranked[:POLISH_TOP]}
    best = ("spectra-like", _schedule(inst, spectra))  # so ours ≤ it despite LP tolerances
    for label, assign in chosen.items():
        sched = _schedule(inst, polish(inst, assign))
        if sched.makespan_s < best[1].makespan_s:
            best = (label, sched)
    wall = time.perf_counter() - t0 + sum(pools.wall_s[p] for p in OUR_POOLS)
    return _result("ours", best[1], wall, detail=best[0])


def _makespan(assign: Assignment, delay_s: float) -> float:
    return max(sum(delay_s + d for _, d in sw) for sw in assign)


def _result(name: str, sched: Schedule, wall_s: float, detail: str = "") -> Result:
    return Result(name, sched, sched.makespan_s, sched.configurations, wall_s, detail)


SCHEDULERS = ("bvn+lpt", "solstice+lpt", "eclipse+lpt", "spectra-like", "ours")
