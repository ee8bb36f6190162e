"""Paired statistics for policy comparisons over seeds (two-sided throughout), the design
every experiment declares before it runs, and the power calculation that sizes it.

For paired differences ``d_i`` (policy minus control on seed ``i``, zeros dropped where a
test says so):

* :func:`sign_test` — exact binomial test of ``P(d > 0) = 1/2`` on the non-zero signs;
* :func:`sign_flip_test` — the paired permutation test the seed's artifact used: under the
  null every ``d_i`` is as likely to be ``−d_i``; the p-value is the share of the ``2^n``
  sign assignments with ``|Σ ± d_i| >= |Σ d_i|`` (exact up to ``exact_max`` pairs, else a
  seeded Monte Carlo with ``draws`` assignments, counting the observed one);
* :func:`wilcoxon` — the signed-rank test (:func:`scipy.stats.wilcoxon`);
* :func:`bootstrap_ci` — percentile bootstrap CI of the mean difference (seeded);
* :func:`holm` — Holm's step-down adjustment of a family of p-values;
* :func:`seeds_for_power` — pairs needed to detect a mean difference ``delta`` with sd
  ``sigma`` at level ``alpha`` with power ``power`` (below).

**The design** (:class:`Design`, one per experiment, fixed before it runs): one *primary*
comparison (a policy against its matched random on the SLO violation rate) tested alone at
``alpha``; the *secondary* comparisons (the losses at equal tokens, at equal wall-clock and
at the end; the other policies against their matched random) form **one** Holm family, all
of them together. A comparison's verdict is ``better`` / ``worse`` only where its p-value
(the primary's raw, a secondary's Holm-adjusted) is below ``alpha``, otherwise ``no
difference detected``. A planned secondary without data counts as ``p = 1`` in the family
(the family never shrinks after the fact).

**The primary test is the sign-flip test** (:data:`PRIMARY_TEST`); Wilcoxon and the sign
test are reported beside it, never used for a verdict. Why this one: (1) it tests the mean
difference, the effect every table reports (pp of SLO violations, nats), so a significant
result always has the sign of the reported mean — Wilcoxon tests a pseudo-median and can be
significant against a mean of the other sign on skewed differences; (2) it is exact under the
paired design's null (policy and control exchangeable within a seed) with no normality and no
special handling of ties or zeros (a zero difference flips to itself); (3) it is the test of
the seed's artifact (its p = 0.021), so the primary is comparable with it; (4) its power is
the paired t-test's (it is the t-test's permutation version, asymptotically equivalent; the
signed-rank test has efficiency 3/π = 0.955 under normal errors), so the sample size has a
closed form, and its floor is exact: with ``n`` non-zero pairs no p goes below
:func:`min_attainable_p` ``= 2 / 2^n`` (0.002 at 10 seeds).

**Power** (:func:`seeds_for_power`, :func:`power_plan`): from a pilot's paired differences
of the primary metric (effect ``δ = |mean|``, ``σ`` = their sd), the smallest ``n`` such that

1. ``2 / 2^n < α`` (below that the exact test cannot reject at all: ``n >= 6`` at 0.05);
2. the paired t-test reaches the power: ``P(|T| > t_{1−α/2, n−1}) >= power`` with
   ``T ~ noncentral t(n − 1, δ √n / σ)`` (:func:`t_power`, exact for normal differences;
   about ``((z_{1−α/2} + z_{power}) σ / δ)^2 + z_{1−α/2}^2 / 2``);
3. up to :data:`SIM_MAX_N` pairs, the sign-flip test itself reaches it in a seeded simulation
   of normal differences (:func:`sign_flip_power`; ``n`` grows while the simulated power is
   more than two Monte Carlo standard errors short), which catches the exact test's
   discreteness at small ``n`` (at ``n = 6`` it rejects only when all six signs agree:
   power ``Φ(δ/σ)^6 + Φ(−δ/σ)^6``).

:meth:`Design.check` names what a seed count cannot find: the primary when ``2 / 2^n >= α``,
the whole secondary family when ``2 / 2^n >= α / m`` (Holm's first step): with 10 seeds a
family of 26 can never reach 0.05 (``0.00195 > 0.05 / 26``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from trainfabric.errors import ConfigError


def _diffs(d) -> np.ndarray:
    d = np.asarray(d, float)
    if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
        raise ConfigError("differences", "need a non-empty 1-D array of finite paired differences")
    return d


def sign_test(d) -> float:
    """Two-sided exact sign test (zeros dropped): :func:`scipy.stats.binomtest` of the number
    of positive differences among the ``n`` non-zero ones at ``p = 1/2``; 1.0 when every
    difference is zero."""
    d = _diffs(d)
    nz = d[d != 0]
    if nz.size == 0:
        return 1.0
    return float(stats.binomtest(int((nz > 0).sum()), int(nz.size), 0.5).pvalue)


def sign_flip_test(d, exact_max: int = 20, draws: int = 100_000, seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation test of the mean (module doc).

    The exact branch counts the ``2^n`` sign assignments in blocks: the signed sums of the
    first ``m = min(n, 14)`` differences are tabulated once (``2^m`` values) and each of the
    ``2^(n − m)`` assignments of the rest shifts that table, so memory stays at ``2^14``
    floats whatever ``n`` (the full ``2^n x n`` sign matrix would be 0.5 GB at ``n = 20``).
    """
    d = _diffs(d)
    if exact_max < 0 or draws < 1:
        raise ConfigError("sign_flip_test", "need exact_max >= 0 and draws >= 1")
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, np.abs(d).sum())
    if d.size <= exact_max:
        return _exact_sign_flip(d, observed - tol)
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(draws, d.size))
    hits = int(np.sum(np.abs(signs @ d) >= observed - tol))
    return (hits + 1) / (draws + 1)


