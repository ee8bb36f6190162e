"""Online rewiring under drifting traffic: the lazy threshold policy and its regret
(docs/ocs.md §1.10).

**Per-slot cost (one-hop model).** Pods with ``d_v`` ports, duplex circuits of rate ``B``
(bits/s) and a fallback ``B0 > 0`` per pair. Slot ``t`` carries the directed traffic ``D_t``
[n, n] (bytes, :mod:`trainfabric.ocs.traffic`); a pair's load is ``L_t,e = 8 max(D_t,uv, D_t,vu)``
bits (a circuit serves both directions) and the cost of an integer wiring ``x`` [P] is the slot's
maximum link utilisation time

    f_t(x) = max_e  L_t,e / (B x_e + B0)        seconds.

*Exact per-slot optimum* (:func:`slot_optimum`): ``u`` is achievable iff the fewest circuits
``k_e(u) = min{k ≥ 0 : L_e / (B k + B0) ≤ u}`` fit (``k_e ≤ min(d_u, d_v)``,
``Σ_u k_uv ≤ d_v``); achievability is monotone in ``u`` and some pair is tight at the
optimum, so ``u* ∈ {L_e / (B k + B0) : 0 ≤ k ≤ min(d_u, d_v)}`` and a binary search over
these sorted candidates finds it exactly (the method of :mod:`trainfabric.ocs.wiring.onehop`, here
with the
fallback ``B0``; ``k = 0`` is a candidate, so ``u*`` is always finite). The search is a numba
kernel; the oracle's per-slot costs ``f_t(w_t*) = u*_t`` are exact, hence so is the regret.

*Lipschitz constant in the traffic* (analytic, [A10]): for any wiring ``x``,

    |f_t(x) − f_s(x)| ≤ max_e |L_t,e − L_s,e| / (B x_e + B0) ≤ (8 / B0) max_uv |D_t,uv − D_s,uv|
                     ≤ (8 / B0) ||D_t − D_s||_1,

using ``|max a − max b| ≤ max |a − b|`` twice and ``B x_e + B0 ≥ B0`` (``x_e = 0`` is
admissible, so no smaller constant holds for every wiring): ``Γ = 8 / B0`` seconds per byte.

**Policies** (:func:`run_policies`, one pass over the sequence for all of them). The wiring
deployed before slot 0 is the optimum of ``D_0``, free for every policy; then per slot ``t``
the policy sees ``D_t`` and either keeps its wiring or reconfigures to the exact optimum of
``D_t``, completed without losing optimality (:func:`complete`: first keep the previous
circuits the free ports allow — the warm start, so that only changed circuits move — then
give every remaining port pair to the loaded pair of highest utilisation, one circuit at a
time; more circuits never raise ``f``):

* ``threshold`` (lazy): reconfigure when ``||D_t − D_{s_k}||_1 > θ`` since the last
  reconfiguration ``s_k``; ``always``: every slot (``θ = −1``); ``never``: keep the first
  wiring; ``mask``: reconfigure at given slots (the GLR-triggered comparator).
* Switching cost ``C`` (seconds) per reconfiguration (``charge="reconfiguration"``) or per
  moved circuit (``"circuit"``: ``C`` times the circuits added, ``Σ_e max(x_new − x_old, 0)``,
  the least any split onto the OCSes must add; the cross-connects a real split adds are
  measured by :mod:`.churn`, E10).

**Regret and bound.** ``Regret = Σ_t f_t(w_t) + switching − Σ_t f_t(w_t*)``. With ``N`` the
reconfigurations of the threshold policy: (a) each needs a drift ``> θ`` accumulated over
slots disjoint from the others', so ``N θ < V1``; (b) in a slot ``t`` after ``s_k``, with
``w_k`` *exactly* optimal at ``s_k``, ``f_t(w_k) ≤ f_{s_k}(w_k) + Γθ ≤ f_{s_k}(w_t*) + Γθ ≤
f_t(w_t*) + 2Γθ``. Hence, with ``C_eff = C`` (per reconfiguration) or ``C · M`` (per circuit,
``M`` the most circuits a wiring holds, so at most ``M`` are added per reconfiguration),

    Regret ≤ C_eff (V1/θ + 1) + 2Γθ T,     θ* = sqrt(C_eff V1 / (2Γ T)),
    Regret(θ*) ≤ 2 sqrt(2 Γ C_eff V1 T) + C_eff.

``Γ = 8/B0`` is a worst case over all wirings (an unwired pair at the fallback rate), so the
measured regret is far below the bound; the benchmarks report both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

import numba
import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.traffic import BLOCK, TrafficSequence

CHARGES = ("reconfiguration", "circuit")


@dataclass(frozen=True, eq=False)
class OneHopCost:
    """The one-hop cost of an OCS model (ports, ``B``, ``B0``; module doc)."""

    model: OcsModel

    @property
    def gamma(self) -> float:
        """``Γ = 8 / B0`` seconds per byte of l1 traffic change (module doc)."""
        return 8.0 / self.model.fallback_bps

    @property
    def kmax(self) -> np.ndarray:
        iu, iv = self.model.pairs
        return np.minimum(self.model.degrees[iu], self.model.degrees[iv])

    def loads(self, block: np.ndarray) -> np.ndarray:
        """Pair loads ``8 max(D_uv, D_vu)`` bits [len, P] of a block of matrices."""
        iu, iv = self.model.pairs
        return 8.0 * np.maximum(block[:, iu, iv], block[:, iv, iu])

    def cost(self, block: np.ndarray, x) -> np.ndarray:
        """``f_t(x)`` [len] of every matrix of ``block`` on the wiring ``x`` [P]."""
        rate = self.model.rate_bps * np.asarray(x, dtype=float) + self.model.fallback_bps
        return (self.loads(np.asarray(block, dtype=float)) / rate).max(axis=1)

    def _args(self):
        iu, iv = self.model.pairs
        m = self.model
        return (self.kmax, iu, iv, m.degrees, float(m.rate_bps), float(m.fallback_bps))

    def slot_optimum(self, matrix: np.ndarray) -> tuple[float, np.ndarray]:
        """``(u*, x)``: the exact minimum of ``f`` for one matrix and the least wiring
        attaining it (int64 [P], dark ports left dark)."""
        load = self.loads(np.asarray(matrix, dtype=float)[None])[0]
        x = np.zeros(load.size, dtype=np.int64)  # feasible: the search starts from its cost
        u = _optimum(load, *self._args(), _buffer(self), x)
        return u, x

    def complete(self, matrix: np.ndarray, x, previous=None) -> np.ndarray:
        """``x`` plus circuits on free ports: the ``previous`` circuits first, then the
        most utilised loaded pairs (module doc); never raises ``f`` of the matrix."""
        load = self.loads(np.asarray(matrix, dtype=float)[None])[0]
        out = np.array(x, dtype=np.int64)
        prev = np.zeros_like(out) if previous is None else np.asarray(previous, dtype=np.int64)
        _complete(load, out, prev, *self._args()[1:])
        return out

    def optima(self, seq: TrafficSequence) -> np.ndarray:
        """``u*_t`` [T] for every slot of the sequence (exact, block by block)."""
        out = np.empty(seq.slots)
        buf = _buffer(self)
        for t0, b in seq.blocks():
            _optima(self.loads(b), *self._args(), buf, out[t0 : t0 + b.shape[0]])
        return out


def _buffer(cost: OneHopCost) -> np.ndarray:
    return np.empty(int((cost.kmax + 1).sum()))


# -- numba kernels ----------------------------------------------------------------------------


@numba.njit(cache=True)
def _least_k(load, u, rate, fallback):  # pragma: no cover - compiled
    """Least ``k ≥ 0`` with ``load / (rate k + fallback) ≤ u`` (the cost's own expression)."""
    if load <= 0.0:
        return 0
    k = max(math.ceil((load / u - fallback) / rate), 0)
    while k > 0 and load / (rate * (k - 1) + fallback) <= u:
        k -= 1
    while load / (rate * k + fallback) > u:
        k += 1
    return k


@numba.njit(cache=True)
def _fits(load, u, kmax, iu, iv, deg, rate, fallback, used):  # pragma: no cover - compiled
    used[:] = 0
    for e in range(load.size):
        k = _least_k(load[e], u, rate, fallback)
        if k > kmax[e]:
            return False
        used[iu[e]] += k
        used[iv[e]] += k
    return (used <= deg).all()


@numba.njit(cache=True)
def _optimum(load, kmax, iu, iv, deg, rate, fallback, buf, x):  # pragma: no cover - compiled
    """Exact ``min_x max_e load_e / (rate x_e + fallback)``; ``x`` [P] holds a feasible wiring
    on entry (its cost bounds the candidates from above) and the least optimal one on exit.
    Candidates are also bounded from below by ``max_e load_e / (rate kmax_e + fallback)``."""
    hi, lo = 0.0, 0.0
    for e in range(load.size):
        hi = max(hi, load[e] / (rate * x[e] + fallback))
        lo = max(lo, load[e] / (rate * kmax[e] + fallback))
    m = 0
    for e in range(load.size):
        if load[e] > 0.0:
            k = _least_k(load[e], hi, rate, fallback)
            while k <= kmax[e]:
                c = load[e] / (rate * k + fallback)
                if c < lo:
                    break
                buf[m] = c
                m += 1
                k += 1
    x[:] = 0
    if m == 0:
        return 0.0
    cand = np.sort(buf[:m])
    used = np.zeros(deg.size, dtype=np.int64)
    lo_i, hi_i = 0, m - 1  # cand[m - 1] = hi: the entry wiring attains it, feasible
    while lo_i < hi_i:
        mid = (lo_i + hi_i) // 2
        if _fits(load, cand[mid], kmax, iu, iv, deg, rate, fallback, used):
            hi_i = mid
        else:
            lo_i = mid + 1
    best = 0.0
    for e in range(load.size):
        x[e] = _least_k(load[e], cand[lo_i], rate, fallback)
        best = max(best, load[e] / (rate * x[e] + fallback))
    return best


@numba.njit(cache=True)
def _optima(loads, kmax, iu, iv, deg, rate, fallback, buf, out):  # pragma: no cover - compiled
    x = np.zeros(loads.shape[1], dtype=np.int64)  # the empty wiring is feasible
    for t in range(loads.shape[0]):  # then the previous slot's optimum bounds the next one
        out[t] = _optimum(loads[t], kmax, iu, iv, deg, rate, fallback, buf, x)


@numba.njit(cache=True)
def _complete(load, x, prev, iu, iv, deg, rate, fallback):  # pragma: no cover - compiled
    free = deg.copy()
    for e in range(x.size):
        free[iu[e]] -= x[e]
        free[iv[e]] -= x[e]
    order = np.argsort(-(load / (rate * x + fallback)), kind="mergesort")
    for e in order:  # keep the previous circuits first (the warm start)
        add = min(prev[e] - x[e], free[iu[e]], free[iv[e]])
        if add > 0:
            x[e] += add
            free[iu[e]] -= add
            free[iv[e]] -= add
    while True:  # then the most utilised loaded pair with two free ends, one circuit at a time
        best, top = -1, 0.0
        for e in range(x.size):
            if load[e] > 0.0 and free[iu[e]] > 0 and free[iv[e]] > 0:
                val = load[e] / (rate * x[e] + fallback)
                if val > top:
                    best, top = e, val
        if best < 0:
            return
        x[best] += 1
        free[iu[best]] -= 1
        free[iv[best]] -= 1


@numba.njit(cache=True)
def _run_block(
    flat,
    loads,
    theta,
    mask,
    use_mask,
    ref,
    x,
    kmax,
    iu,
    iv,
    deg,
    rate,
    fallback,
    buf,
    cost_out,
    switch_out,
    moved_out,
):  # pragma: no cover - compiled
    """One policy over a block: switch on ``mask`` or when ``||D_t − ref||_1 > theta``."""
    xn = np.empty_like(x)
    for t in range(flat.shape[0]):
        if use_mask:
            switch = mask[t]
        else:
            drift = 0.0
            for j in range(flat.shape[1]):
                drift += abs(flat[t, j] - ref[j])
            switch = drift > theta
        moved = 0
        if switch:
            xn[:] = x  # the deployed wiring bounds the candidates
            _optimum(loads[t], kmax, iu, iv, deg, rate, fallback, buf, xn)
            _complete(loads[t], xn, x, iu, iv, deg, rate, fallback)
            for e in range(x.size):
                moved += max(xn[e] - x[e], 0)
                x[e] = xn[e]
            ref[:] = flat[t]
        worst = 0.0
        for e in range(x.size):
            worst = max(worst, loads[t, e] / (rate * x[e] + fallback))
        cost_out[t] = worst
        switch_out[t] = switch
        moved_out[t] = moved


# -- policies, regret, bound -----------------------------------------------------------------


def theta_star(c_eff: float, v1: float, gamma: float, slots: int) -> float:
    """``θ* = sqrt(C_eff V1 / (2 Γ T))`` (bytes)."""
    return math.sqrt(c_eff * v1 / (2.0 * gamma * slots))


def regret_bound(c_eff: float, v1: float, theta: float, gamma: float, slots: int) -> float:
    """``C_eff (V1/θ + 1) + 2Γθ T`` (seconds; ``inf`` for ``θ = 0 < V1``)."""
    if theta <= 0:
        return c_eff if v1 == 0 else math.inf
    return c_eff * (v1 / theta + 1.0) + 2.0 * gamma * theta * slots


def resolve_theta(theta: float | None, star: float) -> float:
    """The threshold ``θ`` (bytes): ``theta``, or ``θ*`` when None; ConfigError naming
    ``theta`` unless ``≥ 0``."""
    theta = star if theta is None else float(theta)
    if not theta >= 0:
        raise ConfigError("theta", f"must be >= 0, got {theta}")
    return theta


def effective_switch_cost(cost: OneHopCost, switch_cost_s: float, charge: str) -> float:
    """``C`` per reconfiguration, or ``C · M`` with ``M`` the most circuits of a wiring."""
    if not (math.isfinite(switch_cost_s) and switch_cost_s >= 0):
        raise ConfigError("switch_cost_s", f"must be finite and >= 0, got {switch_cost_s}")
    if charge not in CHARGES:
        raise ConfigError("charge", f"must be one of {', '.join(CHARGES)}, got {charge!r}")
    return switch_cost_s * (1 if charge == "reconfiguration" else cost.model.max_circuits)


@dataclass(frozen=True)
class Policy:
    """``name``; ``theta`` (bytes; ``−1`` = always, ``inf`` = never) or a switch ``mask``."""

    name: str
    theta: float = math.inf
    mask: np.ndarray | None = field(default=None, repr=False)


@dataclass
class PolicyRun:
    """Measured totals of one policy over ``T`` slots, built by :meth:`measure`.

    Per slot (arrays [T]): ``cost`` ``f_t(w_t)`` (s), ``switched`` (a reconfiguration at
    ``t``) and ``moved`` (circuits added, ``Σ_e max(x_new − x_old, 0)``). Totals:
    ``switches``, ``moved_circuits``, ``slot_cost_s = Σ_t f_t(w_t)``, ``switching_cost_s``
    (``C`` per reconfiguration or per added circuit, by the charge) and ``regret_s =
    slot_cost_s + switching_cost_s − Σ_t`` of the oracle's per-slot costs (s): the exact
    optima in the one-hop model, so the regret itself; the planner's plans on the DAG model
    (:class:`.dag.DagPolicyRun`), the lower end of the regret's bracket. ``theta`` (bytes;
    ``−1`` for always-switch, ``inf`` for never-switch and the masks). ``success``: the regret
    is finite; ``message`` says so and against what it was measured (``oracle``).
    """

    oracle: ClassVar[str] = "the exact per-slot optima"

    name: str
    theta: float
    switches: int
    moved_circuits: int
    slot_cost_s: float
    switching_cost_s: float
    regret_s: float
    cost: np.ndarray = field(repr=False)
    switched: np.ndarray = field(repr=False)
    moved: np.ndarray = field(repr=False)

    @classmethod
    def measure(
        cls,
        name: str,
        theta: float,
        per_slot: tuple[np.ndarray, np.ndarray, np.ndarray],
        switch_cost_s: float,
        charge: str,
        oracle_s: float,
        **extra,
    ) -> Self:
        """The run with per-slot ``(cost, switched, moved)`` and the totals of the class doc:
        ``switching_cost_s = C · switches`` (``charge="reconfiguration"``) or ``C ·
        moved_circuits`` (``"circuit"``), ``regret_s = slot_cost_s + switching_cost_s −
        oracle_s`` (s); ``extra``: the fields a subclass adds."""
        cost, switched, moved = per_slot
        switches, circuits = int(switched.sum()), int(moved.sum())
        switching = switch_cost_s * (switches if charge == "reconfiguration" else circuits)
        total = float(cost.sum())
        regret = total + switching - oracle_s
        return cls(
            name, float(theta), switches, circuits, total, switching, regret, *per_slot, **extra
        )

    @property
    def success(self) -> bool:
        return math.isfinite(self.regret_s)

    @property
    def message(self) -> str:
        return f"regret {'measured' if self.success else 'not finite'} against {self.oracle}"


def standard_policies(theta: float, grid: Sequence[float] = ()) -> list[Policy]:
    """``threshold`` at ``theta``, ``always``, ``never`` and ``theta=<g>`` for every ``g`` of
    the grid (the candidates of the oracle-tuned θ)."""
    out = [Policy("threshold", theta), Policy("always", -1.0), Policy("never", math.inf)]
    return out + [Policy(f"theta={g:.6g}", float(g)) for g in grid]


def run_policies(
    cost: OneHopCost,
    seq: TrafficSequence,
    policies: Sequence[Policy],
    switch_cost_s: float,
    charge: str = "reconfiguration",
    optima: np.ndarray | None = None,
) -> dict[str, PolicyRun]:
    """Run every policy over ``seq`` in one pass (module doc) and measure its regret against
    the exact per-slot optima ``optima`` (computed when None)."""
    effective_switch_cost(cost, switch_cost_s, charge)
    if optima is None:
        optima = cost.optima(seq)
    first = seq.block(0, 1)[0]
    _, x0 = cost.slot_optimum(first)
    x0 = cost.complete(first, x0)
    args, buf = cost._args(), _buffer(cost)
    state = [(first.ravel().copy(), x0.copy()) for _ in policies]
    t_all = seq.slots
    out = {
        p.name: (np.empty(t_all), np.zeros(t_all, bool), np.zeros(t_all, np.int64))
        for p in policies
    }
    for t0, b in seq.blocks(BLOCK):
        flat, loads = b.reshape(b.shape[0], -1), cost.loads(b)
        sl = slice(t0, t0 + b.shape[0])
        for p, (ref, x) in zip(policies, state, strict=True):
            use_mask = p.mask is not None
            mask = p.mask[sl] if use_mask else np.zeros(b.shape[0], dtype=bool)
            c, s, m = out[p.name]
            _run_block(
                flat, loads, float(p.theta), mask, use_mask, ref, x, *args, buf, c[sl], s[sl], m[sl]
            )
    return {
        p.name: PolicyRun.measure(
            p.name, p.theta, out[p.name], switch_cost_s, charge, float(optima.sum())
        )
        for p in policies
    }


# Multiples of θ* the oracle-tuned θ chooses from: θ* · 2^{k/2}, k = −6..14 (θ* is
# conservative, Γ being a worst case over wirings, so the grid reaches far above it).
ORACLE_GRID = 2.0 ** (np.arange(-6, 15) / 2.0)


@dataclass
class OnlineResult:
    """One sequence of ``slots`` slots, one switching cost ``switch_cost_s`` (s) charged per
    ``charge``: ``runs`` per policy, the measured ``v1 = Σ_t ||D_t − D_{t−1}||_1`` (bytes),
    ``gamma`` ``Γ`` (s/byte), ``c_eff`` (s), ``theta_star`` ``θ*`` (bytes), ``bound_s`` the
    regret bound of the threshold policy at its ``θ`` and ``optimum_s`` the oracle's
    ``Σ_t`` cost (s; the exact optima here, the planner's plans in :class:`.dag.DagOnlineResult`).
    ``success``: every run succeeded (:attr:`PolicyRun.success`); ``message`` names any that
    did not.
    """

    slots: int
    v1: float
    gamma: float
    switch_cost_s: float
    charge: str
    c_eff: float
    theta_star: float
    bound_s: float
    optimum_s: float
    runs: dict[str, PolicyRun]

    @property
    def success(self) -> bool:
        return all(r.success for r in self.runs.values())

    @property
    def message(self) -> str:
        failed = [k for k, r in self.runs.items() if not r.success]
        return f"regret not finite: {', '.join(failed)}" if failed else "every regret is finite"

    def run_bound(self, run: PolicyRun) -> float:
        """The regret bound ``C_eff (V1/θ + 1) + 2ΓθT`` (s) at the run's ``θ``; nan for the
        always- and never-switch runs and the masks."""
        if run.theta >= 0 and math.isfinite(run.theta):
            return regret_bound(self.c_eff, self.v1, run.theta, self.gamma, self.slots)
        return math.nan

    def oracle_theta(self) -> PolicyRun:
        """The grid policy with the least regret in hindsight (the oracle-tuned θ)."""
        grid = [r for k, r in self.runs.items() if k.startswith("theta=")]
        if not grid:
            raise ConfigError("policy", "no θ grid was run")
        return min(grid, key=lambda r: r.regret_s)

    def summary(self, name: str) -> dict:
        """Flat JSON-able figures of policy ``name`` (``oracle`` = the oracle-tuned θ)."""
        r = self.oracle_theta() if name == "oracle" else self.runs[name]
        norm = math.sqrt(self.gamma * self.c_eff * self.v1 * self.slots)
        return {
            "policy": name,
            "theta": r.theta,
            "regret_s": r.regret_s,
            "regret_bound_s": self.run_bound(r),
            "normalised_regret": r.regret_s / norm if norm > 0 else math.nan,
            "switches": r.switches,
            "switches_bound": self.v1 / r.theta + 1 if 0 < r.theta < math.inf else math.nan,
            "moved_circuits": r.moved_circuits,
            "slot_cost_s": r.slot_cost_s,
            "switching_cost_s": r.switching_cost_s,
            "optimum_s": self.optimum_s,
        }


def evaluate(
    cost: OneHopCost,
    seq: TrafficSequence,
    switch_cost_s: float,
    charge: str = "reconfiguration",
    theta: float | None = None,
    grid: Sequence[float] | None = None,
    masks: dict[str, np.ndarray] | None = None,
    extra: Sequence[str] = ("always", "never"),
) -> OnlineResult:
    """Regret of the threshold policy (at ``theta``, default ``θ*`` from the measured
    ``V1``), the ``extra`` comparators, ``theta=`` policies at ``grid`` x ``θ*`` (the
    oracle-tuned θ's candidates; None: none) and one mask policy per entry of ``masks``."""
    from trainfabric.ocs.traffic import variation

    v1 = variation(seq)
    c_eff = effective_switch_cost(cost, switch_cost_s, charge)
    star = theta_star(c_eff, v1, cost.gamma, seq.slots)
    theta = resolve_theta(theta, star)
    pol = [Policy("threshold", theta)]
    pol += [p for p in standard_policies(theta)[1:] if p.name in extra]
    pol += [Policy(f"theta={g * star:.6g}", g * star) for g in (grid if grid is not None else ())]
    pol += [Policy(k, mask=np.asarray(v, dtype=bool)) for k, v in (masks or {}).items()]
    optima = cost.optima(seq)
    runs = run_policies(cost, seq, pol, switch_cost_s, charge, optima)
    return OnlineResult(
        seq.slots,
        v1,
        cost.gamma,
        switch_cost_s,
        charge,
        c_eff,
        star,
        regret_bound(c_eff, v1, theta, cost.gamma, seq.slots),
        float(optima.sum()),
        runs,
    )