_BLOCK_BITS = 14


def _signed_sums(d: np.ndarray) -> np.ndarray:
    """``Σ_i s_i d_i`` for all ``2^len(d)`` sign vectors (row bit ``i`` set: ``s_i = −1``)."""
    signs = 1 - 2 * ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1)
    return signs @ d


def _exact_sign_flip(d: np.ndarray, threshold: float) -> float:
    """Share of the ``2^n`` sign assignments with ``|Σ ± d_i| >= threshold``, in blocks."""
    m = min(d.size, _BLOCK_BITS)
    low = _signed_sums(d[:m])
    rest = d[m:]
    hits = 0
    for high in _signed_sums(rest) if rest.size else np.zeros(1):
        hits += int(np.count_nonzero(np.abs(low + high) >= threshold))
    return hits / 2.0**d.size


def wilcoxon(d) -> float:
    """Two-sided Wilcoxon signed-rank p-value (scipy; zeros dropped, exact when small)."""
    d = _diffs(d)
    if np.all(d == 0):
        return 1.0
    return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def bootstrap_ci(d, level: float = 0.95, draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``d`` (resampling pairs, seeded)."""
    d = _diffs(d)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(d.size, size=(draws, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def holm(p) -> np.ndarray:
    """Holm-adjusted p-values (same order as ``p``)."""
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def effect_size(d) -> float:
    """Standardised paired effect ``d_z = mean / sd`` (0 when all differences are equal)."""
    d = _diffs(d)
    sd = d.std(ddof=1) if d.size > 1 else 0.0
    return float(d.mean() / sd) if sd > 0 else 0.0


# -- power ----------------------------------------------------------------------------------------
class DesignWarning(UserWarning):
    """A seed count with which a comparison of the design cannot be found (:meth:`Design.check`)."""


PRIMARY_TEST = "sign_flip"
TESTS = ("sign_flip", "wilcoxon", "sign")
SIM_MAX_N = 60  # above, the sign-flip test's power is the t-test's (module doc)
SIM_DATASETS = 2000
MAX_SEEDS = 100_000


def min_attainable_p(n: int) -> float:
    """Smallest two-sided p-value an exact paired test can give with ``n`` non-zero pairs."""
    return 2.0 / 2.0**n


def min_pairs(level: float) -> int:
    """Fewest pairs with ``min_attainable_p(n) < level`` (6 at 0.05, 11 at 0.05 / 26)."""
    if not 0 < level < 1:
        raise ConfigError("alpha", f"need 0 < level < 1, got {level:g}")
    return math.floor(math.log2(2.0 / level)) + 1


def _check_power_args(delta, sigma, alpha, power) -> None:
    if not (delta > 0 and sigma >= 0 and 0 < alpha < 1 and 0 < power < 1):
        raise ConfigError("power", "need delta > 0, sigma >= 0, 0 < alpha < 1, 0 < power < 1")


def t_power(delta: float, sigma: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test with ``n`` pairs of ``N(delta, sigma²)``
    differences: ``P(|T| > t_{1−α/2, n−1})``, ``T ~ nct(n − 1, δ √n / σ)`` (closed form)."""
    if n < 2:
        return 0.0
    df, nc = n - 1, abs(delta) * math.sqrt(n) / sigma
    t = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(t, df, nc) + stats.nct.cdf(-t, df, nc))


def sign_flip_power(
    delta: float,
    sigma: float,
    n: int,
    alpha: float = 0.05,
    datasets: int = SIM_DATASETS,
    flips: int = 2000,
    seed: int = 0,
) -> float:
    """Share of ``datasets`` seeded draws of ``n`` pairs of ``N(delta, sigma²)`` differences
    on which the sign-flip test gives ``p < alpha``: exact p-values over all ``2^n`` sign
    assignments up to 12 pairs, else ``flips`` random assignments shared by the draws (the
    observed one counted, as in :func:`sign_flip_test`). The draws are
    ``default_rng(seed).normal(delta, sigma, (datasets, n))``."""
    if n < 1 or datasets < 1 or flips < 1:
        raise ConfigError("power", "need n >= 1, datasets >= 1 and flips >= 1")
    rng = np.random.default_rng(seed)
    x = rng.normal(delta, sigma, size=(datasets, n))
    observed = np.abs(x.sum(axis=1))
    tol = 1e-12 * np.maximum(1.0, np.abs(x).sum(axis=1))
    if n <= 12:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        total, extra = float(2**n), 0
    else:
        signs = rng.choice(np.array([-1.0, 1.0]), size=(flips, n))
        total, extra = float(flips + 1), 1
    hits = np.empty(datasets)
    chunk = max(1, 4_000_000 // signs.shape[0])
    for a in range(0, datasets, chunk):
        sums = np.abs(signs @ x[a : a + chunk].T)  # assignments x draws
        hits[a : a + chunk] = (sums >= observed[a : a + chunk] - tol[a : a + chunk]).sum(axis=0)
    return float(np.mean((hits + extra) / total < alpha))


def seeds_for_power(
    delta: float,
    sigma: float,
    alpha: float = 0.05,
    power: float = 0.8,
    test: str = PRIMARY_TEST,
    seed: int = 0,
) -> int:
    """Pairs needed to detect a mean paired difference ``delta`` (sd ``sigma``) at two-sided
    level ``alpha`` with power ``power`` (module doc, steps 1-3, for ``test="sign_flip"``).

    ``test="wilcoxon"``: the normal approximation with the signed-rank test's efficiency,
    ``n = ((z_{1−α/2} + z_{power}) σ / δ)² / (3/π)``. Raises a ConfigError naming ``power``
    when more than :data:`MAX_SEEDS` pairs would be needed."""
    _check_power_args(delta, sigma, alpha, power)
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    if test == "wilcoxon":
        return max(1, math.ceil((z * sigma / delta) ** 2 / (3 / math.pi)))
    if test != "sign_flip":
        raise ConfigError("test", f"power is computed for sign_flip or wilcoxon, not {test!r}")
    n = min_pairs(alpha)
    if sigma == 0:  # every difference equals delta: the floor is all it takes
        return n
    n = max(n, math.ceil((z * sigma / delta) ** 2))  # the normal bound; t needs a little more
    if n > MAX_SEEDS:
        raise ConfigError(
            "power", f"an effect of {delta:.3g} with sd {sigma:.3g} needs more than "
            f"{MAX_SEEDS:,} pairs for power {power:g} at alpha {alpha:g}"
        )  # fmt: skip
    while t_power(delta, sigma, n, alpha) < power:
        n += 1
    se = math.sqrt(power * (1 - power) / SIM_DATASETS)
    while n <= SIM_MAX_N and sign_flip_power(delta, sigma, n, alpha, seed=seed) < power - 2 * se:
        n += 1
    return n


def power_plan(
    pilot,
    alpha: float = 0.05,
    power: float = 0.8,
    seeds_used: int | None = None,
    source: str = "pilot",
    max_seeds: int | None = None,
) -> dict:
    """The power calculation from a pilot's paired differences of the primary metric.

    Returns ``source``, ``pilot_seeds``, ``pilot_effect`` (mean), ``pilot_sd``,
    ``pilot_dz``, ``alpha``, ``power``, ``test``, ``n_required`` (:func:`seeds_for_power`;
    ``None`` when the pilot's effect is exactly 0 or more than :data:`MAX_SEEDS` pairs would
    be needed), ``n_floor`` (:func:`min_pairs`), ``seeds_used``, ``sufficient`` (``seeds_used
    >= n_required``; ``None`` without ``seeds_used``), ``n_chosen`` (``n_required`` capped by
    ``max_seeds``; ``max_seeds`` when none is finite) and ``formula`` and ``note`` in words.
    A pilot of fewer than 2 pairs has no sd: ``n_required`` is ``None``."""
    d = _diffs(pilot)
    effect = float(d.mean())
    sd = float(d.std(ddof=1)) if d.size > 1 else float("nan")
    n_req: int | None = None
    note = ""
    if d.size < 2:
        note = "a pilot of one pair has no sd"
    elif effect == 0:
        note = "the pilot's effect is exactly 0: no number of seeds reaches the power"
    else:
        try:
            n_req = seeds_for_power(abs(effect), sd, alpha, power)
        except ConfigError as exc:
            note = exc.message
    chosen = n_req if n_req is not None else max_seeds
    if max_seeds is not None and chosen is not None and chosen > max_seeds:
        note = (note + "; " if note else "") + f"capped at max_seeds = {max_seeds:,}"
        chosen = max_seeds
    return {
        "source": source,
        "pilot_seeds": int(d.size),
        "pilot_effect": effect,
        "pilot_sd": sd if math.isfinite(sd) else None,
        "pilot_dz": effect / sd if math.isfinite(sd) and sd > 0 else None,
        "alpha": alpha,
        "power": power,
        "test": PRIMARY_TEST,
        "n_floor": min_pairs(alpha),
        "n_required": n_req,
        "n_chosen": chosen,
        "seeds_used": seeds_used,
        "sufficient": None if seeds_used is None or n_req is None else seeds_used >= n_req,
        "formula": (
            "smallest n with 2/2^n < alpha, noncentral-t power(n-1, |effect| sqrt(n)/sd) >= "
            f"power, and (n <= {SIM_MAX_N}) the sign-flip test's simulated power within 2 s.e."
        ),
        "note": note,
    }


# -- the design -----------------------------------------------------------------------------------
BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no difference detected"
NOT_TESTED = "not tested (no data)"
METRIC_WORDS = {
    "slo_violation_rate": "SLO violation rate",
    "loss_equal_tokens": "eval loss at equal tokens",
    "loss_equal_wall": "eval loss at equal wall-clock",
    "final_loss": "final loss",
}
LOSS_METRICS = ("loss_equal_tokens", "loss_equal_wall", "final_loss")


@dataclass(frozen=True)
class Comparison:
    """A policy against its matched random on one metric (lower is better on every metric)."""

    policy: str
    metric: str

    @property
    def name(self) -> str:
        return f"{self.metric}[{self.policy}]"

    @property
    def label(self) -> str:
        return f"{self.policy} vs matched random: {METRIC_WORDS.get(self.metric, self.metric)}"


def paired_p(test: str, d) -> float:
    """The two-sided p-value of ``test`` (one of :data:`TESTS`) on the differences ``d``."""
    return {"sign_flip": sign_flip_test, "wilcoxon": wilcoxon, "sign": sign_test}[test](d)


@dataclass(frozen=True)
class Design:
    """One experiment's statistics, fixed before it runs (module doc): the ``primary``
    comparison tested alone at ``alpha`` by ``test``; the ``secondary`` ones, one Holm family."""

    primary: Comparison
    secondary: tuple[Comparison, ...]
    alpha: float = 0.05
    test: str = PRIMARY_TEST

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ConfigError("alpha", f"need 0 < alpha < 1, got {self.alpha:g}")
        if self.test not in TESTS:
            raise ConfigError("test", f"unknown test {self.test!r}; known: {', '.join(TESTS)}")
        names = [c.name for c in self.secondary]
        if self.primary.name in names:
            raise ConfigError("design", f"the primary {self.primary.name} is not a secondary")
        if len(set(names)) != len(names):
            raise ConfigError("design", "a secondary comparison is named twice")

    @classmethod
    def for_policies(
        cls,
        policies: Sequence[str],
        primary_policy: str | None = None,
        losses: Sequence[str] = LOSS_METRICS,
        alpha: float = 0.05,
    ) -> Design:
        """Primary: ``primary_policy`` (default the first) vs its matched random on the SLO
        violation rate. Secondary: its ``losses``, then every other policy's SLO and losses."""
        lead = policies[0] if primary_policy is None else primary_policy
        if lead not in policies:
            raise ConfigError("primary_policy", f"{lead!r} is not among the policies run")
        secondary = [Comparison(lead, m) for m in losses]
        for p in policies:
            if p != lead:
                secondary += [Comparison(p, "slo_violation_rate")]
                secondary += [Comparison(p, m) for m in losses]
        return cls(Comparison(lead, "slo_violation_rate"), tuple(secondary), alpha)

    @property
    def family_size(self) -> int:
        return len(self.secondary)

    def check(self, n: int) -> list[str]:
        """What ``n`` paired seeds cannot find (module doc), in words with the numbers;
        empty when both the primary and the family's first Holm step are reachable."""
        floor = min_attainable_p(n)
        out = []
        if floor >= self.alpha:
            out.append(
                f"the primary comparison ({self.primary.label}) cannot reach alpha = "
                f"{self.alpha:g} with {n} paired seeds: the smallest exact p is 2/2^{n} = "
                f"{floor:.3g}; it needs at least {min_pairs(self.alpha)} seeds"
            )
        m = self.family_size
        if m and floor >= self.alpha / m:
            out.append(
                f"no secondary comparison can reach alpha = {self.alpha:g} after Holm over "
                f"{m}: the smallest exact p with {n} paired seeds is {floor:.3g} >= "
                f"{self.alpha:g}/{m} = {self.alpha / m:.3g}; that needs at least "
                f"{min_pairs(self.alpha / m)} seeds"
            )
        return out

    def require(self, n: int, field: str = "seeds") -> list[str]:
        """:meth:`check`, raising a ConfigError naming ``field`` when the primary cannot be
        found with ``n`` seeds; returns the family's warning (if any)."""
        found = self.check(n)
        if found and found[0].startswith("the primary"):
            raise ConfigError(field, found[0] + " (a design where nothing can be found)")
        return found

    def decide(self, p: Mapping[str, float | None], mean: Mapping[str, float | None]) -> dict:
        """Verdicts from each comparison's p-value of :attr:`test` and its mean difference
        (by :attr:`Comparison.name`; a missing or ``None`` p: not tested, ``p = 1`` in the
        family). Returns per name: ``role``, ``comparison`` (in words), ``test``, ``p``,
        ``p_adjusted`` (the primary's own, a secondary's Holm), ``family_size``, ``alpha``,
        ``verdict``."""
        out = {}
        raw = [p.get(c.name) for c in self.secondary]
        adjusted = holm([1.0 if x is None else x for x in raw]) if raw else []
        rows = [(self.primary, "primary", p.get(self.primary.name), p.get(self.primary.name))]
        rows += [
            (c, "secondary", x, float(a))
            for c, x, a in zip(self.secondary, raw, adjusted, strict=True)
        ]
        for c, role, raw_p, adj in rows:
            m = mean.get(c.name)
            if raw_p is None or m is None:
                verdict = NOT_TESTED
            elif adj < self.alpha and m != 0:
                verdict = BETTER if m < 0 else WORSE
            else:
                verdict = NO_DIFFERENCE
            out[c.name] = {
                "role": role,
                "comparison": c.label,
                "test": self.test,
                "p": None if raw_p is None else float(raw_p),
                "p_adjusted": None if raw_p is None else float(adj),
                "family_size": 1 if role == "primary" else self.family_size,
                "alpha": self.alpha,
                "verdict": verdict,
            }
        return out

    def evaluate(self, diffs: Mapping[str, Sequence[float] | None]) -> dict:
        """:meth:`decide` on paired differences (policy − matched random per seed, by name;
        non-finite entries dropped, an empty or missing list not tested)."""
        p, mean = {}, {}
        for c in (self.primary, *self.secondary):
            got = diffs.get(c.name)
            d = np.asarray([] if got is None else got, float)
            d = d[np.isfinite(d)]
            if d.size:
                p[c.name], mean[c.name] = paired_p(self.test, d), float(d.mean())
        return self.decide(p, mean)

    def to_dict(self) -> dict:
        """The design as the outputs state it."""
        return {
            "primary": self.primary.label,
            "primary_name": self.primary.name,
            "primary_test": self.test,
            "primary_tested": "alone at alpha",
            "secondary": [c.label for c in self.secondary],
            "secondary_correction": f"Holm over all {self.family_size} secondaries together",
            "alpha": self.alpha,
            "reported_only": [t for t in TESTS if t != self.test] + ["bootstrap CI"],
        }
